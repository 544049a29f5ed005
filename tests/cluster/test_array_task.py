"""What each array task runs (dvt_hpo.cluster.array_task) and the sbatch script submitit writes
for a cluster section (dvt_hpo.cluster.submit)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from dvt_hpo.cluster.array_task import WorkerCommand, worker_overrides
from dvt_hpo.cluster.submit import sbatch_parameters
from dvt_hpo.studyfile import load_spec
from tests.studyfile.helpers import BASE


def test_the_worker_command_crosses_as_json() -> None:
    command = WorkerCommand("/s/study.yaml", ("study.n_trials=8",), 2, True, requeue=True)
    assert WorkerCommand.from_json(command.to_json()) == command


def test_the_gpus_slurm_gives_become_the_workers_devices() -> None:
    command = WorkerCommand("/s/study.yaml", ("trials.parallel=2",), 2)
    # Slurm's CUDA_VISIBLE_DEVICES holds the task's GPUs; trials index among the visible ones.
    assert worker_overrides(command, ["3", "5"]) == ["trials.parallel=2", "trials.devices=2"]
    cpu = WorkerCommand("/s/study.yaml", (), 0)
    # No GPU asked: the node's GPUs belong to other jobs.
    assert worker_overrides(cpu, ["0", "1"]) == ["trials.devices=cpu"]


def test_the_sbatch_script_holds_the_cluster_section(tmp_path: Path) -> None:
    from submitit.slurm.slurm import _make_sbatch_string

    path = tmp_path / "study.yaml"
    path.write_text(
        BASE
        + textwrap.dedent(
            """\
            cluster:
              workers: 3
              partition: gpu
              time_limit: "1:30:00"
              cpus_per_worker: 6
              gpus_per_worker: 1
              memory_per_worker: 1.5GiB
              sbatch: {account: vision, exclusive: true}
              setup: [module load cuda]
            """
        )
    )
    spec = load_spec(path)
    assert spec.cluster is not None
    script = _make_sbatch_string(
        command="python -m x",
        folder=tmp_path,
        map_count=3,
        **sbatch_parameters(spec, spec.cluster),
    )
    lines = set(script.splitlines())
    expected = {
        "#SBATCH --array=0-2%3",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=90",
        "#SBATCH --cpus-per-task=6",
        "#SBATCH --gpus-per-node=1",
        "#SBATCH --mem=1536M",
        "#SBATCH --account=vision",
        "#SBATCH --exclusive",
        "#SBATCH --no-requeue",
        "#SBATCH --job-name=dvt-hpo-s",
        # Not submitit's USR2, which Slurm sends to the trial processes too and kills them.
        "#SBATCH --signal=URG@60",
        "module load cuda",
    }
    assert expected <= lines, script


@pytest.mark.processes
def test_a_task_s_python_starts_with_sigterm_ignored() -> None:
    # Until submitit's handler: a preemption's SIGTERM then must not kill the starting task.
    import shlex
    import subprocess

    from dvt_hpo.cluster.submit import _TASK_PYTHON

    probe = "import signal; print(signal.getsignal(signal.SIGTERM) is signal.SIG_IGN)"
    done = subprocess.run(
        ["/bin/sh", "-c", f"{_TASK_PYTHON} -c {shlex.quote(probe)}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "True"
