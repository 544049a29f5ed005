"""dvt_hpo.studyfile.fields: the :class:`Reader` every section reader uses, on a real YAML file
read with its lines: each refusal placed at the line and field of the value, sections checked
against their dataclass, dotted paths, and paths resolved against the study file's folder.
Each section's own rules: the other tests of tests/studyfile/."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from dvt_hpo.config.source import Doc, read_yaml
from dvt_hpo.exceptions import SpecError
from dvt_hpo.spec.model import PlateauSpec
from dvt_hpo.studyfile.fields import Reader

STUDY = """\
study:
  name: s
  plateau:
    trials: 0
  other: {count: 5, label: 7, path: 'a..b'}
"""
PLATEAU = ("study", "plateau")
OTHER = ("study", "other")


def reader(tmp_path: Path, text: str = STUDY, shown: str = "sub/study.yaml") -> tuple[Reader, Any]:
    """A Reader of ``text`` written to tmp_path/sub/study.yaml, shown as ``shown``; the tree."""
    path = tmp_path / "sub" / "study.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(textwrap.dedent(text))
    doc = Doc(shown)
    return Reader(doc, path, shown), read_yaml(path, shown, doc, (), "the study file")


def refusal(call: Any) -> SpecError:
    with pytest.raises(SpecError) as info:
        call()
    return info.value


def test_a_sections_field_is_refused_at_its_line(tmp_path: Path) -> None:
    r, root = reader(tmp_path)
    error = refusal(lambda: r.section(PlateauSpec, root["study"]["plateau"], PLATEAU, "plateau"))
    assert (error.file, error.line, error.field) == ("sub/study.yaml", 4, "study.plateau.trials")
    assert error.message == "must be an integer >= 1, got 0"


@pytest.mark.parametrize("keys_only", [False, True])
def test_an_unknown_key_is_refused_with_the_nearest_one(tmp_path: Path, keys_only: bool) -> None:
    r, root = reader(tmp_path, "study:\n  plateau:\n    trails: 3\n")
    section = root["study"]["plateau"]
    error = refusal(
        lambda: r.section(PlateauSpec, section, PLATEAU, "plateau", keys_only=keys_only)
    )
    assert (error.line, error.field) == (3, "study.plateau.trails")
    assert error.message.startswith("unknown key 'trails' in plateau; did you mean 'trials'?")


def test_a_section_gives_its_checked_values_or_only_its_keys(tmp_path: Path) -> None:
    r, root = reader(tmp_path, "study:\n  plateau: {trials: 4, min_delta: 1}\n")
    section = root["study"]["plateau"]
    read = r.section(PlateauSpec, section, PLATEAU, "plateau")
    assert read == {"trials": 4, "min_delta": 1.0} and isinstance(read["min_delta"], float)
    # keys_only: the values as written, for the section reader to check later.
    raw = r.section(PlateauSpec, {"trials": "many"}, PLATEAU, "plateau", keys_only=True)
    assert raw == {"trials": "many"}
    # A null section is empty: its required fields are then missing, said at its line.
    assert r.section(PlateauSpec, None, PLATEAU, "plateau", keys_only=True) == {}
    error = refusal(lambda: r.section(PlateauSpec, None, PLATEAU, "plateau"))
    assert (error.line, error.field) == (2, "study.plateau.trials")
    assert error.message == "missing required key 'trials' in plateau"


def test_a_section_that_is_no_mapping_is_refused_at_its_line(tmp_path: Path) -> None:
    r, root = reader(tmp_path, "study:\n  name: s\n  plateau: 3\n")
    error = refusal(lambda: r.section(PlateauSpec, root["study"]["plateau"], PLATEAU, "plateau"))
    assert (error.line, error.field, error.message) == (
        3,
        "study.plateau",
        "plateau must be a mapping, got 3 (int)",
    )


def test_a_value_is_checked_with_a_bound_given_by_another_field(tmp_path: Path) -> None:
    r, root = reader(tmp_path)
    count = root["study"]["other"]["count"]
    assert r.value(count, (*OTHER, "count"), int, le=5) == 5
    assert r.value(count, (*OTHER, "count"), float) == 5.0
    error = refusal(lambda: r.value(count, (*OTHER, "count"), int, ge=6))
    assert (error.line, error.field) == (5, "study.other.count")
    assert error.message == "must be an integer >= 6, got 5"


def test_a_string_field_is_absent_null_or_a_string(tmp_path: Path) -> None:
    r, root = reader(tmp_path)
    other = root["study"]["other"]
    assert r.string(other, OTHER, "missing", "a label") is None
    assert r.string({"label": None}, OTHER, "label", "a label") is None
    assert r.string({"label": "fine"}, OTHER, "label", "a label") == "fine"
    error = refusal(lambda: r.string(other, OTHER, "label", "a label"))
    assert (error.line, error.field) == (5, "study.other.label")
    assert error.message == "must be a label or null, got 7 (int)"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("a..b", "malformed dotted path: path 'a..b': malformed segment ''"),
        ("", "must be a dotted path such as 'data.batch_size', got '' (str)"),
        (3, "must be a dotted path such as 'data.batch_size', got 3 (int)"),
    ],
)
def test_a_dotted_path_is_refused_at_its_line(tmp_path: Path, value: Any, message: str) -> None:
    r, _ = reader(tmp_path)
    error = refusal(lambda: r.dotted(value, (*OTHER, "path")))
    assert (error.line, error.field, error.message) == (5, "study.other.path", message)


def test_a_good_dotted_path_is_kept_as_written(tmp_path: Path) -> None:
    r, _ = reader(tmp_path)
    assert r.dotted("model.layers[0].units", (*OTHER, "path")) == "model.layers[0].units"


def test_an_error_on_a_missing_key_is_placed_at_its_section(tmp_path: Path) -> None:
    r, _ = reader(tmp_path)
    error = r.err((*PLATEAU, "min_delta"), "is needed here")
    assert (error.file, error.line, error.field) == ("sub/study.yaml", 3, "study.plateau.min_delta")


def test_paths_resolve_against_the_study_files_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    r, _ = reader(tmp_path)
    folder = (tmp_path / "sub").resolve()
    assert r.dir == tmp_path / "sub"
    assert r.resolve("data/../runs") == folder / "runs"
    assert r.resolve("~/cache") == (tmp_path / "home" / "cache").resolve()
    assert r.resolve("/abs/x") == Path("/abs/x")
    # Messages show paths as the user gave the study file.
    assert r.shown_dir == Path("sub")
