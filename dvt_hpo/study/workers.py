"""``dvt-hpo run study.yaml --workers K``: K orchestrators on this machine, one study.

Each worker is a plain ``dvt-hpo run`` process (not a thread, not a joblib task: it owns its
trials' process groups and must be signalled like any orchestrator), sharing the study through
its storage exactly as workers on several machines do. The devices are split once here: the
``K * trials.parallel`` slots of :func:`dvt_hpo.devices.slots.split_devices` are dealt out in
contiguous blocks, so worker ``i`` gets its own GPUs (``trials.devices``) or its share of the
CPU threads (``OMP_NUM_THREADS``). Their output is relayed line by line, prefixed ``[wI]``.

Stopping: a terminal's Ctrl-C reaches every worker (they stay in this process group); a
SIGTERM or SIGINT sent to this process alone is forwarded. Each worker records its running
trials for a retry and exits 130; this process exits 130 when any worker was interrupted,
else 1 when any failed, else 0.

When the budget is reached, no worker starts another trial; trials already running (on any
worker) finish and are recorded, since ``n_trials`` counts trials as the storage numbers them
and a trial asked past the budget by a racing worker is closed at once, uncounted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

from dvt_hpo.devices.slots import Slot, split_devices
from dvt_hpo.exceptions import SpecError

if TYPE_CHECKING:
    from dvt_hpo.spec.model import StudySpec

EXIT_INTERRUPTED = 130
# The user's --set overrides, for the follow-up commands a worker prints (JSON list).
ENV_SHOWN_OVERRIDES = "DVT_HPO_SHOWN_OVERRIDES"


def worker_slots(
    spec: StudySpec, workers: int, *, gpus: Sequence[str] | None = None
) -> list[list[Slot]]:
    """The device slots of each worker: ``trials.parallel`` slots each (``gpus``: the visible
    GPUs, detected when None)."""
    parallel = spec.trials.parallel
    try:
        slots = split_devices(
            spec.trials.devices,
            workers * parallel,
            nproc_per_node=spec.trials.nproc_per_node,
            per_gpu=spec.trials.per_gpu,
            gpus=gpus,
        )
    except SpecError as exc:
        if workers == 1:
            raise
        raise SpecError(
            f"--workers {workers} x trials.parallel={parallel} (per worker) = "
            f"{workers * parallel} trial slots: {exc.message}",
            file=spec.path,
            field=exc.field,
        ) from None
    return [slots[i * parallel : (i + 1) * parallel] for i in range(workers)]


def worker_command(
    study: Path,
    overrides: Sequence[str],
    slots: Sequence[Slot],
    allow_space_change: bool,
    retry_failed: bool = False,
) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of one worker."""
    argv = [sys.executable, "-m", "dvt_hpo", "run", str(study)]
    if retry_failed:
        argv.append("--retry-failed")
    for override in overrides:
        argv += ["--set", override]
    env = dict(os.environ)
    # The commands a worker prints name the study as the user did, without the device
    # overrides added here.
    env[ENV_SHOWN_OVERRIDES] = json.dumps(list(overrides))
    # Shared GPUs (trials.per_gpu) recur among the slots: each once, in the order the slots
    # name them, so that the worker's own round-robin split gives it the same slots back.
    gpus = list(dict.fromkeys(gpu for slot in slots for gpu in slot.gpus))
    if gpus:
        # Its own GPUs, renumbered from 0 inside the worker.
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        argv += ["--set", "trials.devices=auto"]
    else:
        argv += ["--set", "trials.devices=cpu"]
        threads = slots[0].omp_num_threads
        if threads and "OMP_NUM_THREADS" not in os.environ:
            env["OMP_NUM_THREADS"] = str(threads)
    if allow_space_change:
        argv.append("--allow-space-change")
    return argv, env


def oversubscription(
    spec: StudySpec, workers: int, slots: Sequence[Sequence[Slot]], cores: int | None = None
) -> str | None:
    """The warning for ``workers`` whose trials together ask for more CPU threads than the
    machine has cores: they then compete for the CPU and the run can be slower than one
    orchestrator (2 workers x 2 trials on 2 cores: 27 s against 16 s)."""
    cores = cores if cores is not None else len(os.sched_getaffinity(0))
    env_threads = os.environ.get("OMP_NUM_THREADS", "")
    threads = int(env_threads) if env_threads.isdigit() and int(env_threads) > 0 else None
    if threads is None:
        threads = max((s.omp_num_threads or 1) for block in slots for s in block)
    parallel, nproc = spec.trials.parallel, spec.trials.nproc_per_node
    total = workers * parallel * nproc * threads
    if total <= cores:
        return None
    procs = f" x {nproc} processes" if nproc > 1 else ""
    return (
        f"warning: {workers} workers x {parallel} trial(s) at a time{procs} x {threads} CPU "
        f"thread(s) = {total} threads on {cores} cores: the trials compete for the CPU and "
        "this can be slower than one orchestrator; use fewer --workers or a lower "
        "trials.parallel"
    )


def _relay(stream: IO[bytes], prefix: str, out: Callable[[str], None]) -> None:
    for raw in iter(stream.readline, b""):
        out(f"{prefix} {raw.decode('utf-8', errors='replace').rstrip()}")
    stream.close()


def run_workers(
    spec: StudySpec,
    overrides: Sequence[str],
    workers: int,
    *,
    allow_space_change: bool = False,
    retry_failed: bool = False,
    out: Callable[[str], None] | None = None,
) -> int:
    """Run ``workers`` orchestrators of the study and wait for all; the exit code."""
    emit = out or (lambda line: print(line, flush=True))
    lock = threading.Lock()

    def say(line: str) -> None:
        with lock:
            emit(line)

    procs: list[subprocess.Popen[bytes]] = []
    relays: list[threading.Thread] = []
    blocks = worker_slots(spec, workers)
    if (warning := oversubscription(spec, workers, blocks)) is not None:
        print(warning, file=sys.stderr, flush=True)
    for i, slots in enumerate(blocks, start=1):
        # Failed trials are enqueued again once, by the first worker; any worker runs them.
        argv, env = worker_command(
            spec.path, overrides, slots, allow_space_change, retry_failed and i == 1
        )
        proc = subprocess.Popen(
            argv,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        procs.append(proc)
        assert proc.stdout is not None
        relay = threading.Thread(target=_relay, args=(proc.stdout, f"[w{i}]", say), daemon=True)
        relay.start()
        relays.append(relay)

    def forward(signum: int, frame: object) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    previous = (
        {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
        if threading.current_thread() is threading.main_thread()
        else {}
    )
    try:
        codes = [proc.wait() for proc in procs]
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for relay in relays:
            relay.join(timeout=5)
    if any(code in (EXIT_INTERRUPTED, -signal.SIGINT, -signal.SIGTERM) for code in codes):
        return EXIT_INTERRUPTED
    failed = [code for code in codes if code != 0]
    if failed:
        return 2 if all(code == 2 for code in failed) else 1
    return 0


__all__ = ["oversubscription", "run_workers", "worker_command", "worker_slots"]
