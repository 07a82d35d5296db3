"""Exception types raised by sume_urllib3."""

from __future__ import annotations

from typing import Any, Optional

import requests

from ._helpers import plural
from ._record import SumeRecord, status_label


class SumeError(Exception):
    """Base class for every error sume_urllib3 raises itself."""


class ConfigurationError(SumeError, ValueError):
    """Bad configuration, raised before anything is sent."""


class SumeRetryError(SumeError, requests.exceptions.RetryError):
    """The policy gave up: carries the record and the last response, body intact.

    ``retry_in`` is how many seconds until trying again could succeed (what is left of
    the server's Retry-After, else the next backoff), and ``idempotency_key`` the key to
    send again, so a task queue can retry later as the same logical request.
    """

    # The last response, body intact. None only when nothing was sent (record.attempts == 0:
    # the fleet refused the turn), so the common case reads without a check.
    response: requests.Response

    def __init__(
        self,
        record: SumeRecord,
        response: Optional[requests.Response] = None,
        request: Any = None,
    ) -> None:
        self.record = record
        super().__init__(
            describe(record),
            response=response,
            request=request if request is not None else getattr(response, "request", None),
        )

    @property
    def sume(self) -> SumeRecord:
        """The record, under the same name as ``response.sume``."""
        return self.record

    @property
    def retry_in(self) -> Optional[float]:
        """Seconds until trying again could succeed; None when retrying cannot help."""
        return self.record.retry_in

    @property
    def idempotency_key(self) -> Optional[str]:
        """The key every attempt carried: send it again to resume the same logical request."""
        return self.record.idempotency_key

    def __reduce__(self) -> Any:
        # RetryError pickles its args only; keep the record and drop the live response.
        return (_rebuild_retry_error, (self.record,))


def _rebuild_retry_error(record: SumeRecord) -> SumeRetryError:
    return SumeRetryError(record)


def describe(record: SumeRecord) -> str:
    """One message that says what was tried, what the server said and why we stopped."""
    what = status_label(record.status, record.code)
    # Reasons from the policy already open with the status and code; do not say it twice.
    why = record.reason if record.reason.startswith(what) else f"{what}: {record.reason}"
    ids = ", ".join(record.request_ids) if record.request_ids else "none"
    return (
        f"gave up after {plural(record.attempts, 'attempt', 'attempts')} in {record.elapsed:.2f}s: {why} "
        f"(request id{'s' if len(record.request_ids) > 1 else ''}: {ids})"
    )
