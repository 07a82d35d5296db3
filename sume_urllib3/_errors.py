"""Exception types raised by sume_urllib3."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import requests

if TYPE_CHECKING:
    from ._record import SumeRecord


class SumeError(Exception):
    """Base class for every error sume_urllib3 raises itself."""


class ConfigurationError(SumeError, ValueError):
    """Bad configuration, raised before anything is sent."""


class SumeRetryError(SumeError, requests.exceptions.RetryError):
    """The policy gave up: carries the record and the last response, body intact."""

    def __init__(
        self,
        record: SumeRecord,
        response: Optional[requests.Response] = None,
        request: Any = None,
    ) -> None:
        self.record = record
        super().__init__(
            _describe(record),
            response=response,
            request=request if request is not None else getattr(response, "request", None),
        )

    def __reduce__(self) -> Any:
        # RetryError pickles its args only; keep the record and drop the live response.
        return (_rebuild_retry_error, (self.record,))


def _rebuild_retry_error(record: SumeRecord) -> SumeRetryError:
    return SumeRetryError(record)


def _describe(record: SumeRecord) -> str:
    """One message that says what was tried, what the server said and why we stopped."""
    from ._policy import status_label  # _policy needs ConfigurationError from here first
    what = "no response" if record.status is None else status_label(record.status, record.code)
    # Reasons from the policy already open with the status and code; do not say it twice.
    why = record.reason if record.reason.startswith(what) else f"{what}: {record.reason}"
    ids = ", ".join(record.request_ids) if record.request_ids else "none"
    plural = "" if record.attempts == 1 else "s"
    return (
        f"gave up after {record.attempts} attempt{plural} in {record.elapsed:.2f}s: {why} "
        f"(request id{'s' if len(record.request_ids) > 1 else ''}: {ids})"
    )
