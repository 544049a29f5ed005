"""The CUDA paths of dvt-hpo on one GPU, through the real orchestrator: one table.

    python benchmarks/gpu/gpu_check.py [--workdir DIR] [--budget-s 280] [--cpu]

Each check writes a study file (and, where it needs one, the entry module of this script) to a
work folder and runs ``python -m dvt_hpo run`` on it, then reads the trials from the study's
SQLite database. Nothing is simulated: the numbers are those the trials stored.

- **batch size by memory**: the built-in CNN at two widths, 2 trials in 1/4 shares of GPU 0
  (``trials.per_gpu: 4``), ``batch_size.auto`` (the search by memory figures) against the
  largest size that fits in the same share found exactly (a trial running the same probe,
  ``find_batch_size(tolerance=0, use_memory=False)``), and the probes each used.
- **fp16 / bf16**: the built-in trainer with ``precision.amp`` in each dtype: COMPLETE and finite
  losses (a NaN objective fails a trial "diverged").
- **torchrun on NCCL**: a trial of world size 1 (2 where there are 2 GPUs) all-reduces on NCCL
  each step, reports, and is pruned at its first report (ThresholdPruner); with 2 GPUs, the
  built-in trainer's DDP too.
- **packing**: 1, 2 and 4 trials on GPU 0 (``per_gpu`` 1, 2, 4; twice as many trials), each
  searching its batch size up to its share while its neighbours do the same (later ones reuse
  it from the study's cache): trials per minute, and no trial out of memory.
- **out of memory**: on a GPU packed 2 to 1, one trial allocates until its share is refused
  (FAIL, reason "out of memory") while its neighbour holds 80% of its own share and finishes;
  the next trial on that GPU allocates 90% of a share.

Without CUDA (``--cpu``, or no GPU) it runs what it can on the CPU (bf16, torchrun on gloo with
world size 1, out of memory under ``trials.memory_limit``) and lists what it skipped. Exit code
0 when every check that ran is ok. ``--budget-s`` skips the checks that would start after it.
``--validate-only N`` writes the study files as for N GPUs and only validates them (through
``CUDA_VISIBLE_DEVICES``, no GPU needed): a machine without one checks that they are sound.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
# Run from a checkout without installing the package: here and in the trial processes.
sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))

GIB = 1 << 30
# Synthetic images: no download, nothing but torch (the digits need scikit-learn).
SMALL_DATA = {
    "kind": "synthetic",
    "image_size": 16,
    "batch_size": 32,
    "synthetic": {"num_samples": 400, "num_classes": 4},
}
STUDY_TIMEOUT_S = 240

# The entry points of the checks that need their own, copied next to the study files.
ENTRY = Path(__file__).resolve().with_name("gpu_check_entry.py")


@dataclass
class Row:
    check: str
    setting: str
    result: str
    ok: bool | None  # None: informational

    def status(self) -> str:
        return "-" if self.ok is None else ("ok" if self.ok else "FAIL")


@dataclass
class Study:
    name: str
    code: int
    output: str
    trials: list[Any]
    wall_s: float


class Checks:
    def __init__(
        self, workdir: Path, cuda: bool, n_gpus: int, budget_s: float, validate_only: bool = False
    ) -> None:
        self.workdir = workdir
        self.cuda = cuda
        self.n_gpus = n_gpus
        # Only `dvt-hpo validate` each study file (a machine without the GPUs checks them).
        self.validate_only = validate_only
        self.rows: list[Row] = []
        self.skipped: list[str] = []
        self.deadline = time.monotonic() + budget_s
        shutil.copy(ENTRY, workdir / ENTRY.name)

    # -- running studies through the CLI --------------------------------------------------

    def study(self, name: str, doc: dict[str, Any]) -> Study:
        base: dict[str, Any] = {
            "study": {
                "name": name,
                "storage": f"sqlite:///{name}.db",
                "pruner": {"kind": "none"},
                "heartbeat_interval_s": 2,
            },
            "trials": {"timeout_s": 180, "stop_grace_s": 5, "keep_logs": "failed"},
        }
        for key, value in doc.items():
            if isinstance(value, dict) and isinstance(base.get(key), dict):
                base[key] = {**base[key], **value}
            else:
                base[key] = value
        path = self.workdir / f"{name}.yaml"
        path.write_text(yaml.safe_dump(base, sort_keys=False))
        began = time.perf_counter()
        command = "validate" if self.validate_only else "run"
        env = dict(os.environ)
        if self.validate_only and self.n_gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(self.n_gpus))
        try:
            done = subprocess.run(
                [sys.executable, "-m", "dvt_hpo", command, str(path)],
                capture_output=True,
                text=True,
                timeout=STUDY_TIMEOUT_S,
                cwd=self.workdir,
                env=env,
            )
            code, output = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired as exc:
            code, output = -1, f"timed out after {STUDY_TIMEOUT_S} s: {exc.stdout!r}"
        wall_s = time.perf_counter() - began
        if self.validate_only:
            line = (output.strip().splitlines() or ["no output"])[-1]
            said = line.rsplit("; ", 1)[-1] if code == 0 else line  # the trials' layout
            self.rows.append(Row(f"study file {name}", "dvt-hpo validate", said, code == 0))
            return Study(name, code, output, [], wall_s)
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        try:
            trials = optuna.load_study(
                study_name=name, storage=f"sqlite:///{self.workdir / name}.db"
            ).get_trials(deepcopy=False)
        except Exception:  # noqa: BLE001 - the run's own output says why
            trials = []
        return Study(name, code, output, sorted(trials, key=lambda t: t.number), wall_s)

    def fail_row(self, check: str, setting: str, study: Study) -> None:
        if self.validate_only:
            return  # the study file's row says it all
        last = study.output.strip().splitlines()[-1:] or ["no output"]
        self.rows.append(Row(check, setting, f"exit {study.code}: {last[0][:160]}", False))

    def run(self, title: str, needs_cuda: bool, check: Callable[[], None]) -> None:
        if needs_cuda and not self.cuda:
            self.skipped.append(f"{title} (needs CUDA)")
            return
        if time.monotonic() > self.deadline:
            self.skipped.append(f"{title} (--budget-s reached)")
            return
        check()

    # -- the checks -------------------------------------------------------------------------

    def batch_size(self) -> None:
        # Largest tensors stay under 2**31 elements at every size tried (max), where some CUDA
        # kernels would refuse them for another reason than memory.
        widths = (16, 48)
        trainer = {
            "epochs": 1,
            "seed": 0,
            "model": {"builder": "cnn", "kwargs": {"width": widths[0]}},
            "data": {
                "kind": "synthetic",
                "image_size": 128,
                "batch_size": 32,
                "synthetic": {"num_samples": 256, "num_classes": 4},
            },
            "eval": {"latency": {"enabled": False}},
        }
        low, high = 8, 6144
        width_dim = {
            "name": "width",
            "path": "model.kwargs.width",
            "kind": "categorical",
            "choices": list(widths),
        }
        found = self.study(
            "bs-memory",
            {
                "study": {"n_trials": 2, "sampler": {"kind": "grid"}},
                "objective": {"metric": "macro_f1", "direction": "maximize"},
                "trials": {"devices": [0], "per_gpu": 4, "parallel": 2},
                "batch_size": {"auto": True, "min": low, "max": high,
                               "memory_keys": ["model.kwargs.width"]},
                "trainer": {"entrypoint": "dvt_hpo.train:run", "config": trainer},
                "search_space": [width_dim],
            },
        )  # fmt: skip
        exact_dim = {**width_dim, "path": "trainer.model.kwargs.width"}
        exact = self.study(
            "bs-exact",
            {
                "study": {"n_trials": 2, "sampler": {"kind": "grid"}},
                "objective": {"metric": "score", "direction": "maximize"},
                "trials": {"devices": [0], "per_gpu": 4, "parallel": 2},
                "trainer": {
                    "entrypoint": "gpu_check_entry:exact_batch_size",
                    "config": {"trainer": trainer, "min": low, "max": high},
                },
                "search_space": [exact_dim],
            },
        )
        for study in (found, exact):
            if study.code != 0 or len(study.trials) != 2:
                self.fail_row("batch size by memory", "CNN, 1/4 GPU", study)
                return
        by_width = {t.params["width"]: t.user_attrs for t in found.trials}
        exact_by_width = {t.params["width"]: t.user_attrs for t in exact.trials}
        for width in widths:
            got, ref = by_width[width], exact_by_width[width]
            size, best = got.get("batch_size_found"), ref["exact_size"]
            ok = isinstance(size, int) and size <= best and size >= best * 0.95
            self.rows.append(
                Row(
                    "batch size by memory",
                    f"CNN width {width}, 128px, 1/4 GPU",
                    f"found {size} in {got.get('batch_size_probes')} probes "
                    f"({got.get('batch_size_probe_s')} s); largest that fits {best} "
                    f"({ref['exact_probes']} probes, exact search, {ref['exact_s']} s)",
                    ok,
                )
            )

    def precision(self) -> None:
        dtypes = ["fp16", "bf16"] if self.cuda else ["bf16"]
        if not self.cuda:
            self.skipped.append("fp16 training (a CUDA path: the CPU runs bf16 only)")
        study = self.study(
            "amp",
            {
                "study": {"n_trials": len(dtypes), "sampler": {"kind": "grid"}},
                "objective": {"metric": "macro_f1", "direction": "maximize"},
                "trials": {"devices": [0] if self.cuda else "cpu", "parallel": 2}
                | ({"per_gpu": 2} if self.cuda else {}),
                "trainer": {
                    "entrypoint": "dvt_hpo.train:run",
                    "config": {
                        "epochs": 2,
                        "seed": 0,
                        "model": {"builder": "cnn", "kwargs": {"width": 8}},
                        "data": SMALL_DATA,
                        "precision": {"amp": True, "amp_dtype": dtypes[0]},
                        "eval": {"latency": {"enabled": False}},
                    },
                },
                "search_space": [
                    {"name": "amp_dtype", "path": "precision.amp_dtype",
                     "kind": "categorical", "choices": dtypes}
                ],
            },
        )  # fmt: skip
        if study.code != 0 or len(study.trials) != len(dtypes):
            self.fail_row("fp16/bf16 training", ", ".join(dtypes), study)
            return
        for trial in study.trials:
            final = trial.user_attrs.get("final_metrics", {})
            losses = {k: final.get(k) for k in ("train_loss", "loss")}
            finite = all(isinstance(v, float) and math.isfinite(v) for v in losses.values())
            ok = trial.state.name == "COMPLETE" and finite
            where = "CUDA" if self.cuda else "CPU"
            self.rows.append(
                Row(
                    f"{trial.params['amp_dtype']} training",
                    f"built-in CNN, amp on {where}",
                    f"{trial.state.name}; train_loss {losses['train_loss']:.4g}, "
                    f"val loss {losses['loss']:.4g}, macro_f1 {trial.value:.3f}"
                    if finite and trial.value is not None
                    else f"{trial.state.name}: {trial.user_attrs.get('reason')}",
                    ok,
                )
            )

    def torchrun(self) -> None:
        world = min(2, self.n_gpus) if self.cuda else 1
        backend = "nccl" if self.cuda else "gloo"
        prune_at_first = {"kind": "threshold", "lower": 0.9, "n_warmup_steps": 0}
        study = self.study(
            "collective",
            {
                "study": {"n_trials": 1, "pruner": prune_at_first},
                "objective": {"metric": "score", "direction": "maximize"},
                "trials": {"launcher": "torchrun", "nproc_per_node": world,
                           "devices": "auto" if self.cuda else "cpu"},
                "trainer": {
                    "entrypoint": "gpu_check_entry:collective_steps",
                    "config": {"device": "cuda" if self.cuda else "cpu", "steps": 5, "x": 0.0},
                },
                "search_space": [{"name": "x", "path": "x", "new_key": True, "kind": "float",
                                  "low": 0.0, "high": 1.0}],
            },
        )  # fmt: skip
        self._pruned_row(f"torchrun trial on {backend}", f"world size {world}", study, backend)
        if self.cuda and self.n_gpus < 2:
            self.skipped.append("built-in trainer DDP on NCCL, world size 2 (needs 2 GPUs)")
        elif self.cuda:
            ddp = self.study(
                "ddp-trainer",
                {
                    "study": {"n_trials": 1, "pruner": {**prune_at_first, "lower": 0.999}},
                    "objective": {"metric": "macro_f1", "direction": "maximize"},
                    "trials": {"launcher": "torchrun", "nproc_per_node": 2},
                    "trainer": {
                        "entrypoint": "dvt_hpo.train:run",
                        "config": {
                            "epochs": 3,
                            "model": {"builder": "cnn", "kwargs": {"width": 8}},
                            "data": SMALL_DATA,
                        },
                    },
                    "search_space": [{"name": "lr", "path": "optim.optim_args.lr",
                                      "kind": "float", "low": 1e-3, "high": 1e-2, "log": True}],
                },
            )  # fmt: skip
            self._pruned_row("built-in trainer DDP", "world size 2, NCCL", ddp, "nccl")

    def _pruned_row(self, check: str, setting: str, study: Study, backend: str) -> None:
        if not study.trials:
            self.fail_row(check, setting, study)
            return
        trial = study.trials[0]
        attrs = trial.user_attrs
        seen = attrs.get("backend", backend)
        ok = (
            trial.state.name == "PRUNED"
            and attrs.get("pruned_step") == 0
            and attrs.get("epochs_reported") == 1
            and seen == backend
        )
        self.rows.append(
            Row(
                check,
                setting,
                f"{trial.state.name} at step {attrs.get('pruned_step')} after "
                f"{attrs.get('epochs_reported')} report(s), backend {seen}"
                + (f": {attrs.get('reason')}" if trial.state.name == "FAIL" else ""),
                ok,
            )
        )

    def packing(self) -> None:
        for per_gpu in (1, 2, 4):
            n = 2 * per_gpu
            study = self.study(
                f"packed-{per_gpu}",
                {
                    "study": {"n_trials": n, "sampler": {"kind": "random", "seed": 0}},
                    "objective": {"metric": "macro_f1", "direction": "maximize"},
                    "trials": {"devices": [0], "per_gpu": per_gpu, "parallel": per_gpu},
                    # Up to the 1/2 and 1/4 shares' limits; 3072 keeps tensors under 2**31.
                    "batch_size": {"auto": True, "min": 8, "max": 3072},
                    "trainer": {
                        "entrypoint": "dvt_hpo.train:run",
                        "config": {
                            "epochs": 2,
                            "seed": 0,
                            "model": {"builder": "cnn", "kwargs": {"width": 32}},
                            "data": {
                                "kind": "synthetic",
                                "image_size": 128,
                                "synthetic": {"num_samples": 512, "num_classes": 4},
                            },
                            "eval": {"latency": {"enabled": False}},
                        },
                    },
                    "search_space": [{"name": "lr", "path": "optim.optim_args.lr",
                                      "kind": "float", "low": 1e-3, "high": 1e-2, "log": True}],
                },
            )  # fmt: skip
            if not study.trials:
                self.fail_row("packing", f"{per_gpu} per GPU", study)
                continue
            done = [t for t in study.trials if t.datetime_complete is not None]
            complete = [t for t in done if t.state.name == "COMPLETE"]
            oom = [t for t in done if "out of memory" in str(t.user_attrs.get("reason", ""))]
            span_s = (
                max(t.datetime_complete for t in done) - min(t.datetime_start for t in done)
            ).total_seconds()
            sizes = sorted({t.user_attrs.get("batch_size_found") for t in complete} - {None})
            caches = [t.user_attrs.get("batch_size_cache") for t in complete]
            self.rows.append(
                Row(
                    "packing",
                    f"{per_gpu} per GPU, {n} trials",
                    f"{len(complete)}/{n} COMPLETE, {len(oom)} out of memory; "
                    f"{len(complete) / span_s * 60:.1f} trials/min; batch sizes {sizes} "
                    f"(cache hits {caches.count('hit')})",
                    len(complete) == n and not oom,
                )
            )

    def out_of_memory(self) -> None:
        marker = self.workdir / "refused.marker"
        marker.unlink(missing_ok=True)
        config: dict[str, Any] = {
            "device": "cuda" if self.cuda else "cpu",
            "marker": str(marker),
            "roles": ["hog", "neighbour", "reclaim"],
            "x": 0.0,
        }
        trials: dict[str, Any] = {"parallel": 2}
        if self.cuda:
            config["chunk_bytes"] = GIB // 4
            trials |= {"devices": [0], "per_gpu": 2}
        else:
            limit = 768 << 20
            config |= {"chunk_bytes": 16 << 20, "limit_bytes": limit}
            # No warm template: a fork of it would carry the template's mappings into the
            # address space the limit counts.
            trials |= {"devices": "cpu", "memory_limit": limit, "warm": False}
        study = self.study(
            "out-of-memory",
            {
                "study": {"n_trials": 3, "max_failures": 2,
                          "sampler": {"kind": "random", "seed": 0}},
                "objective": {"metric": "score", "direction": "maximize"},
                "trials": trials,
                "trainer": {"entrypoint": "gpu_check_entry:memory_roles", "config": config},
                "search_space": [{"name": "x", "path": "x", "new_key": True, "kind": "float",
                                  "low": 0.0, "high": 1.0}],
            },
        )  # fmt: skip
        where = "1/2 GPU each" if self.cuda else "CPU, trials.memory_limit"
        if len(study.trials) != 3:
            self.fail_row("out of memory", where, study)
            return
        hog, neighbour, reclaim = study.trials
        reason = str(hog.user_attrs.get("reason", ""))
        refused = "out of memory" in reason or reason.startswith("MemoryError")
        self.rows.append(
            Row(
                "out of memory: the trial",
                where,
                f"{hog.state.name} after {hog.user_attrs.get('held_gib')} GiB of "
                f"{hog.user_attrs.get('limit_gib')}: {reason[:90]}",
                hog.state.name == "FAIL" and refused,
            )
        )
        self.rows.append(
            Row(
                "out of memory: its neighbour",
                where,
                f"{neighbour.state.name}, held 80% of its share meanwhile, "
                f"saw the refusal: {neighbour.user_attrs.get('saw_refusal')}",
                neighbour.state.name == "COMPLETE" and neighbour.value == 1.0,
            )
        )
        free = reclaim.user_attrs.get("free_gib_at_start")
        self.rows.append(
            Row(
                "out of memory: next trial",
                where,
                f"{reclaim.state.name}, allocated 90% of its "
                f"{reclaim.user_attrs.get('allowed_gib')} GiB"
                + (f" ({free} GiB of the GPU free at its start)" if free is not None else ""),
                reclaim.state.name == "COMPLETE",
            )
        )


def cuda_devices() -> int:
    """GPUs torch sees, asked in a child process (this one must hold no CUDA context)."""
    from dvt_hpo.devices.slots import visible_gpus

    if not visible_gpus():
        return 0
    done = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
        capture_output=True,
        text=True,
        check=False,
    )
    return int(done.stdout.strip() or 0) if done.returncode == 0 else 0


def print_table(checks: Checks, began: float) -> None:
    print("\n| check | setting | result | status |\n| --- | --- | --- | --- |")
    for row in checks.rows:
        print(f"| {row.check} | {row.setting} | {row.result} | {row.status()} |")
    for what in checks.skipped:
        print(f"| {what.split(' (')[0]} | - | skipped: {what.partition(' (')[2][:-1]} | - |")
    print(f"\n{time.perf_counter() - began:.0f} s in all")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, help="where the studies go (default: a temp dir)")
    parser.add_argument("--budget-s", type=float, default=280.0)
    parser.add_argument("--cpu", action="store_true", help="run the CPU part even with a GPU")
    parser.add_argument(
        "--validate-only",
        type=int,
        metavar="N_GPUS",
        help="write every study file as for N_GPUS GPUs and only `dvt-hpo validate` them",
    )
    args = parser.parse_args(argv)
    began = time.perf_counter()
    if args.validate_only is not None:
        n_gpus = args.validate_only
    else:
        n_gpus = 0 if args.cpu else cuda_devices()
    cuda = n_gpus > 0
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        workdir = (args.workdir or Path(tmp)).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        validate = args.validate_only is not None
        checks = Checks(workdir, cuda, n_gpus, args.budget_s, validate)
        what = "validating the study files for" if validate else "running on"
        print(f"gpu_check: {what} {n_gpus} GPU(s) with CUDA; studies in {workdir}", flush=True)
        checks.run("batch size by memory", True, checks.batch_size)
        checks.run("fp16/bf16 training", False, checks.precision)
        checks.run("torchrun trial", False, checks.torchrun)
        checks.run("packing 1, 2, 4 trials per GPU", True, checks.packing)
        checks.run("out of memory", False, checks.out_of_memory)
        print_table(checks, began)
    return 0 if all(row.ok is not False for row in checks.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
