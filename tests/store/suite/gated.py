"""Run processes that start at the same instant (see :mod:`tests.store.suite.gate`)."""

from __future__ import annotations

import contextlib
import fcntl
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO


@dataclass(frozen=True)
class Finished:
    returncode: int
    output: str


@contextlib.contextmanager
def closed_gates(paths: Sequence[Path]) -> Iterator[list[IO[str]]]:
    """Hold an exclusive ``flock`` on each path; closing a returned file opens its gate."""
    held = []
    try:
        for path in paths:
            path.touch()
            f = open(path)  # noqa: SIM115 - closed by the caller (opens the gate) or below
            fcntl.flock(f, fcntl.LOCK_EX)
            held.append(f)
        yield held
    finally:
        for f in held:
            f.close()


def _start(
    argv: Sequence[str], env: Mapping[str, str] | None, cwd: Path | None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.store.suite.gate", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=None if env is None else dict(env),
        cwd=cwd,
    )


def _await_line(proc: subprocess.Popen[str], expected: str) -> str:
    """Read lines until one starts with ``expected``; returns what came before it plus it."""
    assert proc.stdout is not None
    seen = ""
    for line in proc.stdout:
        seen += line
        if line.startswith(expected):
            return seen
    return seen  # the process ended first: its output says why


def run_gated(
    argvs: Sequence[Sequence[str]],
    gate: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout_s: float = 180,
) -> list[Finished]:
    """Start ``gate MODE GATE ARGS...`` for each ``[MODE, ARGS...]``, open the gate once all
    are ready, and wait for all to finish (stdout and stderr together)."""
    with closed_gates([gate]) as (held,):
        procs = [_start([argv[0], str(gate), *argv[1:]], env, cwd) for argv in argvs]
        early = [_await_line(proc, "ready").removesuffix("ready\n") for proc in procs]
        held.close()
    finished = []
    for proc, before in zip(procs, early, strict=True):
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        finished.append(Finished(proc.returncode, before + out))
    return finished


def run_rounds(
    workers: int, name: str, trials: int, urls: Sequence[str], gate_dir: Path
) -> Iterator[list[str]]:
    """``workers`` processes race through one round per URL (``gate rounds``); yields, per
    round, each process's ``done ...`` line (or its output if it died), after the round."""
    gates = [gate_dir / f"gate-{i}" for i in range(len(urls))]
    pairs = [str(p) for pair in zip(gates, urls, strict=True) for p in pair]
    with closed_gates(gates) as held:
        procs = [_start(["rounds", name, str(trials), *pairs], None, None) for _ in range(workers)]
        try:
            for gate in held:
                for proc in procs:
                    _await_line(proc, "ready")
                gate.close()
                yield [_await_line(proc, "done").strip().splitlines()[-1] for proc in procs]
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
