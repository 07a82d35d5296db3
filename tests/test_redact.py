"""One set of redaction rules: what each kind of text keeps, and what it loses."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
from urllib3.exceptions import MaxRetryError, NewConnectionError

from sume_urllib3._redact import REDACTED, RedactingFilter, redact_error, redact_text, redact_url, secrets_of


@pytest.mark.parametrize(
    ("url", "redacted"),
    [
        ("https://api.sume.com/v1/avatars", "https://api.sume.com/v1/avatars"),
        (
            "https://b.s3.amazonaws.com/a.mp4?X-Amz-Signature=abc",
            "https://b.s3.amazonaws.com/a.mp4?<redacted>",
        ),
        ("https://user:pw@host:8443/x", "https://host:8443/x"),
        ("https://host/x#access_token=abc", "https://host/x"),
        ("/v1/avatars?token=abc", "/v1/avatars?<redacted>"),
        ("https://host/x?<redacted>", "https://host/x?<redacted>"),
        ("", ""),
    ],
)
def test_a_url_keeps_scheme_host_port_and_path(url: str, redacted: str) -> None:
    """Userinfo and fragment go, a query string becomes ``<redacted>``; redacting twice changes nothing."""
    assert redacted == redact_url(url)
    assert redacted == redact_url(redact_url(url))


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        (
            "Pool(host='h'): Max retries exceeded with url: /a.mp4?sig=abc (Caused by X)",
            "Pool(host='h'): Max retries exceeded with url: /a.mp4?<redacted> (Caused by X)",
        ),
        ("Failed to parse: http://u:pw@host:abc/x?y=1#frag", "Failed to parse: http://host:abc/x?<redacted>"),
        (
            "Incremented Retry for (url='/x?a=b'): SumeRetry(total=1)",
            "Incremented Retry for (url='/x?<redacted>'): SumeRetry(total=1)",
        ),
        ("what went wrong? nothing", "what went wrong? nothing"),
        ("really?!", "really?!"),
        ("attempt #2 of 3", "attempt #2 of 3"),
    ],
)
def test_a_message_keeps_its_shape(text: str, redacted: str) -> None:
    """Only the query, userinfo and fragment of URL-shaped words change; prose with a "?" does not."""
    assert redacted == redact_text(text)
    assert redacted == redact_text(redacted)


def test_known_secrets_are_replaced_wherever_they_appear() -> None:
    """A request's key, Authorization token and query are replaced even where no URL shape shows them."""
    secrets = secrets_of(
        "https://h/x?sig=abcdef123", {"Authorization": "Bearer tok_123456789"}, "sk_live_123456"
    )

    text = redact_text("key sk_live_123456, token tok_123456789, query sig=abcdef123", secrets)

    assert f"key {REDACTED}, token {REDACTED}, query {REDACTED}" == text


def test_an_error_chain_is_redacted_in_place() -> None:
    """urllib3's MaxRetryError keeps its class, its reason and its place in args, without the query."""
    reason = NewConnectionError(None, "Failed to establish a new connection")  # type: ignore[arg-type]
    inner = MaxRetryError(None, "/a.mp4?sig=abc", reason)  # type: ignore[arg-type]
    outer = ValueError(inner)
    outer.__context__ = inner

    assert outer is redact_error(outer)
    assert inner is outer.args[0]
    assert reason is inner.reason
    assert "/a.mp4?<redacted>" == inner.url
    assert "sig=abc" not in str(inner)


def test_urllib3_log_lines_are_redacted() -> None:
    """The filter on urllib3's loggers rewrites a line that names a URL, and keeps every line."""
    record = logging.LogRecord(
        "urllib3.connectionpool", logging.DEBUG, "", 0, '"%s %s" %s', ("GET", "/x?sig=abc", 200), None
    )

    assert RedactingFilter().filter(record)
    assert '"GET /x?<redacted>" 200' == record.getMessage()


def test_a_long_word_costs_its_length_not_its_length_squared() -> None:
    """A message with one long word (a token, a base64 blob) is redacted in linear time: run in a
    process of its own, which a search from every position of the word would keep for minutes."""
    script = (
        "from sume_urllib3._redact import redact_text\n"
        "blob = 'A' * 200_000\n"
        "assert redact_text(blob) == blob\n"
        "assert redact_text(blob + ' /x?sig=1') == blob + ' /x?<redacted>'\n"
        "assert redact_text('/x?' + blob) == '/x?<redacted>'\n"
        "print('done')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert "done" == done.stdout.strip(), done.stderr


def test_the_urllib3_filter_is_installed_by_the_first_retry_not_by_the_import() -> None:
    """``import sume_urllib3`` leaves urllib3's loggers alone; making a SumeRetry (every session
    has one) installs the filter once, and calling redact_urllib3_logs again adds none."""
    script = (
        "import logging, sume_urllib3\n"
        "from sume_urllib3.observe import redact_urllib3_logs\n"
        "names = ('urllib3.connectionpool', 'urllib3.util.retry')\n"
        "def count():\n"
        "    return sum(len(logging.getLogger(n).filters) for n in names)\n"
        "before = count()\n"
        "sume_urllib3.SumeRetry()\n"
        "made = count()\n"
        "sume_urllib3.SumeSession('sk_x')\n"
        "redact_urllib3_logs()\n"
        "print(before, made, count())\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert "0 2 2" == done.stdout.strip()
