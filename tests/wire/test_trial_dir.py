"""A trial's folders: the one place their file names are written."""

from __future__ import annotations

from pathlib import Path

from dvt_hpo.wire.trial_dir import SAVED_FILE, STATE_FILE, ResumeDir, TrialDir


def test_a_trials_folder_holds_its_payload_logs_result_and_output(tmp_path: Path) -> None:
    folder = TrialDir.of(tmp_path, 7)
    assert folder.path == tmp_path / "trial-0007"
    assert (folder.payload.name, folder.result.name) == ("payload.json", "result.json")
    assert (folder.stdout.name, folder.stderr.name) == ("stdout.log", "stderr.log")
    assert folder.output == folder.path / "output"
    folder.path.mkdir()
    for rank in (2, 1):
        folder.rank_error(rank).write_text("{}")
    assert [p.name for p in folder.rank_errors()] == ["error-rank1.json", "error-rank2.json"]


def test_a_chains_resume_folder(tmp_path: Path) -> None:
    chain = ResumeDir.of(tmp_path, 12)
    assert chain.path == ResumeDir.root(tmp_path) / "trial-0012" == tmp_path / "resume/trial-0012"
    assert (chain.chain.name, chain.curve.name) == ("chain.json", "curve.json")
    assert chain.saved == chain.state / SAVED_FILE and STATE_FILE == "state.pt"
