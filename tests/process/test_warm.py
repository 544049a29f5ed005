"""The warm template: fork per trial, exit statuses, staleness, no orphans."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dvt_hpo.process import warm
from dvt_hpo.wire.payload import TrialPayload

pytestmark = pytest.mark.processes

REPO = Path(__file__).resolve().parents[2]


def _env(extra_path: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(REPO)] + ([str(extra_path)] if extra_path else [])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.pop("DVT_HPO_CONTROL", None)
    return env


def _payload(
    tmp_path: Path, name: str, config: dict, entrypoint: str = "tests.entrypoints.toy:run"
) -> Path:
    trial_dir = tmp_path / name
    trial_dir.mkdir()
    path = trial_dir / "payload.json"
    TrialPayload(
        entrypoint=entrypoint, config=config, trial_number=0, trial_dir=str(trial_dir)
    ).write(path)
    return path


@pytest.fixture
def template(tmp_path: Path):
    t = warm.WarmTemplate.start(
        ["dvt_hpo.trial.main", "tests.entrypoints.toy"],
        env=_env(),
        cwd=REPO,
        log_path=tmp_path / "template.log",
        popen=subprocess.Popen,
    )
    yield t
    t.close()


def _spawn(
    template: warm.WarmTemplate, payload: Path, env: dict[str, str] | None = None
) -> warm.WarmChild:
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    out = os.open(payload.parent / "stdout.log", flags, 0o644)
    err = os.open(payload.parent / "stderr.log", flags, 0o644)
    try:
        return template.spawn(
            [str(payload)], env=env or _env(), cwd=payload.parent, stdout_fd=out, stderr_fd=err
        )
    finally:
        os.close(out)
        os.close(err)


def test_child_runs_worker_and_reports_its_status(template, tmp_path):
    payload = _payload(tmp_path, "ok", {"curve": [0.5, 0.7], "return": {"score": 0.7}})
    child = _spawn(template, payload)
    assert child.exited(30)
    assert child.reap() == 0
    # Without DVT_HPO_CONTROL the trial process runs as by hand: its result is a rerun-*.json.
    (result_path,) = payload.parent.glob("rerun-*.json")
    result = json.loads(result_path.read_text())
    assert result["status"] == "ok" and result["metrics"] == {"score": 0.7}
    assert result["pid"] == child.pid
    assert os.getpgid(template.pid) != child.pid  # the child leads a session of its own


def test_child_exit_codes_and_signals(template, tmp_path):
    crash = _spawn(template, _payload(tmp_path, "crash", {"actions": [{"do": "exit", "code": 7}]}))
    segv = _spawn(template, _payload(tmp_path, "segv", {"actions": [{"do": "segfault"}]}))
    assert crash.reap() == 7
    assert segv.reap() == -signal.SIGSEGV


def test_unreaped_child_keeps_its_group_until_reaped(template, tmp_path):
    child = _spawn(
        template, _payload(tmp_path, "sleep", {"actions": [{"do": "sleep", "seconds": 60}]})
    )
    assert not child.exited(0.2)
    os.killpg(child.pid, signal.SIGTERM)
    assert child.exited(30)
    # Exited but not reaped: a zombie whose pid (its group id) cannot be reused yet.
    assert Path(f"/proc/{child.pid}").exists()
    status = child.reap()
    assert status != 0


def test_environment_cwd_and_logs_are_the_childs(template, tmp_path):
    out = tmp_path / "env.json"
    payload = _payload(
        tmp_path,
        "env",
        {"actions": [{"do": "write", "path": str(out), "text": "x"}], "return": {"score": 1.0}},
    )
    env = _env()
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["DVT_HPO_TEST_MARK"] = "child-env"
    child = _spawn(template, payload, env)
    assert child.reap() == 0
    assert out.read_text() == "x"
    assert "running without an orchestrator" in (payload.parent / "stderr.log").read_text()


def test_edited_module_makes_the_template_stale(tmp_path):
    module = tmp_path / "edited_trainer.py"
    module.write_text("def run(config, ctx):\n    return {'score': 1.0}\n")
    t = warm.WarmTemplate.start(
        ["edited_trainer"],
        env=_env(tmp_path),
        cwd=tmp_path,
        log_path=tmp_path / "template.log",
        popen=subprocess.Popen,
    )
    try:
        assert t.stale_reason() is None
        time.sleep(0.01)
        module.write_text("def run(config, ctx):\n    return {'score': 2.0}\n")
        os.utime(module, ns=(time.time_ns(), time.time_ns() + 10**9))
        reason = t.stale_reason()
        assert reason is not None and "edited_trainer.py changed on disk" in reason
    finally:
        t.close()


def test_a_module_written_while_the_template_imports_makes_it_stale_at_once(tmp_path):
    # The template imported helper, then helper's file was rewritten before the template
    # recorded its mtime: it may hold the old code, so it must not serve a trial.
    (tmp_path / "helper.py").write_text("VERSION = 1\n")
    (tmp_path / "rewrites_helper.py").write_text(
        "from pathlib import Path\n"
        "import helper\n"
        "Path(helper.__file__).write_text('VERSION = 2  # rewritten\\n')\n"
    )
    t = warm.WarmTemplate.start(
        ["rewrites_helper"],
        env=_env(tmp_path),
        cwd=tmp_path,
        log_path=tmp_path / "template.log",
        popen=subprocess.Popen,
    )
    try:
        reason = t.stale_reason()
        assert reason is not None
        assert "helper.py changed on disk while the warm template imported it" in reason
    finally:
        t.close()


def test_a_file_older_than_the_imports_or_in_the_future_is_not_taken_for_an_edit(tmp_path):
    module = tmp_path / "old.py"
    module.write_text("X = 1\n")
    os.utime(module, (time.time() - 60, time.time() - 60))
    sys.path.insert(0, str(tmp_path))
    try:
        import old  # noqa: F401

        began = time.time()
        files = warm.watched_files(roots=(), imports_began=began)
        assert files[str(module.resolve())] > 0
        os.utime(module, (time.time() + 3600, time.time() + 3600))  # a skewed file server
        files = warm.watched_files(roots=(), imports_began=began)
        assert files[str(module.resolve())] > began
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("old", None)


def test_import_error_is_reported_not_fatal(tmp_path):
    t = warm.WarmTemplate.start(
        ["no_such_module_xyz"],
        env=_env(),
        cwd=tmp_path,
        log_path=tmp_path / "template.log",
        popen=subprocess.Popen,
    )
    try:
        assert "no_such_module_xyz" in t.errors
        assert "ModuleNotFoundError" in t.errors["no_such_module_xyz"]
    finally:
        t.close()


def test_closing_the_template_kills_its_children(template, tmp_path):
    child = _spawn(
        template, _payload(tmp_path, "long", {"actions": [{"do": "sleep", "seconds": 60}]})
    )
    assert not child.exited(0.2)
    template.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the child outlived its template")


def test_killed_orchestrator_leaves_no_template_or_child(tmp_path):
    """kill -9 of the process that owns the template: the template (parent-death signal) and
    its children (their parent-death signal) die too."""
    script = tmp_path / "owner.py"
    pids = tmp_path / "pids.json"
    payload = _payload(tmp_path, "orphan", {"actions": [{"do": "sleep", "seconds": 120}]})
    script.write_text(
        f"""
import json, subprocess, sys, time
from dvt_hpo.process import warm
from dvt_hpo.wire.payload import TrialPayload
t = warm.WarmTemplate.start(["dvt_hpo.trial.main", "tests.entrypoints.toy"], env={_env()!r},
    cwd={str(REPO)!r}, log_path={str(tmp_path / "template.log")!r}, popen=subprocess.Popen)
c = t.spawn([{str(payload)!r}], env={_env()!r}, cwd={str(payload.parent)!r}, stdout_fd=1, stderr_fd=2)
open({str(pids)!r}, "w").write(json.dumps([t.pid, c.pid]))
time.sleep(300)
"""
    )
    owner = subprocess.Popen([sys.executable, str(script)], env=_env())
    deadline = time.monotonic() + 60
    while not pids.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    template_pid, child_pid = json.loads(pids.read_text())
    owner.kill()
    owner.wait()
    deadline = time.monotonic() + 10
    alive = {template_pid, child_pid}
    while alive and time.monotonic() < deadline:
        for pid in list(alive):
            try:
                os.kill(pid, 0)
                state = Path(f"/proc/{pid}/stat").read_text().split()[2]
                if state == "Z":
                    alive.discard(pid)
            except (ProcessLookupError, FileNotFoundError):
                alive.discard(pid)
        time.sleep(0.05)
    assert not alive, f"left running after kill -9 of their owner: {alive}"


def test_a_forked_trial_whose_template_is_already_gone_exits_before_running(
    tmp_path: Path,
) -> None:
    """The race behind the test above: the template dies between its fork and the child's
    parent-death signal. The child sees another parent and exits (1) before the trial's main runs
    (which would exit 2 here: no payload)."""

    def fork_child(template_pid: int) -> int:
        ours, theirs = socket.socketpair()
        log = tmp_path / f"child-{template_pid}.log"
        out_fd = os.open(log, os.O_WRONLY | os.O_CREAT)
        err_fd = os.dup(out_fd)
        request = {"cwd": str(tmp_path), "env": {}, "args": []}
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child never returns
            warm._child(request, theirs, out_fd, err_fd, (), template_pid)
        for item in (ours, theirs):
            item.close()
        os.close(out_fd)
        os.close(err_fd)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status)

    assert fork_child(os.getpid()) == 2  # its template (this process) alive: the trial's main ran
    assert fork_child(os.getpid() + 1) == 1  # not its parent: exits at once


HOOKED_TRAINER = """
import json, os
from pathlib import Path

warmed = None

def __dvt_hpo_warm__(folder):
    global warmed
    if os.environ.get("HOOK_FAILS"):
        raise RuntimeError("no GPU driver")
    folder.mkdir(parents=True)
    (folder / "written-at-import.txt").write_text("x")
    warmed = str(folder)

def run(config, ctx):
    seen = {"warmed": warmed, "warm_dir": os.environ.get("DVT_HPO_WARM_DIR")}
    Path(config["out"]).write_text(json.dumps(seen))
    return {"score": 1.0}
"""


def _hooked_template(tmp_path: Path, warm_dir: Path | None, **env: str) -> warm.WarmTemplate:
    (tmp_path / "hooked_trainer.py").write_text(HOOKED_TRAINER)
    return warm.WarmTemplate.start(
        ["dvt_hpo.trial.main", "hooked_trainer"],
        env={**_env(tmp_path), **env},
        cwd=tmp_path,
        log_path=tmp_path / "template.log",
        popen=subprocess.Popen,
        warm_dir=warm_dir,
    )


def _seen_by_trial(template: warm.WarmTemplate, tmp_path: Path) -> dict[str, str | None]:
    out = tmp_path / "seen.json"
    payload = _payload(tmp_path, "hooked", {"out": str(out)}, "hooked_trainer:run")
    assert _spawn(template, payload, _env(tmp_path)).reap() == 0
    return json.loads(out.read_text())


def test_warm_up_hook_runs_in_its_folder_and_its_state_reaches_the_trial(tmp_path):
    t = _hooked_template(tmp_path, tmp_path / "runs" / "warm-template")
    try:
        folder = tmp_path / "runs" / "warm-template" / "hooked_trainer"
        assert t.errors == {}
        assert (folder / "written-at-import.txt").exists()
        # The trial inherits what the hook did; the template's own variable is not its.
        assert _seen_by_trial(t, tmp_path) == {"warmed": str(folder), "warm_dir": None}
    finally:
        t.close()


def test_without_a_warm_dir_no_hook_runs(tmp_path):
    t = _hooked_template(tmp_path, None)
    try:
        assert t.errors == {}
        assert _seen_by_trial(t, tmp_path) == {"warmed": None, "warm_dir": None}
    finally:
        t.close()


def test_a_failing_hook_is_reported_like_a_failed_import(tmp_path):
    t = _hooked_template(tmp_path, tmp_path / "warm", HOOK_FAILS="1")
    try:
        assert t.errors == {"hooked_trainer": "__dvt_hpo_warm__: RuntimeError: no GPU driver"}
    finally:
        t.close()
