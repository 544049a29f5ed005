"""dvt_hpo/studyfile/reference.py: the study.yaml reference says what every field is."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from dvt_hpo.config.schema import domain, field_doc, rule
from dvt_hpo.studyfile import load
from dvt_hpo.studyfile.reference import markdown, rows, sections, undocumented


def test_every_field_and_section_is_explained() -> None:
    missing = undocumented()
    assert missing == [], (
        "give each field its sentence in dvt_hpo/spec/model.py, in its own declaration: "
        'rule(..., doc="...") or domain(..., doc="...", accepts="what the file writes"):\n'
        + "\n".join(missing)
    )


def test_the_sections_are_the_loaders() -> None:
    assert [name for name, _, _ in sections()] == list(load.SECTIONS)


def test_each_explanation_is_one_sentence() -> None:
    for name, cls, is_list in sections():
        for row in rows(cls, f"{name}[]" if is_list else name):
            assert row.doc is not None and row.doc.endswith("."), row.path
            # One sentence: no full stop followed by a new sentence inside it.
            assert not re.search(r"\.\s+[A-Z]", row.doc), (row.path, row.doc)


def test_the_page_has_a_row_per_field_with_its_type_and_default() -> None:
    page = markdown()
    lines = page.splitlines()
    assert lines[0] == "# study.yaml reference"
    for name, _, _ in sections():
        assert f"## {name}" in lines
    per_gpu = next(line for line in lines if line.startswith("| `trials.per_gpu` |"))
    assert per_gpu.startswith("| `trials.per_gpu` | an integer >= 1 | `1` | Trials packed")
    n_trials = next(line for line in lines if line.startswith("| `study.n_trials` |"))
    assert "an integer >= 1 or null | `null` |" in n_trials
    keep = next(line for line in lines if line.startswith("| `trials.keep_logs` |"))
    assert "one of all, failed, none | `all` |" in keep
    # Nested sections and list items are spelt as the file writes them.
    assert "| `study.plateau.trials` | an integer >= 1 | required |" in page
    assert "| `objective.metrics[].name` |" in page and "| `search_space[].when` |" in page
    # A default the loader computes is said as such.
    assert "| `trials.runs_dir` | a folder path | `runs/<name>` |" in page


def test_a_field_without_its_sentence_is_reported() -> None:
    @dataclass(frozen=True)
    class Section:
        """A section."""

        explained: int = rule(1, ge=1, doc="Explained.")
        bare: int = rule(1, ge=1)
        raw: str = domain("x", doc="Checked by code, but what does the file write?")
        plain: bool = dataclasses.field(default=False)

    problems = [r.problem for r in rows(Section, "s") if r.problem]

    assert problems == [
        "s.bare: no doc= sentence",
        "s.raw: a domain field needs accepts= (what the file writes)",
        "s.plain: no doc= sentence",
    ]
    assert field_doc(dataclasses.fields(Section)[0]).doc == "Explained."
