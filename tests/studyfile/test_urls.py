from __future__ import annotations

import pytest

from dvt_hpo.exceptions import SpecError
from dvt_hpo.studyfile.urls import expand_env
from dvt_hpo.text.redact import redact_text, redact_url, url_secrets


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


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql+psycopg://u:p4ss@h/db", "postgresql+psycopg://u:***@h/db"),
        (
            "postgresql://u@h/db?password=p4ss&sslmode=require",
            "postgresql://u@h/db?password=***&sslmode=require",
        ),
        ("postgresql://h/db?sslpassword=k3y", "postgresql://h/db?sslpassword=***"),
        ("postgresql://:p4ss@h/db", "postgresql://:***@h/db"),
        ("journal:///tmp/x.log", "journal:///tmp/x.log"),
    ],
)
def test_redact_url_more_shapes(url: str, expected: str) -> None:
    assert redact_url(url) == expected


def test_redact_text_hides_the_url_and_its_password_inside_messages() -> None:
    url = "postgresql+psycopg://alice:p%40ss%3Aw0rd@db:5432/hpo?token=t0k3n"
    message = (
        f"could not open {url}\nFATAL: bad password 'p@ss:w0rd' for alice "
        "(conninfo: host=db password=p@ss:w0rd user=alice) token t0k3n"
    )
    redacted = redact_text(message, url)
    for secret in ("p@ss:w0rd", "p%40ss%3Aw0rd", "t0k3n"):
        assert secret not in redacted
    assert "alice" in redacted and "db:5432/hpo" in redacted


def test_redact_text_without_url_still_hides_credentials_of_any_url() -> None:
    text = "failed: mysql://root:hunter2@db/x and postgresql://u:pw@h/y, password='pw2' done"
    redacted = redact_text(text)
    assert "hunter2" not in redacted and "pw@" not in redacted and "pw2" not in redacted
    assert redacted.endswith("done")


def test_unescaped_at_in_a_password_is_still_hidden() -> None:
    url = "postgresql://u:p@ss@h/db"
    assert url_secrets(url) == ["p@ss"]
    assert "ss" not in redact_text(f"error with {url}", url).replace("***", "")
