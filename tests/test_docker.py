"""docker/: what can be checked without a Docker engine (none runs here).

The compose file parses; its services use the project's image, the documented command, the
storage URL from the environment and the mounted study; the Dockerfile installs the extras
pyproject.toml declares; no secret is written in any of these files.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dvt_hpo.store.storage import expand_env
from dvt_hpo.studyfile import load_spec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - tomli is in [test] for Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
COMMAND = ["dvt-hpo", "run", "/study/study.yaml"]
COMPOSE_VARIABLE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<rest>[^}]*)\}")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def test_compose_has_the_five_services_and_the_workers_scale(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"postgres", "pgbouncer", "worker", "dashboard", "mlflow"}
    worker = services["worker"]
    assert "container_name" not in worker  # a fixed name would forbid --scale worker=N
    assert worker["deploy"]["replicas"] == "${WORKERS:-2}"
    assert worker["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_workers_and_dashboard_use_the_image_the_storage_url_and_the_study(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    worker, dashboard = services["worker"], services["dashboard"]
    assert worker["image"] == dashboard["image"] == "dvt-hpo:${DVT_HPO_TAG:-latest}"
    assert worker["build"]["dockerfile"] == "docker/Dockerfile"
    assert worker["command"] == COMMAND
    assert "$$DB_URL" in " ".join(dashboard["command"])  # read inside the container
    for service, host in ((worker, "pgbouncer:6432"), (dashboard, "postgres:5432")):
        url = service["environment"]["DB_URL"]
        assert url.startswith("postgresql://${POSTGRES_USER:-hpo}:${POSTGRES_PASSWORD:?")
        assert url.endswith(f"@{host}/${{POSTGRES_DB:-hpo}}")
    assert worker["environment"]["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"
    assert "${STUDY_DIR:-./study}:/study" in worker["volumes"]
    assert (DOCKER / "study" / "study.yaml").is_file()
    assert "pgdata:/var/lib/postgresql/data" in services["postgres"]["volumes"]


def test_the_study_file_takes_its_storage_from_the_environment() -> None:
    path = DOCKER / "study" / "study.yaml"
    doc = yaml.safe_load(path.read_text())
    assert doc["study"]["storage"] == "${DB_URL}"
    url = expand_env(doc["study"]["storage"], env={"DB_URL": "postgresql://hpo:pw@postgres/hpo"})
    assert url == "postgresql://hpo:pw@postgres/hpo"
    # Everything else in the file is a valid study (the storage replaced as the env would).
    spec = load_spec(path, [f"study.storage={url}"])
    assert spec.study.name == "compose-digits" and spec.trials.devices == "cpu"


def test_no_secret_in_the_files_and_every_variable_documented(compose: dict[str, Any]) -> None:
    text = " ".join(_strings(compose))  # values only: comments may mention ${DB_URL}
    example = (DOCKER / ".env.example").read_text()
    documented = {
        line.split("=", 1)[0] for line in example.splitlines() if re.match(r"^[A-Z_]+=", line)
    }
    for match in COMPOSE_VARIABLE.finditer(text):
        if not match["rest"].startswith(":-"):  # a required variable: .env.example names it
            assert match["name"] in documented, match.group(0)
    assert "POSTGRES_PASSWORD=change-me" in example
    postgres_env = compose["services"]["postgres"]["environment"]
    assert postgres_env["POSTGRES_PASSWORD"].startswith("${POSTGRES_PASSWORD:?")
    dockerfile = (DOCKER / "Dockerfile").read_text()
    assert "PASSWORD" not in dockerfile and "DB_URL=" not in dockerfile
    assert "docker/.env" in (ROOT / ".gitignore").read_text().splitlines()


def _strings(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in _strings(k) + _strings(v)]
    if isinstance(node, list):
        return [s for item in node for s in _strings(item)]
    return [node] if isinstance(node, str) else []


def test_pgbouncer_is_debian_s_in_transaction_pooling_in_front_of_postgres(
    compose: dict[str, Any],
) -> None:
    service = compose["services"]["pgbouncer"]
    assert service["build"]["dockerfile"] == "docker/pgbouncer/Dockerfile"
    assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert service["environment"]["POSTGRES_PASSWORD"].startswith("${POSTGRES_PASSWORD:?")
    dockerfile = (DOCKER / "pgbouncer" / "Dockerfile").read_text()
    assert "FROM debian:" in dockerfile and "apt-get install" in dockerfile
    assert re.search(r"^USER (?!root)\w+", dockerfile, flags=re.M)
    assert "PASSWORD" not in dockerfile
    entrypoint = (DOCKER / "pgbouncer" / "entrypoint.sh").read_text()
    assert "pool_mode = transaction" in entrypoint
    assert "host=${DB_HOST:-postgres}" in entrypoint
    assert compose["services"]["worker"]["depends_on"]["pgbouncer"]


def test_dockerfile_installs_what_pyproject_declares() -> None:
    dockerfile = (DOCKER / "Dockerfile").read_text()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", dockerfile, flags=re.M))
    assert args["BASE_IMAGE"].startswith("python:3.")
    assert args["TORCH_INDEX"].endswith("/cpu")  # CPU unless a CUDA index is given
    extras = args["EXTRAS"].split(",")
    assert set(extras) <= set(project["optional-dependencies"])
    assert {"postgres", "dashboard"} <= set(extras)
    assert 'pip install ".[${EXTRAS}]"' in dockerfile
    # torch first and pinned like the README's set-up, so pip never pulls another build.
    readme_torch = re.search(r"torch==([\d.]+)", (ROOT / "README.md").read_text())
    assert readme_torch is not None and args["TORCH_VERSION"] == readme_torch.group(1)
    assert dockerfile.index("pip install torch==") < dockerfile.index('pip install ".[')
    assert "COPY dvt_hpo ./dvt_hpo" in dockerfile and "COPY pyproject.toml" in dockerfile
    assert re.search(r"^USER (?!root)\w+", dockerfile, flags=re.M)  # workers do not run as root


def test_gpu_override_switches_the_base_image_and_reserves_gpus() -> None:
    gpu = yaml.safe_load((DOCKER / "compose.gpu.yaml").read_text())["services"]["worker"]
    assert "nvidia/cuda" in gpu["build"]["args"]["BASE_IMAGE"]
    assert "/cu" in gpu["build"]["args"]["TORCH_INDEX"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]


def test_the_team_tutorial_documents_the_compose_command() -> None:
    page = (ROOT / "docs" / "tutorials" / "postgresql.md").read_text()
    assert "docker compose -f docker/compose.yaml up -d --build --scale worker=" in page
    assert "cp docker/.env.example docker/.env" in page
