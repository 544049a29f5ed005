"""The trial process: ``python -m dvt_hpo.trial PAYLOAD.json`` (alone or under torchrun).

The order of :func:`main` matters (docs/protocol.md):

1. apply ``$DVT_HPO_MEMORY_LIMIT`` as ``RLIMIT_AS``, before anything allocates much;
2. ask the kernel for SIGKILL when the parent dies (``PR_SET_PDEATHSIG``), then check the
   parent did not die before that;
3. connect to the orchestrator (``$DVT_HPO_CONTROL``) and say hello; from here the connection
   is a watchdog that kills this process group when the orchestrator goes away;
4. read the payload (JSON, never pickle), and under ``trials.per_gpu`` cap the CUDA allocator
   at the trial's share of its GPU (:mod:`dvt_hpo.devices.gpu_cap`) before anything allocates;
5. build the context;
6. import the entry point ``module:function`` and call it with ``(config, ctx)`` (for a
   ``trainer.command`` payload, :func:`dvt_hpo.command.script.run` runs the script as a child in this
   process group);
7. write ``result.json`` (chief) or ``error-rank{R}.json`` (another rank that failed),
   atomically, and exit with a code from :mod:`dvt_hpo.wire.protocol`.

Without ``$DVT_HPO_CONTROL`` the payload runs with a :class:`~dvt_hpo.trial.context.LocalContext`
(reports printed, no pruning, no cache): a failed trial's payload can be rerun by hand.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import importlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dvt_hpo.devices.gpu_cap import apply_share
from dvt_hpo.trial.context import (
    LocalContext,
    TrialContext,
    TrialStopped,
    distributed_env,
    note_stop,
)
from dvt_hpo.trial.ending import import_failed, metrics_of, result_of
from dvt_hpo.trial.lifeline import set_parent_death_signal
from dvt_hpo.trial.resume_state import ResumeState
from dvt_hpo.wire.control_client import ControlClient
from dvt_hpo.wire.payload import PayloadError, TrialPayload
from dvt_hpo.wire.protocol import (
    ENV_CONTROL,
    ENV_LAUNCHED,
    ENV_MEMORY_LIMIT,
    EXIT_BAD_PAYLOAD,
    EXIT_ERROR,
    EXIT_NO_ORCHESTRATOR,
    ControlUnavailable,
)
from dvt_hpo.wire.result import TrialResult
from dvt_hpo.wire.trial_dir import TrialDir

# Freed before an error result is written: after a MemoryError the process may sit at its
# RLIMIT_AS, and formatting a traceback needs a little memory.
_RESERVE_BYTES = 1 << 20
# A trial that returned but whose interpreter does not exit (a stray non-daemon thread) is
# ended this long after its result was written.
_EXIT_GRACE_S = 20.0

_reserve: bytearray | None = None


def _say(message: str) -> None:
    with contextlib.suppress(Exception):
        sys.stderr.write(f"dvt-hpo trial: {message}\n")
        sys.stderr.flush()


# -- steps 1-3 ---------------------------------------------------------------------------


def apply_memory_limit(env: Mapping[str, str]) -> int | None:
    """Apply ``$DVT_HPO_MEMORY_LIMIT`` (bytes) as this process's ``RLIMIT_AS`` soft limit
    (never above the hard limit); returns the limit applied."""
    value = env.get(ENV_MEMORY_LIMIT)
    if not value:
        return None
    try:
        limit = int(value)
    except ValueError:
        raise PayloadError(f"${ENV_MEMORY_LIMIT} must be an int (bytes), got {value!r}") from None
    if limit < 1:
        raise PayloadError(f"${ENV_MEMORY_LIMIT} must be >= 1 byte, got {limit}")
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    _steady_malloc()
    return limit


# glibc's mallopt parameters, each with the variable that sets it in a process's environment:
# (parameter number, variable, value).
_MALLOC_SETTINGS = (
    (-3, "MALLOC_MMAP_THRESHOLD_", 128 * 1024),  # M_MMAP_THRESHOLD
    (-8, "MALLOC_ARENA_MAX", 1),  # M_ARENA_MAX
)


def _steady_malloc() -> None:
    """Make what a trial maps under ``RLIMIT_AS`` the memory it uses, not glibc's reserves.

    - **Large blocks (tensors) stay mmapped, unmapped when freed.** By default the threshold
      rises to the size of each mmapped block freed (up to 32 MiB); blocks below it then come
      from the heap, whose freed space stays mapped. Setting the threshold turns that off.
    - **One malloc arena.** Each thread that first allocates gets an arena of its own, and
      each arena reserves 64 MiB of address space however little it holds. Which of torch's
      threads first allocate during the batch-size search, and which only later in training,
      varied from run to run: the same trial under the same limit found 24 or 25 samples of
      768 KiB, and then ran out of memory training at 25 about once in 15 runs on a loaded
      machine. With one arena it found 79 in 18 runs of 18, and each trained. Large blocks,
      being mmapped, never touch an arena, so one arena costs little.

    Otherwise a trial would keep paying for memory it freed or never used, and the batch-size
    search would depend on what earlier probes and threads left behind. The same settings go
    to the processes the trial starts (a command trainer's script inherits ``RLIMIT_AS``) through
    glibc's variables; a variable the user set wins, here and there.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return  # not glibc (e.g. musl): nothing to turn off
    for parameter, variable, value in _MALLOC_SETTINGS:
        if variable not in os.environ:
            mallopt(parameter, value)
            os.environ[variable] = str(value)


def kill_own_group() -> None:
    """The watchdog's action: SIGKILL this trial's process group (this process and what it
    forked), or only this process if it does not lead its group (never someone else's)."""
    _say("lost the control connection to the orchestrator; killing this trial's processes")
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _on_sigterm(signum: int, frame: Any) -> None:
    # Only the first SIGTERM interrupts: a second one (torchrun forwards ours) must not break
    # the finally blocks the first one started. A Python no-op, not SIG_IGN, because SIG_IGN
    # would be inherited by processes the entry point starts while cleaning up.
    signal.signal(signal.SIGTERM, _ignore_signal)
    name = signal.Signals(signum).name
    note_stop(name)  # raised again at the next report should this raise be dropped
    raise TrialStopped(name)


def _ignore_signal(signum: int, frame: Any) -> None:
    return None


# -- step 4 ------------------------------------------------------------------------------


def resolve_entrypoint(spec: str) -> Callable[..., Any]:
    """Import ``module:function`` (the function part may be dotted: ``module:Class.method``)."""
    module_name, _, attr_path = spec.partition(":")
    target: Any = importlib.import_module(module_name)
    for attr in attr_path.split("."):
        try:
            target = getattr(target, attr)
        except AttributeError:
            raise AttributeError(
                f"entry point {spec!r}: module {module_name!r} has no attribute {attr_path!r}"
            ) from None
    if not callable(target):
        raise TypeError(f"entry point {spec!r} is not callable: {target!r}")
    return target


# -- main --------------------------------------------------------------------------------


def _exit_soon(code: int) -> int:
    """Flush, and make sure the interpreter really exits with ``code``."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()

    def force() -> None:
        if not done.wait(_EXIT_GRACE_S):
            _say(f"the interpreter did not exit {_EXIT_GRACE_S:g} s after the result; forcing it")
            os._exit(code)

    done = threading.Event()
    try:
        threading.Thread(target=force, name="dvt-exit-guard", daemon=True).start()
    except RuntimeError:
        # No address space left for a thread's stack (a trial that ended near its RLIMIT_AS):
        # the result is written and the streams flushed, so leave without the guard.
        os._exit(code)
    return code


def _startup_s(env: Mapping[str, str]) -> float | None:
    """Seconds from the orchestrator's launch to the entry point's call (process start,
    interpreter, imports, connecting): what a warm start saves."""
    try:
        return round(time.time() - float(env[ENV_LAUNCHED]), 4)
    except (KeyError, ValueError):
        return None


class _Early(Exception):
    """The trial cannot start (no orchestrator, a bad payload): exit with ``code``, no result."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _connect(
    env: Mapping[str, str], rank: int, local_rank: int, world: int
) -> ControlClient | None:
    """Step 3: connect before the (possibly slow) imports, so a dead orchestrator ends us at
    once; ``None`` without ``$DVT_HPO_CONTROL`` (a payload rerun by hand)."""
    if not env.get(ENV_CONTROL):
        _say(f"${ENV_CONTROL} is not set: running without an orchestrator (no pruning)")
        return None
    try:
        return ControlClient.connect(
            env[ENV_CONTROL],
            rank=rank,
            local_rank=local_rank,
            world_size=world,
            on_lost=kill_own_group,
        )
    except ControlUnavailable as exc:
        raise _Early(str(exc), EXIT_NO_ORCHESTRATOR) from None


def _context(
    payload: TrialPayload,
    client: ControlClient | None,
    trial_dir: Path,
    distributed: tuple[int, int, int],
    env: Mapping[str, str],
) -> TrialContext | LocalContext:
    """Step 5: the ``ctx`` the entry point gets: the orchestrator's, or a local one by hand."""
    rank, local_rank, world_size = distributed
    if client is None:
        ctx: TrialContext | LocalContext = LocalContext(
            batch_size=payload.batch_size,
            params=payload.params,
            trial_dir=trial_dir,
            trial_number=payload.trial_number,
            env=env,
        )
    else:
        ctx = TrialContext(
            client,
            trial_number=payload.trial_number,
            params=payload.params,
            rank=rank,
            local_rank=local_rank,
            world_size=world_size,
            trial_dir=trial_dir,
            batch_size=payload.batch_size,
            cache_key=payload.cache_key,
            report_timeout_s=payload.limits.report_timeout_s,
            study_name=payload.study_name,
        )
    if payload.resume is not None:  # trials.resume (docs/resume.md)
        ctx.attach_resume(ResumeState(payload.resume, rank=rank))
    return ctx


def main(argv: list[str] | None = None) -> int:
    global _reserve
    started = time.perf_counter()
    # What is imported so far (the trial process, the standard library; the warm template's
    # imports) lives as long as the process: out of the cyclic collector's reach, it is not
    # traversed again by the trainer's collections nor by the interpreter's at exit (100+ ms of
    # a cold trial's exit on a busy node). Objects made from here on are collected as before.
    gc.freeze()
    expected_parent = os.getppid()
    args = sys.argv[1:] if argv is None else argv
    env = os.environ

    # 1. Memory limit first: what follows allocates under it.
    try:
        apply_memory_limit(env)
    except (PayloadError, ValueError, OSError) as exc:
        _say(str(exc))
        return EXIT_BAD_PAYLOAD
    _reserve = bytearray(_RESERVE_BYTES)

    # 2. Die with the parent (the orchestrator, or the torchrun agent).
    if set_parent_death_signal() and os.getppid() != expected_parent:
        _say("the parent process died while this trial started; exiting")
        return EXIT_NO_ORCHESTRATOR
    previous_sigterm = signal.signal(signal.SIGTERM, _on_sigterm)

    if len(args) != 1:
        _say("usage: python -m dvt_hpo.trial PAYLOAD.json")
        return EXIT_BAD_PAYLOAD
    payload_path = Path(args[0]).absolute()
    try:
        distributed = distributed_env(env)
    except ValueError as exc:
        _say(str(exc))
        return EXIT_BAD_PAYLOAD
    rank = distributed[0]

    client: ControlClient | None = None
    ctx: TrialContext | LocalContext | None = None
    trial_dir: Path | None = None
    by_hand: str | None = None  # the result file of a payload rerun by hand
    startup_s: float | None = None
    metrics: dict[str, float] = {}
    ended: BaseException | None = None
    importing: str | None = None  # the entry point while it is imported
    try:
        try:
            client = _connect(env, *distributed)  # 3
            payload = TrialPayload.read(payload_path)  # 4
        except PayloadError as exc:
            raise _Early(str(exc), EXIT_BAD_PAYLOAD) from None
        trial_dir = Path(payload.trial_dir) if payload.trial_dir else payload_path.parent
        if client is None:
            by_hand = _rerun_name()
            _prepare_rerun(payload.study_dir, trial_dir / by_hand)
        # 4b. A GPU share (trials.per_gpu): cap the allocator before anything allocates.
        fractions = apply_share(payload.gpu_share)
        if payload.gpu_share is not None and not fractions:
            _say("a GPU share was given but CUDA is not available here: no cap applied")
        ctx = _context(payload, client, trial_dir, distributed, env)  # 5
        if fractions:
            # Where status and the dashboard show it: the cap this trial ran under.
            ctx.set_user_attrs({"gpu_memory_fraction": round(min(fractions.values()), 4)})

        # 6. Entry point.
        try:
            importing = payload.entrypoint
            function = resolve_entrypoint(payload.entrypoint)
            importing = None
            if payload.command is not None:
                # trainer.command: the entry point dvt_hpo.command:run runs the script.
                function = functools.partial(function, command=payload.command)
            startup_s = _startup_s(env)
            metrics = metrics_of(function(payload.config, ctx))
        finally:
            # From here on a stop must not interrupt writing the result.
            signal.signal(signal.SIGTERM, _ignore_signal)
    except _Early as exc:
        _say(str(exc))
        if client is not None:
            client.close()
        return _exit_soon(exc.code)
    except BaseException as exc:  # noqa: BLE001 - every ending becomes a result
        signal.signal(signal.SIGTERM, _ignore_signal)
        _reserve = None  # after a MemoryError, making the result needs a little memory
        ended = exc

    # 7. The result.
    result, code = result_of(
        ended, metrics=metrics, pruned_step=ctx.pruned_step if ctx else None, rank=rank
    )
    if importing is not None and ended is not None and result.failed:
        log = str(TrialDir(trial_dir).stderr) if client is not None and trial_dir else None
        result = import_failed(result, ended, importing, log)
    result = dataclasses.replace(
        result,
        startup_s=startup_s,
        pid=os.getpid(),
        host=socket.gethostname(),
        duration_s=round(time.perf_counter() - started, 3),
        time_unix=time.time(),
    )
    if trial_dir is not None:
        try:
            _write_result(trial_dir, result, by_hand)
        except OSError as exc:
            _say(f"cannot write the result in {trial_dir}: {exc}")
            code = code or EXIT_ERROR
    if result.failed:
        # The whole traceback goes to stderr.log too, where a user looks first.
        with contextlib.suppress(Exception):
            sys.stderr.write(result.traceback or "")
        _say(f"rank {rank} failed: {result.exc_type}: {(result.message or '')[:500]}")
    if client is not None:
        client.close()
    signal.signal(signal.SIGTERM, previous_sigterm)
    return _exit_soon(code)


def _write_result(trial_dir: Path, result: TrialResult, by_hand: str | None = None) -> None:
    """The chief writes result.json; another rank writes error-rank{R}.json when it failed
    (a rank stopped by SIGTERM is not a cause: torchrun stops the others when one fails).
    A rerun by hand writes ``by_hand`` (``rerun-*.json``, ``-rank{R}`` for other ranks)
    instead, so the trial's own result stays as the study recorded it."""
    trial_dir.mkdir(parents=True, exist_ok=True)
    rank = result.rank
    if by_hand is not None:
        if rank == 0 or result.failed:
            name = by_hand if rank == 0 else by_hand.replace(".json", f"-rank{rank}.json")
            result.write(trial_dir / name)
        return
    if rank == 0:
        result.write(TrialDir(trial_dir).result)
    elif result.failed:
        result.write(TrialDir(trial_dir).rank_error(rank))


def _rerun_name() -> str:
    return f"rerun-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}.json"


def _prepare_rerun(study_dir: str | None, result_path: Path) -> None:
    """A payload run by hand behaves as its trial did: the study folder first on ``sys.path``
    and as the working directory (relative paths in the config resolve against it)."""
    if study_dir:
        sys.path[:] = [study_dir] + [p for p in sys.path if p not in ("", study_dir)]
        os.chdir(study_dir)
    _say(f"run by hand: the result goes to {result_path} (the trial's result.json is kept)")


if __name__ == "__main__":
    sys.exit(main())
