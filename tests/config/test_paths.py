"""Dotted paths: parse, format, get and set, with list indexes (dvt_hpo.config.paths)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from dvt_hpo.config import paths


@dataclass
class Inner:
    width: int = 16
    tags: list[str] = field(default_factory=lambda: ["a", "b"])


@dataclass
class Outer:
    inner: Inner = field(default_factory=Inner)
    layers: list[dict[str, int]] = field(default_factory=lambda: [{"units": 8}, {"units": 4}])


@dataclass(frozen=True)
class Frozen:
    x: int = 1


@pytest.fixture
def tree() -> dict:
    return {
        "model": {"kwargs": {"width": 16}},
        "layers": [{"units": 8}, {"units": 4}],
        "obj": Outer(),
        "sched": None,
    }


@pytest.mark.parametrize(
    ("path", "parts"),
    [
        ("a", ["a"]),
        ("a.b.c", ["a", "b", "c"]),
        ("a.b[0].c", ["a", "b", 0, "c"]),
        ("a.b.0.c", ["a", "b", "0", "c"]),
        ("a[1][2]", ["a", 1, 2]),
    ],
)
def test_parse_path(path: str, parts: list) -> None:
    assert paths.parse_path(path) == parts


@pytest.mark.parametrize("path", ["", "a..b", "a.b]", "a[x]"])
def test_parse_path_rejects_malformed(path: str) -> None:
    with pytest.raises(KeyError):
        paths.parse_path(path)


def test_format_path_inverts_parse() -> None:
    assert paths.format_path(["search_space", 2, "low"]) == "search_space[2].low"
    assert paths.format_path(paths.parse_path("a.b[0].c")) == "a.b[0].c"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("model.kwargs.width", 16),
        ("layers.1.units", 4),
        ("layers[0].units", 8),
        ("obj.inner.width", 16),
        ("obj.inner.tags.1", "b"),
        ("obj.layers[1].units", 4),
        ("sched", None),
    ],
)
def test_get_path(tree: dict, path: str, expected: object) -> None:
    assert paths.get_path(tree, path) == expected


def test_get_path_missing_key_names_path_segment_and_close_name(tree: dict) -> None:
    with pytest.raises(KeyError) as info:
        paths.get_path(tree, "model.kwarg.width")
    text = str(info.value)
    assert "'model.kwarg.width'" in text
    assert "no key 'kwarg' at 'model'" in text
    assert "did you mean 'kwargs'?" in text


def test_get_path_dataclass_field_error(tree: dict) -> None:
    with pytest.raises(KeyError, match=r"Inner at 'obj.inner' has no field 'widht'.*'width'"):
        paths.get_path(tree, "obj.inner.widht")


def test_get_path_index_error_names_length(tree: dict) -> None:
    with pytest.raises(IndexError, match=r"'layers.5.units': index 5 is out of range .* length 2"):
        paths.get_path(tree, "layers.5.units")


def test_get_path_list_needs_index(tree: dict) -> None:
    with pytest.raises(KeyError, match="'layers' is a list, so segment 'units' must be an index"):
        paths.get_path(tree, "layers.units")


def test_get_path_through_scalar(tree: dict) -> None:
    with pytest.raises(KeyError, match=r"cannot look up 'x' in 'model.kwargs.width'.*int 16"):
        paths.get_path(tree, "model.kwargs.width.x")


def test_set_path_dict_list_and_dataclass(tree: dict) -> None:
    paths.set_path(tree, "model.kwargs.width", 32)
    paths.set_path(tree, "model.kwargs.depth", 3)  # a new last key is fine
    paths.set_path(tree, "layers[1].units", 2)
    paths.set_path(tree, "obj.inner.width", 64)
    paths.set_path(tree, "obj.inner.tags.0", "z")
    assert tree["model"]["kwargs"] == {"width": 32, "depth": 3}
    assert tree["layers"][1] == {"units": 2}
    assert tree["obj"].inner.width == 64
    assert tree["obj"].inner.tags == ["z", "b"]


def test_set_path_missing_intermediate_only_with_create(tree: dict) -> None:
    with pytest.raises(KeyError, match="no key 'optim'"):
        paths.set_path(tree, "optim.optim_args.lr", 0.1)
    assert "optim" not in tree
    paths.set_path(tree, "optim.optim_args.lr", 0.1, create=True)
    assert tree["optim"] == {"optim_args": {"lr": 0.1}}


def test_set_path_create_replaces_none_section(tree: dict) -> None:
    with pytest.raises(KeyError, match="cannot look up 'warmup'"):
        paths.set_path(tree, "sched.warmup.steps", 5)
    paths.set_path(tree, "sched.warmup.steps", 5, create=True)
    assert tree["sched"] == {"warmup": {"steps": 5}}


def test_set_path_errors(tree: dict) -> None:
    with pytest.raises(IndexError, match="index 2 is out of range"):
        paths.set_path(tree, "layers.2", {})
    with pytest.raises(KeyError, match="has no field 'nope'"):
        paths.set_path(tree, "obj.inner.nope", 1)
    with pytest.raises(TypeError, match="frozen"):
        paths.set_path({"f": Frozen()}, "f.x", 2)
    with pytest.raises(KeyError, match="cannot set 'x' in 'model.kwargs.width'"):
        paths.set_path(tree, "model.kwargs.width.x", 1)
