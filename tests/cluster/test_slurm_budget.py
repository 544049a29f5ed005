"""`dvt-hpo submit` with study.budget and study.enqueue on the single-node Slurm cluster and the
real PostgreSQL server: the array's workers share one budget and seed the study once."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from tests.cluster.conftest import cluster_study, submit, wait_job_done, write_yaml

pytestmark = pytest.mark.processes


def test_an_array_shares_an_epochs_budget_and_seeds_once(
    slurm_cluster: int, postgres_url: str, unique_name: str, tmp_path: Path
) -> None:
    seeds = [{"x": 0.125}, {"x": 0.375}]
    doc = cluster_study(
        unique_name,
        postgres_url,
        study={"n_trials": 50, "budget": {"epochs": 10}, "enqueue": seeds},
        trainer={
            "config": {"curve": [0.1, 0.2, 0.3], "actions": [{"do": "curve", "sleep_s": 0.3}]}
        },
        cluster={"workers": 3},
    )
    job = submit(write_yaml(tmp_path / "study.yaml", doc))
    assert wait_job_done(job, 180) == {f"{job}_{i}": "COMPLETED" for i in range(3)}
    trials = optuna.load_study(study_name=unique_name, storage=postgres_url).get_trials()
    epochs = sum(len(t.intermediate_values) for t in trials)
    # Spent at the 10th report; then at most one running trial per worker finishes.
    assert 10 <= epochs <= 9 + 3 * 3 and len(trials) <= 6, epochs
    xs = [t.params["x"] for t in trials]
    assert all(xs.count(s["x"]) == 1 for s in seeds), xs
