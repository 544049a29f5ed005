"""``trainer.command``: a training script run as the trial's trainer, by the trial process.

The trial process calls :func:`run` as it calls any entry point, so everything around an entry point
applies to the script unchanged: the trial process's memory limit (``RLIMIT_AS`` is inherited), its
control connection as watchdog, its process group (the script is a child in the *same* group,
so the orchestrator's stop and timeout, and the watchdog, reach it), the slot's environment
(``CUDA_VISIBLE_DEVICES``, ``OMP_NUM_THREADS``, under torchrun ``RANK``, ``MASTER_ADDR``...),
the folder it runs in and the capped log files: the script's stdout and stderr are copied line
by line to the trial process's own, which are the trial's logs. A line ends at ``\n``, ``\r\n`` or a
lone ``\r``: a progress bar redrawn with ``\r`` reaches the log and the pattern at each redraw.
A parent-death signal is not inherited: the script asks for its own (SIGKILL when the trial
process dies, :mod:`dvt_hpo.trial.lifeline`) before it starts, since a trial process killed by
its parent-death signal (the orchestrator killed with SIGKILL) runs no ``finally`` to stop it.

Metrics reach ``ctx.report`` two ways, both going through one lock so each step is reported
once: :mod:`dvt_hpo.report` in the script (over a Unix socket named by ``$DVT_HPO_REPORT``;
a prune answers it, and the script raises ``SystemExit``), and ``trainer.metrics_pattern``
matched on each stdout line (a prune stops the script: SIGTERM, then SIGKILL after the grace).
Stdlib only, like the rest of the trial process.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import yaml

from dvt_hpo.atomic import write_json_atomic, write_text_atomic
from dvt_hpo.batch.search import is_out_of_memory_line
from dvt_hpo.command.template import render
from dvt_hpo.config.paths import get_path
from dvt_hpo.exceptions import CommandFailed, TrialPruned
from dvt_hpo.trial.context import raise_if_stopped
from dvt_hpo.trial.lifeline import dies_with_this_process
from dvt_hpo.trial.resume_state import ENV_RESUME_DIR
from dvt_hpo.wire.control_server import short_socket_dir
from dvt_hpo.wire.payload import CommandPayload
from dvt_hpo.wire.protocol import ENV_CONTROL, ENV_REPORT

if TYPE_CHECKING:
    from dvt_hpo.trial.context import LocalContext, TrialContext

    Context = TrialContext | LocalContext

__all__ = ["CONFIG_JSON", "CONFIG_YAML", "exit_reason", "run", "split_lines"]

CONFIG_YAML = "config.yaml"  # {config}: the trial's resolved config, in the trial folder
CONFIG_JSON = "config.json"  # {config_json}
_MAX_LINE_BYTES = 64 * 1024  # a longer stdout line is copied and matched in pieces
_MAX_REQUEST_BYTES = 1024 * 1024
_DRAIN_S = 5.0  # after the script exits, how long its pipes may take to reach EOF
_LAST_LINE_CHARS = 500
_LINE_END = re.compile(rb"\r\n?|\n")


def run(config: Mapping[str, Any], ctx: Context, *, command: CommandPayload) -> None:
    """Run the trial's command to its end; returns None (the objective comes from the
    reported history). Raises :class:`TrialPruned` when the study pruned it and
    :class:`CommandFailed` when it failed (the whole reason in one line)."""
    trial_dir = Path(ctx.trial_dir) if ctx.trial_dir is not None else Path.cwd()
    argv = render(command.argv, _lookup(config, ctx, command.names, trial_dir))
    _write_configs(config, trial_dir)
    pattern = re.compile(command.metrics_pattern) if command.metrics_pattern else None
    reporter = _Reporter(ctx)
    with _Relay(reporter) as relay:
        env = {k: v for k, v in os.environ.items() if k != ENV_CONTROL}
        env[ENV_REPORT] = relay.path
        if ctx.resume_dir is not None:
            env[ENV_RESUME_DIR] = str(ctx.resume_dir)
        try:
            # The script dies with this process: a trial process killed by its own
            # parent-death signal (the orchestrator killed with SIGKILL) runs no `finally`.
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                preexec_fn=dies_with_this_process(),
            )
        except OSError as exc:
            raise CommandFailed(f"cannot start the command {argv[0]!r}: {exc}") from None
        stopper = _Stopper(proc, command.stop_grace_s)
        reporter.stopper = stopper
        assert proc.stdout is not None and proc.stderr is not None
        out = _Pump(proc.stdout, _binary(sys.stdout), lambda line: reporter.match(pattern, line))
        err = _Pump(proc.stderr, _binary(sys.stderr), None)
        try:
            returncode = proc.wait()
        finally:
            if proc.returncode is None:  # the trial process is being stopped (SIGTERM, Ctrl-C)
                stopper.request(delay_s=0.0)
                proc.wait()
            stopper.exited.set()
            out.join(_DRAIN_S)
            err.join(_DRAIN_S)
    if ctx.pruned_step is not None:
        raise TrialPruned(ctx.pruned_step)
    # The script died of the stop (SIGTERM reaches the whole group): a stop, not a failure.
    raise_if_stopped()
    if reporter.failure is not None:
        raise CommandFailed(reporter.failure)
    if returncode != 0:
        last = err.last_line
        raise CommandFailed(
            exit_reason(returncode, last), out_of_memory=is_out_of_memory_line(last)
        )


def exit_reason(returncode: int, last_stderr_line: str) -> str:
    """``command exited with 3: ValueError: bad``, ``command was killed by SIGSEGV``."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        what = f"command was killed by {name}"
    else:
        what = f"command exited with {returncode}"
    if not last_stderr_line:
        return f"{what} (nothing on stderr)"
    return f"{what}: {last_stderr_line}"


# -- before the start --------------------------------------------------------------------


def _lookup(
    config: Mapping[str, Any], ctx: Context, names: Mapping[str, str], trial_dir: Path
) -> Callable[[str], Any]:
    reserved = {
        "config": str(trial_dir / CONFIG_YAML),
        "config_json": str(trial_dir / CONFIG_JSON),
        "trial_dir": str(trial_dir),
        "trial_number": ctx.trial_number,
        "python": sys.executable,
    }

    def lookup(name: str) -> Any:
        if name == "resume_dir":  # made only when the command names it
            return str(_resume_dir(ctx, trial_dir))
        if name in reserved:
            return reserved[name]
        try:
            return get_path(config, names.get(name, name))
        except (KeyError, IndexError) as exc:
            detail = exc.args[0] if exc.args else str(exc)
            raise CommandFailed(f"placeholder {{{name}}} has no value: {detail}") from None

    return lookup


def _resume_dir(ctx: Context, trial_dir: Path) -> Path:
    """``{resume_dir}``: the chain's folder with trials.resume; else an empty folder of this
    attempt, so a script written for resume starts from epoch 0."""
    path = ctx.resume_dir if ctx.resume_dir is not None else trial_dir / "resume"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _write_configs(config: Mapping[str, Any], trial_dir: Path) -> None:
    """The resolved config as YAML and JSON in the trial folder (atomically: under torchrun
    every rank writes the same files)."""
    trial_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(trial_dir / CONFIG_YAML, yaml.safe_dump(dict(config), sort_keys=False))
    write_json_atomic(trial_dir / CONFIG_JSON, dict(config))


def _binary(stream: IO[str]) -> IO[bytes] | None:
    return getattr(stream, "buffer", None)


# -- while it runs -----------------------------------------------------------------------


class _Stopper:
    """Stops the script once: after ``delay_s`` (time to exit by itself), SIGTERM; after the
    grace, SIGKILL. The script alone is signalled: the trial process shares its process group, and
    what the script forked dies with the group when the trial process exits."""

    def __init__(self, proc: subprocess.Popen[bytes], grace_s: float) -> None:
        self._proc = proc
        self.grace_s = grace_s
        self._lock = threading.Lock()
        self._requested = False
        self.exited = threading.Event()  # set by run() once the script is reaped

    def request(self, *, delay_s: float) -> None:
        with self._lock:
            if self._requested:
                return
            self._requested = True
        threading.Thread(target=self._escalate, args=(delay_s,), daemon=True).start()

    def _escalate(self, delay_s: float) -> None:
        if delay_s > 0 and self.exited.wait(delay_s):
            return
        self._signal(signal.SIGTERM)
        if not self.exited.wait(self.grace_s):
            self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        with contextlib.suppress(OSError):
            self._proc.send_signal(sig)


class _Reporter:
    """The one way into ``ctx.report`` for both sources; remembers why the script was
    stopped."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.stopper: _Stopper | None = None
        self.failure: str | None = None  # a metrics_pattern line that cannot be reported
        self._lock = threading.Lock()
        self._lines = 0
        self._step_lines: dict[int, int] = {}

    def report(self, step: int, metrics: dict[str, float], *, by_script: bool) -> bool:
        """Report one step; True when the trial is (now) pruned."""
        with self._lock:
            if self.ctx.pruned_step is not None:
                return True
            try:
                self.ctx.report(step, metrics)
            except TrialPruned:
                if self.stopper is not None:
                    # A script told by report() ends itself; one whose lines are matched does
                    # not know: stop it now.
                    self.stopper.request(delay_s=self.stopper.grace_s if by_script else 0.0)
                return True
            return False

    def request(self, line: bytes) -> dict[str, Any]:
        """One line of dvt_hpo.report -> its reply."""
        try:
            data = json.loads(line)
            step, metrics = data["step"], data["metrics"]
        except (ValueError, KeyError, TypeError):
            return {"error": f"not a report request: {line[:200]!r}"}
        try:
            return {"prune": self.report(step, metrics, by_script=True)}
        except Exception as exc:  # noqa: BLE001 - the script waits for a reply: always answer
            return {"error": str(exc), "error_type": type(exc).__name__}

    def match(self, pattern: re.Pattern[str] | None, raw: bytes) -> None:
        """Report what ``trainer.metrics_pattern`` finds in one stdout line."""
        self._lines += 1
        if pattern is None or self.failure is not None:
            return
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        found = pattern.search(line)
        if found is None:
            return
        groups = {k: v for k, v in found.groupdict().items() if v is not None}
        where = f"trainer.metrics_pattern matched stdout line {self._lines} {line[:200]!r}"
        step_text = groups.pop("step", None)
        if step_text is None or not groups:
            return  # optional groups that did not take part: nothing to report
        try:
            step = int(step_text)
        except ValueError:
            return self._fail(f"{where}, but its step {step_text!r} is not an integer")
        metrics: dict[str, float] = {}
        for name, text in groups.items():
            try:
                metrics[name] = float(text)
            except ValueError:
                return self._fail(f"{where}, but {name}={text!r} is not a number")
        if step in self._step_lines:
            return self._fail(
                f"{where}: step {step} was already matched on line {self._step_lines[step]}; "
                "make the pattern match one line per step (with all its metrics)"
            )
        self._step_lines[step] = self._lines
        try:
            self.report(step, metrics, by_script=False)
        except Exception as exc:  # noqa: BLE001 - the pump must go on copying the output
            self._fail(f"{where}, but the report failed: {type(exc).__name__}: {exc}")

    def _fail(self, reason: str) -> None:
        self.failure = reason
        if self.stopper is not None:
            self.stopper.request(delay_s=0.0)


def split_lines(chunks: Iterable[bytes], max_bytes: int) -> Iterator[tuple[bytes, bool]]:
    """The pieces of a byte stream read in ``chunks``, each with whether it is a line.

    A line ends at ``\n``, ``\r\n`` or a lone ``\r`` (kept in the piece), or after
    ``max_bytes`` without an end; what is left at the end of the stream is a last line. The
    pieces joined are the stream byte for byte. A ``\r`` that ends a chunk is a line end at
    once (a script may write ``val=0.5\r`` and sleep); when the next chunk starts with the
    ``\n`` of that ``\r\n``, the ``\n`` comes alone and is not a line."""
    buffer = b""
    scanned = 0  # buffer[:scanned] holds no line end
    after_cr = False
    for chunk in chunks:
        if after_cr and chunk.startswith(b"\n"):
            yield b"\n", False
            chunk = chunk[1:]
        buffer += chunk
        after_cr = False
        while buffer:
            end = _LINE_END.search(buffer, scanned)
            if end is not None and end.start() < max_bytes:
                cut = end.end()
            elif len(buffer) >= max_bytes:
                cut = max_bytes
            else:
                scanned = len(buffer)
                break
            line, buffer, scanned = buffer[:cut], buffer[cut:], 0
            after_cr = not buffer and line.endswith(b"\r")
            yield line, True
    if buffer:
        yield buffer, True


class _Pump:
    """Copies a pipe to ``sink`` line by line (bounded lines, see :func:`split_lines`),
    calling ``on_line`` on each, and keeps the last non-empty line."""

    def __init__(
        self, pipe: IO[bytes], sink: IO[bytes] | None, on_line: Callable[[bytes], None] | None
    ) -> None:
        self._pipe = pipe
        self._sink = sink
        self._on_line = on_line
        self.last_line = ""
        self._thread = threading.Thread(target=self._run, name="dvt-command-pump", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        # readline() ends lines at "\n" only: a "\r" redraw would wait for the next newline.
        chunks = iter(lambda: self._pipe.read1(_MAX_LINE_BYTES), b"")
        try:
            for line, is_line in split_lines(chunks, _MAX_LINE_BYTES):
                if self._sink is not None:
                    # As written, "\r" included: the trial process's stdout is a terminal when the
                    # trial is rerun by hand, where a redrawn bar must stay one line, and the
                    # log then reads like a capture of that terminal.
                    with contextlib.suppress(OSError, ValueError):
                        self._sink.write(line)
                        self._sink.flush()
                if not is_line:
                    continue
                if text := line.decode("utf-8", errors="replace").strip():
                    self.last_line = text[-_LAST_LINE_CHARS:]
                if self._on_line is not None:
                    self._on_line(line)
        except (OSError, ValueError):
            return  # the pipe was closed under us

    def join(self, timeout_s: float) -> None:
        # What the script forked may hold the pipe open after it exited: bounded.
        self._thread.join(timeout_s)


class _Relay:
    """The Unix socket :mod:`dvt_hpo.report` talks to: one JSON line per report, answered by
    ``{"prune": bool}`` or ``{"error": ...}``; any number of connections (forked processes)."""

    def __init__(self, reporter: _Reporter) -> None:
        self._reporter = reporter
        self._dir = short_socket_dir()
        self.path = os.path.join(self._dir, "report.sock")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        self._listener.listen(16)
        self._lock = threading.Lock()
        self._connections: list[socket.socket] = []
        threading.Thread(target=self._accept, name="dvt-report-accept", daemon=True).start()

    def __enter__(self) -> _Relay:
        return self

    def __exit__(self, *exc_info: object) -> None:
        with self._lock:
            sockets = [self._listener, *self._connections]
        for sock in sockets:
            # shutdown() wakes the threads blocked in accept()/recv(); close() alone may not.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self._connections.append(conn)
            threading.Thread(
                target=self._serve, args=(conn,), name="dvt-report-conn", daemon=True
            ).start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError, ValueError), conn.makefile("rb") as reader:
            while line := reader.readline(_MAX_REQUEST_BYTES):
                reply = self._reporter.request(line)
                conn.sendall(json.dumps(reply, allow_nan=True).encode() + b"\n")
