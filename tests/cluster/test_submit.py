"""dvt_hpo.cluster.submit without submitting: the sbatch parameters a cluster section becomes,
the storages refused for several workers, what ``submit`` refuses before it writes anything,
and the lines it prints. The sbatch script of a full cluster section:
tests/cluster/test_array_task.py; real submits: tests/cluster/test_slurm_workers.py."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dvt_hpo.cluster import slurm
from dvt_hpo.cluster.submit import (
    Submitted,
    check_storage_fit,
    sbatch_parameters,
    submit_study,
    submitted_lines,
)
from dvt_hpo.exceptions import DvtHpoError, SpecError
from dvt_hpo.spec.model import ClusterSpec, StudySpec
from dvt_hpo.studyfile import load_spec
from tests.conftest import toy_study

MIB = 1024**2


@pytest.fixture
def spec(write_study: Callable[..., Path]) -> StudySpec:
    return load_spec(write_study(toy_study("s")))


def test_a_bare_cluster_section_asks_slurm_for_nothing_but_the_array(spec: StudySpec) -> None:
    assert sbatch_parameters(spec, ClusterSpec()) == {
        "job_name": "dvt-hpo-s",
        "time": 60,
        "array_parallelism": 1,
        "additional_parameters": {"no-requeue": True, "signal": "URG@60"},
    }


def test_the_cluster_sections_choices_win(spec: StudySpec) -> None:
    cluster = ClusterSpec(
        workers=4,
        job_name="mine",
        requeue=True,
        memory_per_worker=1000 * MIB + 1,  # rounded up: a worker never gets less than asked
        sbatch={"qos": "low"},
    )
    params = sbatch_parameters(spec, cluster)
    assert (params["job_name"], params["array_parallelism"], params["mem"]) == ("mine", 4, "1001M")
    assert params["additional_parameters"] == {"qos": "low", "requeue": True, "signal": "URG@60"}
    # No GPU asked: the option is left out, not 0.
    assert "gpus_per_node" not in sbatch_parameters(spec, ClusterSpec(gpus_per_worker=0))


@pytest.mark.parametrize(
    ("storage", "workers", "allowed", "refused"),
    [
        ("journal", 2, False, "2 workers on a journal file"),
        ("journal", 2, True, None),
        ("sqlite", 1, False, None),
        ("postgresql", 16, False, None),
    ],
)
def test_file_storages_are_refused_for_several_workers(
    tmp_path: Path,
    write_study: Callable[..., Path],
    storage: str,
    workers: int,
    allowed: bool,
    refused: str | None,
) -> None:
    url = {
        "journal": f"journal:///{tmp_path}/study.log",
        "sqlite": f"sqlite:///{tmp_path}/study.db",
        "postgresql": "postgresql://me:secret@db.example/hpo",
    }[storage]
    spec = load_spec(write_study(toy_study("s", study={"storage": url})))
    cluster = ClusterSpec(workers=workers, allow_file_storage=allowed)
    if refused is None:
        check_storage_fit(spec, cluster)
        return
    with pytest.raises(SpecError) as info:
        check_storage_fit(spec, cluster)
    assert info.value.field == "study.storage" and info.value.line is not None
    assert refused in str(info.value) and "a journal file on a shared file system" in str(
        info.value
    )


def test_submit_without_slurm_says_where_to_run_and_writes_nothing(
    spec: StudySpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(slurm, "available", lambda: False)
    with pytest.raises(DvtHpoError, match=r"^sbatch and squeue not found: .*dvt-hpo run --workers"):
        submit_study(spec, [], out=pytest.fail)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.yaml"]


def test_submit_without_submitit_names_the_extra(
    spec: StudySpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(slurm, "available", lambda: True)
    monkeypatch.setitem(sys.modules, "submitit", None)  # `import submitit` raises ImportError
    with pytest.raises(DvtHpoError, match=r"pip install 'dvt-hpo\[slurm\]'"):
        submit_study(spec, [], out=pytest.fail)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.yaml"]


def test_the_lines_of_an_array_name_its_tasks_logs_and_next_commands(
    write_study: Callable[..., Path], tmp_path: Path
) -> None:
    url = "postgresql://me:secret@db.example/hpo"
    doc = toy_study("s", study={"storage": url}, cluster={"time_limit": "1-02:05:00"})
    spec = load_spec(write_study(doc, "my study.yaml"))
    logs = tmp_path / "logs"
    lines = submitted_lines(spec, Submitted("812", 3, logs), ["study.n_trials=9", "x=a b"])
    assert lines[0] == (
        "submitted job 812: 3 worker(s) of study 's' (array 812_[0-2]), time limit 26:05:00 "
        "each, on postgresql://me:***@db.example/hpo"
    )
    assert lines[1] == (
        f"logs: {logs}/812_<task>_0_log.out and .err (trial logs: {spec.trials.runs_dir}/<trial>/)"
    )
    study = f"'{spec.path}'"  # quoted: its name holds a space
    sets = " --set study.n_trials=9 --set 'x=a b'"
    assert (
        lines[2] == f"next: dvt-hpo status {study}{sets}    (trials and the workers' Slurm state)"
    )
    assert lines[4].startswith(f"      dvt-hpo cancel {study}{sets}    (stop the workers;")


def test_the_lines_of_one_worker_name_one_job(spec: StudySpec, tmp_path: Path) -> None:
    assert spec.cluster is None  # the defaults of a cluster section: one hour
    lines = submitted_lines(spec, Submitted("9", 1, tmp_path), [])
    assert "(one job), time limit 1:00:00 each" in lines[0]
    assert lines[1].startswith(f"logs: {tmp_path}/9_0_log.out and .err")
    assert lines[2] == f"next: dvt-hpo status {spec.path}    (trials and the workers' Slurm state)"
