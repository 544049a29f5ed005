"""Section ``trials``: launcher, parallel slots, devices, limits, the runs folder.

Plain fields are checked by the schema engine from :class:`~dvt_hpo.spec.model.TrialsSpec`;
devices are put in the canonical form the launcher splits into slots (``"auto"``, ``"cpu"``,
``"cuda"``, a GPU count, or a tuple of GPU ids), so nothing parses them again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from dvt_hpo.config.hints import describe, did_you_mean
from dvt_hpo.config.source import Key
from dvt_hpo.config.units import format_bytes, parse_bytes
from dvt_hpo.spec.model import ObjectiveSpec, StudySection, TrainerSpec, TrialsSpec
from dvt_hpo.studyfile.fields import Reader

__all__ = [
    "check_packing",
    "check_pause",
    "default_parallel",
    "read_devices",
    "read_memory_limit",
    "read_per_gpu",
    "read_trials",
]

_GPU_LIST_RE = re.compile(r"^\d+(\s*,\s*\d+)*$")
# Below this a byte count is almost surely a unit mistake (``memory_limit: 4096`` meant MiB).
_MIN_MEMORY_LIMIT = 16 * 1024**2
_MIN_LOG_LIMIT = 4096
_MODULE_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def read_trials(r: Reader, root: Mapping[str, Any], study_name: str) -> TrialsSpec:
    key: Key = ("trials",)
    sec = r.section(TrialsSpec, root.get("trials"), key, "section 'trials'")
    launcher = sec.get("launcher", "process")
    nproc = sec.get("nproc_per_node", 1)
    if nproc > 1 and launcher != "torchrun":
        raise r.err(
            (*key, "nproc_per_node"),
            f"nproc_per_node={nproc} runs several processes per trial, which needs "
            "launcher: torchrun (launcher is 'process')",
        )
    devices = read_devices(r, sec, key)
    per_gpu = read_per_gpu(r, sec, key, devices, nproc)
    if isinstance(devices, tuple) and nproc > len(devices):
        raise r.err(
            (*key, "nproc_per_node"),
            f"nproc_per_node={nproc} needs at least {nproc} GPUs per trial, but devices "
            f"lists {len(devices)}: {list(devices)}",
        )
    runs_dir = r.string(sec, key, "runs_dir", "a folder path")
    defaults = TrialsSpec()
    return TrialsSpec(
        launcher=launcher,
        nproc_per_node=nproc,
        parallel=sec.get("parallel", default_parallel(devices, per_gpu)),
        per_gpu=per_gpu,
        devices=devices,
        timeout_s=sec.get("timeout_s", defaults.timeout_s),
        stop_grace_s=sec.get("stop_grace_s", defaults.stop_grace_s),
        max_retries=sec.get("max_retries", defaults.max_retries),
        memory_limit=read_memory_limit(r, sec, key),
        report_timeout_s=sec.get("report_timeout_s", defaults.report_timeout_s),
        runs_dir=r.resolve(runs_dir) if runs_dir is not None else r.resolve(f"runs/{study_name}"),
        warm=read_warm(r, sec, key, launcher),
        preload=read_preload(r, sec, key),
        log_limit=read_log_limit(r, sec, key),
        keep_logs=sec.get("keep_logs", defaults.keep_logs),
        node_failures=sec.get("node_failures", defaults.node_failures),
        resume=read_resume(r, sec, key),
        resume_every_s=sec.get("resume_every_s", defaults.resume_every_s),
        pause=sec.get("pause", defaults.pause),
        paused_max=sec.get("paused_max", defaults.paused_max),
        paused_max_gb=sec.get("paused_max_gb", defaults.paused_max_gb),
    )


def read_resume(r: Reader, sec: Mapping[str, Any], key: Key) -> bool:
    """``resume``; on by itself with ``pause`` (a paused trial continues from its resume
    state), refused when the file turns it off beside ``pause: true``."""
    resume = sec.get("resume")
    if not sec.get("pause"):
        return bool(resume) if resume is not None else TrialsSpec().resume
    if resume is False:
        raise r.err(
            (*key, "resume"),
            "resume=false, but pause=true keeps a paused trial's resume state to continue it "
            "from: leave resume out (pause turns it on) or set it true",
        )
    return True


def read_per_gpu(r: Reader, sec: Mapping[str, Any], key: Key, devices: Any, nproc: int) -> int:
    """``per_gpu``: trials packed on each GPU (the schema checked it is an int >= 1)."""
    per_gpu: int = sec.get("per_gpu", 1)
    if per_gpu == 1:
        return per_gpu
    fkey = (*key, "per_gpu")
    if devices == "cpu":
        raise r.err(
            fkey,
            f"per_gpu={per_gpu} shares GPUs, but devices is cpu: there is no GPU to share; "
            "for several trials at once on the CPU write trials.parallel",
        )
    if nproc > 1:
        raise r.err(
            fkey,
            f"per_gpu={per_gpu} packs trials of one process each onto a GPU, but "
            f"nproc_per_node={nproc} spreads a trial over {nproc} GPUs; use per_gpu: 1 with "
            "nproc_per_node > 1",
        )
    return per_gpu


def check_pause(
    r: Reader, trials: TrialsSpec, study: StudySection, objective: ObjectiveSpec
) -> None:
    """``pause`` pauses what the pruner stops, ranked on one objective: refused where nothing
    would ever be paused (no pruner) or ranked (several objectives)."""
    if not trials.pause:
        return
    if objective.is_multi:
        raise r.err(
            ("trials", "pause"),
            f"pause=true ranks paused trials on one objective, but the study has "
            f"{len(objective.names)} ({', '.join(objective.names)}): leave pause out",
        )
    if study.pruner.kind == "none":
        raise r.err(
            ("trials", "pause"),
            "pause=true pauses the trials the pruner stops, but study.pruner is none (the "
            "default for curves of up to 20 epochs): nothing would ever be paused; name a "
            "pruner, e.g. study.pruner: {kind: successive_halving}",
        )


def check_packing(r: Reader, trials: TrialsSpec, trainer: TrainerSpec) -> None:
    """``per_gpu`` > 1 needs a Python entry point: the trial process caps its own allocator
    at its share before the trainer allocates, which a ``trainer.command`` script (a process
    of its own, maybe not Python) escapes."""
    if trials.per_gpu > 1 and trainer.command is not None:
        raise r.err(
            ("trials", "per_gpu"),
            f"per_gpu={trials.per_gpu} gives each trial 1/{trials.per_gpu} of a GPU's memory, "
            "which the trial process enforces for a Python entry point (trainer.entrypoint) "
            "only; trainer.command runs a script outside it: use per_gpu: 1, or an entry point",
        )


def default_parallel(devices: Any, per_gpu: int) -> int:
    """``parallel`` when the file leaves it out: 1, or with ``per_gpu`` K > 1 every share,
    K per GPU ``devices`` selects (for ``auto``/``cuda`` the GPUs visible here, found without
    torch; where none is, K: the study runs as many at once on the CPU as on one GPU)."""
    if per_gpu == 1:
        return 1
    if isinstance(devices, tuple):
        return per_gpu * len(devices)
    if isinstance(devices, int):
        return per_gpu * devices
    from dvt_hpo.devices.slots import visible_gpus

    return per_gpu * max(1, len(visible_gpus()))


def read_warm(r: Reader, sec: Mapping[str, Any], key: Key, launcher: str) -> bool:
    """``warm``: true (the default with launcher process), false, or null for the default.
    torchrun trials always start through torchrun, so an explicit true there is refused."""
    value = sec.get("warm")
    if value is None:
        return launcher == "process"
    if not isinstance(value, bool):
        raise r.err((*key, "warm"), f"must be true, false or null, got {describe(value)}")
    if value and launcher != "process":
        raise r.err(
            (*key, "warm"),
            "warm starts apply to launcher: process; torchrun starts every rank itself "
            "(write warm: false or leave it out)",
        )
    return value


def read_preload(r: Reader, sec: Mapping[str, Any], key: Key) -> tuple[str, ...]:
    value = sec.get("preload")
    if value is None:
        return ()
    fkey = (*key, "preload")
    if not isinstance(value, list):
        raise r.err(
            fkey, f"must be a list of module names such as [torch, timm], got {describe(value)}"
        )
    for i, name in enumerate(value):
        if not isinstance(name, str) or not _MODULE_RE.match(name):
            raise r.err(
                (*fkey, i),
                f"must be a module name such as 'timm' or 'pkg.models', got {describe(name)}",
            )
    return tuple(value)


def read_log_limit(r: Reader, sec: Mapping[str, Any], key: Key) -> int | None:
    if "log_limit" not in sec:
        return TrialsSpec().log_limit
    forms = "null (no cap) or a size such as '10MiB'"
    return _read_size(r, sec, key, "log_limit", _MIN_LOG_LIMIT, forms, " per log")


def read_devices(r: Reader, sec: Mapping[str, Any], key: Key) -> Any:
    """Canonical devices: ``"auto"``, ``"cpu"``, ``"cuda"``, an int (a GPU count), or a tuple
    of GPU ids; :func:`dvt_hpo.devices.slots.split_devices` shares them among the slots."""
    fkey = (*key, "devices")
    if "devices" not in sec:
        return "auto"
    value = sec["devices"]
    forms = (
        "auto, cpu, cuda (every visible GPU), a GPU count (integer >= 1), a list of GPU "
        "ids such as [0, 1], or a string such as '0,1', 'cuda:0,1' or 'cuda:2'"
    )
    if isinstance(value, bool) or value is None:
        raise r.err(fkey, f"must be {forms}, got {describe(value)}")
    if isinstance(value, int):
        if value < 1:
            raise r.err(
                fkey,
                f"a GPU count must be >= 1, got {value}; to pick GPU {value} write "
                f"[{value}] or 'cuda:{value}', for no GPU write cpu",
            )
        return value
    if isinstance(value, list):
        ids = value
    elif isinstance(value, str):
        text = value.strip().lower()
        if text in ("auto", "cpu"):
            return text
        if text in ("cuda", "gpu"):
            return "cuda"  # every visible GPU, and an error at launch when there is none
        if text.startswith("cuda:"):
            text = text[len("cuda:") :]
        if not _GPU_LIST_RE.match(text):
            raise r.err(
                fkey, f"must be {forms}, got {value!r}{did_you_mean(text, ['auto', 'cpu'])}"
            )
        ids = [int(part) for part in text.split(",")]
    else:
        raise r.err(fkey, f"must be {forms}, got {describe(value)}")
    if not ids:
        raise r.err(fkey, "a list of GPU ids must not be empty; for no GPU write cpu")
    for i, gpu in enumerate(ids):
        if isinstance(gpu, bool) or not isinstance(gpu, int) or gpu < 0:
            sub = (*fkey, i) if isinstance(value, list) else fkey
            raise r.err(sub, f"GPU ids must be integers >= 0, got {describe(gpu)}")
    if len(set(ids)) != len(ids):
        raise r.err(fkey, f"GPU ids must be distinct, got {ids}")
    return tuple(ids)


def read_memory_limit(r: Reader, sec: Mapping[str, Any], key: Key) -> int | None:
    unit = " (a bare number is bytes; write units such as '4GiB')"
    return _read_size(r, sec, key, "memory_limit", _MIN_MEMORY_LIMIT, "null or a size", unit)


def _read_size(
    r: Reader, sec: Mapping[str, Any], key: Key, name: str, minimum: int, forms: str, unit: str
) -> int | None:
    """A byte size such as '4GiB' (null stays None), at least ``minimum``: below it a number
    is almost surely a unit mistake."""
    value = sec.get(name)
    if value is None:
        return None
    fkey = (*key, name)
    try:
        size = parse_bytes(value)
    except ValueError as exc:
        raise r.err(fkey, f"must be {forms}: {exc}") from None
    if size < minimum:
        raise r.err(fkey, f"must be at least {format_bytes(minimum)}{unit}, got {value!r}")
    return size
