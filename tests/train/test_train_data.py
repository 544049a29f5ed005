"""Datasets: digits split sizes, synthetic determinism, image folders (npy and PNG)."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from dvt_hpo.exceptions import SpecError
from dvt_hpo.train.config import DataConfig, SyntheticConfig
from dvt_hpo.train.data import build_data, split_indices


def test_digits_split_sizes_shape_and_range() -> None:
    bundle = build_data(DataConfig(kind="digits", val_fraction=0.2), seed=0)
    assert (len(bundle.train), len(bundle.val)) == (1438, 359)
    assert bundle.in_shape == (1, 8, 8) and bundle.num_classes == 10
    image, label = bundle.val[0]
    assert image.shape == (1, 8, 8) and image.dtype == torch.float32
    assert float(image.min()) >= 0.0 and float(image.max()) <= 1.0
    assert label.dtype == torch.int64


def test_digits_split_is_seeded_and_capped() -> None:
    a = build_data(DataConfig(max_samples=100, val_fraction=0.3), seed=1)
    b = build_data(DataConfig(max_samples=100, val_fraction=0.3), seed=1)
    c = build_data(DataConfig(max_samples=100, val_fraction=0.3), seed=2)
    assert (len(a.train), len(a.val)) == (70, 30)
    assert torch.equal(a.val[0][0], b.val[0][0])
    assert [int(a.val[i][1]) for i in range(30)] != [int(c.val[i][1]) for i in range(30)]


def test_digits_resize() -> None:
    bundle = build_data(DataConfig(image_size=16, max_samples=10), seed=0)
    assert bundle.in_shape == (1, 16, 16) and bundle.train[0][0].shape == (1, 16, 16)


def test_split_indices_partition() -> None:
    train, val = split_indices(10, 0.01, seed=0)
    assert len(val) == 1 and sorted(train + val) == list(range(10))
    train, val = split_indices(3, 0.99, seed=0)
    assert len(train) == 1 and len(val) == 2


def test_synthetic_is_deterministic_and_learnable() -> None:
    cfg = DataConfig(
        kind="synthetic",
        image_size=6,
        synthetic=SyntheticConfig(num_samples=300, num_classes=3, channels=2),
    )
    bundle = build_data(cfg, seed=0)
    assert bundle.in_shape == (2, 6, 6) and bundle.num_classes == 3
    assert len(bundle.train) + len(bundle.val) == 300
    again = build_data(cfg, seed=0)
    assert torch.equal(bundle.train[5][0], again.train[5][0])
    # Labels are learnable: nearest class mean on the training set classifies validation well.
    xs = torch.stack([bundle.train[i][0] for i in range(len(bundle.train))]).flatten(1)
    ys = torch.stack([bundle.train[i][1] for i in range(len(bundle.train))])
    means = torch.stack([xs[ys == k].mean(0) for k in range(3)])
    vx = torch.stack([bundle.val[i][0] for i in range(len(bundle.val))]).flatten(1)
    vy = torch.stack([bundle.val[i][1] for i in range(len(bundle.val))])
    accuracy = (torch.cdist(vx, means).argmin(1) == vy).float().mean()
    assert accuracy > 0.9


def test_synthetic_noise_sets_the_difficulty() -> None:
    def image(noise: float) -> torch.Tensor:
        syn = SyntheticConfig(num_samples=10, num_classes=2, channels=1, noise=noise)
        bundle = build_data(DataConfig(kind="synthetic", image_size=8, synthetic=syn), seed=0)
        return bundle.train[0][0]

    pattern = image(0.0)  # the class pattern alone
    # The same noise draw, scaled: noise 20 buries the pattern 20 times deeper.
    assert torch.allclose(image(20.0) - pattern, 20 * (image(1.0) - pattern), atol=1e-4)
    with pytest.raises(SpecError, match="noise"):
        SyntheticConfig(noise=-1.0)


def write_npy_folder(root: Path, classes: dict[str, int], size: int = 5) -> None:
    rng = np.random.default_rng(0)
    for name, count in classes.items():
        (root / name).mkdir(parents=True)
        for i in range(count):
            np.save(root / name / f"{i}.npy", rng.integers(0, 256, (size, size, 3), dtype=np.uint8))


def test_imagefolder_npy_split_and_resize(tmp_path: Path) -> None:
    write_npy_folder(tmp_path / "train", {"cat": 6, "dog": 4})
    (tmp_path / "train" / "empty").mkdir()
    bundle = build_data(
        DataConfig(
            kind="imagefolder", root=str(tmp_path / "train"), image_size=4, val_fraction=0.2
        ),
        0,
    )
    assert bundle.class_names == ("cat", "dog") and bundle.num_classes == 2
    assert (len(bundle.train), len(bundle.val)) == (8, 2)
    image, label = bundle.train[0]
    assert image.shape == (3, 4, 4) and bundle.in_shape == (3, 4, 4)
    assert float(image.min()) >= 0.0 and float(image.max()) <= 1.0 and int(label) in (0, 1)


def test_imagefolder_val_root(tmp_path: Path) -> None:
    write_npy_folder(tmp_path / "train", {"a": 3, "b": 3})
    write_npy_folder(tmp_path / "val", {"b": 2})
    cfg = DataConfig(
        kind="imagefolder", root=str(tmp_path / "train"), val_root=str(tmp_path / "val")
    )
    bundle = build_data(cfg, 0)
    assert (len(bundle.train), len(bundle.val)) == (6, 2)
    assert [int(bundle.val[i][1]) for i in range(2)] == [1, 1]
    write_npy_folder(tmp_path / "val2", {"c": 1})
    with pytest.raises(SpecError, match=r"classes \['c'\] of val_root are not in root") as info:
        build_data(
            DataConfig(
                kind="imagefolder", root=str(tmp_path / "train"), val_root=str(tmp_path / "val2")
            ),
            0,
        )
    assert info.value.field == "data.val_root"


def test_imagefolder_needs_two_classes(tmp_path: Path) -> None:
    write_npy_folder(tmp_path, {"only": 3})
    with pytest.raises(SpecError, match="at least 2 class sub-folders") as info:
        build_data(DataConfig(kind="imagefolder", root=str(tmp_path)), 0)
    assert info.value.field == "data.root"


def _png_gray(path: Path, pixels: np.ndarray) -> None:
    """A minimal 8-bit grayscale PNG, written by hand so the test does not need Pillow to write."""
    height, width = pixels.shape
    raw = b"".join(b"\x00" + pixels[r].astype(np.uint8).tobytes() for r in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return len(data).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")

    header = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 0, 0, 0, 0])
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def test_imagefolder_png(tmp_path: Path) -> None:
    for name, value in (("dark", 10), ("light", 240)):
        (tmp_path / name).mkdir()
        for i in range(3):
            _png_gray(tmp_path / name / f"{i}.png", np.full((6, 6), value))
    cfg = DataConfig(kind="imagefolder", root=str(tmp_path), image_size=4, val_fraction=0.34)
    bundle = build_data(cfg, 0)
    assert bundle.in_shape == (1, 4, 4)
    for i in range(len(bundle.train)):
        image, label = bundle.train[i]
        expected = 10 / 255 if int(label) == 0 else 240 / 255
        assert torch.allclose(image, torch.full((1, 4, 4), expected), atol=1e-3)


def test_digits_match_scikit_learn() -> None:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    data = build_data(DataConfig(val_fraction=0.5), seed=0)
    full = data.train.dataset  # both splits index the same full dataset
    images, labels = full.tensors
    assert torch.equal(images.squeeze(1) * 16, torch.from_numpy(bunch.images).float())
    assert torch.equal(labels, torch.from_numpy(bunch.target))


def test_imagefolder_jpeg_rgb(tmp_path: Path) -> None:
    from PIL import Image

    for name, color in (("red", (250, 0, 0)), ("blue", (0, 0, 250))):
        (tmp_path / name).mkdir()
        for i in range(3):
            Image.new("RGB", (10, 7), color).save(tmp_path / name / f"{i}.jpg", quality=95)
    cfg = DataConfig(kind="imagefolder", root=str(tmp_path), image_size=5, val_fraction=0.34)
    bundle = build_data(cfg, 0)
    assert bundle.in_shape == (3, 5, 5)
    assert bundle.num_classes == 2
    image, label = bundle.train[0]
    channel = 0 if bundle.class_names[int(label)] == "red" else 2
    assert float(image[channel].mean()) > 0.9


def png_folder(root: Path, classes: dict[str, int]) -> None:
    for name, count in classes.items():
        (root / name).mkdir(parents=True)
        for i in range(count):
            _png_gray(root / name / f"{i}.png", np.full((6, 6), 10 * i))


def test_imagefolder_warns_about_empty_class_folders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png_folder(tmp_path, {"a": 3, "b": 3})
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("not an image")

    bundle = build_data(DataConfig(kind="imagefolder", root=str(tmp_path)), 0)

    assert bundle.class_names == ("a", "b")
    err = capsys.readouterr().err
    assert "warning: data.root: class folder 'empty' has no images" in err, err
    assert str(tmp_path) in err


def test_imagefolder_names_unreadable_images_before_training(tmp_path: Path) -> None:
    png_folder(tmp_path, {"a": 3, "b": 3})
    (tmp_path / "a" / "bad.png").write_bytes(b"not a png at all")
    (tmp_path / "b" / "empty.npy").write_bytes(b"")

    with pytest.raises(SpecError) as info:
        build_data(DataConfig(kind="imagefolder", root=str(tmp_path)), 0)

    err = info.value
    assert err.field == "data.root" and "\n" not in str(err), str(err)
    assert "2 unreadable images" in err.message, err.message
    assert str(tmp_path / "a" / "bad.png") in err.message
    assert str(tmp_path / "b" / "empty.npy") in err.message
    assert "data.skip_unreadable" in err.message


def test_imagefolder_skips_unreadable_images_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png_folder(tmp_path, {"a": 3, "b": 3})
    (tmp_path / "a" / "bad.png").write_bytes(b"not a png at all")
    cfg = DataConfig(kind="imagefolder", root=str(tmp_path), skip_unreadable=True)

    bundle = build_data(cfg, 0)

    assert len(bundle.train) + len(bundle.val) == 6
    err = capsys.readouterr().err
    assert "warning: data.root: skipped 1 unreadable image" in err and "bad.png" in err, err


def test_imagefolder_image_that_fails_to_decode_names_its_file(tmp_path: Path) -> None:
    png_folder(tmp_path, {"a": 2, "b": 2})
    truncated = tmp_path / "a" / "0.png"
    _png_gray(truncated, np.random.default_rng(0).integers(0, 256, (64, 64)))
    good = truncated.read_bytes()
    truncated.write_bytes(good[: len(good) // 2])  # header intact, pixel data cut
    bundle = build_data(DataConfig(kind="imagefolder", root=str(tmp_path), val_fraction=0.5), 0)

    with pytest.raises(SpecError) as info:
        for split in (bundle.train, bundle.val):
            for i in range(len(split)):
                split[i]

    assert str(truncated) in info.value.message and info.value.field == "data.root", info.value
