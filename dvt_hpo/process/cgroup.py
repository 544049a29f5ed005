"""How many processes the out-of-memory killer of this process's own cgroup killed (stdlib).

A Slurm job or a Kubernetes pod runs in a memory cgroup of its own; when the job's memory is
exhausted the kernel kills one of its processes, often a trial's, with SIGKILL. The trial run
compares the count before and after a trial (:mod:`dvt_hpo.recovery.node_health` names such a
trial a failure of the machine). cgroup v2 keeps the count in ``memory.events``, v1 in
``memory.oom_control`` (``oom_kill``, Linux 4.13+); ``None`` where neither can be read.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["counter_file", "oom_kill_count", "oom_kills"]

CGROUP_ROOT = Path("/sys/fs/cgroup")


def counter_file(proc_cgroup: str, root: Path = CGROUP_ROOT) -> Path | None:
    """The file holding this cgroup's ``oom_kill`` count, from ``/proc/self/cgroup``'s text.
    Inside a container the cgroup is often mounted at the root: that is tried second."""
    candidates: list[Path] = []
    for line in proc_cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        rel = path.lstrip("/")
        if hierarchy == "0" and controllers == "":
            candidates += [root / rel / "memory.events", root / "memory.events"]
        elif "memory" in controllers.split(","):
            candidates += [
                root / "memory" / rel / "memory.oom_control",
                root / "memory" / "memory.oom_control",
            ]
    return next((c for c in candidates if c.is_file()), None)


def oom_kill_count(text: str) -> int | None:
    """``oom_kill N`` of a ``memory.events`` or ``memory.oom_control`` file."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return None


def oom_kills() -> int | None:
    """This process's cgroup's count of out-of-memory kills; ``None`` when unknown."""
    try:
        path = counter_file(Path("/proc/self/cgroup").read_text())
        return None if path is None else oom_kill_count(path.read_text())
    except OSError:
        return None
