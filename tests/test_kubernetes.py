"""docs/kubernetes/indexed-job.yaml: the Kubernetes example parses and runs the same worker
as a Slurm array task (no cluster runs it here)."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "docs" / "kubernetes" / "indexed-job.yaml"


def test_the_indexed_job_runs_one_worker_per_pod_on_the_study_database() -> None:
    job = yaml.safe_load(JOB.read_text())
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] >= 1
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    assert container["command"] == ["dvt-hpo", "run", "/study/study.yaml"]
    env = {e["name"]: e for e in container["env"]}
    # The storage URL (and its password) comes from a Secret, never from the file.
    assert env["DB_URL"]["valueFrom"]["secretKeyRef"]["key"] == "DB_URL"
    assert "password" not in JOB.read_text().lower().replace("password@", "")
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert "/study/study.yaml" in mounts
    # Room to stop the trials (trials.stop_grace_s, 10 s by default) and record them.
    assert pod["terminationGracePeriodSeconds"] >= 30
    study = yaml.safe_load((ROOT / "docker" / "study" / "study.yaml").read_text())
    assert study["study"]["storage"] == "${DB_URL}"
