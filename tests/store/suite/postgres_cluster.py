"""A throwaway PostgreSQL server for outage tests: ``initdb`` + ``pg_ctl`` on a free port in a
temporary folder, with password authentication, removed afterwards.

PostgreSQL refuses to run as root, so under root the server runs as the ``postgres`` system
user (``runuser``). Skips the test when no ``initdb`` is installed (Debian: the
``postgresql`` package, under ``/usr/lib/postgresql/<version>/bin``), and fails it instead under
``DVT_HPO_REQUIRE_POSTGRES=1``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

PASSWORD = "s3cret-Pw_42"  # a test-only secret: the tests check that it never shows


def admin_engine(url: str) -> Any:
    """An AUTOCOMMIT engine on the ``postgres`` maintenance database of ``url``'s server."""
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    admin = sqlalchemy.engine.make_url(url).set(database="postgres")
    return sqlalchemy.create_engine(admin, poolclass=NullPool, isolation_level="AUTOCOMMIT")


def _bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version_key)
    if not found:
        which = shutil.which("initdb")
        if which is None:
            message = (
                "no initdb: PostgreSQL server binaries are not installed "
                "(neither /usr/lib/postgresql/*/bin/initdb nor initdb on PATH)"
            )
            if os.environ.get("DVT_HPO_REQUIRE_POSTGRES") == "1":
                pytest.fail(message + " (DVT_HPO_REQUIRE_POSTGRES=1)")
            pytest.skip(message)
        return Path(which).parent
    return Path(found[-1]).parent


def _version_key(path: str) -> int:
    part = path.split("/")[4]
    return int(part) if part.isdigit() else 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PostgresCluster:
    folder: Path
    port: int
    bin_dir: Path

    @property
    def data_dir(self) -> Path:
        return self.folder / "data"

    @property
    def url(self) -> str:
        return f"postgresql://postgres:{PASSWORD}@127.0.0.1:{self.port}/postgres"

    def url_for(self, database: str, *, password: str = PASSWORD, user: str = "postgres") -> str:
        return f"postgresql://{user}:{password}@127.0.0.1:{self.port}/{database}"

    @classmethod
    def create(cls) -> PostgresCluster:
        bin_dir = _bin_dir()
        folder = Path(tempfile.mkdtemp(prefix="dvt-hpo-pg-"))
        cluster = cls(folder, _free_port(), bin_dir)
        (folder / "pw").write_text(PASSWORD + "\n")
        if os.geteuid() == 0:
            shutil.chown(folder, "postgres", "postgres")
            shutil.chown(folder / "pw", "postgres", "postgres")
        cluster._run(
            "initdb",
            "-D",
            str(cluster.data_dir),
            "-U",
            "postgres",
            "--auth=scram-sha-256",
            f"--pwfile={folder / 'pw'}",
            "--no-sync",
        )
        return cluster

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bin_dir / tool), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, text=True, cwd=self.folder)

    def start(self, **settings: object) -> None:
        """Start the server; ``settings`` are more server settings (``max_connections=100``)."""
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        options += "".join(f" -c {key}={value}" for key, value in settings.items())
        self._run(
            "pg_ctl",
            "-D",
            str(self.data_dir),
            "-o",
            options,
            "-l",
            str(self.folder / "log"),
            "-w",
            "start",
        )

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "stop")

    def destroy(self) -> None:
        if (self.data_dir / "postmaster.pid").exists():
            with contextlib.suppress(subprocess.CalledProcessError):
                self._run("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)
