"""A 2-rank DDP run on CPU (gloo) under real torchrun: global metrics, agreement, pruning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_builtin import KEYS, evaluate_checkpoint

pytestmark = pytest.mark.processes  # torchrun with two ranks

SCRIPT = Path(__file__).with_name("ddp_script.py")
REPO_ROOT = Path(__file__).resolve().parents[2]


def torchrun(tmp_path: Path, config: dict[str, Any], *extra: str) -> list[dict[str, Any]]:
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(config))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)}
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        str(SCRIPT), str(config_path), str(tmp_path), *extra,
    ]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]


@pytest.fixture
def ddp_config(make_config: Any, tmp_path: Path) -> dict[str, Any]:
    return make_config(
        epochs=3,
        model={"builder": "cnn", "kwargs": {"width": 8}},
        # 81 validation samples: an odd count that a padding sampler would double-count.
        data={"max_samples": 405},
        optim={"optim_args": {"lr": 1e-2}},
        checkpoint={"enable_checkpointing": True, "dir": str(tmp_path / "ck")},
    )


def test_two_ranks_report_global_metrics(tmp_path: Path, ddp_config: dict[str, Any]) -> None:
    chief, other = torchrun(tmp_path, ddp_config)
    assert chief["world_size"] == other["world_size"] == 2
    # Only the chief reports; every rank took the smallest size any rank found.
    assert [step for step, _ in chief["reports"]] == [0, 1, 2] and other["reports"] == []
    assert set(chief["reports"][-1][1]) == KEYS
    # Measured on the chief once, handed to every rank: the same value in every epoch.
    latency = chief["result"]["latency_ms"]
    assert latency > 0 and {m["latency_ms"] for _, m in chief["reports"]} == {latency}
    assert chief["agreed"] == other["agreed"] == 16 and chief["probe"] is True
    # Metrics are all-reduced (measures too: the max over ranks): identical on both ranks, and equal to the checkpointed model's
    # macro-F1 over the *whole* validation set (not a rank's half of it).
    assert chief["result"] == other["result"]
    macro, accuracy, loss = evaluate_checkpoint(tmp_path / "ck" / "last.pt")
    last = chief["reports"][-1][1]
    assert last["macro_f1"] == pytest.approx(macro, abs=1e-9)
    assert last["accuracy"] == pytest.approx(accuracy, abs=1e-12)
    # Also checks that rank 1 evaluated with rank 0's (checkpointed) BatchNorm statistics.
    assert last["loss"] == pytest.approx(loss, rel=1e-5)
    assert chief["result"]["accuracy"] > 0.4


def test_pruning_on_the_chief_stops_every_rank(tmp_path: Path, ddp_config: dict[str, Any]) -> None:
    ddp_config["epochs"] = 5
    ddp_config["checkpoint"] = {"enable_checkpointing": False}
    chief, other = torchrun(tmp_path, ddp_config, "0")
    assert chief["pruned"] == 0 and len(chief["reports"]) == 1
    assert other["result"]["epochs_run"] == 1.0
