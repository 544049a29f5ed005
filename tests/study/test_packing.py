"""``trials.per_gpu``: what the trial processes of a packed GPU receive, through the real study
loop on CPU (the GPU is named through CUDA_VISIBLE_DEVICES; the cap itself needs CUDA and is
checked by benchmarks/gpu/gpu_check.py), and the batch-size cache key with a share."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from dvt_hpo.devices.gpu_share import CONTEXT_RESERVE_BYTES
from dvt_hpo.devices.slots import Slot
from dvt_hpo.study.loop import StudyRunner
from dvt_hpo.study.trial_run import TrialRun, cache_key
from dvt_hpo.studyfile import load_spec
from tests.conftest import run_keeping_failures, toy_study

SEEN = """\
import json, os
from pathlib import Path

def run(config, ctx):
    payload = json.loads((Path(ctx.trial_dir) / "payload.json").read_text())
    ctx.set_user_attrs({
        "seen_cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "seen_gpu_share": payload["gpu_share"],
        "seen_gpus": payload["gpus"],
    })
    ctx.report(0, {"score": config["x"]})
    return {"score": config["x"]}
"""


@pytest.mark.processes
def test_packed_trials_receive_their_gpu_and_share(
    write_study: Callable[..., Path],
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "seen.py").write_text(SEEN)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    doc = toy_study(
        unique_name,
        study={"n_trials": 4},
        trials={"per_gpu": 2},  # parallel: every share, 2 GPUs x 2
        trainer={"entrypoint": "seen:run", "config": {"x": 0.5}},
    )
    spec = load_spec(write_study(doc))
    assert spec.trials.parallel == 4
    lines: list[str] = []
    study = run_keeping_failures(spec, lines)

    start = next(line for line in lines if "at a time" in line)
    assert start.endswith(
        "4 at a time, 2 per GPU (GPU 0: 2, GPU 1: 2), each with 1/2 of its GPU's memory"
    ), start
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 4, lines
    share = {"per_gpu": 2, "reserve_bytes": CONTEXT_RESERVE_BYTES}
    by_gpu: dict[str, int] = {}
    for trial in study.trials:
        attrs = trial.user_attrs
        gpu = attrs["devices"]
        by_gpu[gpu] = by_gpu.get(gpu, 0) + 1
        assert attrs["seen_cuda_visible_devices"] == gpu and attrs["seen_gpus"] == [gpu]
        assert attrs["seen_gpu_share"] == share and attrs["gpu_share"] == "1/2"
        # This torch has no CUDA: the trial says it could not cap, and runs.
        stderr = (Path(attrs["log_dir"]) / "stderr.log").read_text()
        assert "CUDA is not available here: no cap applied" in stderr
    assert by_gpu == {"0": 2, "1": 2}


def test_the_cache_key_includes_the_share(
    write_study: Callable[..., Path], unique_name: str
) -> None:
    import optuna

    doc = toy_study(
        unique_name,
        trials={"devices": "cpu"},
        batch_size={"auto": True, "path": "bs", "memory_keys": ["width"]},
        trainer={"config": {"curve": [0.1], "bs": 8, "width": 16}},
    )
    spec = load_spec(write_study(doc))
    runner = StudyRunner(spec, out=lambda line: None)
    runner.open_study()
    trial = runner.study.ask()
    trial.suggest_float("x", 0.0, 1.0)
    config = {"curve": [0.1], "bs": 8, "width": 16}

    def payload(slot: Slot):  # type: ignore[no-untyped-def]
        return TrialRun(runner, trial, dict(trial.params), config, slot).payload()

    whole = payload(Slot(0, "0", 1))
    halves = payload(Slot(0, "0", 1, per_gpu=2))
    quarters = payload(Slot(1, "1", 1, per_gpu=4))
    assert whole.gpu_share is None and halves.gpu_share is not None
    assert halves.gpu_share.per_gpu == 2 and quarters.gpu_share.per_gpu == 4  # type: ignore[union-attr]
    keys = {whole.cache_key, halves.cache_key, quarters.cache_key}
    assert len(keys) == 3 and None not in keys
    # Another GPU with the same share shares the key; a whole GPU keeps the key it had.
    assert payload(Slot(3, "3", 1, per_gpu=2)).cache_key == halves.cache_key
    extra = {
        "entrypoint": spec.trainer.entrypoint,
        "precision": {},
        "launcher": "process",
        "nproc": 1,
        "memory_limit": None,
    }
    assert whole.cache_key == cache_key(config, ("width",), extra)
    assert json.loads(json.dumps(halves.to_json()))["gpu_share"]["per_gpu"] == 2
    runner.study.tell(trial, state=optuna.trial.TrialState.FAIL)
