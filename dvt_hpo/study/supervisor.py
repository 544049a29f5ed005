"""One trial's process, supervised: launched with its environment, waited on until it ends,
times out or is told to stop, then stopped (its group, a grace, SIGKILL), and how it exited.

What the trial reported is the report handler's (:mod:`dvt_hpo.study.reports`); what its end
comes to is the recorder's (:mod:`dvt_hpo.study.recorder`). This module only runs the process.
"""

from __future__ import annotations

import dataclasses
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dvt_hpo.process import cgroup, launch
from dvt_hpo.process.tree import TrialProcess
from dvt_hpo.recovery import kill_points, node_health
from dvt_hpo.results.outcome import Outcome, Phase
from dvt_hpo.wire.control_server import ControlServer, TrialHandler
from dvt_hpo.wire.protocol import ENV_LAUNCHED

if TYPE_CHECKING:
    from dvt_hpo.devices.slots import Slot
    from dvt_hpo.study.handle import StudyHandle

__all__ = ["Exit", "ProcessSupervisor", "run_attrs"]

# How long a trial that died of a signal waits for its worker's own stop signal (see
# ProcessSupervisor.stopped_with_worker); only crashed trials pay it.
_STOP_SIGNAL_WAIT_S = 2.0


@dataclass(frozen=True)
class Exit:
    """How the trial's process ended: its return code and whether ``trials.timeout_s`` did it."""

    returncode: int | None
    timed_out: bool


def run_attrs(slot: Slot, trial_dir: Path, threads: str) -> dict[str, Any]:
    """The attrs a trial gets at launch: where its logs are, its host, devices and threads."""
    return (
        {"log_dir": str(trial_dir), "host": socket.gethostname()}
        | ({"devices": slot.cuda_visible_devices} if slot.cuda_visible_devices is not None else {})
        | ({"gpu_share": f"1/{slot.per_gpu}"} if slot.per_gpu > 1 else {})
        # The CPU threads it got (a trainer may record what it really used): `best
        # --export` carries them, as a thread count changes the numbers.
        | ({"threads": int(threads)} if threads.isdigit() else {})
    )


class ProcessSupervisor:
    """Runs one trial's process: launch, wait, stop. ``handler`` takes the control socket's
    messages (:class:`~dvt_hpo.study.reports.ReportHandler`); ``stop_event`` ends the wait."""

    def __init__(self, study: StudyHandle, trial_id: int, number: int, slot: Slot) -> None:
        self.study = study
        self.trial_id = trial_id
        self.number = number
        self.slot = slot
        self.process: TrialProcess | None = None
        self.timed_out = False
        self._oom_kills: int | None = None  # the cgroup's count when the trial started

    @property
    def strays(self) -> list[Any]:
        """Processes that left the trial's group, found by its token and stopped."""
        return list(getattr(self.process, "strays", None) or [])

    def run(
        self,
        payload_path: Path,
        trial_dir: Path,
        handler: TrialHandler,
        stop_event: threading.Event,
        *,
        answered: Callable[[], bool],
        set_phase: Callable[[Phase], None],
        paused: Callable[[], bool] = lambda: False,
    ) -> Exit:
        """Launch, wait and stop; ``answered()`` says whether a report's answer stopped the
        trial (it then exits on its own, within the grace); ``paused()``, whether that answer
        paused it (it then saves its state first, within its timeout)."""
        spec = self.study.spec
        with ControlServer(None, handler) as server:
            env = launch.trial_env(
                self.study.child_env, self.slot, server.path, spec.trials.memory_limit
            )
            self.study.set_trial_attrs(
                self.trial_id, run_attrs(self.slot, trial_dir, env.get("OMP_NUM_THREADS", ""))
            )
            if self.study.budget is not None:  # what this trial occupies, for study.budget
                self.study.budget.record_units(self.trial_id, self.slot, spec.trials.nproc_per_node)
            env[ENV_LAUNCHED] = repr(time.time())
            self._oom_kills = cgroup.oom_kills()
            self.process = self.study.launcher.start(payload_path, env, trial_dir)
            kill_points.reached("trial:running")
            if self.process.warm:
                self.study.set_trial_attrs(self.trial_id, {"warm_start": True})
            set_phase(Phase.RUNNING)
            waiter = threading.Thread(
                target=self._wait_exit,
                args=(stop_event,),
                name=f"trial-{self.number}-wait",
                daemon=True,
            )
            waiter.start()
            started = time.monotonic()
            if not stop_event.wait(spec.trials.timeout_s):
                self.timed_out = True
            set_phase(Phase.STOPPING)
            if answered() and self.process.poll() is None:
                # The chief raises TrialPruned on the decision and exits on its own; a signal
                # now would turn its clean "pruned" into "stopped". The grace bounds the wait;
                # a paused trial first saves the state its continuation needs (GBs on a shared
                # file system may take longer than the grace), bounded by its timeout.
                wait_s: float | None = spec.trials.stop_grace_s
                timeout_s = spec.trials.timeout_s
                if paused():
                    elapsed_s = time.monotonic() - started
                    wait_s = None if timeout_s is None else max(wait_s, timeout_s - elapsed_s)
                self.process.wait(wait_s)
            if self.process.poll() is None:
                self.process.stop(spec.trials.stop_grace_s)
            returncode = self.process.wait(None)
            # The last reports and attrs may still be in flight on the socket.
            server.drain(timeout_s=5)
        return Exit(returncode, self.timed_out)

    def _wait_exit(self, stop_event: threading.Event) -> None:
        assert self.process is not None
        self.process.wait(None)
        stop_event.set()

    def stopped_with_worker(self, returncode: int | None) -> bool:
        """A trial process that died of a signal while its worker is being stopped was
        interrupted too: a Slurm job's end (time limit, preemption, scancel) signals every
        process of the job, so the trial (or the warm template it dies with) may end a moment
        before the worker's own handler flags the interrupt. Waits briefly for that flag."""
        if self.timed_out or returncode is None or 0 <= returncode < 128:
            return False
        return self.study.worker_stopped.wait(_STOP_SIGNAL_WAIT_S)

    def killed_by_cgroup_oom(self, outcome: Outcome, returncode: int | None) -> Outcome:
        """A SIGKILL this worker did not send while the OOM killer of its cgroup (the Slurm
        job's, the pod's) killed a process: say so, a failure of the machine (node_health)."""
        sigkill = (-signal.SIGKILL, 128 + signal.SIGKILL)
        if outcome.state != "FAIL" or outcome.retry or self.timed_out or returncode not in sigkill:
            return outcome
        after = cgroup.oom_kills()
        if self._oom_kills is None or after is None or after <= self._oom_kills:
            return outcome
        reason = f"{outcome.reason}: {node_health.CGROUP_OOM_REASON}"
        return dataclasses.replace(outcome, reason=reason)
