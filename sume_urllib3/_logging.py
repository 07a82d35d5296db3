"""Log lines a person can act on: one per retry, one per give-up or caller error."""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional
from urllib.parse import urlsplit

from ._helpers import plural, printable
from ._record import Outcome, RetryEvent, SumeRecord, key_prefix

_LOUD = frozenset({Outcome.GAVE_UP, Outcome.FIX})


class LoggingObserver:
    """An observer that logs retries, give-ups and caller errors at INFO, the rest at DEBUG.

    Lines carry method, path, status, code, request id and idempotency key prefix,
    and the same values as ``sume_*`` attributes of the log record. Never logged:
    headers, the query string, the host, the full idempotency key.
    """

    def __init__(self, logger: Optional[logging.Logger] = None) -> None:
        self.logger = logger if logger is not None else logging.getLogger("sume_urllib3")

    def on_retry(self, event: RetryEvent) -> None:
        """Log one INFO line before a retry's wait."""
        if not self.logger.isEnabledFor(logging.INFO):
            return
        fields = _Fields(event.method, event.url, event.status, event.code, event.request_id)
        prefix = key_prefix(_clean(event.key_prefix))
        cause = fields.label or _clean(event.error) or "an error"
        message = f"retrying {fields.target} after {cause}"
        if fields.request_id:
            message += f" (request id {fields.request_id})"
        message += (
            f", attempt {event.attempt}/{event.max_retries}, "
            f"waiting {event.wait:.1f}s ({_clean(event.wait_source) or 'unknown'})"
        )
        if prefix:
            message += f", key {prefix}"
        extra = fields.extra(
            event="retry",
            attempt=event.attempt,
            max_retries=event.max_retries,
            wait=event.wait,
            wait_source=event.wait_source,
            outcome=None,
            key_prefix=prefix,
            error=_clean(event.error),
            elapsed=None,
        )
        self.logger.info(message, extra=extra)

    def on_outcome(self, record: SumeRecord) -> None:
        """Log a give-up or a caller error at INFO, any other outcome at DEBUG."""
        level = logging.INFO if record.outcome in _LOUD else logging.DEBUG
        if not self.logger.isEnabledFor(level):
            return
        outcome = Outcome(record.outcome)
        fields = _Fields(record.method, record.url, record.status, record.code, record.request_id)
        prefix = key_prefix(record.idempotency_key)
        extra = fields.extra(
            event="outcome",
            attempt=record.attempts,
            max_retries=None,
            wait=None,
            wait_source=None,
            outcome=outcome.value,
            key_prefix=prefix,
            error=None,
            elapsed=record.elapsed,
        )
        self.logger.log(level, _outcome_message(record, fields, prefix), extra=extra)


class _Fields:
    """The cleaned values every line carries: method, path, status, code, request id."""

    def __init__(
        self, method: str, url: str, status: Optional[int], code: Optional[str], request_id: Optional[str]
    ) -> None:
        self.method, self.path = _clean(method), _path(url)
        self.status, self.code, self.request_id = status, _clean(code), _clean(request_id)
        self.target = " ".join(filter(None, (self.method, self.path))) or "request"
        self.label = " ".join(filter(None, (None if status is None else str(status), self.code)))

    def extra(self, **values: Any) -> Dict[str, Any]:
        """The ``sume_*`` attributes of the log record."""
        return _fields(
            method=self.method,
            path=self.path,
            status=self.status,
            code=self.code,
            request_id=self.request_id,
            **values,
        )


def _outcome_message(record: SumeRecord, fields: _Fields, prefix: Optional[str]) -> str:
    reason = _clean(record.reason)
    label = (
        fields.label if record.status is not None else " ".join(filter(None, ("no response", fields.code)))
    )
    details = ", ".join(
        filter(
            None,
            (
                "" if reason.startswith(label) else label,  # reasons usually open with it
                f"request id {fields.request_id}" if fields.request_id else "",
                f"key {prefix}" if prefix else "",
            ),
        )
    )
    suffix = f" ({details})" if details else ""
    attempts = plural(record.attempts, "attempt", "attempts")
    outcome = Outcome(record.outcome)
    if outcome is Outcome.GAVE_UP:
        return f"gave up on {fields.target} after {attempts} in {record.elapsed:.1f}s: {reason}{suffix}"
    if outcome is Outcome.FIX:
        return f"not retried, the caller must fix it: {fields.target}: {reason}{suffix}"
    return f"{fields.target} ended {outcome.value} after {attempts} in {record.elapsed:.1f}s{suffix}"


def _fields(**values: Any) -> Dict[str, Any]:
    # The prefix keeps these apart from LogRecord's own attributes (which
    # logging refuses to overwrite) and from other libraries' extras.
    return {f"sume_{name}": value for name, value in values.items()}


def _path(url: str) -> str:
    """The path of a URL: no scheme, host, credentials, query string or fragment."""
    if not url:
        return ""
    try:
        path = urlsplit(url).path
    except ValueError:
        return "?"
    return _clean(path) or "/"


def _clean(value: Optional[str]) -> str:
    """Printable characters only (no forged log lines), bounded length."""
    return printable(value) or ""
