"""The documentation site (``mkdocs.yml``, ``docs/``) and the study files the docs show.

Every ```` ```yaml ```` block of study-file sections in the README and the docs is loaded by the
real loader (validate-only: nothing is written), so an example that no longer validates fails
here; a part of a study (only ``trials:``, say) is loaded over the sections it lacks. The site is built with ``mkdocs build --strict`` (a broken link, a page left out of the
nav or a missing anchor fails it) and opened in headless Chromium: the home page, a tutorial
and the generated references render, and the search finds ``per_gpu``.
"""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dvt_hpo.studyfile import load, load_spec
from dvt_hpo.studyfile.reference import rows, sections
from tests.browser import evaluate
from tests.conftest import REPO_ROOT

DOCS = REPO_ROOT / "docs"
PAGES = [REPO_ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
NO_MKDOCS = "mkdocs is not installed (pip install -e '.[docs]'; the test extra has it)"
# A block whose first line names a file of the repository is that file
# (`# studies/quickstart.yaml`), or a part of a study written over it
# (`# over studies/command-trainer/study.yaml`).
NAMED = re.compile(r"#\s*(over\s+)?(studies/\S+\.ya?ml)\s*$")
# What a part of a study (a block of only `trials:`, say) is loaded over when it names no file:
# the sections a study file needs.
BASE: dict[str, Any] = {
    "study": {"name": "shown"},
    "trainer": {
        "entrypoint": "mytrainer:run",
        "config": {
            "epochs": 4,
            "x": 0.5,
            "data": {"batch_size": 32},
            "precision": {"accumulate_steps": 1},
        },
    },
    "search_space": [{"name": "x", "path": "x", "kind": "float", "low": 0.0, "high": 1.0}],
}


def _study_blocks() -> Iterator[tuple[str, str]]:
    """Every yaml block of the README and the docs made of study-file sections."""
    for page in PAGES:
        text = page.read_text()
        for match in re.finditer(r"```yaml\n(.*?)```", text, flags=re.S):
            block = match.group(1)
            doc = yaml.safe_load(block)
            if isinstance(doc, dict) and doc and set(doc) <= set(load.SECTIONS):
                line = text[: match.start()].count("\n") + 2
                yield f"{page.relative_to(REPO_ROOT)}:{line}", block


STUDY_BLOCKS = list(_study_blocks())


def _over(base: dict[str, Any], part: dict[str, Any]) -> dict[str, Any]:
    """``part``'s sections over ``base``'s: ``study`` key by key (a study needs its name), any
    other section as written."""
    doc = dict(base)
    for key, value in part.items():
        both = isinstance(value, dict) and isinstance(base.get(key), dict)
        doc[key] = {**base[key], **value} if key == "study" and both else value
    return doc


def test_the_docs_show_study_files() -> None:
    where = {w.split(":")[0] for w, _ in STUDY_BLOCKS}
    assert {"README.md", "docs/tutorials/quickstart.md", "docs/tutorials/slurm.md"} <= where
    assert {"docs/how-to/per-gpu.md", "docs/how-to/command-trainers.md"} <= where  # parts


@pytest.mark.parametrize(("where", "block"), STUDY_BLOCKS, ids=[w for w, _ in STUDY_BLOCKS])
def test_every_study_file_in_the_docs_validates(
    where: str, block: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DB_PASSWORD", "a-password")  # the team examples read it
    shown = yaml.safe_load(block)
    folder, base = tmp_path, BASE
    named = NAMED.match(block.splitlines()[0])
    if named is not None:
        source = REPO_ROOT / named.group(2)
        folder = tmp_path / source.parent.name
        shutil.copytree(source.parent, folder, ignore=shutil.ignore_patterns("*.db", "runs"))
        base = yaml.safe_load(source.read_text())
        if named.group(1) is None:
            # Shown as the file itself: it must be the file, from `study:` on.
            body = source.read_text().split("study:", 1)[1].rstrip() + "\n"
            assert block.split("study:", 1)[1] == body, (
                f"{where} shows {named.group(2)}, which has changed: copy it again"
            )
    complete = {"study", "trainer", "search_space"} <= set(shown)
    doc = shown if complete else _over(base, shown)
    path = folder / "shown-study.yaml"
    path.write_text(block if complete else yaml.safe_dump(doc, sort_keys=False))
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))

    spec = load_spec(path)

    assert spec.study.name
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written


def _mkdocs() -> None:
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
    except ImportError:
        pytest.skip(NO_MKDOCS)


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        capture_output=True,
        text=True,
        timeout=240,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _mkdocs()
    out = tmp_path_factory.mktemp("site")
    built = _build(REPO_ROOT / "mkdocs.yml", out)
    assert built.returncode == 0, built.stderr[-4000:]
    return out


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The built site over HTTP (the search's web worker does not run from file:// URLs)."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))

    class Quiet(handler.func):  # type: ignore[name-defined,misc]
        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(site))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_committed_generated_references_are_current() -> None:
    """study-yaml.md and cli.md are committed (the README links them in a checkout): each is
    what the code generates now; `python docs/hooks.py` rewrites them."""
    import importlib.util

    found = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    assert found is not None and found.loader is not None
    hooks = importlib.util.module_from_spec(found)
    found.loader.exec_module(hooks)
    assert set(hooks.generated()) == {"reference/study-yaml.md", "reference/cli.md"}
    assert hooks.stale() == [], "run: python docs/hooks.py"


@pytest.mark.processes
def test_the_generated_references_list_every_field_and_command(site: Path) -> None:
    page = (site / "reference" / "study-yaml" / "index.html").read_text()
    for name, cls, is_list in sections():
        for row in rows(cls, f"{name}[]" if is_list else name):
            assert f"<code>{row.path}</code>" in page, row.path
    cli = (site / "reference" / "cli" / "index.html").read_text()
    for command in ("run", "validate", "best", "status", "dashboard", "submit", "train"):
        assert f'id="dvt-hpo-{command}"' in cli, command
    assert "--retry-failed" in cli and "--export FILE" in cli


_RENDERED = """new Promise(resolve => {
  const t0 = Date.now();
  (function poll() {
    const h1 = document.querySelector('article h1');
    const imgs = [...document.querySelectorAll('article img')];
    const ready = h1 && imgs.every(i => i.complete);
    if (ready || Date.now() - t0 > 20000) resolve({
      h1: h1 ? h1.textContent : null,
      nav: document.querySelectorAll('.md-nav__link').length,
      images: imgs.map(i => i.naturalWidth),
      tables: document.querySelectorAll('article table').length,
      code: document.querySelectorAll('article pre code').length,
      text: document.querySelector('article').innerText,
    });
    else setTimeout(poll, 100);
  })();
})"""

_SEARCHED = """new Promise(resolve => {
  const t0 = Date.now();
  (function poll() {
    const items = [...document.querySelectorAll('.md-search-result__item')];
    if (items.length || Date.now() - t0 > 30000)
      resolve(items.map(i => [i.querySelector('a').getAttribute('href'), i.textContent]));
    else setTimeout(poll, 100);
  })();
})"""


@pytest.mark.processes
def test_the_site_renders_in_a_browser_and_its_search_finds_per_gpu(served: str) -> None:
    home = evaluate(f"{served}/", _RENDERED)
    assert home["h1"].startswith("dvt-hpo"), home
    assert home["nav"] > 20 and home["images"] and all(w > 0 for w in home["images"]), home

    tutorial = evaluate(f"{served}/tutorials/quickstart/", _RENDERED)
    assert tutorial["h1"].startswith("Quickstart") and tutorial["code"] >= 3, tutorial
    assert "dvt-hpo run studies/quickstart.yaml" in tutorial["text"]

    reference = evaluate(f"{served}/reference/study-yaml/", _RENDERED)
    assert reference["h1"].startswith("study.yaml reference") and reference["tables"] == 8
    assert "trials.per_gpu" in reference["text"]
    cli = evaluate(f"{served}/reference/cli/", _RENDERED)
    assert cli["h1"].startswith("Command-line reference") and "--retry-failed" in cli["text"]

    found = evaluate(f"{served}/?q=per_gpu", _SEARCHED)
    assert found, "the search found nothing for per_gpu"
    pages = {href.split("#")[0] for href, _ in found}
    assert any("how-to/per-gpu/" in p for p in pages), pages
    assert any("per_gpu" in text for _, text in found)


@pytest.mark.processes
def test_a_broken_link_or_anchor_or_a_page_outside_the_nav_fails_the_build(
    tmp_path: Path,
) -> None:
    _mkdocs()
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(REPO_ROOT / "mkdocs.yml", tmp_path)
    # The hook documents this checkout's dvt_hpo: put it beside the copy.
    (tmp_path / "dvt_hpo").symlink_to(REPO_ROOT / "dvt_hpo")
    index = tmp_path / "docs" / "index.md"
    index.write_text(
        index.read_text()
        + "\n[a page](tutorials/missing.md) and [an anchor](how-to/per-gpu.md#no-such-part)\n"
    )
    (tmp_path / "docs" / "orphan.md").write_text("# Not in the nav\n")

    built = _build(tmp_path / "mkdocs.yml", tmp_path / "site")

    assert built.returncode != 0
    assert "tutorials/missing.md" in built.stderr, built.stderr[-3000:]
    assert "no-such-part" in built.stderr, built.stderr[-3000:]
    assert "orphan.md" in built.stderr, built.stderr[-3000:]
