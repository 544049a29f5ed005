"""Secrets in storage URLs, hidden wherever a URL or a driver's message may show one.

The one rule for redaction: a URL's password and its secret query parameters, and the
credentials of any URL or libpq connection string inside a text. Pure string work (stdlib only):
the exceptions, the storage layer, the trackers and every view use it.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^:@/\s]*):[^@/\s]*@")
# Query parameters of URLs and libpq "key=value" connection strings that carry secrets.
_SECRET_PARAMS = re.compile(
    r"(?i)(?P<key>(?:^|[?&\s;(,'\"])(?:password|sslpassword|passwd|pwd|token|secret)\s*=\s*)"
    r"(?P<quote>['\"]?)[^&\s'\";,)]*(?P=quote)"
)


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (``user:***@host``), and query parameters
    named like secrets (``password=``, ``sslpassword=``, ``token=``...) too."""
    return redact_text(url)


def url_secrets(url: str) -> list[str]:
    """The secrets written in ``url`` (password, secret query parameters), as written and
    percent-decoded, longest first."""
    found: set[str] = set()
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        parts, password = None, None
    if password:
        found.update({password, unquote(password)})
    query = parts.query if parts is not None else url.partition("?")[2]
    for match in _SECRET_PARAMS.finditer("?" + query):
        value = match.group(0)[len(match.group("key")) :].strip("'\"")
        if value:
            found.update({value, unquote(value)})
    return sorted((s for s in found if s), key=len, reverse=True)


def redact_text(text: str, url: str | None = None) -> str:
    """``text`` (an error message, a log line) with every secret hidden: the password and
    secret parameters of ``url`` wherever they appear, and credentials of any URL or libpq
    connection string in it. Drivers quote the URL, or the password alone, in their errors."""
    if url:
        for secret in url_secrets(url):
            text = text.replace(secret, "***")
    text = _CREDENTIALS.sub(lambda m: f"{m['scheme']}{m['user']}:***@", text)
    return _SECRET_PARAMS.sub(lambda m: f"{m['key']}{m['quote']}***{m['quote']}", text)


__all__ = ["redact_text", "redact_url", "url_secrets"]
