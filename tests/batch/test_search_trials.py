"""Issue #4 end to end: the batch size found per trial, through real studies.

``StudyRunner(load_spec(path)).run()`` on SQLite in a temporary folder, real trial processes of
the built-in trainer (``dvt_hpo.train:run``) on CPU: the search runs in the trial before
training and is recorded in the trial's user attrs; trials equal at ``batch_size.memory_keys``
reuse the size stored in the study database after one verifying probe;
``batch_size.effective`` keeps the optimization batch fixed; under ``trials.memory_limit``
(``RLIMIT_AS``) real out-of-memory errors bound the search; torchrun ranks agree; and
``dvt-hpo best --export`` writes the found size.

The studies run once per module (fixtures) and several tests read them, to keep the file fast.
Trial processes run one thread each, as the replay they are compared with, and so that the
address space a trial maps (threads reserve some) does not depend on the machine's cores.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from dvt_hpo.cli import main as cli_main
from dvt_hpo.studyfile import load_spec
from dvt_hpo.wire import control_server
from dvt_hpo.wire.protocol import CacheGet, Message
from tests.conftest import run_keeping_failures, toy_study

pytestmark = pytest.mark.processes

State = optuna.trial.TrialState
MiB = 2**20
CACHE_PREFIX = "dvt_hpo:batch_size_cache:"  # where the runner keeps the cache (study attrs)

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="trials.memory_limit is RLIMIT_AS (Linux)"
)


def trainer_study(
    name: str,
    *,
    config: dict[str, Any],
    batch_size: dict[str, Any],
    space: list[dict[str, Any]],
    n_trials: int,
    trials: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A study of the built-in trainer (the default entry point), trials one at a time."""
    doc = toy_study(
        name,
        study={"n_trials": n_trials},
        objective={"metric": "macro_f1", "direction": "maximize"},
        trials={"devices": "cpu", "timeout_s": 120, "parallel": 1, **(trials or {})},
        batch_size={"auto": True, **batch_size},
        trainer={"config": {"epochs": 1, "seed": 0, **config}},
        search_space=space,
    )
    del doc["trainer"]["entrypoint"]
    return doc


LR = {"name": "lr", "path": "optim.optim_args.lr", "kind": "float", "low": 1e-3, "high": 1e-2}


@dataclass
class Ran:
    """A study that ran: its file, its trials by number, and the runner's output lines."""

    path: Path
    name: str
    trials: dict[int, optuna.trial.FrozenTrial]
    lines: list[str]

    def cache(self) -> dict[str, dict[str, Any]]:
        """The batch-size cache entries stored in the study database."""
        storage = load_spec(self.path).study.storage
        rdb = optuna.storages.RDBStorage(storage)
        study_id = rdb.get_study_id_from_name(self.name)
        attrs = rdb.get_study_system_attrs(study_id)
        return {k[len(CACHE_PREFIX) :]: v for k, v in attrs.items() if k.startswith(CACHE_PREFIX)}


def run_study(
    path: Path,
    *overrides: str,
    enqueue: Sequence[dict[str, Any]] = (),
    lines: list[str] | None = None,
) -> optuna.Study:
    spec = load_spec(path, overrides)
    if enqueue:
        study = optuna.create_study(
            storage=spec.study.storage,
            study_name=spec.study.name,
            direction="maximize",
            load_if_exists=True,
        )
        for params in enqueue:
            study.enqueue_trial(params)
    return run_keeping_failures(spec, lines if lines is not None else [])


def by_number(study: optuna.Study) -> dict[int, optuna.trial.FrozenTrial]:
    return {t.number: t for t in study.trials}


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")
        yield


# -- digits: the search, the cache, effective ---------------------------------------------------

EFFECTIVE = 100
DIGITS_MAX = 64
DOUBLINGS = [8, 16, 32, 64]  # a fresh search from min=8 up to max=64 when everything fits


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    """Four trials of a small CNN on digits, one at a time, in two invocations.

    1st run: trial 0 (width 8). 2nd run (a fresh runner: the cache can only come from the
    database): trial 1 (width 8 again: equal memory keys), trial 2 (width 16), trial 3
    (width 8 with AMP: the same memory keys but another precision).
    """
    folder = tmp_path_factory.mktemp("digits")
    doc = trainer_study(
        "bs-digits",
        config={
            "model": {"builder": "cnn", "kwargs": {"width": 8, "depth": 1}},
            "data": {"kind": "digits", "batch_size": 32, "max_samples": 200},
        },
        batch_size={
            "min": 8,
            "max": DIGITS_MAX,
            "effective": EFFECTIVE,
            "memory_keys": ["model.kwargs.width"],
        },
        space=[
            LR,
            {
                "name": "width",
                "path": "model.kwargs.width",
                "kind": "categorical",
                "choices": [8, 16],
            },
            {"name": "amp", "path": "precision.amp", "kind": "bool"},
        ],
        n_trials=4,
    )
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    lines: list[str] = []
    run_study(
        path, "study.n_trials=1", enqueue=[{"lr": 0.002, "width": 8, "amp": False}], lines=lines
    )
    study = run_study(
        path,
        enqueue=[
            {"lr": 0.005, "width": 8, "amp": False},
            {"lr": 0.005, "width": 16, "amp": False},
            {"lr": 0.005, "width": 8, "amp": True},
        ],
        lines=lines,
    )
    return Ran(path, "bs-digits", by_number(study), lines)


def test_the_search_never_goes_past_the_training_set(tmp_path: Path) -> None:
    # 40 digits, 32 of them for training: the probes (random tensors) would fit 1024.
    doc = trainer_study(
        "bs-small-data",
        config={
            "model": {"builder": "cnn", "kwargs": {"width": 8, "depth": 1}},
            "data": {"kind": "digits", "batch_size": 8, "max_samples": 40},
        },
        batch_size={"min": 8, "max": 1024},
        space=[LR],
        n_trials=1,
    )
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    lines: list[str] = []
    ran = Ran(path, "bs-small-data", by_number(run_study(path, lines=lines)), lines)

    attrs = ran.trials[0].user_attrs
    assert ran.trials[0].state == State.COMPLETE, attrs.get("reason")
    assert attrs["batch_size_probe_sizes"] == [8, 16, 32]
    assert (attrs["batch_size"], attrs["batch_size_data_cap"]) == (32, 32)
    assert any("capped at the 32 training samples per process" in line for line in lines), lines
    log = (Path(attrs["log_dir"]) / "stderr.log").read_text()
    assert "batch size search capped at 32" in log
    (entry,) = ran.cache().values()
    assert entry["batch_size"] == 32


def test_digits_trials_complete(digits: Ran) -> None:
    assert sorted(digits.trials) == [0, 1, 2, 3]
    for t in digits.trials.values():
        assert t.state == State.COMPLETE, (t.number, t.user_attrs.get("reason"), digits.lines)


def test_the_trial_searches_before_training_and_records_the_search(digits: Ran) -> None:
    attrs = digits.trials[0].user_attrs
    assert attrs["batch_size_cache"] == "miss"
    # Nothing runs out of memory on digits: the search doubles from min up to max.
    assert attrs["batch_size_probe_sizes"] == DOUBLINGS
    assert attrs["batch_size_probes"] == len(DOUBLINGS)
    assert attrs["batch_size_found"] == DIGITS_MAX
    assert 0 < attrs["batch_size_probe_s"] < attrs["duration_s"]
    assert attrs["epochs_reported"] == 1  # it trained after the search


def test_the_trial_trains_with_the_batch_size_it_found(digits: Ran) -> None:
    """Replaying the trial's payload with the recorded size and accumulation fixed reproduces
    its metrics exactly; the config's own batch size, or the found size without the
    accumulation, would not (so the trainer really used what the search decided)."""
    trial = digits.trials[0]
    attrs = trial.user_attrs
    payload = json.loads((Path(attrs["log_dir"]) / "payload.json").read_text())
    assert payload["config"]["data"]["batch_size"] == 32  # the config's size, before the search
    recorded = (attrs["batch_size"], attrs["accumulate_steps"])
    replays = [recorded, (32, 1), (attrs["batch_size_found"], 1)]
    metrics = replay(payload["config"], replays)
    keys = ("loss", "train_loss", "accuracy", "macro_f1")
    final = {k: attrs["final_metrics"][k] for k in keys}
    assert {k: metrics[0][k] for k in keys} == final
    for other in metrics[1:]:
        assert other["train_loss"] != final["train_loss"], (replays, metrics)


_REPLAY = """
import json, os, sys
from dvt_hpo.trial.context import LocalContext
from dvt_hpo.train import run

config, sizes = json.loads(sys.argv[1]), json.loads(sys.argv[2])
results = []
for batch_size, accumulate in sizes:
    config["data"]["batch_size"] = batch_size
    config.setdefault("precision", {})["accumulate_steps"] = accumulate
    with open(os.devnull, "w") as quiet:
        results.append(run(config, LocalContext(out=quiet)))
print(json.dumps(results))
"""


def replay(config: dict[str, Any], sizes: list[tuple[int, int]]) -> list[dict[str, float]]:
    """Train ``config`` outside a study (no search) at each ``(batch_size, accumulate)``, in a
    process set up like a trial's (one thread)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("DVT_HPO_MEMORY_LIMIT", None)
    done = subprocess.run(
        [sys.executable, "-c", _REPLAY, json.dumps(config), json.dumps(sizes)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_equal_memory_keys_reuse_the_stored_size_after_one_verifying_probe(digits: Ran) -> None:
    first, same, wider, amp = (digits.trials[n].user_attrs for n in range(4))
    # Trial 1 ran in a second invocation: the size came from the study database, and the
    # only probe verified it (a fresh search starts at min=8).
    assert same["batch_size_cache"] == "hit"
    assert same["batch_size_probes"] == 1
    assert same["batch_size_probe_sizes"] == [first["batch_size_found"]]
    assert same["batch_size_found"] == first["batch_size_found"]
    # Another value at a memory key, or another precision, searches afresh.
    for attrs in (wider, amp):
        assert attrs["batch_size_cache"] == "miss"
        assert attrs["batch_size_probe_sizes"] == DOUBLINGS
    # One entry per (memory keys, precision, device), each written by the trial that searched.
    entries = sorted(digits.cache().values(), key=lambda e: e["trial_number"])
    assert entries == [
        {"batch_size": DIGITS_MAX, "device": "cpu", "trial_number": n} for n in (0, 2, 3)
    ]


def test_effective_batch_size_is_reached_by_accumulation(digits: Ran) -> None:
    for t in digits.trials.values():
        attrs = t.user_attrs
        found = attrs["batch_size_found"]
        accumulate = math.ceil(EFFECTIVE / found)
        assert attrs["accumulate_steps"] == accumulate, attrs
        assert attrs["batch_size"] == math.ceil(EFFECTIVE / accumulate) <= found
        assert attrs["batch_size"] * attrs["accumulate_steps"] >= EFFECTIVE
        # Every trial found 64 on digits: 100 samples per optimizer step are 2 steps of 50.
        assert (attrs["batch_size"], attrs["accumulate_steps"]) == (50, 2)


def test_best_export_writes_the_found_batch_size(
    digits: Ran, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exported = tmp_path / "best.yaml"
    assert cli_main(["best", str(digits.path), "--export", str(exported)]) == 0
    out = capsys.readouterr().out
    config = yaml.safe_load(exported.read_text())
    storage = load_spec(digits.path).study.storage
    best = optuna.load_study(study_name=digits.name, storage=storage).best_trial
    assert f"best trial {best.number}:" in out
    assert config["data"]["batch_size"] == best.user_attrs["batch_size"] != 32
    assert config["precision"]["accumulate_steps"] == best.user_attrs["accumulate_steps"]
    assert config["checkpoint"]["enable_checkpointing"] is True


# -- synthetic under a memory limit: real out-of-memory ----------------------------------------

# An MLP on large 3x256x256 synthetic images: the probe's memory is mostly its input batch
# (768 KiB a sample) while its compute is tiny, so searching up to 512 takes a few seconds.
SYNTHETIC_MAX = 512
HEADROOM = 300 * MiB  # above what importing torch maps; room for ~a few hundred samples


def synthetic_doc(name: str, *, memory_limit: int | None, low: int = 8) -> dict[str, Any]:
    return trainer_study(
        name,
        config={
            "model": {"builder": "mlp", "kwargs": {"width": 8, "depth": 1}},
            "data": {
                "kind": "synthetic",
                "batch_size": 16,
                "image_size": 256,
                # More training samples (585) than batch_size.max: the search is capped at
                # the training set's size, and training runs real batches of the found size;
                # as few validation samples as before (65).
                "val_fraction": 0.1,
                "synthetic": {"num_samples": 650, "num_classes": 2, "channels": 3},
            },
        },
        batch_size={"min": low, "max": SYNTHETIC_MAX},
        space=[LR],
        n_trials=1,
        trials={"memory_limit": memory_limit, "stop_grace_s": 2},
    )


@pytest.fixture(scope="module")
def torch_vm_peak() -> int:
    """Bytes of address space a process maps by importing torch and the trainer (what
    RLIMIT_AS counts), measured on this machine: limits are set relative to it."""
    code = (
        "import torch, dvt_hpo.train.builtin, dvt_hpo.trial.main\n"
        "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmPeak')][0])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return int(done.stdout.strip()) * 1024


@pytest.fixture(scope="module")
def synthetic_runs(tmp_path_factory: pytest.TempPathFactory, torch_vm_peak: int) -> Callable:
    """``run(kind)``: the one trial of the synthetic study without a limit (``free``), with
    one (``limited``), or with one and a ``batch_size.min`` that cannot fit (``min_too_big``);
    each runs once per module."""
    limit = torch_vm_peak + HEADROOM
    # min * 768 KiB of input alone exceeds the headroom.
    too_big = SYNTHETIC_MAX
    variants = {
        "free": {"memory_limit": None},
        "limited": {"memory_limit": limit},
        "min_too_big": {"memory_limit": limit, "low": too_big},
    }
    done: dict[str, Ran] = {}

    def run(kind: str) -> Ran:
        if kind not in done:
            folder = tmp_path_factory.mktemp(kind)
            path = folder / "study.yaml"
            doc = synthetic_doc(f"bs-{kind}", **variants[kind])
            path.write_text(yaml.safe_dump(doc, sort_keys=False))
            lines: list[str] = []
            study = run_study(path, lines=lines)
            done[kind] = Ran(path, f"bs-{kind}", by_number(study), lines)
        return done[kind]

    return run


@linux_only
def test_a_memory_limit_makes_the_trial_find_a_smaller_size_through_real_oom(
    synthetic_runs: Callable[[str], Ran],
) -> None:
    (free,) = synthetic_runs("free").trials.values()
    (limited,) = synthetic_runs("limited").trials.values()
    assert free.state == State.COMPLETE, free.user_attrs.get("reason")
    assert free.user_attrs["batch_size_found"] == SYNTHETIC_MAX
    assert free.user_attrs["batch_size_probe_sizes"] == [8, 16, 32, 64, 128, 256, 512]

    attrs = limited.user_attrs
    assert "batch_size_found" in attrs, attrs.get("reason")
    found, sizes = attrs["batch_size_found"], attrs["batch_size_probe_sizes"]
    assert 8 < found < SYNTHETIC_MAX, sizes
    assert attrs["batch_size"] == found and attrs["batch_size_cache"] == "miss"
    # The built-in trainer's probe fits or raises; a size counts as too big only when what it
    # raised is out of memory (anything else would have failed the search and the trial).
    # So the sizes above the one found, all tried, ran out of memory under the limit.
    too_big = sorted(s for s in sizes if s > found)
    assert too_big and too_big[0] <= max(found * 1.02, found + 1), sizes
    assert attrs["batch_size_probes"] == len(sizes) == len(set(sizes))


@linux_only
def test_a_memory_limited_trial_trains_at_the_size_it_found(
    synthetic_runs: Callable[[str], Ran],
) -> None:
    (limited,) = synthetic_runs("limited").trials.values()
    assert limited.state == State.COMPLETE, limited.user_attrs.get("reason")
    assert limited.user_attrs["epochs_reported"] == 1


@linux_only
def test_a_trial_whose_min_does_not_fit_fails_saying_so(
    synthetic_runs: Callable[[str], Ran],
) -> None:
    ran = synthetic_runs("min_too_big")
    (trial,) = ran.trials.values()
    assert trial.state == State.FAIL
    reason = trial.user_attrs["reason"]
    assert reason.startswith("dvt_hpo.exceptions.BatchSizeError: "), reason
    assert f"batch size low={SYNTHETIC_MAX} does not fit" in reason, reason
    # The probe's real allocation failure under RLIMIT_AS, classified by is_out_of_memory.
    assert f"fits({SYNTHETIC_MAX}) ran out of memory: RuntimeError:" in reason, reason
    assert "DefaultCPUAllocator: can't allocate memory" in reason, reason
    assert "(trials.memory_limit=" in reason
    assert "batch_size_found" not in trial.user_attrs
    # What was tried stays on the failed trial, to tell "min too big" from a broken fits().
    assert SYNTHETIC_MAX in trial.user_attrs["batch_size_probe_sizes"]
    assert ran.cache() == {}


# -- torchrun: every rank probes, the ranks agree ----------------------------------------------


@pytest.fixture
def cache_requests(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The key of every ``cache_get`` message a trial process sent (one per rank).

    The runner's handler is asked once per key and trial (the server answers every rank from
    one snapshot), so the messages are counted where the server reads them.
    """
    seen: list[str] = []
    original = control_server.ControlServer._dispatch

    def dispatch(self: control_server.ControlServer, msg: Message) -> Any:
        if isinstance(msg, CacheGet):
            seen.append(msg.key)
        return original(self, msg)

    monkeypatch.setattr(control_server.ControlServer, "_dispatch", dispatch)
    return seen


def test_torchrun_ranks_each_search_and_record_the_agreed_size(
    tmp_path: Path, cache_requests: list[str], unique_name: str
) -> None:
    doc = trainer_study(
        unique_name,
        config={
            "model": {"builder": "cnn", "kwargs": {"width": 8, "depth": 1}},
            "data": {"kind": "digits", "batch_size": 16, "max_samples": 300},
        },
        batch_size={"min": 8, "max": DIGITS_MAX},
        space=[LR],
        n_trials=1,
        trials={"launcher": "torchrun", "nproc_per_node": 2, "stop_grace_s": 5},
    )
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    lines: list[str] = []
    (trial,) = run_study(path, lines=lines).trials
    assert trial.state == State.COMPLETE, (trial.user_attrs.get("reason"), lines)
    # Both ranks ran the search (each asks the cache first, with the same key) ...
    assert len(cache_requests) == 2 and len(set(cache_requests)) == 1, cache_requests
    # ... and the chief recorded the size they agreed on: each found max, nothing ran out.
    attrs = trial.user_attrs
    assert attrs["batch_size"] == attrs["batch_size_found"] == DIGITS_MAX
    assert attrs["batch_size_probe_sizes"] == DOUBLINGS
    (entry,) = Ran(path, unique_name, {}, lines).cache().values()
    assert entry == {"batch_size": DIGITS_MAX, "device": "cpu", "trial_number": 0}
