from __future__ import annotations

import pytest

from dvt_hpo.exceptions import SpecError
from dvt_hpo.studyfile.urls import expand_env


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("${DB_URL}", "postgresql://u:p@h/db"),
        ("postgresql://u:${PW}@${HOST:-localhost}/hpo", "postgresql://u:pa$s@localhost/hpo"),
        ("${HOST:-db.example}", "db.example"),
        ("${EMPTY:-fallback}", "fallback"),
        ("[${EMPTY}]", "[]"),
        ("${MISSING:-}", ""),
        ("cost $$5 and $5 and $HOME", "cost $5 and $5 and $HOME"),
        ("no variables", "no variables"),
    ],
)
def test_expand_env(text: str, expected: str) -> None:
    env = {"DB_URL": "postgresql://u:p@h/db", "PW": "pa$s", "EMPTY": ""}
    assert expand_env(text, env=env) == expected


def test_expand_env_names_the_unset_variable_and_never_its_neighbours() -> None:
    with pytest.raises(SpecError, match=r"environment variable DB_PASSWORD is not set") as info:
        expand_env("postgresql://u:${DB_PASSWORD}@${HOST}/db", env={"HOST": "secret-host"})
    assert "${DB_PASSWORD:-default}" in str(info.value)
    assert "secret-host" not in str(info.value)


@pytest.mark.parametrize("text", ["${1ABC}", "${A B}", "${}", "${OPEN", "x${A:B}"])
def test_expand_env_rejects_malformed_references(text: str) -> None:
    with pytest.raises(SpecError, match=r"\$\{"):
        expand_env(text, env={"A": "1"})


def test_expand_env_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DVT_HPO_TEST_VAR", "from-env")
    assert expand_env("${DVT_HPO_TEST_VAR}") == "from-env"
