"""Log lines a person can act on: one per retry, one per give-up or caller error."""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional
from urllib.parse import urlsplit

from ._policy import Outcome
from ._record import RetryEvent, SumeRecord, key_prefix

# Values that come from the server (codes, request ids) are cut to this length
# so a hostile or broken response cannot flood the log.
_MAX_FIELD = 200


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
        method, path = _clean(event.method), _path(event.url)
        code, request_id = _clean(event.code), _clean(event.request_id)
        prefix = key_prefix(_clean(event.key_prefix))
        if event.status is not None:
            cause = " ".join(filter(None, (str(event.status), code)))
        else:
            cause = _clean(event.error) or "an error"
        message = f"retrying {_target(method, path)} after {cause}"
        if request_id:
            message += f" (request id {request_id})"
        message += (
            f", attempt {event.attempt}/{event.max_retries}, "
            f"waiting {event.wait:.1f}s ({_clean(event.wait_source) or 'unknown'})"
        )
        if prefix:
            message += f", key {prefix}"
        extra = _fields(
            event="retry",
            method=method,
            path=path,
            status=event.status,
            code=code,
            request_id=request_id,
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
        outcome = Outcome(record.outcome)
        level = logging.INFO if outcome in (Outcome.GAVE_UP, Outcome.FIX) else logging.DEBUG
        if not self.logger.isEnabledFor(level):
            return
        method, path = _clean(record.method), _path(record.url)
        code, request_id = _clean(record.code), _clean(record.request_id)
        prefix = key_prefix(record.idempotency_key)
        target = _target(method, path)
        reason = _clean(record.reason)
        plural = "" if record.attempts == 1 else "s"
        label = " ".join(filter(None, (_status(record.status), code)))
        details = ", ".join(
            filter(
                None,
                (
                    "" if reason.startswith(label) else label,  # reasons usually open with it
                    f"request id {request_id}" if request_id else "",
                    f"key {prefix}" if prefix else "",
                ),
            )
        )
        suffix = f" ({details})" if details else ""
        if outcome is Outcome.GAVE_UP:
            message = (
                f"gave up on {target} after {record.attempts} attempt{plural} "
                f"in {record.elapsed:.1f}s: {reason}{suffix}"
            )
        elif outcome is Outcome.FIX:
            message = f"not retried, the caller must fix it: {target}: {reason}{suffix}"
        else:
            message = (
                f"{target} ended {outcome.value} after {record.attempts} attempt{plural} "
                f"in {record.elapsed:.1f}s{suffix}"
            )
        extra = _fields(
            event="outcome",
            method=method,
            path=path,
            status=record.status,
            code=code,
            request_id=request_id,
            attempt=record.attempts,
            max_retries=None,
            wait=None,
            wait_source=None,
            outcome=outcome.value,
            key_prefix=prefix,
            error=None,
            elapsed=record.elapsed,
        )
        self.logger.log(level, message, extra=extra)


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


def _target(method: str, path: str) -> str:
    return " ".join(filter(None, (method, path))) or "request"


def _status(status: Optional[int]) -> str:
    return "no response" if status is None else str(status)


def _clean(value: Optional[str]) -> str:
    """Printable characters only (no forged log lines), bounded length."""
    if not value:
        return ""
    text = str(value)
    if not text.isprintable():
        text = "".join(ch if ch.isprintable() else "?" for ch in text)
    if len(text) > _MAX_FIELD:
        text = text[:_MAX_FIELD] + "…"
    return text
