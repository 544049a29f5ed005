"""Datasets of the built-in trainer: ``digits``, ``imagefolder`` and ``synthetic``.

Every sample is ``(image, label)`` with ``image`` a float tensor ``(channels, size, size)`` in
[0, 1] (synthetic: roughly standard normal) and ``label`` an int64 scalar.

- ``digits``: scikit-learn's bundled 8x8 digits (1797 samples, 10 classes; no download),
  resized only when ``image_size`` is set.
- ``imagefolder``: ``root/<class>/<file>``, classes in sorted order; PNG/JPEG/BMP/GIF/WebP are
  decoded with Pillow (``pip install pillow``), ``.npy`` arrays ``(H, W)`` or ``(H, W, C)``
  (uint8 scaled by 1/255, floats taken as they are) need nothing more. Channels follow the
  first image (grayscale -> 1, else RGB -> 3); everything is resized to ``image_size``
  (default 32). The validation set is ``val_root`` (same class names) or a seeded split.
  Before training, every file's header is read: unreadable files fail the data load with
  their list (``skip_unreadable: true`` skips them with a warning and a count), and class
  folders without images are named in a warning (they are not classes). An image that still
  fails to decode later raises an error naming its file.
- ``synthetic``: seeded random images whose class sets a low-frequency mean pattern, so
  labels are learnable; generated on the fly per index, so any size costs no memory.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, Subset, TensorDataset

from dvt_hpo.exceptions import SpecError
from dvt_hpo.train.config import DataConfig

__all__ = ["DataBundle", "ImageFolder", "SyntheticImages", "build_data", "split_indices"]

DEFAULT_IMAGE_SIZE = 32
PIL_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp"})
IMAGE_SUFFIXES = PIL_SUFFIXES | {".npy"}


@dataclass(frozen=True)
class DataBundle:
    train: Dataset[Any]
    val: Dataset[Any]
    in_shape: tuple[int, int, int]  # (channels, height, width) of one sample
    num_classes: int
    class_names: tuple[str, ...]


def split_indices(n: int, val_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """A seeded random split of ``range(n)`` into (train, val), both non-empty."""
    if n < 2:
        raise SpecError(f"need at least 2 samples to split, got {n}", field="data")
    n_val = min(max(1, round(n * val_fraction)), n - 1)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    return order[n_val:], order[:n_val]


def _cap(dataset: Dataset[Any], max_samples: int | None, seed: int) -> Dataset[Any]:
    n = len(dataset)  # type: ignore[arg-type]
    if max_samples is None or max_samples >= n:
        return dataset
    # A different stream than the split's, so capping does not bias which samples validate.
    keep = torch.randperm(n, generator=torch.Generator().manual_seed(seed + 1)).tolist()
    return Subset(dataset, sorted(keep[:max_samples]))


class _Resized(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Resizes another dataset's images on access (bilinear), so nothing large is stored."""

    def __init__(self, base: Dataset[Any], size: int) -> None:
        self.base = base
        self.size = size

    def __len__(self) -> int:
        return len(self.base)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image, label = self.base[index]
        return _resize(image, self.size), label


def _resize(image: torch.Tensor, size: int) -> torch.Tensor:
    if image.shape[-2:] == (size, size):
        return image
    return F.interpolate(
        image.unsqueeze(0), size=(size, size), mode="bilinear", align_corners=False
    ).squeeze(0)


def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled digits: images (1797, 8, 8) with values 0..16, labels (1797,)."""
    # Importing sklearn.datasets costs ~1 s per trial process; the data is a small CSV inside
    # the package, read directly when it is where scikit-learn keeps it.
    spec = importlib.util.find_spec("sklearn")
    if spec is not None and spec.submodule_search_locations:
        path = Path(list(spec.submodule_search_locations)[0], "datasets", "data", "digits.csv.gz")
        if path.is_file():
            table = np.loadtxt(path, delimiter=",")
            if table.shape == (1797, 65):
                return table[:, :-1].reshape(-1, 8, 8), table[:, -1]
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return bunch.images, bunch.target


def _digits(cfg: DataConfig) -> tuple[Dataset[Any], int, tuple[str, ...]]:
    pixels, targets = _digits_arrays()
    images = torch.from_numpy(np.asarray(pixels, dtype=np.float32) / 16.0).unsqueeze(1)
    labels = torch.from_numpy(np.asarray(targets, dtype=np.int64))
    dataset: Dataset[Any] = TensorDataset(images, labels)
    if cfg.image_size is not None and cfg.image_size != 8:
        dataset = _Resized(dataset, cfg.image_size)
    return dataset, 10, tuple(str(i) for i in range(10))


class SyntheticImages(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """``num_samples`` images: class pattern (a 4x4 random map upsampled) + Gaussian noise of
    standard deviation ``noise``."""

    def __init__(
        self,
        num_samples: int,
        num_classes: int,
        channels: int,
        image_size: int,
        seed: int,
        noise: float = 1.0,
    ) -> None:
        self.num_samples = num_samples
        self.noise = noise
        self.num_classes = num_classes
        self.image_size = image_size
        self.seed = seed
        generator = torch.Generator().manual_seed(seed)
        coarse = torch.randn(num_classes, channels, 4, 4, generator=generator)
        self.patterns = F.interpolate(coarse, size=(image_size, image_size), mode="nearest")
        order = torch.randperm(num_samples, generator=generator)
        self.labels = order % num_classes  # balanced classes in a seeded order

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < self.num_samples:
            raise IndexError(index)
        label = self.labels[index]
        # Per-index stream: the same index gives the same image in any order or worker.
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        noise = torch.randn(self.patterns.shape[1:], generator=generator)
        return self.patterns[label] + self.noise * noise, label


def _warn(message: str) -> None:
    # The trial's stderr.log (or the terminal of `dvt-hpo train`) is where a user looks.
    print(f"warning: {message}", file=sys.stderr, flush=True)


def _find_images(folder: Path, field: str) -> dict[str, list[Path]]:
    if not folder.is_dir():
        raise SpecError(f"not a folder: {str(folder)!r}", field=field)
    classes: dict[str, list[Path]] = {}
    empty: list[str] = []
    for class_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
        files = sorted(
            p for p in class_dir.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES
        )
        if files:
            classes[class_dir.name] = files
        else:
            empty.append(class_dir.name)
    if empty:
        names = ", ".join(repr(n) for n in empty)
        noun = "class folder" if len(empty) == 1 else "class folders"
        _warn(
            f"{field}: {noun} {names} {'has' if len(empty) == 1 else 'have'} no images "
            f"({', '.join(sorted(IMAGE_SUFFIXES))}) under {str(folder)!r}; not used as classes"
        )
    return classes


def _unreadable(path: Path) -> str | None:
    """Why ``path`` cannot be opened as an image (its header is read, not the pixels), or
    ``None``."""
    try:
        if path.suffix.lower() == ".npy":
            array = np.load(path, mmap_mode="r")
            if array.ndim not in (2, 3):
                return f"an array of shape {array.shape}, expected (H, W) or (H, W, C)"
            return None
        with _open_pil(path):
            return None
    except SpecError:
        raise
    except Exception as exc:  # noqa: BLE001 - every decoder error means "unreadable"
        return f"{type(exc).__name__}: {exc}".splitlines()[0]


def _readable(files: dict[str, list[Path]], cfg: DataConfig, field: str) -> dict[str, list[Path]]:
    """``files`` without the unreadable ones (skipped with a warning), or an error listing them."""
    bad = [(p, why) for paths in files.values() for p in paths if (why := _unreadable(p))]
    if not bad:
        return files
    shown = "; ".join(f"{p} ({why})" for p, why in bad[:5])
    more = f"; and {len(bad) - 5} more" if len(bad) > 5 else ""
    plural = "s" if len(bad) != 1 else ""
    if not cfg.skip_unreadable:
        raise SpecError(
            f"{len(bad)} unreadable image{plural}: {shown}{more}; fix or remove them, or set "
            "data.skip_unreadable: true to train without them",
            field=field,
        )
    _warn(f"{field}: skipped {len(bad)} unreadable image{plural}: {shown}{more}")
    dropped = {p for p, _ in bad}
    kept = {name: [p for p in paths if p not in dropped] for name, paths in files.items()}
    return {name: paths for name, paths in kept.items() if paths}


class ImageFolder(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Images decoded on access from ``(path, label)`` pairs, resized to a square side."""

    def __init__(self, samples: Sequence[tuple[Path, int]], image_size: int, channels: int) -> None:
        self.samples = list(samples)
        self.image_size = image_size
        self.channels = channels

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        path, label = self.samples[index]
        try:
            image = load_image(path, self.image_size, self.channels)
        except SpecError:
            raise
        except Exception as exc:  # noqa: BLE001 - a decoder error names the file, in one line
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
            raise SpecError(f"cannot read image {path}: {reason}", field="data.root") from None
        return image, torch.tensor(label, dtype=torch.int64)


def image_channels(path: Path) -> int:
    """1 for a grayscale image, else 3 (what :func:`load_image` produces by default)."""
    if path.suffix.lower() == ".npy":
        array = np.load(path, mmap_mode="r")
        return 1 if array.ndim == 2 else int(array.shape[2])
    image = _open_pil(path)
    with image:
        return 1 if image.mode in ("1", "L", "I", "I;16", "F") else 3


def _open_pil(path: Path) -> Any:
    try:
        from PIL import Image
    except ImportError:
        raise SpecError(
            f"decoding {path.suffix} images needs Pillow (pip install pillow); "
            ".npy arrays need nothing more",
            field="data.root",
        ) from None
    return Image.open(path)


def load_image(path: Path, image_size: int, channels: int) -> torch.Tensor:
    """Decode one image file to a float tensor ``(channels, image_size, image_size)``."""
    if path.suffix.lower() == ".npy":
        array = np.load(path)
        if array.ndim == 2:
            array = array[:, :, None]
        if array.ndim != 3:
            raise ValueError(f"{path}: expected an (H, W) or (H, W, C) array, got {array.shape}")
        scale = 1.0 / 255.0 if array.dtype == np.uint8 else 1.0
        tensor = torch.from_numpy(array.astype(np.float32) * scale).permute(2, 0, 1)
        if tensor.shape[0] != channels:
            if tensor.shape[0] == 1:
                tensor = tensor.expand(channels, -1, -1)
            else:
                raise ValueError(f"{path}: {tensor.shape[0]} channels, expected {channels}")
        return _resize(tensor.contiguous(), image_size)
    from PIL import Image

    with _open_pil(path) as image:
        converted = image.convert("L" if channels == 1 else "RGB")
        converted = converted.resize((image_size, image_size), Image.Resampling.BILINEAR)
        array = np.asarray(converted, dtype=np.float32) / 255.0
    if array.ndim == 2:
        array = array[:, :, None]
    return torch.from_numpy(array).permute(2, 0, 1).contiguous()


def _imagefolder(cfg: DataConfig, seed: int) -> DataBundle:
    assert cfg.root is not None  # checked by DataConfig
    root = Path(cfg.root)
    classes = _readable(_find_images(root, "data.root"), cfg, "data.root")
    if len(classes) < 2:
        raise SpecError(
            f"{str(root)!r} needs at least 2 class sub-folders with images "
            f"({', '.join(sorted(IMAGE_SUFFIXES))}), found {len(classes)}",
            field="data.root",
        )
    names = tuple(classes)
    index = {name: i for i, name in enumerate(names)}
    samples = [(path, index[name]) for name, files in classes.items() for path in files]
    size = cfg.image_size or DEFAULT_IMAGE_SIZE
    channels = image_channels(samples[0][0])
    full = _cap(ImageFolder(samples, size, channels), cfg.max_samples, seed)
    if cfg.val_root is None:
        n = len(full)  # type: ignore[arg-type]
        train_idx, val_idx = split_indices(n, cfg.val_fraction, seed)
        train: Dataset[Any] = Subset(full, train_idx)
        val: Dataset[Any] = Subset(full, val_idx)
    else:
        val_classes = _readable(
            _find_images(Path(cfg.val_root), "data.val_root"), cfg, "data.val_root"
        )
        unknown = sorted(set(val_classes) - set(names))
        if unknown:
            raise SpecError(
                f"classes {unknown} of val_root are not in root (classes: {', '.join(names)})",
                field="data.val_root",
            )
        if not val_classes:
            raise SpecError(f"no images under {cfg.val_root!r}", field="data.val_root")
        val_samples = [(p, index[name]) for name, files in val_classes.items() for p in files]
        train, val = full, ImageFolder(val_samples, size, channels)
    return DataBundle(train, val, (channels, size, size), len(names), names)


def build_data(cfg: DataConfig, seed: int) -> DataBundle:
    """The train and validation datasets of ``cfg``, split with ``seed``."""
    if cfg.kind == "imagefolder":
        return _imagefolder(cfg, seed)
    if cfg.kind == "digits":
        full, num_classes, names = _digits(cfg)
        side = cfg.image_size or 8
        in_shape = (1, side, side)
    else:
        syn = cfg.synthetic
        side = cfg.image_size or DEFAULT_IMAGE_SIZE
        full = SyntheticImages(
            syn.num_samples, syn.num_classes, syn.channels, side, seed, noise=syn.noise
        )
        num_classes, names = syn.num_classes, tuple(str(i) for i in range(syn.num_classes))
        in_shape = (syn.channels, side, side)
    full = _cap(full, cfg.max_samples, seed)
    train_idx, val_idx = split_indices(len(full), cfg.val_fraction, seed)  # type: ignore[arg-type]
    return DataBundle(Subset(full, train_idx), Subset(full, val_idx), in_shape, num_classes, names)
