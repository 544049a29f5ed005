"""Live progress of ``dvt-hpo run``: an observer of the study loop.

On a terminal: a bar over the study's budget (done / n_trials, elapsed, ETA) and a line per
running trial (epoch, latest objective value, elapsed time), redrawn in place by ``rich``'s
``Live``; finished trials and the loop's own messages scroll above it. Elsewhere (CI,
``| tee``, a log file): plain lines only, one per finished trial and at most one per trial
every ``report_every_s`` seconds for epoch reports, so logs stay readable.

rich rather than tqdm: the view is a bar *and* a table of running trials refreshed together,
which rich's ``Live`` renders as one region (tqdm draws bars, one line each, and has no table);
rich also prints messages above the live region without tearing it, detects terminals, and
honours ``NO_COLOR`` and narrow widths.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from dvt_hpo.results.events import (
    BaseObserver,
    StudyEnded,
    StudyStarted,
    TrialFinished,
    TrialReported,
    TrialStarted,
)
from dvt_hpo.study.messages import fmt_params, trial_line


def fmt_elapsed(seconds: float) -> str:
    minutes, s = divmod(max(0, int(seconds)), 60)
    h, m = divmod(minutes, 60)
    return f"{h}:{m:02d}:{s:02d}"


@dataclass
class _Running:
    number: int
    params: dict[str, Any]
    started: float  # monotonic
    retry_of: int | None
    step: int | None = None
    value: float | None = None
    last_line: float = -math.inf  # monotonic time of the last plain epoch line


class ProgressObserver(BaseObserver):
    """Progress of a study on ``stream`` (stdout by default).

    ``live``: None picks the live view when ``stream`` is a terminal. ``report_every_s``: the
    least time between two plain epoch lines of one trial (0: every report; None: none).
    Use :meth:`out` for the loop's other messages, so they print above the live view.
    """

    def __init__(
        self,
        stream: IO[str] | None = None,
        *,
        live: bool | None = None,
        report_every_s: float | None = 30.0,
        refresh_per_second: float = 4.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.live_mode = self.stream.isatty() if live is None else live
        self.report_every_s = report_every_s
        self.refresh_per_second = refresh_per_second
        self.clock = clock
        self.metric = ""
        self.metrics: list[str] = []
        self.n_trials: int | None = None
        self.done = 0  # finished trials of the study (COMPLETE + PRUNED + FAIL counted here)
        self.done_here = 0  # finished by this run: the ETA's rate
        self.started = clock()
        self.running: dict[int, _Running] = {}
        self._lock = threading.Lock()
        self._console: Any = None
        self._live: Any = None
        self._progress: Any = None
        self._task: Any = None

    # -- output -----------------------------------------------------------------------
    def out(self, line: str) -> None:
        """Print one message: above the live view on a terminal, a plain line elsewhere."""
        if self._console is not None:
            self._console.print(line, markup=False, highlight=False)
        else:
            self.stream.write(line + "\n")
            self.stream.flush()

    def _start_live(self) -> None:
        from rich.console import Console, Group
        from rich.live import Live
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self._console = Console(file=self.stream, force_terminal=True)
        self._progress = Progress(
            # Explicit columns without markup: rich would otherwise parse brackets in text.
            TextColumn("{task.description}", style="bold", markup=False),
            BarColumn(),
            MofNCompleteColumn()
            if self.n_trials is not None
            else TextColumn("{task.completed} done", markup=False),
            TimeElapsedColumn(),
            _eta_column(self),
            console=self._console,
        )
        self._task = self._progress.add_task(
            "trials", total=self.n_trials, completed=min(self.done, self.n_trials or self.done)
        )

        def view() -> Any:
            return Group(self._progress, self._running_table())

        self._live = Live(
            get_renderable=view,
            console=self._console,
            refresh_per_second=self.refresh_per_second,
            transient=False,
        )
        self._live.start()

    def _running_table(self) -> Any:
        from rich.table import Table

        table = Table(box=None, show_header=bool(self.running), pad_edge=False)
        for header in ("trial", "epoch", self.metric, "elapsed", "params"):
            table.add_column(header, no_wrap=header != "params", overflow="ellipsis")
        now = self.clock()
        with self._lock:
            rows = sorted(self.running.values(), key=lambda r: r.number)
        for r in rows:
            retry = f" (retry of {r.retry_of})" if r.retry_of is not None else ""
            table.add_row(
                f"{r.number}{retry}",
                "-" if r.step is None else str(r.step),
                "-" if r.value is None else f"{r.value:.4f}",
                fmt_elapsed(now - r.started),
                fmt_params(r.params),
            )
        return table

    def refresh(self) -> None:
        """Redraw the live view now (it also redraws on its own, ``refresh_per_second``)."""
        if self._live is not None:
            self._live.refresh()

    def eta_s(self) -> float | None:
        """Seconds left at this run's pace so far; None before a trial finished here."""
        if self.n_trials is None or self.done_here == 0:
            return None
        left = max(0, self.n_trials - self.done)
        return (self.clock() - self.started) / self.done_here * left

    # -- events -----------------------------------------------------------------------
    def study_started(self, event: StudyStarted) -> None:
        # Several objectives arrive comma-joined; the running table shows the first.
        self.metrics = event.metric.split(",")
        self.metric = self.metrics[0]
        self.n_trials = event.n_trials
        self.done = event.n_done
        self.started = self.clock()
        if self.live_mode and self._live is None:
            self._start_live()

    def trial_started(self, event: TrialStarted) -> dict[str, Any] | None:
        with self._lock:
            self.running[event.number] = _Running(
                event.number, dict(event.params), self.clock(), event.retry_of
            )
        return None

    def trial_reported(self, event: TrialReported) -> None:
        value = event.metrics.get(self.metric)
        with self._lock:
            r = self.running.get(event.number)
            if r is None:
                return
            r.step = event.step
            if value is not None:
                r.value = float(value)
            now = self.clock()
            due = (
                not self.live_mode
                and self.report_every_s is not None
                and now - r.last_line >= self.report_every_s
            )
            if due:
                r.last_line = now
        if due:
            shown = "".join(
                f"{name}={float(event.metrics[name]):.4f}  "
                for name in self.metrics
                if event.metrics.get(name) is not None
            )
            self.out(
                f"trial {event.number:>3} epoch {event.step:<4} {shown}"
                f"{fmt_elapsed(event.elapsed_s)}"
            )

    def trial_finished(self, event: TrialFinished) -> None:
        with self._lock:
            self.running.pop(event.number, None)
            self.done += 1
            self.done_here += 1
        budget = event.user_attrs.get("budget")  # study.budget: spent / total
        if self._progress is not None:
            self._progress.update(self._task, completed=self.done)
            if budget:
                self._progress.update(self._task, description=f"trials ({budget})")
        self.out(trial_line(event, self.metrics))

    def study_ended(self, event: StudyEnded) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=event.n_done)
        self.close()

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


def _eta_column(observer: ProgressObserver) -> Any:
    from rich.progress import ProgressColumn
    from rich.text import Text

    class EtaColumn(ProgressColumn):
        # Rich's own estimate averages over a 30 s window; trials last minutes, so the pace
        # of the whole run is the better guess.
        def render(self, task: Any) -> Text:
            eta = observer.eta_s()
            return Text("eta " + ("-:--:--" if eta is None else fmt_elapsed(eta)))

    return EtaColumn()


__all__ = ["ProgressObserver", "fmt_elapsed"]
