"""``dvt-hpo dashboard``: optuna-dashboard on a study's storage, on loopback by default.

optuna-dashboard is the ``dashboard`` extra. It can also change a study (notes, deleting
studies), so listening beyond loopback is the user's explicit choice and gets a warning.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dvt_hpo.exceptions import DvtHpoError

if TYPE_CHECKING:
    from dvt_hpo.spec.model import StudySpec

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


def _server(host: str, port: int, app: Any) -> Any:
    import socket
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    class Quiet(WSGIRequestHandler):
        # One stderr line per request would bury the address line; errors still show.
        def log_message(self, format: str, *args: Any) -> None:
            pass

    class Threaded(ThreadingMixIn, WSGIServer):
        # The page fetches several API routes at once; one slow one must not stall the rest.
        daemon_threads = True
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    return make_server(host, port, app, server_class=Threaded, handler_class=Quiet)


def serve(
    spec: StudySpec,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    out: Callable[[str], None] = lambda line: print(line, flush=True),
) -> None:
    """Serve the dashboard until interrupted (Ctrl-C ends it normally)."""
    dashboard = _import_dashboard()
    from dvt_hpo.store.opening import StudyAt

    opened = StudyAt.of(spec).load()
    storage, study_id = opened.storage, opened.study_id
    try:
        # optuna-dashboard's own run_server prints Bottle's banner before it binds; binding
        # here first makes a busy port one clear line and "listening" true when printed.
        server = _server(host, port, dashboard.wsgi(storage))
    except OSError as exc:
        raise DvtHpoError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
    if host not in _LOOPBACK:
        print(
            f"warning: serving on {host}: anyone who reaches it can read the study and change "
            "it (notes, deleting studies); prefer an SSH tunnel to 127.0.0.1",
            file=sys.stderr,
            flush=True,
        )

    # Ctrl-C asks the server loop to stop rather than raising KeyboardInterrupt wherever the
    # main thread is: raised inside a weakref callback or a __del__ (SQLAlchemy's, during a
    # garbage collection) Python prints and drops it, and the dashboard would serve on.
    # shutdown() waits for the loop, so it runs on a thread of its own.
    def stop(signum: int, frame: Any) -> None:
        threading.Thread(target=server.shutdown, name="dashboard-stop", daemon=True).start()

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, stop) if main_thread else None
    try:
        out(
            f"optuna-dashboard for study {spec.study.name!r} listening on "
            f"{study_url(host, server.server_port, study_id)}  (Ctrl-C to stop)"
        )
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        return
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        server.server_close()


__all__ = ["serve", "study_url"]
