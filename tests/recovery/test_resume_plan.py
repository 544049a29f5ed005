""":class:`dvt_hpo.recovery.resume.ResumePlan` as a unit: which of the chain's earlier reports a
copy's first own report takes in (the process tests of ``trials.resume``:
tests/recovery/test_resume.py)."""

from __future__ import annotations

from pathlib import Path

from dvt_hpo.recovery.resume import ResumePlan

EARLIER = [(s, {"loss": 1.0 / (s + 1)}) for s in range(4)]  # steps 0..3 of the attempts before


def _plan(tmp_path: Path) -> ResumePlan:
    return ResumePlan(
        root=0,
        dir=tmp_path,
        fingerprint="f",
        every_s=0.0,
        attempt=1,
        chain_length=1,
        pauses=0,
        expect=True,
        earlier=[(s, dict(m)) for s, m in EARLIER],
    )


def test_the_first_own_report_takes_the_steps_before_it(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    assert plan.splice(2) == EARLIER[:2]
    # Steps 2 and 3 are trained again by the copy (its state was older): redone, not taken.
    assert (plan.spliced, plan.redone) == (2, 2)


def test_only_the_first_report_splices(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    assert plan.splice(4) == EARLIER
    assert plan.splice(5) == []
    assert plan.splice(None) == []
    assert (plan.spliced, plan.redone) == (4, 0)  # the first call's count stays


def test_none_takes_every_earlier_report(tmp_path: Path) -> None:
    """A copy that reported nothing (its state covered every epoch) takes the whole curve."""
    plan = _plan(tmp_path)
    assert plan.splice(None) == EARLIER
    assert (plan.spliced, plan.redone) == (4, 0)


def test_a_first_step_at_or_before_the_chains_first_takes_nothing(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    assert plan.splice(0) == []
    assert (plan.spliced, plan.redone) == (0, 4)
    assert plan.splice(1) == []  # spliced is 0, not None: the first report has been


def test_the_reports_taken_are_copies(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    taken = plan.splice(None)
    taken[0][1]["loss"] = -1.0
    assert plan.earlier[0][1]["loss"] == 1.0
