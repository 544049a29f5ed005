"""The typed trial payload: written by the orchestrator, read by the trial process, shape-checked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dvt_hpo.devices.gpu_share import GpuShare
from dvt_hpo.studyfile import BatchSizeSpec
from dvt_hpo.wire.payload import CommandPayload, PayloadError, TrialLimits, TrialPayload
from dvt_hpo.wire.protocol import PROTOCOL_VERSION

FULL = TrialPayload(
    entrypoint="pkg.mod:run",
    config={"optim": {"lr": 0.1}, "x": [1, 2]},
    params={"lr": 0.1},
    study_name="s",
    trial_number=3,
    batch_size=BatchSizeSpec(auto=True, min=8, max=64, memory_keys=("model.width",)),
    cache_key="abc",
    devices=(0, 2),
    gpus=("0", "2"),
    gpu_share=GpuShare(4, 1 << 29),
    limits=TrialLimits(report_timeout_s=5.0, timeout_s=60, memory_limit=1 << 30),
    trial_dir="/runs/trial-0003",
)


@pytest.mark.parametrize(
    "payload",
    [
        FULL,
        TrialPayload(entrypoint="m:f", config={}),
        TrialPayload(entrypoint="m:f", config={}, devices="cpu"),
        TrialPayload(entrypoint="m:f", config={}, devices=2),
        TrialPayload(entrypoint="m:f", config={}, gpus=("1",), gpu_share=GpuShare(2)),
        TrialPayload(
            entrypoint="dvt_hpo.command:run",
            config={"lr": 0.1},
            command=CommandPayload(
                argv=("{python}", "train.py", "--lr={lr}"),
                metrics_pattern=r"epoch (?P<step>\d+) f1=(?P<f1>\S+)",
                names={"lr": "optim.lr"},
                stop_grace_s=2.5,
            ),
        ),
    ],
)
def test_a_payload_round_trips_through_its_file(payload: TrialPayload, tmp_path: Path) -> None:
    path = tmp_path / "payload.json"
    payload.write(path)
    assert TrialPayload.read(path) == payload
    assert not list(tmp_path.glob(".*"))  # the atomic writer left no temporary file


def test_the_file_is_plain_json_with_the_version() -> None:
    data = json.loads(json.dumps(FULL.to_json()))
    assert data["protocol"] == PROTOCOL_VERSION
    assert data["devices"] == [0, 2] and data["gpus"] == ["0", "2"]
    assert data["batch_size"]["memory_keys"] == ["model.width"]
    assert data["gpu_share"] == {"per_gpu": 4, "reserve_bytes": 1 << 29}
    assert data["limits"] == {"report_timeout_s": 5.0, "timeout_s": 60, "memory_limit": 1 << 30}


def good() -> dict[str, Any]:
    return FULL.to_json()


def edit(**changes: Any) -> dict[str, Any]:
    data = good()
    for key, value in changes.items():
        if value is ...:
            del data[key]
        else:
            data[key] = value
    return data


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ([], "must be a JSON object"),
        (edit(protocol=1), f"protocol must be {PROTOCOL_VERSION} .*got 1"),
        (edit(protocol=...), "protocol must be"),
        (edit(entrypoint="pkg.mod.run"), "'module:function'"),
        (edit(entrypoint=...), "missing required key 'entrypoint'"),
        (edit(config=[1]), "payload config: expected a mapping"),
        (edit(trial_number="3"), "trial_number: expected int, got '3'"),
        (edit(colour="red"), "payload: unknown key 'colour'"),
        (
            edit(batch_size={"auto": True, "maximum": 3}),
            "batch_size: unknown key 'maximum'; did you mean 'max'",
        ),
        (edit(batch_size={"auto": "yes"}), "batch_size.auto: expected bool"),
        (edit(batch_size={"memory_keys": "model.width"}), "memory_keys: expected a list of str"),
        (edit(limits={"timeout_s": "long"}), "limits.timeout_s: expected float"),
        (edit(devices="0,1"), "devices: expected one of .*got '0,1'"),
        (edit(devices=[0, -1]), "devices must be"),
        (edit(devices=True), "devices: expected one of .*got True"),
        (edit(command={"argv": []}), "command.argv must not be empty"),
        (edit(gpu_share={"per_gpu": 1, "reserve_bytes": 0}), "gpu_share: .*per_gpu >= 2"),
        (edit(gpu_share={"per_gpu": "2"}), "gpu_share.per_gpu: expected int"),
        (edit(gpu_share={"per_gpu": 2, "fraction": 0.5}), "gpu_share: unknown key 'fraction'"),
        (edit(command={"argv": "python x.py"}), "command.argv: expected a list of str"),
        (edit(command={"argv": ["x"], "shell": True}), "command: unknown key 'shell'"),
    ],
)
def test_a_malformed_payload_is_one_clear_error(data: Any, error: str) -> None:
    with pytest.raises(PayloadError, match=error):
        TrialPayload.from_json(data)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(PayloadError, match="cannot read the payload"):
        TrialPayload.read(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(PayloadError, match="is not JSON"):
        TrialPayload.read(tmp_path / "bad.json")
