"""The process supervisor's rules; launching, waiting and stopping run in every trial of the
suite (tests/study/test_loop.py: timeouts, prunes, stops, strays)."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from dvt_hpo.devices.slots import Slot
from dvt_hpo.results.outcome import Outcome
from dvt_hpo.study.supervisor import ProcessSupervisor, run_attrs


def test_run_attrs_say_the_logs_devices_share_and_threads(tmp_path: Path) -> None:
    attrs = run_attrs(Slot(0, "1", None, per_gpu=2), tmp_path, "4")
    assert attrs["log_dir"] == str(tmp_path) and attrs["host"]
    assert attrs["devices"] == "1" and attrs["gpu_share"] == "1/2" and attrs["threads"] == 4
    cpu = run_attrs(Slot(0, "", 2), tmp_path, "")
    assert "gpu_share" not in cpu and "threads" not in cpu


def supervisor(stopped: bool) -> ProcessSupervisor:
    event = threading.Event()
    if stopped:
        event.set()
    handle: Any = SimpleNamespace(worker_stopped=event)
    return ProcessSupervisor(handle, 1, 0, Slot(0, "", 1))


def test_a_signalled_trial_is_interrupted_only_when_its_worker_is_stopped() -> None:
    assert supervisor(stopped=True).stopped_with_worker(-15)
    assert not supervisor(stopped=True).stopped_with_worker(0)
    assert not supervisor(stopped=True).stopped_with_worker(None)
    timed_out = supervisor(stopped=True)
    timed_out.timed_out = True
    assert not timed_out.stopped_with_worker(-9)


def test_an_outcome_is_left_alone_without_an_oom_kill_of_the_cgroup() -> None:
    failed = Outcome("FAIL", "failed", reason="killed")
    assert supervisor(stopped=False).killed_by_cgroup_oom(failed, -9) == failed
    ok = Outcome("COMPLETE", "ok", value=1.0)
    assert supervisor(stopped=False).killed_by_cgroup_oom(ok, 0) == ok
