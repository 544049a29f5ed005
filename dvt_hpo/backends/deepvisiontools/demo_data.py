"""A tiny generated semantic-segmentation dataset in deepvisiontools' ``semantic_mask_folder``
layout (``<root>/{train,valid}/{images,masks}/<stem>.png``), for the example study, the tests
and the benchmark. Pillow only (no torch): shapes of class 1..C on a noisy background 0, each
class drawn in its own colour, so a small U-Net learns it in a few epochs.

    python -m dvt_hpo.backends.deepvisiontools.demo_data DIR [--classes 1] [--size 64]
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from PIL import Image, ImageDraw

_COLOURS = [(220, 60, 60), (60, 200, 80), (70, 90, 230), (230, 200, 40), (200, 60, 220)]


def _sample(rng: random.Random, size: int, classes: int) -> tuple[Image.Image, Image.Image]:
    image = Image.new("RGB", (size, size))
    image.putdata(
        [tuple(rng.randint(40, 110) for _ in range(3)) for _ in range(size * size)]  # type: ignore[misc]
    )
    mask = Image.new("L", (size, size), 0)
    draw_image, draw_mask = ImageDraw.Draw(image), ImageDraw.Draw(mask)
    for _ in range(rng.randint(1, 3)):
        label = rng.randint(1, classes)
        r = rng.randint(size // 10, size // 4)
        x, y = rng.randint(r, size - r), rng.randint(r, size - r)
        box = (x - r, y - r, x + r, y + r)
        colour = tuple(min(255, c + rng.randint(-25, 25)) for c in _COLOURS[(label - 1) % 5])
        if rng.random() < 0.5:
            draw_image.ellipse(box, fill=colour)  # type: ignore[arg-type]
            draw_mask.ellipse(box, fill=label)
        else:
            draw_image.rectangle(box, fill=colour)  # type: ignore[arg-type]
            draw_mask.rectangle(box, fill=label)
    return image, mask


def write_dataset(
    root: str | Path,
    *,
    classes: int = 1,
    size: int = 64,
    n_train: int = 16,
    n_valid: int = 8,
    seed: int = 0,
) -> Path:
    """Write ``root/train`` and ``root/valid``; returns ``root``. Same seed, same files."""
    if classes < 1 or classes > 255:
        raise ValueError(f"classes must be in [1, 255], got {classes}")
    root = Path(root)
    rng = random.Random(seed)
    for split, count in (("train", n_train), ("valid", n_valid)):
        images, masks = root / split / "images", root / split / "masks"
        images.mkdir(parents=True, exist_ok=True)
        masks.mkdir(parents=True, exist_ok=True)
        for i in range(count):
            image, mask = _sample(rng, size, classes)
            image.save(images / f"{split}-{i:03d}.png")
            mask.save(masks / f"{split}-{i:03d}.png")
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--classes", type=int, default=1, help="classes besides background")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--train", type=int, default=16)
    parser.add_argument("--valid", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    write_dataset(
        args.root,
        classes=args.classes,
        size=args.size,
        n_train=args.train,
        n_valid=args.valid,
        seed=args.seed,
    )
    print(f"wrote {args.root}/train ({args.train}) and {args.root}/valid ({args.valid})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
