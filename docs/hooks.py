"""MkDocs hook: the reference pages generated from the code at every build (never committed).

``reference/study-yaml.md`` comes from the study file's dataclasses
(:mod:`dvt_hpo.studyfile.reference`), ``reference/cli.md`` from ``dvt-hpo``'s argument parser
(:mod:`dvt_hpo.views.cli_reference`). Named in ``mkdocs.yml`` (``hooks:``); the repository root is put
on ``sys.path`` so that the checkout's own dvt_hpo is documented.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

GENERATED = {
    "reference/study-yaml.md": ("dvt_hpo.studyfile.reference", "markdown"),
}


def _cli_page() -> str:
    from dvt_hpo.cli import build_parser
    from dvt_hpo.views.cli_reference import markdown

    return markdown(build_parser())


def on_files(files, config):  # noqa: ANN001, ANN201 - MkDocs' hook signature
    import importlib

    for uri, (module, function) in GENERATED.items():
        content = getattr(importlib.import_module(module), function)()
        files.append(File.generated(config, uri, content=content))
    files.append(File.generated(config, "reference/cli.md", content=_cli_page()))
    return files
