"""Secrets out of storage URLs and of the messages that quote them: passwords, secret query
parameters and libpq keys, as written and percent-decoded."""

from __future__ import annotations

import pytest

from dvt_hpo.text.redact import redact_text, redact_url, url_secrets


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://alice:s3cret@db:5432/hpo", "postgresql://alice:***@db:5432/hpo"),
        ("postgresql+psycopg2://bob:p%40ss@db/hpo", "postgresql+psycopg2://bob:***@db/hpo"),
        ("postgresql://carol@db/hpo", "postgresql://carol@db/hpo"),
        ("mysql://u:pw@h/db?charset=utf8", "mysql://u:***@h/db?charset=utf8"),
        ("postgresql://h/db?user=u&password=pw&x=1", "postgresql://h/db?user=u&password=***&x=1"),
        ("sqlite:///study.db", "sqlite:///study.db"),
    ],
)
def test_redact_url_hides_passwords(url: str, expected: str) -> None:
    assert redact_url(url) == expected
    assert "s3cret" not in redact_url(url)


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
