"""Kept name: ``python -m dvt_hpo.worker PAYLOAD.json`` reruns a trial as before.

The trial process is :mod:`dvt_hpo.trial` (``python -m dvt_hpo.trial PAYLOAD.json``); in the rest
of the project "worker" means an orchestrator (``dvt-hpo run``, ``--workers K``)."""

import sys

from dvt_hpo.trial.main import main

if __name__ == "__main__":
    sys.exit(main())
