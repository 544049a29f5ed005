"""A throwaway PgBouncer (Debian's ``pgbouncer``) in transaction pooling in front of a
PostgreSQL server, for the tests and benchmarks of many workers on one database.

PgBouncer refuses to run as root: under root it runs as the ``postgres`` system user (its own
``-u``). Skips the test when ``pgbouncer`` is not installed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def pgbouncer(server_url: str, *, pool_size: int = 5, max_clients: int = 1000) -> Iterator[str]:
    """Run PgBouncer in front of ``server_url``'s server (its user and password); yields the
    URL of the same database through it. At most ``pool_size`` server connections per
    database."""
    exe = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not Path(exe).exists():
        pytest.skip("no pgbouncer: apt-get install pgbouncer")
    url = sqlalchemy.engine.make_url(server_url)
    folder = Path(tempfile.mkdtemp(prefix="dvt-hpo-pgbouncer-"))
    port = _free_port()
    password = f" password={url.password}" if url.password else ""
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={url.host} port={url.port or 5432} user={url.username}{password}\n"
        "[pgbouncer]\n"
        "listen_addr = 127.0.0.1\n"
        f"listen_port = {port}\n"
        "unix_socket_dir =\n"
        # The server authenticates PgBouncer (the [databases] line); clients are local tests.
        "auth_type = any\n"
        "pool_mode = transaction\n"
        f"default_pool_size = {pool_size}\n"
        "min_pool_size = 0\n"
        "reserve_pool_size = 0\n"
        f"max_client_conn = {max_clients}\n"
        # libpq startup options (a read-only session) are not pooled: PgBouncer drops them.
        "ignore_startup_parameters = extra_float_digits,options\n"
        # Waiters connect for each try of the creation lock: thousands of lines otherwise.
        "log_connections = 0\n"
        "log_disconnections = 0\n"
        f"logfile = {folder / 'pgbouncer.log'}\n"
        f"pidfile = {folder / 'pgbouncer.pid'}\n"
    )
    command = [exe, str(folder / "pgbouncer.ini")]
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
        for path in folder.iterdir():
            shutil.chown(path, "postgres", "postgres")
        command = [exe, "-u", "postgres", str(folder / "pgbouncer.ini")]
    # PgBouncer also logs to stderr when it runs in the foreground: a pipe nobody reads fills
    # after 64 KiB of connection lines and blocks PgBouncer, and every worker with it (a 6-worker
    # test hung a CI run that way). Its log file keeps the lines.
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if process.poll() is not None or time.monotonic() > end:
                log = (
                    (folder / "pgbouncer.log").read_text()
                    if (folder / "pgbouncer.log").exists()
                    else ""
                )
                pytest.fail(f"pgbouncer did not start: {log[-2000:]}")
            time.sleep(0.1)
        yield url.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)
    finally:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(10)
        if process.poll() is None:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)
