"""Shared fixtures: a repo-root PYTHONPATH for child processes, the PostgreSQL server, study
databases, study-file writers, and orchestrator subprocesses (tests/orchestrator.py); under CI, skips outside a short allow-list fail (tests/ci_skips.py)."""

from __future__ import annotations

import contextlib
import copy
import os
import signal
import socket
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from tests.ci_skips import (  # noqa: F401 - pytest hooks, found by name in this conftest
    pytest_make_collect_report,
    pytest_runtest_makereport,
)

if TYPE_CHECKING:
    import optuna

    from tests.orchestrator import Orchestrator

REPO_ROOT = Path(__file__).resolve().parent.parent
POSTGRES_URL = os.environ.get(
    "DVT_HPO_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


def pytest_configure(config: pytest.Config) -> None:
    # Trial processes import test entry points (tests.entrypoints.toy) by module path.
    parts = [str(REPO_ROOT)]
    if os.environ.get("PYTHONPATH"):
        parts.append(os.environ["PYTHONPATH"])
    os.environ["PYTHONPATH"] = os.pathsep.join(parts)
    # Trials on 2 cores: one thread each keeps parallel tests from oversubscribing.
    os.environ.setdefault("OMP_NUM_THREADS", "1")


# The suite runs on two xdist workers (addopts in pyproject.toml, `--dist loadgroup`). Tests of
# a resource there is one of run on one worker, one at a time: the single Slurm node, a throwaway
# PostgreSQL server (they restart and pause it, and time the outage) and PgBouncer in front of the
# shared server. pytest 9.2 ignores the `@group` suffix xdist 3.8 writes into a grouped test's id,
# so the group is given to xdist's own loadgroup scheduler by path (``pytest_xdist_make_scheduler``
# below): the controller sees test ids only. Given as one work unit, and the largest one, it
# starts first on one worker while the other takes every other test; before, each worker took
# these tests as they came and one of them waited, idle, on the lock below for the other's
# Slurm test. The lock stays, so that a run with another `--dist` keeps them one at a time.
ONE_AT_A_TIME = "one-at-a-time"
_ONE_AT_A_TIME_FIXTURES = {"slurm_cluster", "postgres_cluster"}
_ONE_AT_A_TIME_PATHS = (
    "tests/cluster/",
    "tests/store/suite/test_outage.py",
    "tests/store/suite/test_pgbouncer.py",
)


def needs_the_one_resource(nodeid: str) -> bool:
    """Whether the test ``nodeid`` (relative to the repository) runs in the one-at-a-time group."""
    return nodeid.startswith(_ONE_AT_A_TIME_PATHS)


def pytest_itemcollected(item: pytest.Item) -> None:
    fixtures = set(getattr(item, "fixturenames", ()))
    grouped = needs_the_one_resource(item.nodeid)
    if fixtures & _ONE_AT_A_TIME_FIXTURES and not grouped:
        # Outside the group's paths it would run beside another such test's worker, waiting on
        # the lock: the scheduler only knows the paths.
        raise pytest.UsageError(
            f"{item.nodeid} uses {sorted(fixtures & _ONE_AT_A_TIME_FIXTURES)}: tests of the one "
            f"Slurm node or a throwaway PostgreSQL server live under {_ONE_AT_A_TIME_PATHS}"
        )
    if grouped:
        item.add_marker(pytest.mark.xdist_group(ONE_AT_A_TIME))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """loadgroup with the one-at-a-time group found by path (see above); other modes as xdist
    has them."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class OneResourceGroup(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if needs_the_one_resource(nodeid):
                return ONE_AT_A_TIME
            return super()._split_scope(nodeid)

    return OneResourceGroup(config, log)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # set in xdist's workers only
    if run is None or item.get_closest_marker("xdist_group") is None:
        return (yield)
    import fcntl
    import tempfile

    lock = Path(tempfile.gettempdir()) / f"dvt-hpo-tests-{run}.lock"
    with lock.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
        return (yield)


@pytest.fixture
def python() -> str:
    return sys.executable


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """URL of the real PostgreSQL server; skips (or fails under DVT_HPO_REQUIRE_POSTGRES=1)."""
    from dvt_hpo.store.storage import unreachable_reason

    why = unreachable_reason(POSTGRES_URL)
    if why is not None:
        message = f"PostgreSQL not reachable at {POSTGRES_URL}: {why}"
        if os.environ.get("DVT_HPO_REQUIRE_POSTGRES") == "1":
            pytest.fail(message + " (DVT_HPO_REQUIRE_POSTGRES=1)")
        pytest.skip(message)
    return POSTGRES_URL


@pytest.fixture
def unique_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


TOY_ENTRYPOINT = "tests.entrypoints.toy:run"


def toy_study(name: str, **sections: Any) -> dict[str, Any]:
    """A small study dict on the torch-free toy entry point; sections override the defaults."""
    doc: dict[str, Any] = {
        "study": {
            "name": name,
            "n_trials": 2,
            "sampler": {"kind": "random", "seed": 0},
            "pruner": {"kind": "none"},
            "heartbeat_interval_s": 1,
            "grace_period_s": 3,
        },
        "objective": {"metric": "score", "direction": "maximize"},
        "trials": {"timeout_s": 60, "stop_grace_s": 2},
        "trainer": {"entrypoint": TOY_ENTRYPOINT, "config": {"curve": [0.1, 0.2, 0.3]}},
        "search_space": [{"name": "x", "path": "x", "kind": "float", "low": 0.0, "high": 1.0}],
    }
    return toy_keys(merge_sections(doc, sections), any_entrypoint=True)


def toy_keys(doc: dict[str, Any], *, any_entrypoint: bool = False) -> dict[str, Any]:
    """``doc`` with ``new_key: true`` on each top-level dimension whose key the config of a
    test entry point (``tests.entrypoints``; any, for a :func:`toy_study`) lacks: those toys
    read none of them or read them with a default, so the key is new on purpose (a study file
    says so)."""
    trainer = doc.get("trainer")
    config = trainer.get("config") if isinstance(trainer, dict) else None
    entrypoint = str(trainer.get("entrypoint", "")) if isinstance(trainer, dict) else ""
    toy = any_entrypoint or entrypoint.startswith("tests.entrypoints.")
    if not toy or not isinstance(config, dict):
        return doc
    for dim in doc.get("search_space") or ():
        path = dim.get("path", "") if isinstance(dim, dict) else ""
        if "." not in path and "[" not in path and path not in config:
            dim.setdefault("new_key", True)
    return doc


def merge_sections(doc: dict[str, Any], sections: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with each section of ``sections`` merged in (mappings) or replaced (others)."""
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(doc.get(key), dict):
            doc[key] = {**doc[key], **value}
        else:
            doc[key] = value
    return doc


@pytest.fixture
def write(tmp_path: Path) -> Callable[..., Path]:
    """Write dedented YAML text to tmp_path/<name> (folders made) and return its path."""

    def _write(text: str, name: str = "study.yaml") -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        return path

    return _write


@pytest.fixture
def write_study(tmp_path: Path) -> Callable[..., Path]:
    """Write a study dict (or YAML text) to tmp_path/<filename> and return its path."""

    def write(doc: dict[str, Any] | str, filename: str = "study.yaml") -> Path:
        path = tmp_path / filename
        if not isinstance(doc, str):
            doc = yaml.safe_dump(toy_keys(copy.deepcopy(doc)), sort_keys=False)
        path.write_text(doc)
        return path

    return write


@pytest.fixture
def run_study(write_study: Callable[..., Path]) -> Callable[[dict[str, Any]], optuna.Study]:
    """Run a study dict through the real runner; its study (also when every trial failed)."""
    from dvt_hpo.studyfile import load_spec

    def run(doc: dict[str, Any]) -> optuna.Study:
        lines: list[str] = []
        try:
            return run_keeping_failures(load_spec(write_study(doc)), lines)
        finally:
            print("\n".join(lines))  # shown by pytest when the test fails

    return run


def run_dvt_hpo(
    *argv: str | Path,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 240,
) -> subprocess.CompletedProcess[str]:
    """``python -m dvt_hpo ARGV`` in a fresh interpreter, run to its end in ``cwd`` (``env``:
    its whole environment; None: this one's), its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "dvt_hpo", *(str(a) for a in argv)],
        cwd=cwd,
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=timeout_s,
    )


def run_keeping_failures(spec: Any, lines: list[str]) -> optuna.Study:
    """Run ``spec`` through the real runner (its lines into ``lines``); its study, also when
    every trial failed (the run then ends with exit 1's StudyStopped: these tests read the
    failed trials)."""
    from dvt_hpo.exceptions import StudyStopped
    from dvt_hpo.run.runner import study_runner

    runner = study_runner(spec, out=lines.append)
    try:
        return runner.run()
    except StudyStopped as exc:
        assert str(exc).startswith("no trial of this run succeeded"), exc
        return runner.study


@pytest.fixture
def study_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path


@pytest.fixture(params=["sqlite", "postgresql"])
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A study database on a SQLite file and on the real PostgreSQL server (skipped when none
    answers); tests/store/suite/ overrides it with a journal file too."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/study.db"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    # The spec resolves the runs folder; trial command lines show the resolved path.
    return tmp_path.resolve() / "runs"


@pytest.fixture
def orchestrator(runs_dir: Path) -> Iterator[Callable[..., Orchestrator]]:
    """Start ``python -m dvt_hpo run STUDY`` (with ``env`` added to its environment);
    whatever is left is killed at teardown."""
    from dvt_hpo.process import tree as process_tree
    from tests.orchestrator import EVENT_TIMEOUT_S, Orchestrator, processes_mentioning

    started: list[Orchestrator] = []

    def start(study: Path, env: dict[str, str] | None = None) -> Orchestrator:
        started.append(Orchestrator(study, env=env))
        return started[-1]

    try:
        yield start
    finally:
        for run in started:
            if run.proc.poll() is None:
                run.proc.kill()
            run.proc.wait(timeout=EVENT_TIMEOUT_S)
            run.finish()  # joins the output reader, which then closes the pipe
        leftovers = processes_mentioning(runs_dir)
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process_tree.wait_gone(leftovers, EVENT_TIMEOUT_S)
