"""How a trial process is launched: its command line, its environment, its log files.

Stdlib only: the orchestrator imports this and must never import torch.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from dvt_hpo.devices.slots import Slot
from dvt_hpo.process.strays import ENV_TRIAL_TOKEN, new_token
from dvt_hpo.process.tree import TrialProcess, spawner_popen
from dvt_hpo.process.warm import TemplateUnavailable, WarmTemplate
from dvt_hpo.wire.protocol import ENV_CONTROL, ENV_MEMORY_LIMIT
from dvt_hpo.wire.trial_dir import TrialDir

# What a trial process runs (``python -m dvt_hpo.trial``), and the module the warm template
# imports ahead of its trials.
TRIAL_COMMAND = "dvt_hpo.trial"
TRIAL_MODULE = "dvt_hpo.trial.main"

# Variables of a torchrun context: an orchestrator started under torchrun must not hand them
# to its trials, or every trial process would believe it is some rank of a foreign job.
_DISTRIBUTED_ENV = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_NAME",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
)

# -- command line ------------------------------------------------------------------------


def build_command(
    launcher: Literal["process", "torchrun"] | str,
    payload_path: str | os.PathLike[str],
    *,
    nproc_per_node: int = 1,
    python: str = sys.executable,
    rdzv_port: int | None = None,
) -> list[str]:
    """The argv of one trial.

    ``process``: ``python -m dvt_hpo.trial PAYLOAD``. ``torchrun``: the same module under
    ``python -m torch.distributed.run`` on one node, no restarts (a failed trial is data,
    not something to retry in place). Without ``rdzv_port`` the rendezvous is
    ``--standalone``: torchrun binds its store to port 0, which the kernel makes unique, so
    parallel trials never collide; with ``rdzv_port`` it is a c10d store on
    ``127.0.0.1:rdzv_port``.
    """
    payload = os.fspath(payload_path)
    if nproc_per_node < 1:
        raise ValueError(f"nproc_per_node must be >= 1, got {nproc_per_node}")
    if launcher == "process":
        if nproc_per_node != 1:
            raise ValueError(
                f"launcher 'process' runs one process per trial; nproc_per_node={nproc_per_node} "
                "needs launcher 'torchrun'"
            )
        return [python, "-m", TRIAL_COMMAND, payload]
    if launcher == "torchrun":
        if rdzv_port is None:
            rendezvous = ["--standalone"]
        else:
            if not 0 < rdzv_port < 65536:
                raise ValueError(f"rdzv_port must be in 1..65535, got {rdzv_port}")
            rendezvous = [
                "--rdzv-backend=c10d",
                f"--rdzv-endpoint=127.0.0.1:{rdzv_port}",
                f"--rdzv-id=dvt-hpo-{rdzv_port}",
            ]
        return [
            python,
            "-m",
            "torch.distributed.run",
            *rendezvous,
            "--nnodes=1",
            f"--nproc-per-node={nproc_per_node}",
            "--max-restarts=0",
            # Older torch defaults to 5 s: a failed rank would leave the others running that long.
            "--monitor-interval=0.1",
            "-m",
            TRIAL_COMMAND,
            payload,
        ]
    raise ValueError(f"launcher must be 'process' or 'torchrun', got {launcher!r}")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (another process may take it before use)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def tail_lines(path: str | os.PathLike[str], n: int = 50) -> str:
    """The last ``n`` lines of a text file ("" when it does not exist), read from the end."""
    if n <= 0:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            end = f.tell()
            block = 8192
            data = b""
            pos = end
            while pos > 0 and data.count(b"\n") <= n:
                step = min(block, pos)
                pos -= step
                f.seek(pos)
                data = f.read(step) + data
    except (FileNotFoundError, IsADirectoryError):
        return ""
    lines = data.decode("utf-8", errors="replace").splitlines()
    return "\n".join(lines[-n:])


def trial_env(
    base_env: Mapping[str, str],
    slot: Slot,
    control_path: str | os.PathLike[str],
    memory_limit_bytes: int | None,
) -> dict[str, str]:
    """The environment of a trial process: ``base_env`` plus the control socket, the memory
    limit, the slot's devices and threads (an ``OMP_NUM_THREADS`` set in ``base_env`` wins:
    the user chose it), minus any torchrun variables the orchestrator itself was started with."""
    env = {
        k: v
        for k, v in base_env.items()
        if k not in _DISTRIBUTED_ENV and not k.startswith("TORCHELASTIC_")
    }
    env[ENV_CONTROL] = os.fspath(control_path)
    if memory_limit_bytes is not None:
        if memory_limit_bytes < 1:
            raise ValueError(f"memory_limit_bytes must be >= 1, got {memory_limit_bytes}")
        env[ENV_MEMORY_LIMIT] = str(int(memory_limit_bytes))
    else:
        env.pop(ENV_MEMORY_LIMIT, None)
    if slot.cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = slot.cuda_visible_devices
    if slot.omp_num_threads is not None and "OMP_NUM_THREADS" not in base_env:
        env["OMP_NUM_THREADS"] = str(slot.omp_num_threads)
        env.setdefault("MKL_NUM_THREADS", str(slot.omp_num_threads))
    env.setdefault("PYTHONUNBUFFERED", "1")
    # Inherited by everything the trial starts: its strays are found by it (dvt_hpo.process.strays).
    env[ENV_TRIAL_TOKEN] = new_token()
    return env


class Launcher:
    """Starts a study run's trial processes.

    With ``trials.warm`` (the default for ``launcher: process``) each trial is forked from one
    template process that imported the trial process, the entry point's module and
    ``trials.preload`` once (:mod:`dvt_hpo.process.warm`; their warm-up hooks run in folders under
    ``warm_dir``); otherwise, and for torchrun, each trial is a
    fresh ``python`` process. A template whose watched files changed on disk, or that died, is
    replaced before the next trial; one whose imports failed turns warm starts off for the
    run (trials then start cold and fail with the import error as they always did). Each
    reason is printed once.
    """

    def __init__(
        self,
        *,
        launcher: str,
        nproc_per_node: int,
        warm: bool,
        preload: Sequence[str],
        base_env: Mapping[str, str],
        cwd: Path,
        log_path: Path,
        log_limit: int | None,
        out: Callable[[str], None],
        warm_dir: Path | None = None,
    ) -> None:
        self.launcher = launcher
        self.nproc_per_node = nproc_per_node
        self.warm = warm and launcher == "process"
        # What this machine turns off, said once when the run starts (not at the first trial).
        self.notes: list[str] = []
        if self.warm and sys.platform == "darwin":
            # macOS: forking a process that imported torch without an exec is unsafe there (the
            # Objective-C runtime and libdispatch do not survive it), and there is no
            # parent-death signal to tie the template's children to the run.
            self.warm = False
            self.notes.append("warm starts off on macOS (trials.warm): each trial starts cold")
        self.modules = list(dict.fromkeys([TRIAL_MODULE, *preload]))
        self.base_env = dict(base_env)
        self.cwd = cwd
        self.log_path = log_path
        self.log_limit = log_limit
        self.out = out
        self.warm_dir = warm_dir
        self._template: WarmTemplate | None = None
        self._lock = threading.Lock()
        self._said: set[str] = set()

    def start(self, payload_path: Path, env: Mapping[str, str], trial_dir: Path) -> TrialProcess:
        logs = {
            "stdout_path": TrialDir(trial_dir).stdout,
            "stderr_path": TrialDir(trial_dir).stderr,
            "log_limit": self.log_limit,
        }
        template = self._warm_template() if self.warm else None
        if template is not None:
            try:
                return TrialProcess.start_warm(
                    template, [str(payload_path)], env=env, cwd=self.cwd, **logs
                )
            except TemplateUnavailable as exc:
                self._say(f"warm start failed ({exc}); this trial starts cold")
        argv = build_command(self.launcher, payload_path, nproc_per_node=self.nproc_per_node)
        return TrialProcess.start(argv, env=env, cwd=self.cwd, **logs)

    def close(self) -> None:
        with self._lock:
            template, self._template = self._template, None
        if template is not None:
            template.close()

    def _warm_template(self) -> WarmTemplate | None:
        with self._lock:
            if not self.warm:
                return None
            if self._template is not None:
                reason = self._template.stale_reason()
                if reason is None:
                    return self._template
                self._say(f"restarting the warm template: {reason}")
                self._template.close()
                self._template = None
            try:
                template = self._start_template()
            except TemplateUnavailable as exc:
                self.warm = False
                self._say(f"warm starts off for this run: {exc}; trials start cold")
                return None
            if template.errors:
                name, error = next(iter(template.errors.items()))
                template.close()
                self.warm = False
                self._say(
                    f"warm starts off for this run: importing {name} in the template failed "
                    f"({error}); trials start cold"
                )
                return None
            self._template = template
            return template

    def _start_template(self) -> WarmTemplate:
        """A template whose imported files did not change while it imported them: a file
        written during the imports may be held in its old version. Started again once; a file
        that changes during both is taken for one written on every import."""
        for attempt in range(2):
            template = WarmTemplate.start(
                self.modules,
                env=self.base_env,
                cwd=self.cwd,
                log_path=self.log_path,
                popen=spawner_popen,
                warm_dir=self.warm_dir,
            )
            reason = template.stale_reason()
            if reason is None:
                return template
            template.close()
            if attempt == 0:
                self._say(f"restarting the warm template: {reason}")
        raise TemplateUnavailable(f"{reason}, twice")

    def _say(self, message: str) -> None:
        if message not in self._said:
            self._said.add(message)
            self.out(message)


def warm_modules(entrypoint: str, builtin_entrypoint: str, preload: Sequence[str]) -> list[str]:
    """What the warm template imports: the entry point's module and ``trials.preload``; for the
    built-in trainer, its training module (``dvt_hpo.train`` itself imports torch lazily)."""
    modules = [entrypoint.partition(":")[0]]
    if entrypoint == builtin_entrypoint:
        modules.append("dvt_hpo.train.builtin")
    return list(dict.fromkeys([*modules, *preload]))


__all__ = [
    "Launcher",
    "TRIAL_COMMAND",
    "TRIAL_MODULE",
    "warm_modules",
    "build_command",
    "free_port",
    "tail_lines",
    "trial_env",
]
