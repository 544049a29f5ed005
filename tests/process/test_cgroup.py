"""Reading the out-of-memory kill count of this process's cgroup (v1 and v2 layouts)."""

from __future__ import annotations

from pathlib import Path

from dvt_hpo.process.cgroup import counter_file, oom_kill_count, oom_kills

V2_EVENTS = "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n"
V1_CONTROL = "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n"


def test_cgroup_v2_reads_memory_events(tmp_path: Path) -> None:
    job = tmp_path / "system.slice" / "slurmstepd.scope" / "job_42"
    job.mkdir(parents=True)
    (job / "memory.events").write_text(V2_EVENTS)
    found = counter_file("0::/system.slice/slurmstepd.scope/job_42\n", root=tmp_path)
    assert found == job / "memory.events"
    assert oom_kill_count(found.read_text()) == 2


def test_cgroup_v1_reads_the_memory_controllers_oom_control(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.oom_control").write_text(V1_CONTROL)
    # The path of /proc/self/cgroup is not mounted inside this container: the root is its own.
    text = "12:pids:/\n4:memory:/slurm/uid_0/job_7\n0::/\n"
    found = counter_file(text, root=tmp_path)
    assert found == tmp_path / "memory" / "memory.oom_control"
    assert oom_kill_count(found.read_text()) == 5


def test_no_counter_is_none(tmp_path: Path) -> None:
    assert counter_file("0::/nowhere\n", root=tmp_path) is None
    assert oom_kill_count("oom 1\n") is None


def test_this_process_reads_what_its_cgroup_file_says() -> None:
    path = counter_file(Path("/proc/self/cgroup").read_text())
    expected = None if path is None else oom_kill_count(path.read_text())
    assert oom_kills() == expected
