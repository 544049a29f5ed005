"""``dvt-hpo dashboard``: optuna-dashboard on a study's storage, on loopback by default.

optuna-dashboard is the ``dashboard`` extra. It can also change a study (notes, deleting
studies), so listening beyond loopback is the user's explicit choice and gets a warning.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dvt_hpo.exceptions import DvtHpoError

if TYPE_CHECKING:
    from dvt_hpo.spec import StudySpec

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _import_dashboard() -> Any:
    try:
        import optuna_dashboard
    except ImportError:
        raise DvtHpoError(
            "dvt-hpo dashboard needs optuna-dashboard: pip install 'dvt-hpo[dashboard]'"
        ) from None
    return optuna_dashboard


def study_url(host: str, port: int, study_id: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/dashboard/studies/{study_id}"


def serve(
    spec: StudySpec,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    out: Callable[[str], None] = lambda line: print(line, flush=True),
) -> None:
    """Serve the dashboard until interrupted (Ctrl-C ends it normally)."""
    dashboard = _import_dashboard()
    from dvt_hpo.study_reader import open_existing_study

    study = open_existing_study(spec)
    if host not in _LOOPBACK:
        print(
            f"warning: serving on {host}: anyone who reaches it can read the study and change "
            "it (notes, deleting studies); prefer an SSH tunnel to 127.0.0.1",
            file=sys.stderr,
            flush=True,
        )
    out(
        f"optuna-dashboard for study {spec.study.name!r}: "
        f"{study_url(host, port, study._study_id)}  (Ctrl-C to stop)"
    )
    try:
        dashboard.run_server(study._storage, host=host, port=port)
    except KeyboardInterrupt:
        return
    except OSError as exc:
        raise DvtHpoError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None


__all__ = ["serve", "study_url"]
