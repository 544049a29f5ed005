"""``trials.resume`` inside the trial process: save and load the latest resume state.

The orchestrator (:mod:`dvt_hpo.recovery.resume`) hands the trial a folder of its attempt chain
and a fingerprint of its params, trainer config and search space (payload ``resume``). An
entry point reaches it through ``ctx`` (:class:`ResumeAPI`, docs/protocol.md):

- ``ctx.resume_dir``: the folder (``None`` when ``trials.resume`` is off); a trainer with its
  own checkpoint format (a command trainer, deepvisiontools) writes there itself;
- ``ctx.save_state(obj)``: on the chief only, at most every ``trials.resume_every_s``
  (``force=True`` skips that rule), ``torch.save`` of ``obj`` with the fingerprint into
  ``state.pt`` through the project's atomic writer, latest only, then ``saved.json`` (the
  step and size, what the orchestrator and ``status`` read without torch);
- ``ctx.load_state()``: on every rank, the object saved last by this chain with this
  fingerprint, else ``None`` with one line saying why when a state was expected.

torch is imported only when a state is saved or loaded.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import IO, Any, TextIO

from dvt_hpo.atomic import write_atomic, write_json_atomic
from dvt_hpo.wire.payload import ResumePayload
from dvt_hpo.wire.trial_dir import SAVED_FILE, STATE_FILE

ENV_RESUME_DIR = "DVT_HPO_RESUME_DIR"

__all__ = [
    "ENV_RESUME_DIR",
    "ResumeAPI",
    "ResumeState",
]


class ResumeState:
    """One trial's resume folder, as the trial process sees it."""

    def __init__(self, payload: ResumePayload, *, rank: int = 0, out: TextIO | None = None):
        self.payload = payload
        self.dir = Path(payload.dir)
        self.rank = rank
        self._out = out
        self._last = time.monotonic()  # the first save comes every_s after the start
        self.saves = 0
        self.save_s = 0.0

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    def _say(self, message: str) -> None:
        if self.is_chief:
            print(f"dvt-hpo: {message}", file=self._out or sys.stderr, flush=True)

    def due(self) -> bool:
        """Whether a save now keeps to ``trials.resume_every_s``."""
        return time.monotonic() - self._last >= self.payload.every_s

    def save(self, obj: Any, *, step: int | None = None, force: bool = False) -> bool:
        """Save ``obj`` (chief only; at most every ``every_s`` unless ``force``); True when
        it was written."""
        if not self.is_chief or not (force or self.due()):
            return False
        import torch

        began = time.perf_counter()
        self.dir.mkdir(parents=True, exist_ok=True)
        wrapped = {
            "fingerprint": self.payload.fingerprint,
            "attempt": self.payload.attempt,
            "step": step,
            "state": obj,
        }

        def write(f: IO[bytes]) -> None:
            torch.save(wrapped, f)

        write_atomic(self.dir / STATE_FILE, write)
        self.record(self.dir / STATE_FILE, step=step, save_s=time.perf_counter() - began)
        return True

    def record(self, path: Path, *, step: int | None, save_s: float) -> None:
        """A state was saved at ``path`` (by :meth:`save`, or by a trainer in its own format):
        ``saved.json`` for the orchestrator and ``status``, and the interval starts again."""
        write_json_atomic(
            self.dir / SAVED_FILE,
            {
                "fingerprint": self.payload.fingerprint,
                "attempt": self.payload.attempt,
                "step": step,
                "file": path.name,
                "bytes": path.stat().st_size,
                "save_s": round(save_s, 4),
                "time_unix": time.time(),
            },
        )
        self._last = time.monotonic()
        self.saves += 1
        self.save_s += save_s

    def load(self) -> Any | None:
        """The state this chain saved last with this fingerprint, or None (one line why,
        when the orchestrator expected one)."""
        path = self.dir / STATE_FILE
        if not path.exists():
            if self.payload.expect:
                self._say(f"no resume state in {self.dir}: starting from epoch 0")
            return None
        import torch

        try:
            # Our own file, written by this chain's trial (numpy and Python RNG states are
            # not plain tensors, so weights_only cannot read it).
            wrapped = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as exc:  # noqa: BLE001 - a resume must never be worse than none
            self._say(
                f"resume state {path} unreadable ({type(exc).__name__}: {exc}): "
                "starting from epoch 0"
            )
            return None
        if not isinstance(wrapped, dict) or "state" not in wrapped:
            self._say(f"resume state {path} is not a dvt-hpo state: starting from epoch 0")
            return None
        if wrapped.get("fingerprint") != self.payload.fingerprint:
            self._say(
                f"resume state {path} was written with other params, trainer config or "
                "search space: starting from epoch 0"
            )
            return None
        step = wrapped.get("step")
        self._say(
            f"resuming from the state of trial {wrapped.get('attempt')}"
            + (f" saved after step {step}" if step is not None else "")
        )
        return wrapped["state"]


class ResumeAPI:
    """What ``ctx`` offers an entry point for ``trials.resume`` (docs/protocol.md)."""

    _resume: ResumeState | None = None

    def attach_resume(self, state: ResumeState | None) -> None:
        self._resume = state

    @property
    def resume_dir(self) -> Path | None:
        """The folder for this trial's resume state; None when ``trials.resume`` is off."""
        return self._resume.dir if self._resume is not None else None

    @property
    def pause_enabled(self) -> bool:
        """``trials.pause``: a ``TrialPruned`` from :meth:`report` before the last epoch is a
        pause, continued later from the state saved last; save it then
        (``save_state(..., force=True)``) and the continuation trains no epoch twice."""
        return self._resume is not None and self._resume.payload.pause

    def resume_due(self) -> bool:
        """Whether :meth:`save_state` would write now (``trials.resume_every_s``)."""
        return self._resume is not None and self._resume.is_chief and self._resume.due()

    def save_state(self, obj: Any, *, step: int | None = None, force: bool = False) -> bool:
        """Save ``obj`` as the latest resume state (see :class:`ResumeState`); a no-op
        (False) with ``trials.resume`` off or on a rank other than 0. ``step``: the last
        step the state includes (default: the last one reported)."""
        if self._resume is None:
            return False
        if step is None:
            history = getattr(self, "history", None)
            step = history[-1][0] if history else None
        saved = self._resume.save(obj, step=step, force=force)
        if saved:
            self._saved_attrs()
        return saved

    def mark_saved(self, path: str | Path, *, step: int | None, save_s: float) -> None:
        """A trainer that writes its own state format into :attr:`resume_dir` (atomically)
        says so here: the ``resume_every_s`` interval starts again and the save is counted."""
        if self._resume is not None and self._resume.is_chief:
            self._resume.record(Path(path), step=step, save_s=save_s)
            self._saved_attrs()

    def _saved_attrs(self) -> None:
        set_attrs = getattr(self, "set_user_attrs", None)
        if set_attrs is not None and self._resume is not None:
            set_attrs(
                {
                    "resume_saves": self._resume.saves,
                    "resume_save_s": round(self._resume.save_s, 4),
                }
            )

    def load_state(self) -> Any | None:
        """The latest resume state of this trial's chain (every rank), or None."""
        return self._resume.load() if self._resume is not None else None
