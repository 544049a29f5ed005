"""The lines a run prints about itself: objective, dashboard command, waiting, retry hint."""

from __future__ import annotations

import shlex
from pathlib import Path

from dvt_hpo.run_messages import dashboard_hint, objective_text, retry_hint, waiting_line
from dvt_hpo.spec.model import ObjectiveSpec


def test_the_objective_shows_its_direction() -> None:
    text = objective_text(ObjectiveSpec(metric="val_mse", direction="minimize", reduce="best"))
    assert "minimize" in text and "val_mse" in text


def test_a_journal_file_is_given_as_the_plain_path_optuna_dashboard_reads() -> None:
    hint = dashboard_hint("journal:////srv/my studies/s.log", installed=True)
    command = hint.removeprefix("watch it: ")
    assert shlex.split(command) == ["optuna-dashboard", "/srv/my studies/s.log"]


def test_a_url_without_secrets_is_pasted_as_is() -> None:
    hint = dashboard_hint("sqlite:////tmp/s.db", installed=True)
    assert hint == "watch it: optuna-dashboard sqlite:////tmp/s.db"


def test_a_password_is_never_shown_and_the_command_still_works_when_pasted() -> None:
    hint = dashboard_hint("postgresql://ann:s3cret@db.example:5432/hpo", installed=True)
    assert "s3cret" not in hint and "***" not in hint
    command = hint.removeprefix("watch it: ").split("  (")[0]
    assert shlex.split(command) == ["optuna-dashboard", "postgresql://ann@db.example:5432/hpo"]
    assert "PGPASSWORD" in hint and "password is not shown" in hint


def test_without_optuna_dashboard_the_hint_says_how_to_install_it() -> None:
    hint = dashboard_hint("sqlite:////tmp/s.db", installed=False)
    assert "optuna-dashboard sqlite" not in hint
    assert "pip install 'dvt-hpo[dashboard]'" in hint


def test_the_waiting_line_names_trials_heartbeat_ages_and_the_longest_wait() -> None:
    line = waiting_line([3, 4], {3: 5.2, 4: 12.0}, grace_period_s=20, heartbeat_interval_s=10)
    assert "waiting for 2 RUNNING trial(s)" in line
    assert (
        "trial 3 (last heartbeat 5 s ago)" in line and "trial 4 (last heartbeat 12 s ago)" in line
    )
    # Trial 3 turns stale in 14.8 s, and the check runs every heartbeat interval.
    assert "at most about 25 s" in line and "study.grace_period_s=20" in line


def test_a_trial_of_unknown_age_may_take_a_whole_grace_period() -> None:
    line = waiting_line([7], {}, grace_period_s=20, heartbeat_interval_s=10)
    assert "trial 7." in line and "at most about 30 s" in line


def test_the_retry_hint_is_a_command_to_paste() -> None:
    hint = retry_hint([0, 2], Path("/srv/my studies/study.yaml"))
    command = hint.split(": ", 1)[1]
    assert shlex.split(command) == [
        "dvt-hpo", "run", "/srv/my studies/study.yaml", "--retry-failed"
    ]  # fmt: skip
    assert hint.startswith("2 failed trial(s)")
