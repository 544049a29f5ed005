"""Start many processes at the same instant (``python -m tests.store.suite.gate MODE ...``).

Each process imports everything it needs first (so that import time does not spread the
start), prints ``ready``, then blocks on a shared ``flock`` of a gate file that the test holds
exclusively; releasing it lets every process through at once. Modes:

- ``cli GATE ARGS...``: ``dvt_hpo.cli.main(ARGS)`` (a ``dvt-hpo`` command), exit with its code;
- ``rounds NAME TRIALS GATE1 URL1 [GATE2 URL2 ...]``: for each round, wait at its gate, then
  :meth:`dvt_hpo.store.opening.StudyAt.create_or_load` on URL (the study's settings stored by
  ``init``) and TRIALS trials through ask/tell; prints ``done 0`` or ``done 1 <error>`` per
  round. One process serves many rounds, so that the imports are paid once.
"""

from __future__ import annotations

import fcntl
import sys
import warnings

import optuna
import sqlalchemy  # noqa: F401 - imported before the gate, see above

import dvt_hpo.cli
import dvt_hpo.store.opening
import dvt_hpo.store.storage


def wait_at(gate: str) -> None:
    with open(gate) as f:
        print("ready", flush=True)
        fcntl.flock(f, fcntl.LOCK_SH)
        fcntl.flock(f, fcntl.LOCK_UN)


def _round(url: str, name: str, trials: int) -> str:
    def init(study: optuna.Study) -> None:
        study.set_user_attr("dvt_hpo:settings", {"sampler": "random"})

    heartbeat = (
        None if url.startswith("journal") else dvt_hpo.store.storage.HeartbeatSettings(5, 10, 1)
    )
    try:
        study = (
            dvt_hpo.store.opening.StudyAt(url, name)
            .create_or_load(["maximize"], heartbeat=heartbeat, init=init)
            .study
        )
        study.sampler = optuna.samplers.RandomSampler(seed=0)
        for _ in range(trials):
            trial = study.ask()
            study.tell(trial, trial.suggest_float("x", 0.0, 1.0))
    except Exception as exc:  # noqa: BLE001 - the test reads what failed
        return f"done 1 {type(exc).__name__}: {' '.join(str(exc).split())}"
    return "done 0"


def main(argv: list[str]) -> int:
    mode, *rest = argv
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # The study loop drives heartbeats around ask/tell on purpose, as here.
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
    if mode == "cli":
        wait_at(rest[0])
        return dvt_hpo.cli.main(rest[1:])
    name, trials, *pairs = rest
    for gate, url in zip(pairs[::2], pairs[1::2], strict=True):
        wait_at(gate)
        print(_round(url, name, int(trials)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
