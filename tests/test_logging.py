"""LoggingObserver: actionable INFO lines, structured extras, never a secret."""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Tuple

import pytest

from sume_urllib3._record import Outcome, RetryEvent, SumeRecord, key_prefix
from sume_urllib3.observe import LoggingObserver

KEY = "3f2a9c1e-7d4b-4f7e-9a55-0c1d2e3f4a5b"
URL = "https://api.sume.com/v1/avatars?api_key=SECRET&x=1#frag"
FIELDS = (
    "sume_method", "sume_path", "sume_status", "sume_code", "sume_request_id", "sume_attempt",
    "sume_wait", "sume_wait_source", "sume_outcome", "sume_key_prefix",
)


def make_event(
    status: Optional[int] = 503,
    code: Optional[str] = "service_unavailable",
    error: Optional[str] = None,
    request_id: Optional[str] = "req_12",
) -> RetryEvent:
    """A retry event for POST /v1/avatars with a secret in the query string."""
    return RetryEvent(
        method="POST", url=URL, attempt=2, max_retries=6, wait=1.74, wait_source="backoff",
        status=status, code=code, request_id=request_id, key_prefix=key_prefix(KEY),
        reason="503 service_unavailable: retry in 1.7s (backoff)", error=error,
    )


def make_record(
    outcome: Outcome,
    status: Optional[int] = 503,
    code: Optional[str] = "service_unavailable",
    reason: str = "503 service_unavailable: attempt cap reached (6 retries)",
    attempts: int = 7,
) -> SumeRecord:
    """A record for POST /v1/avatars with a secret in the query string and a full key."""
    return SumeRecord(
        idempotency_key=KEY, attempts=attempts, outcome=outcome, status=status, code=code,
        request_id="req_77", request_ids=("req_71", "req_77"), waits=(1.0, 2.0),
        elapsed=61.23, reason=reason, method="POST", url=URL,
    )


@pytest.fixture
def observer() -> LoggingObserver:
    """A LoggingObserver on the default logger."""
    return LoggingObserver()


def sume_records(caplog: pytest.LogCaptureFixture) -> List[logging.LogRecord]:
    """Records on the sume_urllib3 logger."""
    return [r for r in caplog.records if r.name == "sume_urllib3"]


def extras(rec: logging.LogRecord) -> Dict[str, Any]:
    """The sume_* attributes of a log record."""
    return {k: v for k, v in vars(rec).items() if k.startswith("sume_")}


def assert_no_secret(rec: logging.LogRecord) -> None:
    """Neither the query secret nor the full key is in the message or any extra."""
    texts: List[str] = [rec.getMessage()] + [repr(v) for v in extras(rec).values()]
    for text in texts:
        assert "SECRET" not in text
        assert "api_key" not in text
        assert KEY not in text
        assert KEY[:9] not in text  # not even one character past the prefix


def test_default_logger_is_sume_urllib3() -> None:
    """Without an argument the observer logs to the "sume_urllib3" logger."""
    assert LoggingObserver().logger is logging.getLogger("sume_urllib3")


def test_retry_line_says_what_why_and_how_long(
    observer: LoggingObserver, caplog: pytest.LogCaptureFixture
) -> None:
    """One INFO line: method, path, status, code, request id, attempt i/n, wait, source, key prefix."""
    caplog.set_level(logging.INFO, logger="sume_urllib3")
    observer.on_retry(make_event())
    (rec,) = sume_records(caplog)
    assert rec.levelno == logging.INFO
    assert rec.getMessage() == (
        "retrying POST /v1/avatars after 503 service_unavailable (request id req_12), "
        "attempt 2/6, waiting 1.7s (backoff), key 3f2a9c1e…"
    )
    assert_no_secret(rec)


def test_retry_extras_are_structured(
    observer: LoggingObserver, caplog: pytest.LogCaptureFixture
) -> None:
    """The retry record carries every sume_* field with the raw values."""
    caplog.set_level(logging.INFO, logger="sume_urllib3")
    observer.on_retry(make_event())
    (rec,) = sume_records(caplog)
    fields = extras(rec)
    assert set(FIELDS) <= set(fields)
    assert fields["sume_method"] == "POST"
    assert fields["sume_path"] == "/v1/avatars"
    assert fields["sume_status"] == 503
    assert fields["sume_code"] == "service_unavailable"
    assert fields["sume_request_id"] == "req_12"
    assert fields["sume_attempt"] == 2
    assert fields["sume_wait"] == 1.74
    assert fields["sume_wait_source"] == "backoff"
    assert fields["sume_outcome"] is None
    assert fields["sume_key_prefix"] == "3f2a9c1e…"
    assert_no_secret(rec)


def test_transport_error_retry_names_the_error_class(
    observer: LoggingObserver, caplog: pytest.LogCaptureFixture
) -> None:
    """With no response, the line names the exception class instead of a status."""
    caplog.set_level(logging.INFO, logger="sume_urllib3")
    observer.on_retry(make_event(status=None, code=None, error="ConnectTimeoutError", request_id=None))
    (rec,) = sume_records(caplog)
    message = rec.getMessage()
    assert message.startswith("retrying POST /v1/avatars after ConnectTimeoutError, attempt 2/6")
    assert "request id" not in message
    assert rec.sume_status is None  # type: ignore[attr-defined]
    assert_no_secret(rec)


def test_give_up_line(observer: LoggingObserver, caplog: pytest.LogCaptureFixture) -> None:
    """A give-up is one INFO line with attempts, elapsed, reason, request id and key prefix."""
    caplog.set_level(logging.INFO, logger="sume_urllib3")
    observer.on_outcome(make_record(Outcome.GAVE_UP))
    (rec,) = sume_records(caplog)
    assert rec.levelno == logging.INFO
    message = rec.getMessage()
    assert message.startswith(
        "gave up on POST /v1/avatars after 7 attempts in 61.2s: "
        "503 service_unavailable: attempt cap reached (6 retries)"
    )
    assert "request id req_77" in message
    assert "key 3f2a9c1e…" in message
    assert rec.sume_outcome == "gave_up"  # type: ignore[attr-defined]
    assert rec.sume_attempt == 7  # type: ignore[attr-defined]
    assert_no_secret(rec)


def test_fix_line(observer: LoggingObserver, caplog: pytest.LogCaptureFixture) -> None:
    """A caller error is one INFO line that says the caller must fix it."""
    caplog.set_level(logging.INFO, logger="sume_urllib3")
    observer.on_outcome(
        make_record(
            Outcome.FIX, 402, "insufficient_credits",
            "402 insufficient_credits: the caller must fix the request; not retried", 1,
        )
    )
    (rec,) = sume_records(caplog)
    assert rec.levelno == logging.INFO
    message = rec.getMessage()
    assert message.startswith("not retried, the caller must fix it: POST /v1/avatars")
    assert "402 insufficient_credits" in message
    assert "request id req_77" in message
    assert rec.sume_outcome == "fix"  # type: ignore[attr-defined]
    assert_no_secret(rec)


@pytest.mark.parametrize(
    "outcome", [Outcome.OK, Outcome.RETRIED_OK, Outcome.NO_RETRY, Outcome.POLL]
)
def test_other_outcomes_are_debug(
    observer: LoggingObserver, caplog: pytest.LogCaptureFixture, outcome: Outcome
) -> None:
    """ok, retried_ok, no_retry and poll log at DEBUG only."""
    caplog.set_level(logging.INFO, logger="sume_urllib3")
    observer.on_outcome(make_record(outcome, 200, None, "", 1))
    assert sume_records(caplog) == []
    caplog.set_level(logging.DEBUG, logger="sume_urllib3")
    observer.on_outcome(make_record(outcome, 200, None, "", 1))
    (rec,) = sume_records(caplog)
    assert rec.levelno == logging.DEBUG
    assert outcome.value in rec.getMessage()
    assert rec.sume_outcome == outcome.value  # type: ignore[attr-defined]
    assert_no_secret(rec)


def test_nothing_is_logged_when_disabled(
    observer: LoggingObserver, caplog: pytest.LogCaptureFixture
) -> None:
    """Above INFO neither retries nor give-ups produce records."""
    caplog.set_level(logging.WARNING, logger="sume_urllib3")
    observer.on_retry(make_event())
    observer.on_outcome(make_record(Outcome.GAVE_UP))
    assert sume_records(caplog) == []


def test_custom_logger_is_used(caplog: pytest.LogCaptureFixture) -> None:
    """A logger passed in receives the lines."""
    logger = logging.getLogger("myapp.sume")
    caplog.set_level(logging.INFO, logger="myapp.sume")
    LoggingObserver(logger).on_retry(make_event())
    assert [r.name for r in caplog.records] == ["myapp.sume"]


def test_control_characters_from_the_server_cannot_forge_lines(
    observer: LoggingObserver, caplog: pytest.LogCaptureFixture
) -> None:
    """A request id or code with newlines is logged on one line."""
    caplog.set_level(logging.INFO, logger="sume_urllib3")
    observer.on_retry(make_event(code="bad\ncode", request_id="req\r\nINFO fake line"))
    (rec,) = sume_records(caplog)
    assert "\n" not in rec.getMessage()
    assert "\r" not in rec.getMessage()


def test_url_credentials_and_host_are_not_logged(
    observer: LoggingObserver, caplog: pytest.LogCaptureFixture
) -> None:
    """Only the path of the URL is logged: no userinfo, host or query."""
    caplog.set_level(logging.INFO, logger="sume_urllib3")
    event = make_event()
    leaky = RetryEvent(**{**vars(event), "url": "https://user:PASSWORD@api.sume.com/v1/x?token=SECRET"})
    observer.on_retry(leaky)
    (rec,) = sume_records(caplog)
    for text in [rec.getMessage()] + [repr(v) for v in extras(rec).values()]:
        assert "PASSWORD" not in text
        assert "SECRET" not in text
        assert "api.sume.com" not in text
    assert rec.sume_path == "/v1/x"  # type: ignore[attr-defined]


def test_full_key_in_event_prefix_is_still_cut(
    observer: LoggingObserver, caplog: pytest.LogCaptureFixture
) -> None:
    """Even if an event carried a whole key as its prefix, only 8 characters are logged."""
    caplog.set_level(logging.INFO, logger="sume_urllib3")
    event = make_event()
    observer.on_retry(RetryEvent(**{**vars(event), "key_prefix": KEY}))
    (rec,) = sume_records(caplog)
    assert_no_secret(rec)


def test_works_with_a_formatter_using_the_extras(
    observer: LoggingObserver, caplog: pytest.LogCaptureFixture
) -> None:
    """Retry and outcome records both carry every field, so one format string fits both."""
    caplog.set_level(logging.DEBUG, logger="sume_urllib3")
    observer.on_retry(make_event())
    observer.on_outcome(make_record(Outcome.OK, 200, None, "", 1))
    fmt = logging.Formatter(" ".join(f"%({name})s" for name in FIELDS))
    lines: List[Tuple[str, ...]] = [tuple(fmt.format(r).split(" ")) for r in sume_records(caplog)]
    assert len(lines) == 2
