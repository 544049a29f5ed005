"""The trial process end to end: a real ControlServer, a real TrialProcess running
``python -m dvt_hpo.trial`` (and torchrun) on the torch-free toy entry point."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dvt_hpo.devices.slots import Slot
from dvt_hpo.process.launch import build_command, tail_lines, trial_env
from dvt_hpo.process.tree import TrialProcess, describe_exit, group_members, pid_alive, wait_gone
from dvt_hpo.studyfile import BatchSizeSpec
from dvt_hpo.wire.control_server import ControlServer
from dvt_hpo.wire.payload import TrialLimits, TrialPayload
from dvt_hpo.wire.protocol import (
    EXIT_BAD_PAYLOAD,
    EXIT_ERROR,
    EXIT_NO_ORCHESTRATOR,
    EXIT_OK,
    EXIT_PRUNED,
    EXIT_STOPPED,
    PROTOCOL_VERSION,
)
from tests.entrypoints.recording import RecordingHandler

pytestmark = pytest.mark.processes

REPO_ROOT = Path(__file__).resolve().parents[2]
TOY = "tests.entrypoints.toy:run"
V = PROTOCOL_VERSION
WAIT_S = 30.0  # generous upper bounds: every wait returns as soon as its event happens


@dataclass
class Trial:
    process: TrialProcess
    server: ControlServer
    handler: RecordingHandler
    dir: Path

    def result(self) -> dict[str, Any] | None:
        path = self.dir / "result.json"
        return json.loads(path.read_text()) if path.exists() else None

    def json(self, name: str) -> dict[str, Any]:
        return json.loads((self.dir / name).read_text())

    def stderr(self) -> str:
        return tail_lines(self.dir / "stderr.log", 200)

    def stdout(self) -> str:
        return tail_lines(self.dir / "stdout.log", 200)

    def wait(self) -> int:
        code = self.process.wait(WAIT_S)
        assert code is not None, f"trial still running after {WAIT_S} s:\n{self.stderr()}"
        return code


def base_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


@pytest.fixture
def start_trial(tmp_path: Path) -> Iterator[Callable[..., Trial]]:
    trials: list[Trial] = []

    def start(
        config: dict[str, Any],
        *,
        handler: RecordingHandler | None = None,
        launcher: str = "process",
        nproc: int = 1,
        memory_limit: int | None = None,
        batch_size: BatchSizeSpec | None = None,
        cache_key: str | None = None,
        report_timeout_s: float = WAIT_S,
        entrypoint: str = TOY,
        payload_text: str | None = None,
        env_update: dict[str, str | None] | None = None,
    ) -> Trial:
        trial_dir = tmp_path / f"trial-{len(trials)}"
        trial_dir.mkdir()
        payload = TrialPayload(
            study_name="test",
            trial_number=len(trials),
            entrypoint=entrypoint,
            config=config,
            params={"x": 0.5},
            batch_size=batch_size,
            cache_key=cache_key,
            limits=TrialLimits(report_timeout_s=report_timeout_s),
            trial_dir=str(trial_dir),
        )
        if payload_text is None:
            payload.write(trial_dir / "payload.json")
        else:
            (trial_dir / "payload.json").write_text(payload_text)
        handler = handler or RecordingHandler()
        server = ControlServer(None, handler)
        env = trial_env(base_env(), Slot(0, "", 1), server.path, memory_limit)
        for key, value in (env_update or {}).items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        process = TrialProcess.start(
            build_command(launcher, trial_dir / "payload.json", nproc_per_node=nproc),
            env=env,
            cwd=trial_dir,
            stdout_path=trial_dir / "stdout.log",
            stderr_path=trial_dir / "stderr.log",
        )
        trial = Trial(process, server, handler, trial_dir)
        trials.append(trial)
        return trial

    yield start
    for trial in trials:
        if trial.process.poll() is None:
            trial.process.stop(0)
        trial.server.close()


def test_ok_result_with_reports_in_order(start_trial: Callable[..., Trial]) -> None:
    trial = start_trial({"curve": [0.1, 0.2, 0.3]})
    assert trial.wait() == EXIT_OK, trial.stderr()
    assert trial.server.drain(WAIT_S)
    result = trial.result()
    assert result is not None
    assert (result["status"], result["metrics"], result["rank"]) == ("ok", {"score": 0.3}, 0)
    assert result["pid"] == trial.process.pid and result["duration_s"] >= 0
    assert trial.handler.reports == [(0, {"score": 0.1}), (1, {"score": 0.2}), (2, {"score": 0.3})]
    assert [(h.rank, h.pid, h.pgid) for h in trial.server.hellos] == [
        (0, trial.process.pid, trial.process.pgid)
    ]


def test_an_exception_becomes_an_error_result(start_trial: Callable[..., Trial]) -> None:
    trial = start_trial({"actions": [{"do": "raise", "type": "ValueError", "message": "boom"}]})
    assert trial.wait() == EXIT_ERROR
    result = trial.result()
    assert result is not None and result["status"] == "error"
    assert (result["exc_type"], result["message"], result["rank"]) == ("ValueError", "boom", 0)
    assert "toy.py" in result["traceback"] and "ValueError: boom" in result["traceback"]
    assert result["out_of_memory"] is False
    assert "rank 0 failed: ValueError: boom" in trial.stderr()


def test_a_hard_exit_leaves_no_result(start_trial: Callable[..., Trial]) -> None:
    trial = start_trial({"actions": [{"do": "exit", "code": 7}]})
    assert trial.wait() == 7 and describe_exit(7) == "exit code 7"
    assert trial.result() is None


def test_sys_exit_non_zero_is_an_error(start_trial: Callable[..., Trial]) -> None:
    trial = start_trial({"actions": [{"do": "sys_exit", "code": 5}]})
    assert trial.wait() == 5
    result = trial.result()
    assert result is not None and result["exc_type"] == "SystemExit"
    assert "sys.exit(5)" in result["message"]


def test_a_segfault_is_described(start_trial: Callable[..., Trial]) -> None:
    trial = start_trial(
        {"actions": [{"do": "report", "step": 0, "metrics": 1.0}, {"do": "segfault"}]}
    )
    code = trial.wait()
    assert code == -int(signal.SIGSEGV)
    assert describe_exit(code) == "killed by signal SIGSEGV (-11)"
    assert trial.result() is None and len(trial.handler.reports) == 1


def test_the_memory_limit_turns_a_big_allocation_into_memory_error(
    start_trial: Callable[..., Trial],
) -> None:
    trial = start_trial({"actions": [{"do": "allocate", "bytes": 2 << 30}]}, memory_limit=512 << 20)
    assert trial.wait() == EXIT_ERROR, trial.stderr()
    result = trial.result()
    assert result is not None and result["exc_type"] == "MemoryError"
    assert result["out_of_memory"] is True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc, Linux only")
def test_under_the_memory_limit_threads_reserve_no_arena_of_their_own(tmp_path: Path) -> None:
    """glibc gives each thread that allocates a 64 MiB arena of address space, which RLIMIT_AS
    counts: the batch-size search and training would see different reserves."""
    script = tmp_path / "threads.py"
    script.write_text(
        "import ctypes, subprocess, sys, threading\n"
        "from dvt_hpo.trial.main import apply_memory_limit\n"
        "from dvt_hpo.wire.protocol import ENV_MEMORY_LIMIT\n"
        "if sys.argv[1] == 'limit':\n"
        "    apply_memory_limit({ENV_MEMORY_LIMIT: str(64 << 30)})\n"
        "def vm():\n"
        "    status = open('/proc/self/status').read().split('VmSize:')[1]\n"
        "    return int(status.split()[0]) * 1024\n"
        "malloc = ctypes.CDLL(None).malloc\n"
        "before, ready, release = vm(), threading.Barrier(5), threading.Event()\n"
        "def work():\n"
        "    malloc(64)\n"
        "    ready.wait()\n"
        "    release.wait()\n"
        "threads = [threading.Thread(target=work) for _ in range(4)]\n"
        "for t in threads:\n"
        "    t.start()\n"
        "ready.wait()\n"
        "print((vm() - before) >> 20, flush=True)\n"
        "release.set()\n"
        "if sys.argv[1] == 'limit':\n"
        "    subprocess.run([sys.executable, __file__, 'child'], check=True)\n"
    )
    env = {k: v for k, v in base_env().items() if not k.startswith("MALLOC_")}

    def added_mib(mode: str, **extra: str) -> list[int]:
        done = subprocess.run(
            [sys.executable, str(script), mode], env=env | extra, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return [int(line) for line in done.stdout.split()]

    (unlimited,) = added_mib("none")
    assert unlimited >= 4 * 64, "this glibc gives threads no arenas: the test shows nothing"
    # No arena for any of the four threads, here and in the process it started after the limit:
    # what is left is their stacks.
    limited = added_mib("limit")
    assert len(limited) == 2 and all(mib <= unlimited - 4 * 60 for mib in limited), limited
    # A variable the user set wins, in both.
    assert all(mib >= 4 * 64 for mib in added_mib("limit", MALLOC_ARENA_MAX="8")), unlimited


def test_prune_ends_the_trial_and_stop_leaves_no_process(
    start_trial: Callable[..., Trial],
) -> None:
    handler = RecordingHandler(prune=lambda step, metrics: step == 2)
    trial = start_trial({"curve": [0.5, 0.4, 0.3, 0.2, 0.1]}, handler=handler)
    assert trial.wait() == EXIT_PRUNED
    result = trial.result()
    assert result is not None and (result["status"], result["step"]) == ("pruned", 2)
    assert [step for step, _ in handler.reports] == [0, 1, 2]
    outcome = trial.process.stop(5)
    assert (outcome.how, outcome.returncode) == ("exited", EXIT_PRUNED)
    with pytest.raises(ProcessLookupError):
        os.killpg(trial.process.pgid, 0)


def test_sigterm_lets_finally_blocks_run(start_trial: Callable[..., Trial], tmp_path: Path) -> None:
    finally_file = tmp_path / "finally.txt"
    trial = start_trial(
        {
            "actions": [
                {"do": "attr", "key": "ready", "value": True},
                {"do": "sleep", "seconds": 60},
            ],
            "finally_file": str(finally_file),
        }
    )
    trial.handler.wait_attr("ready", WAIT_S)
    outcome = trial.process.stop(WAIT_S)
    assert (outcome.how, outcome.returncode) == ("terminated", EXIT_STOPPED)
    assert outcome.seconds < 5
    assert finally_file.read_text() == "finally rank 0\n"
    result = trial.result()
    assert result is not None and (result["status"], result["signal"]) == ("stopped", "SIGTERM")


def test_a_sigterm_whose_stop_python_dropped_stops_the_trial_at_its_next_report(
    start_trial: Callable[..., Trial], tmp_path: Path
) -> None:
    finally_file = tmp_path / "finally.txt"
    trial = start_trial(
        {
            "actions": [{"do": "drop_sigterm"}, {"do": "curve", "values": [0.5, 0.4, 0.3]}],
            "finally_file": str(finally_file),
        }
    )
    assert trial.wait() == EXIT_STOPPED, trial.stderr()
    assert trial.handler.reports == []  # stopped at the first report, which never went out
    assert finally_file.read_text() == "finally rank 0\n"
    result = trial.result()
    assert result is not None and (result["status"], result["signal"]) == ("stopped", "SIGTERM")


def test_the_watchdog_kills_the_group_when_the_orchestrator_goes(
    start_trial: Callable[..., Trial],
) -> None:
    trial = start_trial(
        {
            "actions": [
                {"do": "spawn", "seconds": 60},
                {"do": "attr", "key": "ready", "value": True},
                {"do": "sleep", "seconds": 60},
            ]
        }
    )
    child = trial.handler.wait_attr("child_pid", WAIT_S)
    trial.handler.wait_attr("ready", WAIT_S)
    trial.server.close()  # what the orchestrator's death does to the connection
    assert trial.process.wait(10) == -int(signal.SIGKILL)
    assert not pid_alive(child) and group_members(trial.process.pgid) == []
    assert "lost the control connection" in trial.stderr()


def test_no_orchestrator_exits_at_once(start_trial: Callable[..., Trial], tmp_path: Path) -> None:
    trial = start_trial(
        {"curve": [1.0]}, env_update={"DVT_HPO_CONTROL": str(tmp_path / "gone.sock")}
    )
    assert trial.wait() == EXIT_NO_ORCHESTRATOR
    assert "orchestrator is gone" in trial.stderr() and trial.result() is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "is not JSON"),
        (json.dumps({"protocol": 1, "entrypoint": TOY, "config": {}}), "protocol must be 2"),
        (json.dumps({"protocol": V, "entrypoint": "toy.run", "config": {}}), "module:function"),
        (
            json.dumps({"protocol": V, "entrypoint": TOY, "config": {}, "batch_size": {"x": 1}}),
            "batch_size: unknown key 'x'",
        ),
        (
            json.dumps({"protocol": V, "entrypoint": TOY, "config": []}),
            "config: expected a mapping",
        ),
        (json.dumps({"protocol": V, "entrypoint": TOY, "config": {}, "devices": "0,1"}), "devices"),
    ],
)
def test_a_bad_payload_exits_with_code_2(
    start_trial: Callable[..., Trial], text: str, message: str
) -> None:
    trial = start_trial({}, payload_text=text)
    assert trial.wait() == EXIT_BAD_PAYLOAD
    assert message in trial.stderr()


def test_entrypoint_import_errors_are_trial_errors(start_trial: Callable[..., Trial]) -> None:
    trial = start_trial({}, entrypoint="tests.entrypoints.missing:run")
    assert trial.wait() == EXIT_ERROR
    result = trial.result()
    assert result is not None and result["exc_type"] == "ModuleNotFoundError"


def test_the_return_value_must_be_metrics(start_trial: Callable[..., Trial]) -> None:
    trial = start_trial({"actions": [], "return": {"score": "high"}})
    assert trial.wait() == EXIT_ERROR
    result = trial.result()
    assert result is not None and "metrics must be numbers" in result["message"]


def test_without_control_socket_it_runs_locally(start_trial: Callable[..., Trial]) -> None:
    trial = start_trial({"curve": [0.25, 0.5]}, env_update={"DVT_HPO_CONTROL": None})
    assert trial.wait() == EXIT_OK
    assert trial.stdout().splitlines() == ["epoch 0: score=0.25", "epoch 1: score=0.5"]
    assert trial.handler.hellos == []  # it never connected
    # Run by hand: the result goes to a rerun-*.json, never over the trial's result.json.
    assert trial.result() is None
    (rerun,) = trial.dir.glob("rerun-*.json")
    assert json.loads(rerun.read_text()).get("metrics") == {"score": 0.5}


def test_a_late_decision_does_not_stop_training(start_trial: Callable[..., Trial]) -> None:
    handler = RecordingHandler(prune=lambda step, metrics: step == 0)
    slow = handler.on_report
    release = threading.Event()

    def on_report(step: int, metrics: dict[str, float]) -> bool:
        release.wait(WAIT_S)
        return slow(step, metrics)

    handler.on_report = on_report  # type: ignore[method-assign]
    trial = start_trial({"curve": [1.0, 2.0]}, handler=handler, report_timeout_s=0.2)
    try:
        assert trial.wait() == EXIT_OK
    finally:
        release.set()
    assert "no pruning decision for step 0" in trial.stderr()
    assert (trial.result() or {}).get("status") == "ok"


def test_batch_size_search_and_cache_through_the_worker(
    start_trial: Callable[..., Trial],
) -> None:
    cache: dict[str, dict[str, Any]] = {}
    settings = BatchSizeSpec(auto=True, min=1, max=512, tolerance=0.0)
    config = {"actions": [{"do": "find_batch_size", "capacity": 200, "oom_above": True}]}
    start = functools.partial(start_trial, batch_size=settings, cache_key="m")
    first = start(config, handler=RecordingHandler(cache=cache))
    assert first.wait() == EXIT_OK, first.stderr()
    assert first.server.drain(WAIT_S)
    assert first.handler.attrs["batch_size"] == 200
    assert first.handler.attrs["batch_size_cache"] == "miss"
    second = start(config, handler=RecordingHandler(cache=cache))
    assert second.wait() == EXIT_OK
    assert second.server.drain(WAIT_S)
    assert second.handler.attrs["batch_size_cache"] == "hit"
    assert second.handler.attrs["batch_size_probe_sizes"] == [200]
    assert (second.result() or {})["metrics"]["batch_size"] == 200.0


# -- torchrun (real; each start costs ~2 s) -------------------------------------------------


def test_torchrun_rank_failure_is_recorded_by_that_rank(
    start_trial: Callable[..., Trial], tmp_path: Path
) -> None:
    finally_file = tmp_path / "finally.txt"
    meet = tmp_path / "meet.fifo"
    os.mkfifo(meet)
    trial = start_trial(
        {
            "actions": [
                # Rank 1 fails only once the chief is running its entry point.
                {"do": "write", "rank": 0, "path": str(meet), "text": "here"},
                {"do": "read", "rank": 1, "path": str(meet)},
                {"do": "raise", "rank": 1, "type": "ArithmeticError", "message": "rank one broke"},
                {"do": "sleep", "seconds": 60},
            ],
            "finally_file": str(finally_file),
        },
        launcher="torchrun",
        nproc=2,
    )
    code = trial.wait()
    assert code != 0, trial.stderr()
    error = trial.json("error-rank1.json")
    assert (error["status"], error["rank"], error["exc_type"]) == ("error", 1, "ArithmeticError")
    assert error["message"] == "rank one broke"
    chief = trial.result()  # torchrun stopped the chief: not a cause, just what happened to it
    assert chief is not None and chief["status"] == "stopped"
    assert sorted(finally_file.read_text().splitlines()) == ["finally rank 0", "finally rank 1"]
    assert sorted(h.rank for h in trial.server.hellos) == [0, 1]


def _bounded(call: Callable[[], Any]) -> Any:
    """Run a blocking FIFO open/read/write, failing (not hanging) after WAIT_S."""
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(call()), daemon=True)
    thread.start()
    thread.join(WAIT_S)
    assert box, f"FIFO peer did not show up within {WAIT_S} s"
    return box[0]


def test_torchrun_prune_then_stop_kills_every_rank(
    start_trial: Callable[..., Trial], tmp_path: Path
) -> None:
    ready = tmp_path / "rank1.fifo"
    go = tmp_path / "rank0.fifo"
    os.mkfifo(ready)
    os.mkfifo(go)
    handler = RecordingHandler(prune=lambda step, metrics: step == 1)
    trial = start_trial(
        {
            "actions": [
                # Rank 1 stands for a rank stuck in a collective that ignores SIGTERM.
                {"do": "ignore_sigterm", "rank": 1},
                {"do": "write", "rank": 1, "path": str(ready), "text": "ready"},
                {"do": "sleep", "rank": 1, "seconds": 120},
                # The chief starts its curve (and its prune) only once rank 1 is in place;
                # otherwise a slow rank 1 is ended by torchrun before it ignores SIGTERM.
                {"do": "read", "rank": 0, "path": str(go)},
                {"do": "curve", "rank": 0},
            ],
            "curve": [0.5, 0.4, 0.3, 0.2],
        },
        handler=handler,
        launcher="torchrun",
        nproc=2,
    )
    assert _bounded(lambda: ready.read_text()) == "ready"  # rank 1 ignores SIGTERM now
    _bounded(lambda: go.write_text("go"))
    hellos = handler.wait_hellos(2, WAIT_S)
    assert handler.wait_for(lambda h: len(h.reports) == 2, WAIT_S)
    pids = {rank: pid for rank, pid, _ in hellos}
    assert wait_gone([pids[0]], WAIT_S)  # the chief exits by itself after its prune...
    assert pid_alive(pids[1])  # ...while rank 1 holds on, and torchrun waits for it
    outcome = trial.process.stop(2.0)
    assert outcome.all_gone and outcome.seconds < 10
    assert [pid for pid in pids.values() if pid_alive(pid)] == []
    result = trial.result()
    assert result is not None and (result["status"], result["step"]) == ("pruned", 1)


def test_a_payload_rerun_by_hand_from_another_folder_finds_the_trainer_and_keeps_the_result(
    tmp_path: Path,
) -> None:
    import subprocess
    import sys

    study_dir = tmp_path / "study"
    study_dir.mkdir()
    # A trainer beside the study file, reading a file relative to the study folder.
    (study_dir / "handmade_trainer.py").write_text(
        "from pathlib import Path\n"
        "def run(config, ctx):\n"
        "    value = float(Path(config['data']).read_text())\n"
        "    ctx.report(0, {'score': value})\n"
        "    return {'score': value}\n"
    )
    (study_dir / "value.txt").write_text("0.75")
    trial_dir = tmp_path / "runs" / "trial-0003"
    trial_dir.mkdir(parents=True)
    TrialPayload(
        entrypoint="handmade_trainer:run",
        config={"data": "value.txt"},
        trial_number=3,
        trial_dir=str(trial_dir),
        study_dir=str(study_dir),
    ).write(trial_dir / "payload.json")
    original = '{"status": "ok", "metrics": {"score": 0.5}}'
    (trial_dir / "result.json").write_text(original)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in base_env().items() if k != "DVT_HPO_CONTROL"}
    env["PYTHONPATH"] = str(REPO_ROOT)  # not the study folder: the payload says where it is

    proc = subprocess.run(
        [sys.executable, "-m", "dvt_hpo.trial", str(trial_dir / "payload.json")],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )

    assert proc.returncode == EXIT_OK, proc.stderr
    assert "epoch 0: score=0.75" in proc.stdout
    assert (trial_dir / "result.json").read_text() == original
    (rerun,) = trial_dir.glob("rerun-*.json")
    assert json.loads(rerun.read_text())["metrics"] == {"score": 0.75}
    assert str(rerun) in proc.stderr


@pytest.mark.processes
@pytest.mark.parametrize("module", ["dvt_hpo.trial", "dvt_hpo.worker"])
def test_the_trial_process_runs_under_its_name_and_its_kept_name(module: str) -> None:
    """``python -m dvt_hpo.trial`` runs a trial; ``python -m dvt_hpo.worker`` (its name before
    the house plan, which the README taught for reruns by hand) runs the same main."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", module], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == EXIT_BAD_PAYLOAD
    assert "usage: python -m dvt_hpo.trial PAYLOAD.json" in done.stderr


# What a trial process must not import before its entry point is called: each is someone's
# fixed cost on every trial (a torch-free trial pays for torch and numpy, the orchestrator's
# packages for SQLAlchemy and Optuna), or the orchestrator's side of the process tree.
NOT_AT_TRIAL_START = (
    "torch",
    "numpy",
    "optuna",
    "sqlalchemy",
    "yaml",
    "psutil",
    "multiprocessing",
    "asyncio",
    "concurrent",
    "http",
    "email",
    "xml",
    "urllib.request",
    "dvt_hpo.train",
    "dvt_hpo.command",
    "dvt_hpo.backends",
    "dvt_hpo.process",
    "dvt_hpo.studyfile",
    "dvt_hpo.store",
    "dvt_hpo.study",
    "dvt_hpo.sampling",
    "dvt_hpo.optuna_api",
    "dvt_hpo.run",
    "dvt_hpo.cli",
)


def test_the_trial_process_imports_only_what_a_trial_needs(
    start_trial: Callable[..., Trial],
) -> None:
    """Not a timing: the modules a no-op trial's process holds when its entry point runs
    (benchmarks/overheads/trial_cost.py measures what they cost)."""
    trial = start_trial({}, entrypoint="tests.entrypoints.modules:run")
    assert trial.wait() == EXIT_OK, trial.stderr()
    record = trial.json("modules.json")
    modules = set(record["modules"])
    assert "dvt_hpo.trial.main" in modules and "tests.entrypoints.modules" in modules
    # What any interpreter of this environment holds at start is not the trial's doing (under
    # CI, coverage's start-up hook imports multiprocessing and xml.dom in every process).
    bare = subprocess.run(
        [sys.executable, "-c", "import json, sys; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    )
    modules -= set(json.loads(bare.stdout))
    loaded = sorted(
        m
        for m in modules
        for heavy in NOT_AT_TRIAL_START
        if m == heavy or m.startswith(heavy + ".")
    )
    assert loaded == []
    # Its imports are out of the cyclic collector's reach (not traversed again at exit).
    assert record["frozen"] > 1000
