"""The README's two set-up commands are the ones CI and newcomers run."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def test_readme_gives_exactly_two_setup_commands_and_ci_runs_the_test_one() -> None:
    readme = (ROOT / "README.md").read_text()
    setup = readme.split("## Set up and run", 1)[1].split("\n## ", 1)[0]
    blocks = _bash_blocks(setup)
    assert len(blocks) == 2, blocks
    quickstart, tests = blocks
    assert "dvt-hpo run studies/quickstart.yaml" in quickstart
    assert "pytest" in tests
    ci = (ROOT / ".ci" / "run").read_text()
    assert tests in ci.splitlines(), "the README's test command must appear verbatim in .ci/run"
    assert (ROOT / "studies" / "quickstart.yaml").is_file()


def test_readme_says_how_to_get_the_cpu_build_of_torch_and_the_venv_size() -> None:
    readme = (ROOT / "README.md").read_text()
    setup = readme.split("## Set up and run", 1)[1].split("\n## ", 1)[0]
    assert "--index-url\nhttps://download.pytorch.org/whl/cpu" in setup or (
        "--index-url https://download.pytorch.org/whl/cpu" in setup
    )
    assert re.search(r"virtualenv is then about [0-9.]+ GB", setup), setup


def test_the_cpu_build_comes_before_the_commands_it_applies_to() -> None:
    """A reader runs the first command they see: the CPU-build advice must precede it."""
    readme = (ROOT / "README.md").read_text()
    setup = readme.split("## Set up and run", 1)[1].split("\n## ", 1)[0]
    assert setup.index("download.pytorch.org/whl/cpu") < setup.index("```bash")


def test_the_quickstart_install_has_what_the_first_screen_runs_next() -> None:
    """After the one quickstart command, `dvt-hpo dashboard` and `dvt-hpo report` work: the
    install has their extras (optuna-dashboard, plotly)."""
    readme = (ROOT / "README.md").read_text()
    setup = readme.split("## Set up and run", 1)[1].split("\n## ", 1)[0]
    quickstart = _bash_blocks(setup)[0]
    assert "-e '.[dashboard,report]'" in quickstart, quickstart


def test_every_relative_link_of_the_readme_exists_in_the_checkout() -> None:
    """The README is read on a forge and in a checkout, not only in the built site: a link to
    a page that exists only once built (a generated reference) is a 404 there."""
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(\s*([^)\s]+)", readme)
    relative = [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and t[0] != "#"]
    assert relative, "no relative link found: the pattern is wrong"
    missing = [t for t in relative if not (ROOT / t.split("#", 1)[0]).exists()]
    assert not missing, f"README.md links to files the checkout lacks: {missing}"
