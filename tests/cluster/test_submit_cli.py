"""`dvt-hpo submit` refuses what cannot work before anything is written or submitted."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dvt_hpo.cli import main
from tests.conftest import toy_study


def test_several_workers_on_a_sqlite_file_are_refused_with_the_postgresql_hint(
    write_study: Callable[..., Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write_study(toy_study("s", cluster={"workers": 4}))
    assert main(["submit", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}:") and "study.storage: 4 workers on a sqlite file" in err
    assert "postgresql://" in err and "cluster.allow_file_storage: true" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.yaml"]  # nothing written
    # --workers overrides cluster.workers.
    assert main(["submit", str(path), "--workers", "4", "--set", "cluster.workers=1"]) == 2


def test_the_cluster_section_is_checked_by_validate(
    write_study: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_study(toy_study("s", cluster={"time_limit": "soon"}))
    assert main(["validate", str(path)]) == 2
    assert "cluster.time_limit: must be minutes" in capsys.readouterr().err
