"""Drive a ProgressObserver with a short study's events on this process's stdout (a terminal
or a pipe, chosen by the test that runs it): ``python -m tests.drive_progress``."""

from __future__ import annotations

import sys

from dvt_hpo.results.events import (
    StudyEnded,
    StudyStarted,
    TrialFinished,
    TrialReported,
    TrialStarted,
)
from dvt_hpo.views.progress import ProgressObserver


def main() -> None:
    observer = ProgressObserver(report_every_s=0, refresh_per_second=20)
    observer.study_started(
        StudyStarted(
            study_name="drive",
            storage="sqlite:///drive.db",
            direction="maximize",
            metric="macro_f1",
            n_trials=5,
            n_done=1,
            study_file="/tmp/study.yaml",
            space={},
        )
    )
    observer.out("study 'drive': 1/5 trials done, 2 at a time")
    for number in (1, 2):
        observer.trial_started(TrialStarted(number, number + 1, {"lr": 0.01 * number}, None, 0.0))
    observer.trial_reported(TrialReported(1, 0, {"macro_f1": 0.5, "loss": 1.2}, 1.5))
    observer.trial_reported(TrialReported(2, 2, {"macro_f1": 0.7321, "loss": 0.9}, 2.0))
    observer.refresh()
    print("MARK running-shown", file=sys.stderr, flush=True)
    observer.trial_finished(
        TrialFinished(1, 2, "COMPLETE", 0.8123, {"lr": 0.01}, None, 3.2, {"batch_size": 64})
    )
    observer.refresh()
    observer.trial_finished(
        TrialFinished(2, 3, "PRUNED", None, {"lr": 0.02}, "pruned at step 2", 2.1, {})
    )
    observer.study_ended(StudyEnded(3, 0.8123, {"lr": 0.01}, 1, 0))


if __name__ == "__main__":
    main()
