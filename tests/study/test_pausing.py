"""``trials.pause`` through ``dvt-hpo run``: a paused trial continues when it ranks in the top
of its step, and its curve and value are bit for bit those of the same trial never paused.

Real worker, real trial processes, the built-in trainer on digits (CPU, seeded, one thread).
The threshold pruner stops every trial below macro-F1 0.6 at an epoch, so which trials pause is
decided by their curves, not by timing: the enqueued lr 3e-4 reaches about 0.44 after epoch 0
(paused) and 0.76 after epoch 1, far from the threshold either way; the tiny learning rates stay
near 0.02.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from dvt_hpo.recovery import retries
from tests.conftest import merge_sections, run_dvt_hpo

pytestmark = pytest.mark.processes

LRS = (0.01, 0.0003, 0.0001, 0.00001, 0.00003, 0.000005)


def study_doc(name: str, *, pause: bool, epochs: int = 3, **sections: Any) -> dict[str, Any]:
    """The study: paused (the enqueued lrs, the threshold pruner) or the never-paused
    reference (lr 3e-4 alone, no pruner); ``sections`` merged in."""
    doc = {
        "study": {
            "name": name,
            "storage": "sqlite:///study.db",
            "n_trials": len(LRS) if pause else 1,
            "sampler": {"kind": "random", "seed": 0},
            "pruner": {"kind": "threshold", "lower": 0.6} if pause else {"kind": "none"},
            "enqueue": [{"lr": lr} for lr in (LRS if pause else LRS[1:2])],
        },
        "objective": {"metric": "macro_f1", "direction": "maximize", "reduce": "last"},
        "trials": {
            "devices": "cpu",
            "parallel": 1,
            "warm": False,
            **({"pause": True, "paused_max": 2, "resume_every_s": 1000} if pause else {}),
        },
        "trainer": {
            "entrypoint": "dvt_hpo.train:run",
            "config": {
                "epochs": epochs,
                "seed": 0,
                "deterministic": True,
                "devices": {"device": "cpu", "threads": 1},
                "model": {"builder": "cnn", "kwargs": {"width": 16, "depth": 2, "dropout": 0.0}},
                "data": {"kind": "digits", "batch_size": 16, "val_fraction": 0.2},
                "optim": {"target": "torch.optim.AdamW", "optim_args": {"lr": 0.01}},
            },
        },
        "search_space": [
            {"name": "lr", "path": "optim.optim_args.lr", "kind": "float", "low": 1e-6, "high": 0.1}
        ],
    }
    return merge_sections(doc, sections)


def run(
    tmp: Path, name: str, *, pause: bool, doc: dict[str, Any] | None = None
) -> tuple[optuna.Study, str]:
    tmp.mkdir()
    path = tmp / "study.yaml"
    doc = doc if doc is not None else study_doc(name, pause=pause)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    done = run_dvt_hpo("run", path, cwd=tmp, timeout_s=400)
    assert done.returncode == 0, done.stdout + done.stderr
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{tmp / 'study.db'}")
    return study, done.stdout


def test_a_paused_trial_continues_bit_for_bit_and_no_state_outlives_the_study(
    tmp_path: Path,
) -> None:
    reference, _ = run(tmp_path / "never-paused", "never-paused", pause=False)
    (never,) = reference.trials
    study, out = run(tmp_path / "paused", "paused", pause=True)
    trials = study.trials
    # Trial 1 paused after epoch 0, behind trial 0; it continued once 6 trials reached epoch 0
    # and it ranked second of them (floor(6 / 3) = 2 continue).
    first = trials[1]
    assert first.state.name == "PRUNED" and first.user_attrs["status"] == "paused", out
    assert retries.is_paused(first)
    (copy,) = [t for t in trials if retries.retry_history(t) == [1]]
    assert copy.number == len(LRS), out
    assert "trial 1 (paused) continues" in out
    assert "trial 6 (continues paused trial 1) resumes from" in out
    # One curve, bit for bit the never-paused trial's, the first epoch trained once.
    assert copy.state.name == "COMPLETE"
    assert copy.value == never.value
    assert copy.intermediate_values == never.intermediate_values
    assert copy.user_attrs["resumed_epochs"] == 1 and copy.user_attrs["redone_epochs"] == 0
    stderr = tmp_path / "paused" / "runs" / "paused" / "trial-0006" / "stderr.log"
    assert "resuming from the state of trial 1 saved after step 0" in stderr.read_text()
    # The continuation is not a new trial; the paused one counts through it.
    assert "trials: 2 complete, 1 paused and continued, 4 pruned" in out
    assert retries.counted_numbers(trials) == {0, 2, 3, 4, 5, 6}
    # trials.paused_max=2: the least promising states were evicted as trials paused...
    assert "evicted (trials.paused_max=2)" in out
    # ...and every state is gone once the study is over.
    assert "the study is over: deleted the paused state of" in out
    assert not any((tmp_path / "paused" / "runs" / "paused" / "resume").iterdir())


# torchrun: two gloo ranks on 600 digits; lr 0.01 reaches about 0.43 after epoch 0 (paused), the
# tiny lrs about 0.01, so lr 0.01 is the top third of step 0 once all three reached it.
DDP_LRS = (0.01, 0.00001, 0.000005)


def ddp_doc(name: str, *, pause: bool) -> dict[str, Any]:
    doc = study_doc(name, pause=pause, trials={"launcher": "torchrun", "nproc_per_node": 2})
    lrs = DDP_LRS if pause else DDP_LRS[:1]
    doc["study"].update(n_trials=len(lrs), enqueue=[{"lr": lr} for lr in lrs])
    doc["trainer"]["config"]["data"]["max_samples"] = 600
    return doc


def test_a_paused_torchrun_trial_continues_bit_for_bit(tmp_path: Path) -> None:
    """Rank 0 saves the state when the trial is paused; the continuation's ranks load it."""
    reference, _ = run(
        tmp_path / "never-paused", "ddp-ref", pause=False, doc=ddp_doc("ddp-ref", pause=False)
    )
    (never,) = reference.trials
    study, out = run(tmp_path / "paused", "ddp", pause=True, doc=ddp_doc("ddp", pause=True))
    (copy,) = [t for t in study.trials if retries.retry_history(t) == [0]]
    assert copy.state.name == "COMPLETE", out
    assert copy.value == never.value
    assert copy.intermediate_values == never.intermediate_values
    assert copy.user_attrs["resumed_epochs"] == 1 and copy.user_attrs["redone_epochs"] == 0
