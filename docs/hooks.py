"""The reference pages generated from the code, committed so that they read in a checkout and
on a forge too, and checked current at every build.

``reference/study-yaml.md`` comes from the study file's dataclasses
(:mod:`dvt_hpo.studyfile.reference`), ``reference/cli.md`` from ``dvt-hpo``'s argument parser
(:mod:`dvt_hpo.views.cli_reference`). ``python docs/hooks.py`` rewrites both; the MkDocs hook
(named in ``mkdocs.yml``, ``hooks:``) fails the build when a committed page differs from what
the code generates, and ``tests/test_docs.py`` checks the same without MkDocs. The repository
root is put on ``sys.path`` so that the checkout's own dvt_hpo is documented.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

REGENERATE = "python docs/hooks.py"


def _study_yaml_page() -> str:
    from dvt_hpo.studyfile.reference import markdown

    return markdown() + "\n"


def _cli_page() -> str:
    from dvt_hpo.cli import build_parser
    from dvt_hpo.views.cli_reference import markdown

    return markdown(build_parser()) + "\n"


def generated() -> dict[str, str]:
    """Each generated page (its path under docs/) and the content the code gives it now."""
    return {"reference/study-yaml.md": _study_yaml_page(), "reference/cli.md": _cli_page()}


def stale() -> list[str]:
    """The committed pages that differ from what the code generates."""
    docs = ROOT / "docs"
    return [
        uri
        for uri, content in generated().items()
        if not (docs / uri).is_file() or (docs / uri).read_text() != content
    ]


def on_pre_build(config):  # noqa: ANN001, ANN201 - MkDocs' hook signature
    import logging

    from mkdocs.exceptions import PluginError

    try:
        pages = stale()
    except ImportError as exc:
        # The site builds with MkDocs alone (no torch, no dvt-hpo install); the suite checks.
        logging.getLogger("mkdocs").info("generated pages not checked (%s)", exc)
        return
    if pages:
        raise PluginError(
            f"generated reference page(s) out of date: {', '.join(pages)}; run {REGENERATE}"
        )


if __name__ == "__main__":  # `python docs/hooks.py`: rewrite the generated pages
    for uri, content in generated().items():
        (ROOT / "docs" / uri).write_text(content)
        print(f"wrote docs/{uri}")
