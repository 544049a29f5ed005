"""One trial's run: its payload, then its process supervised, its reports handled, and its
end recorded.

A :class:`TrialRun` moves through :class:`~dvt_hpo.results.outcome.Phase` in order on a thread of
its own. It is three parts, a module each: the control socket's handler with one
:class:`~dvt_hpo.study.reports.PruneDecision` per report (:mod:`~dvt_hpo.study.reports`, the
base class), the process supervisor (:mod:`~dvt_hpo.study.supervisor`) and the recorder
(:mod:`~dvt_hpo.study.recorder`). What happened is decided by the pure
:func:`~dvt_hpo.results.outcome.classify`; this module gathers its inputs and hands its answer
to the recorder.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import threading
import time
from typing import TYPE_CHECKING, Any

from dvt_hpo.batch.cache import cache_key
from dvt_hpo.devices.gpu_share import GpuShare
from dvt_hpo.devices.slots import Slot
from dvt_hpo.optuna_api.private import study_id_of, trial_id_of
from dvt_hpo.process.tree import TrialProcess
from dvt_hpo.recovery import kill_points, resume
from dvt_hpo.results.outcome import (
    Flags,
    Limits,
    Objective,
    Outcome,
    Phase,
    TrialOutcome,
    classify,
    trial_state,
)
from dvt_hpo.study.recorder import Recorder, RunFacts
from dvt_hpo.study.reports import ReportHandler
from dvt_hpo.study.supervisor import ProcessSupervisor
from dvt_hpo.wire.payload import CommandPayload, TrialLimits, TrialPayload
from dvt_hpo.wire.result import ResultError, read_result
from dvt_hpo.wire.trial_dir import TrialDir

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.study.handle import StudyHandle


class TrialRun(ReportHandler):
    """One trial: its payload, process group, control socket and the reports it streams."""

    def __init__(
        self,
        study: StudyHandle,
        trial: optuna.Trial,
        params: dict[str, Any],
        config: dict[str, Any],
        slot: Slot,
    ) -> None:
        self.study = study
        self.spec = study.spec
        self.trial = trial
        self.trial_id: int = trial_id_of(trial)
        self.number = trial.number
        self.params = params
        self.config = config
        self.slot = slot
        self.phase = Phase.ASKED
        self._init_reports()
        self.interrupted = False
        self.start_time = time.monotonic()
        self.folder = TrialDir.of(self.spec.trials.runs_dir, self.number)
        self.trial_dir = self.folder.path
        self.resume: resume.ResumePlan | None = None  # trials.resume: set at launch
        self.supervisor = ProcessSupervisor(study, self.trial_id, self.number, slot)
        self.recorder = Recorder(study, trial, params, self.trial_dir)
        self.thread = threading.Thread(
            target=self._run_safely, name=f"trial-{self.number}", daemon=True
        )

    # -- life -------------------------------------------------------------------------
    def start(self) -> None:
        self.thread.start()

    def stop_over_budget(self, why: str) -> None:
        """``study.budget.strict``: stop now; recorded PRUNED at its last report (FAIL, not
        retried, without one)."""
        if self.over_budget is None:
            self.over_budget = why
        self._unanswered_stop = True
        if self.pruned_step is None and self.history:
            self.pruned_step = self.history[-1][0]
        self.stop_event.set()

    def interrupt(self) -> None:
        self.interrupted = True
        self.stop_event.set()

    @property
    def timed_out(self) -> bool:
        return self.supervisor.timed_out

    @property
    def process(self) -> TrialProcess | None:
        """The trial's process while it runs (None before its launch)."""
        return self.supervisor.process

    def payload(self) -> TrialPayload:
        spec = self.spec
        bs = spec.batch_size
        precision = self.config.get("precision", {}) if isinstance(self.config, dict) else {}
        extra = {
            "entrypoint": spec.trainer.entrypoint,
            "precision": precision,
            "launcher": spec.trials.launcher,
            "nproc": spec.trials.nproc_per_node,
            "memory_limit": spec.trials.memory_limit,
        }
        share = GpuShare(self.slot.per_gpu) if self.slot.per_gpu > 1 else None
        if share is not None:
            # A size found with a whole GPU must never be reused in a share of one (nor one
            # found in a 1/2 share in a 1/4 one); keys without a share stay as they were.
            extra["gpu_share"] = dataclasses.asdict(share)
        return TrialPayload(
            entrypoint=spec.trainer.entrypoint,
            config=self.config,
            params=self.params,
            study_name=spec.study.name,
            trial_number=self.number,
            batch_size=bs,
            cache_key=cache_key(self.config, bs.memory_keys, extra) if bs.auto else None,
            devices=spec.trials.devices,
            gpus=self.slot.gpus,
            gpu_share=share,
            limits=TrialLimits(
                report_timeout_s=spec.trials.report_timeout_s,
                timeout_s=spec.trials.timeout_s,
                memory_limit=spec.trials.memory_limit,
            ),
            trial_dir=str(self.trial_dir),
            study_dir=str(spec.path.parent),
            command=self._command(),
            resume=self.resume.payload() if self.resume is not None else None,
        )

    def _command(self) -> CommandPayload | None:
        trainer = self.spec.trainer
        if trainer.command is None:
            return None
        return CommandPayload(
            argv=trainer.command,
            metrics_pattern=trainer.metrics_pattern,
            names={dim.name: dim.path for dim in self.spec.search_space},
            stop_grace_s=self.spec.trials.stop_grace_s,
        )

    def _run_safely(self) -> None:
        try:
            outcome = self._run()
        except BaseException as exc:  # noqa: BLE001 - a bug here must not hang the study
            reason = f"orchestrator error: {type(exc).__name__}: {exc}"
            try:
                outcome = self._record(Outcome("FAIL", "failed", reason=reason), None)
            except BaseException:  # noqa: BLE001 - the loop must hear of this trial anyway
                duration_s = time.monotonic() - self.start_time
                outcome = TrialOutcome(
                    self.number, self.trial_id, "FAIL", None, self.params, duration_s, reason
                )
                # Recording failed too: at least end it in the study (else it stays RUNNING
                # until its heartbeat goes stale and is retried as if its orchestrator died).
                with contextlib.suppress(Exception), self.study.lock:
                    self.study.storage.set_trial_state_values(self.trial_id, trial_state("FAIL"))
        self.phase = Phase.FINISHED
        self.study.finished(outcome)

    def _run(self) -> TrialOutcome:
        spec = self.spec
        self.phase = Phase.LAUNCHING
        if self.trial_dir.exists():
            shutil.rmtree(self.trial_dir)
        self.trial_dir.mkdir(parents=True)
        if spec.trials.resume:
            self.resume, note = resume.prepare(
                spec, self.study.storage, study_id_of(self.study.study), self.trial_id, self.params
            )
            self._set_attrs({"resume_dir": str(self.resume.state_dir)})
            if note is not None and self.study.out is not None:
                self.study.out(note)
        payload_path = self.folder.payload
        self.payload().write(payload_path)
        ended = self.supervisor.run(
            payload_path,
            self.trial_dir,
            self,
            self.stop_event,
            answered=self._stopped_by_answer,
            set_phase=self._set_phase,
            paused=lambda: self.paused,
        )
        kill_points.reached("trial:ended")
        self.phase = Phase.RECORDING
        return self._conclude(ended.returncode)

    def _set_phase(self, phase: Phase) -> None:
        self.phase = phase

    def _stopped_by_answer(self) -> bool:
        return (
            self.pruned_step is not None or self.diverged is not None
        ) and not self._unanswered_stop

    def _conclude(self, returncode: int | None) -> TrialOutcome:
        spec = self.spec
        try:
            result = read_result(self.folder.result)
            rank_errors = [
                error
                for path in self.folder.rank_errors()
                if (error := read_result(path)) is not None
            ]
        except ResultError as exc:
            # Another version's (or a hand-edited) file: how the trial ended is unknown.
            result, rank_errors = None, []
            self.protocol_error = self.protocol_error or str(exc)
        if self.resume is not None and result is not None and result.status == "ok":
            self._splice(None)  # a copy whose state covered every epoch reported nothing
        outcome = classify(
            result,
            returncode,
            Flags(
                self.pruned_step,
                self.interrupted or self.supervisor.stopped_with_worker(returncode),
                self.timed_out,
                self.protocol_error,
                self.diverged,
                self.diverged_metric,
            ),
            objective=Objective(
                spec.objective.metric,
                spec.objective.direction,
                spec.objective.reduce,
                others=spec.objective.names[1:],
                constraints=spec.objective.constraints,
            ),
            history=self.history,
            rank_errors=rank_errors,
            limits=Limits(spec.trials.timeout_s, spec.trials.memory_limit, self.slot.per_gpu),
            pruner=spec.study.pruner.kind,
        )
        outcome = self.supervisor.killed_by_cgroup_oom(outcome, returncode)
        if self.over_budget is not None and outcome.state != "COMPLETE":
            why = f"stopped: {self.over_budget} (study.budget.strict)"
            outcome = dataclasses.replace(outcome, reason=why, retry=False)
        attrs: dict[str, Any] = {}
        if result is not None and result.startup_s is not None:
            # Launch to the entry point's call: what a warm start saves.
            attrs["startup_s"] = result.startup_s
        if result is not None and result.status == "ok" and result.metrics:
            attrs["final_metrics"] = result.metrics
        return self._record(outcome, returncode, attrs)

    def _record(
        self, outcome: Outcome, returncode: int | None, extra: dict[str, Any] | None = None
    ) -> TrialOutcome:
        facts = RunFacts(
            duration_s=time.monotonic() - self.start_time,
            returncode=returncode,
            history=list(self.history),
            pruned_step=self.pruned_step,
            paused=self.paused,
            over_budget=self.over_budget,
            diverged_step=self.diverged[0] if self.diverged is not None else None,
            strays=self.supervisor.strays,
        )
        return self.recorder.record(outcome, facts, self.attrs, self.resume, extra)


__all__ = ["TrialRun"]
