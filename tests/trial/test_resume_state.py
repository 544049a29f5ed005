"""The trial side of ``trials.resume`` (dvt_hpo/trial/resume_state.py) and its payload field."""

from __future__ import annotations

import io
import json
from pathlib import Path

from dvt_hpo.trial.resume_state import ResumeState
from dvt_hpo.wire.payload import ResumePayload, TrialPayload
from dvt_hpo.wire.trial_dir import SAVED_FILE, STATE_FILE


def test_a_state_of_another_fingerprint_or_a_corrupt_one_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "state"
    writer = ResumeState(ResumePayload(str(folder), "params-a", every_s=0))
    assert writer.save({"epoch": 3}, step=3)
    out = io.StringIO()
    other = ResumeState(ResumePayload(str(folder), "params-b", expect=True), out=out)
    assert other.load() is None
    assert "written with other params, trainer config or search space" in out.getvalue()
    same = ResumeState(ResumePayload(str(folder), "params-a", expect=True), out=out)
    assert same.load() == {"epoch": 3}
    (folder / STATE_FILE).write_bytes(b"garbage")
    assert same.load() is None
    assert "unreadable" in out.getvalue() and "starting from epoch 0" in out.getvalue()


def test_saves_keep_to_the_interval_and_only_rank_0_writes(tmp_path: Path) -> None:
    folder = tmp_path / "state"
    state = ResumeState(ResumePayload(str(folder), "fp", every_s=3600))
    assert not state.due()
    assert not state.save({"epoch": 0}, step=0)
    assert not (folder / STATE_FILE).exists()
    assert state.save({"epoch": 1}, step=1, force=True)
    saved = json.loads((folder / SAVED_FILE).read_text())
    assert saved["step"] == 1 and saved["bytes"] == (folder / STATE_FILE).stat().st_size
    rank1 = ResumeState(ResumePayload(str(tmp_path / "other"), "fp", every_s=0), rank=1)
    assert not rank1.save({"epoch": 1}, step=1, force=True)
    assert not (tmp_path / "other").exists()


def test_the_payload_has_no_resume_key_when_resume_is_off(tmp_path: Path) -> None:
    plain = TrialPayload(entrypoint="m:f", config={})
    assert "resume" not in plain.to_json()
    with_resume = TrialPayload(
        entrypoint="m:f", config={}, resume=ResumePayload(str(tmp_path), "fp", 5.0, 3, True)
    )
    path = tmp_path / "payload.json"
    with_resume.write(path)
    assert TrialPayload.read(path) == with_resume
    plain.write(path)
    assert TrialPayload.read(path).resume is None
