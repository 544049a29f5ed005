"""Section cluster: what `dvt-hpo submit` reads (Slurm job array of workers)."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from dvt_hpo.cluster.submit import check_storage_fit
from dvt_hpo.exceptions import SpecError
from dvt_hpo.studyfile import load_spec
from dvt_hpo.studyfile.cluster import parse_time_limit
from tests.studyfile.helpers import BASE, bad_file_test, case


def test_cluster_section_is_read_with_units_and_defaults(
    write: Callable[..., Path], tmp_path: Path
) -> None:
    text = BASE + textwrap.dedent(
        """\
        cluster:
          kind: slurm
          workers: 8
          partition: gpu
          time_limit: "1-02:30:00"
          cpus_per_worker: 8
          gpus_per_worker: 2
          memory_per_worker: 32GiB
          sbatch: {account: vision, mail_type: END, exclusive: true}
          setup: ["module load cuda/12.1", "source ~/venv/bin/activate"]
          requeue: true
          logs: slurm-logs
        """
    )
    cluster = load_spec(write(text)).cluster
    assert cluster is not None
    assert (cluster.workers, cluster.partition) == (8, "gpu")
    assert cluster.time_limit == (24 + 2) * 60 + 30
    assert (cluster.cpus_per_worker, cluster.gpus_per_worker) == (8, 2)
    assert cluster.memory_per_worker == 32 * 1024**3
    assert cluster.sbatch == {"account": "vision", "mail-type": "END", "exclusive": True}
    assert cluster.setup == ("module load cuda/12.1", "source ~/venv/bin/activate")
    assert cluster.requeue is True
    assert cluster.logs == tmp_path.resolve() / "slurm-logs"


def test_no_cluster_section_and_defaults(write: Callable[..., Path], tmp_path: Path) -> None:
    assert load_spec(write(BASE)).cluster is None
    cluster = load_spec(write(BASE + "cluster: {workers: 2}\n")).cluster
    assert cluster is not None
    assert (cluster.kind, cluster.time_limit, cluster.gpus_per_worker) == ("slurm", 60, 0)
    assert cluster.requeue is False and cluster.allow_file_storage is False
    assert cluster.logs == tmp_path.resolve() / "runs" / "s" / "slurm"


@pytest.mark.parametrize(
    ("value", "minutes"),
    [(90, 90), ("90", 90), ("5:30", 6), ("2:00:00", 120), ("1-0", 1440), ("0-1:30", 90)],
)
def test_time_limit_forms(value: object, minutes: int) -> None:
    assert parse_time_limit(value) == minutes


# fmt: off
BAD_CLUSTER = [
    case("kind-unknown", BASE + "cluster: {kind: pbs}\n", 7, "cluster.kind", "one of slurm", "'pbs'"),
    case("workers-zero", BASE + "cluster:\n  workers: 0\n", 8, "cluster.workers", ">= 1"),
    case("time-garbage", BASE + "cluster:\n  time_limit: 2h\n", 8, "cluster.time_limit",
         "'D-HH:MM:SS'", "'2h'"),
    case("time-zero", BASE + "cluster:\n  time_limit: 0\n", 8, "cluster.time_limit",
         "at least 1 minute"),
    case("memory-tiny", BASE + "cluster:\n  memory_per_worker: 16\n", 8,
         "cluster.memory_per_worker", "at least 64MiB", "'16GiB'"),
    case("sbatch-owned", BASE + "cluster:\n  sbatch:\n    time: 10\n", 9, "cluster.sbatch.time",
         "--time is written by dvt-hpo submit from cluster.time_limit"),
    case("sbatch-dashes", BASE + "cluster:\n  sbatch: {--account: x}\n", 8,
         "cluster.sbatch.--account", "no leading dashes"),
    case("sbatch-list", BASE + "cluster:\n  sbatch: {account: [a, b]}\n", 8,
         "cluster.sbatch.account", "a string, a number or true"),
    case("setup-not-lines", BASE + "cluster:\n  setup: [ok, 3]\n", 8, "cluster.setup[1]",
         "non-empty shell line"),
    case("unknown-key", BASE + "cluster:\n  gpu_per_worker: 2\n", 8, "cluster.gpu_per_worker",
         "did you mean 'gpus_per_worker'"),
]
# fmt: on

test_bad_cluster = bad_file_test(BAD_CLUSTER)


def test_several_workers_on_a_file_storage_are_refused_unless_allowed(
    write: Callable[..., Path],
) -> None:
    spec = load_spec(write(BASE + "cluster: {workers: 4}\n"))
    assert spec.cluster is not None
    with pytest.raises(SpecError) as info:
        check_storage_fit(spec, spec.cluster)
    message = str(info.value)
    assert info.value.field == "study.storage"
    assert "4 workers on a sqlite file" in message and "postgresql://" in message
    assert "cluster.allow_file_storage: true" in message
    allowed = load_spec(write(BASE + "cluster: {workers: 4, allow_file_storage: true}\n"))
    assert allowed.cluster is not None
    check_storage_fit(allowed, allowed.cluster)
    one = load_spec(write(BASE + "cluster: {workers: 1}\n"))
    assert one.cluster is not None
    check_storage_fit(one, one.cluster)
