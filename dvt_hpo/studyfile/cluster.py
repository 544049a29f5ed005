"""Section ``cluster``: how ``dvt-hpo submit`` starts the study's workers (a Slurm job array).

Plain fields are checked by the schema engine from :class:`~dvt_hpo.spec.model.ClusterSpec`;
the code here reads what a type cannot say: the time limit in Slurm's own forms, the memory
as a size with units, the extra sbatch options (refusing those ``submit`` sets itself) and the
setup lines. Nothing here talks to Slurm: ``validate`` works on a laptop.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dvt_hpo.config.hints import describe
from dvt_hpo.config.source import Key
from dvt_hpo.config.units import parse_bytes
from dvt_hpo.spec.model import ClusterSpec
from dvt_hpo.studyfile.fields import Reader

__all__ = ["OWNED_SBATCH_OPTIONS", "parse_time_limit", "read_cluster"]

# sbatch options ``submit`` writes itself: the field that sets each one, or why it is ours.
OWNED_SBATCH_OPTIONS = {
    "array": "cluster.workers",
    "time": "cluster.time_limit",
    "partition": "cluster.partition",
    "cpus-per-task": "cluster.cpus_per_worker",
    "gpus-per-node": "cluster.gpus_per_worker",
    "mem": "cluster.memory_per_worker",
    "requeue": "cluster.requeue",
    "no-requeue": "cluster.requeue",
    "job-name": "cluster.job_name",
    "output": "cluster.logs",
    "error": "cluster.logs",
    "open-mode": "cluster.logs",
    "signal": "the worker's own signal handling",
    "wrap": "the worker's command",
}
_TIME_FORMS = (
    "minutes (an integer) or Slurm's forms 'MM', 'MM:SS', 'HH:MM:SS', 'D-HH', 'D-HH:MM' or "
    "'D-HH:MM:SS'"
)
_TIME_RE = re.compile(r"^(?:(?P<days>\d+)-)?(?P<rest>\d+(?::\d+){0,2})$")
_OPTION_RE = re.compile(r"^[a-z][a-z0-9-]*$")
# Below this a memory size is almost surely a unit mistake (``memory_per_worker: 16`` meant GiB).
_MIN_MEMORY = 64 * 1024**2


def parse_time_limit(value: Any) -> int:
    """Minutes (rounded up) from an int of minutes or a Slurm time string; ``ValueError``
    naming the accepted forms otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"must be {_TIME_FORMS}, got {describe(value)}")
    if isinstance(value, int):
        minutes = value
    else:
        match = _TIME_RE.match(value.strip())
        if match is None:
            raise ValueError(f"must be {_TIME_FORMS}, got {value!r}")
        parts = [int(p) for p in match["rest"].split(":")]
        days = match["days"]
        if days is not None:
            # After a day count the fields are hours, minutes, seconds.
            hours, minutes_, seconds = (parts + [0, 0])[:3]
            total_s = ((int(days) * 24 + hours) * 60 + minutes_) * 60 + seconds
        elif len(parts) == 3:
            total_s = (parts[0] * 60 + parts[1]) * 60 + parts[2]
        elif len(parts) == 2:
            total_s = parts[0] * 60 + parts[1]
        else:
            total_s = parts[0] * 60
        minutes = -(-total_s // 60)
    if minutes < 1:
        raise ValueError(f"must be at least 1 minute, got {value!r}")
    return minutes


def read_cluster(r: Reader, root: Mapping[str, Any], runs_dir: Path) -> ClusterSpec | None:
    """The ``cluster`` section, None when the file has none."""
    if root.get("cluster") is None:
        return None
    key: Key = ("cluster",)
    sec = r.section(ClusterSpec, root["cluster"], key, "section 'cluster'")
    defaults = ClusterSpec()
    logs = r.string(sec, key, "logs", "a folder path")
    return ClusterSpec(
        kind=sec.get("kind", defaults.kind),
        workers=sec.get("workers", defaults.workers),
        partition=sec.get("partition"),
        time_limit=_read_time_limit(r, sec, key),
        cpus_per_worker=sec.get("cpus_per_worker"),
        gpus_per_worker=sec.get("gpus_per_worker", defaults.gpus_per_worker),
        memory_per_worker=_read_memory(r, sec, key),
        sbatch=_read_sbatch(r, sec, key),
        setup=_read_setup(r, sec, key),
        requeue=sec.get("requeue", defaults.requeue),
        logs=r.resolve(logs) if logs is not None else runs_dir / "slurm",
        job_name=sec.get("job_name"),
        allow_file_storage=sec.get("allow_file_storage", defaults.allow_file_storage),
    )


def _read_time_limit(r: Reader, sec: Mapping[str, Any], key: Key) -> int:
    if sec.get("time_limit") is None:
        return ClusterSpec().time_limit
    try:
        return parse_time_limit(sec["time_limit"])
    except ValueError as exc:
        raise r.err((*key, "time_limit"), str(exc)) from None


def _read_memory(r: Reader, sec: Mapping[str, Any], key: Key) -> int | None:
    value = sec.get("memory_per_worker")
    if value is None:
        return None
    fkey = (*key, "memory_per_worker")
    try:
        size = parse_bytes(value)
    except ValueError as exc:
        raise r.err(fkey, f"must be null or a size such as '16GiB': {exc}") from None
    if size < _MIN_MEMORY:
        raise r.err(
            fkey,
            f"must be at least 64MiB (a bare number is bytes; write units such as '16GiB'), "
            f"got {value!r}",
        )
    return size


def _read_sbatch(r: Reader, sec: Mapping[str, Any], key: Key) -> dict[str, Any]:
    """Extra sbatch options, named as on sbatch's command line without the dashes
    (``account``, ``qos``, ``constraint``; ``_`` is read as ``-``)."""
    value = sec.get("sbatch")
    if value is None:
        return {}
    fkey = (*key, "sbatch")
    if not isinstance(value, dict):
        raise r.err(
            fkey,
            "must be a mapping of sbatch options such as {account: vision, qos: high}, got "
            f"{describe(value)}",
        )
    options: dict[str, Any] = {}
    for name, option in value.items():
        okey = (*fkey, name)
        flag = str(name).replace("_", "-")
        if not isinstance(name, str) or not _OPTION_RE.match(flag):
            raise r.err(
                okey,
                f"must be an sbatch option name such as 'account' or 'mail-type' (no leading "
                f"dashes), got {describe(name)}",
            )
        if flag in OWNED_SBATCH_OPTIONS:
            raise r.err(
                okey,
                f"--{flag} is written by dvt-hpo submit from {OWNED_SBATCH_OPTIONS[flag]}; "
                "set that instead",
            )
        if option is True or (
            not isinstance(option, bool) and isinstance(option, (str, int, float))
        ):
            options[flag] = option
            continue
        raise r.err(
            okey,
            f"must be a string, a number or true (a flag such as exclusive), got "
            f"{describe(option)}",
        )
    return options


def _read_setup(r: Reader, sec: Mapping[str, Any], key: Key) -> tuple[str, ...]:
    value = sec.get("setup")
    if value is None:
        return ()
    fkey = (*key, "setup")
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise r.err(
            fkey,
            "must be a list of shell lines such as ['module load cuda/12.1', "
            f"'source ~/venv/bin/activate'], got {describe(value)}",
        )
    for i, line in enumerate(value):
        if not isinstance(line, str) or not line.strip():
            raise r.err((*fkey, i), f"must be a non-empty shell line, got {describe(line)}")
    return tuple(value)
