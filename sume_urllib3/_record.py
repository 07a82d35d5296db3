"""What happened to one logical request: its outcome, its record, and the record as text and JSON."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from ._envelope import key_prefix, status_label
from ._redact import redact_url
from ._util import StrEnum, plural


class Outcome(StrEnum):
    """How a whole logical request ended."""

    OK = "ok"
    RETRIED_OK = "retried_ok"
    GAVE_UP = "gave_up"
    FIX = "fix"
    NO_RETRY = "no_retry"
    POLL = "poll"


@dataclass(frozen=True)
class SumeRecord:
    """The outcome of one logical request, attached to responses as ``response.sume``.

    ``attempts`` counts requests sent; ``waits`` are the seconds slept between them by
    the policy; ``paced`` the seconds the fleet held the request on top (pace, cooldown);
    ``request_ids`` are the server's ids, one per attempt that got one; ``fleet_refused``
    says the fleet refused a turn (the pace would have crossed the deadline); ``retry_in``
    (on a give-up) how many seconds until trying again could succeed. It never holds a
    secret: only the first characters of the idempotency key are shown by ``repr``.
    ``error`` names the last transport error (its class), when there was one.
    """

    idempotency_key: Optional[str]
    attempts: int
    outcome: Outcome
    status: Optional[int]
    code: Optional[str]
    request_id: Optional[str]
    request_ids: Tuple[str, ...]
    waits: Tuple[float, ...]
    elapsed: float
    reason: str
    next_action: Optional[str] = None
    method: str = ""
    url: str = ""
    paced: float = 0.0
    fleet_fallbacks: int = 0
    fleet_refused: bool = False
    retry_in: Optional[float] = None
    error: Optional[str] = None

    def __repr__(self) -> str:
        key = key_prefix(self.idempotency_key)
        return (
            f"SumeRecord(outcome={self.outcome.value!r}, status={self.status!r}, "
            f"code={self.code!r}, attempts={self.attempts}, request_id={self.request_id!r}, "
            f"waits={self.waits!r}, elapsed={self.elapsed:.3f}, key={key!r}, reason={self.reason!r})"
        )


def sume_record(response_or_error: Any) -> Optional[SumeRecord]:
    """The :class:`SumeRecord` of a response or an exception, typed; None when there is none.

    ``response.sume`` and ``exc.sume`` are set at run time, so type checkers cannot see
    them; this reads either, and the ``record`` of a :class:`SumeRetryError`.
    """
    record = getattr(response_or_error, "sume", None) or getattr(response_or_error, "record", None)
    return record if isinstance(record, SumeRecord) else None


def describe(record: SumeRecord) -> str:
    """One message that says what was tried, what the server said and why we stopped."""
    what = status_label(record.status, record.code)
    # Reasons from the policy already open with the status and code; do not say it twice.
    why = record.reason if record.reason.startswith(what) else f"{what}: {record.reason}"
    ids = ", ".join(record.request_ids) if record.request_ids else "none"
    again = f"; try again in {record.retry_in:.1f}s" if record.retry_in is not None else ""
    return (
        f"gave up after {plural(record.attempts, 'attempt', 'attempts')} in {record.elapsed:.2f}s: {why} "
        f"(request id{'s' if len(record.request_ids) > 1 else ''}: {ids}){again}"
    )


def summary(record: SumeRecord) -> Dict[str, Any]:
    """The record as JSON-safe values (what a JSON result backend can keep).

    The URL keeps no query string (``?<redacted>``) and no user:password (a presigned URL's
    signature must not land in a result store), whatever record it is given; everything
    else is the record's own fields.
    """
    out = {field.name: getattr(record, field.name) for field in dataclasses.fields(SumeRecord)}
    out.update(outcome=Outcome(record.outcome).value, url=redact_url(record.url))
    out.update(request_ids=list(record.request_ids), waits=list(record.waits))
    return out


def record_from_summary(data: Mapping[str, Any], message: str = "") -> SumeRecord:
    """A :class:`SumeRecord` again from :func:`summary`'s output; tolerant of missing fields.

    A summary with nothing usable still gives a record whose reason is ``message``.
    """
    # What the summary does not say is a give-up with nothing known.
    values: Dict[str, Any] = {"attempts": 0, "outcome": Outcome.GAVE_UP, "elapsed": 0.0}
    values.update(dict.fromkeys(("idempotency_key", "status", "code", "request_id", "request_ids", "waits")))
    values["reason"] = message or "unknown (rebuilt without a record)"
    values.update((f.name, data[f.name]) for f in dataclasses.fields(SumeRecord) if f.name in data)
    for name in ("request_ids", "waits"):
        values[name] = tuple(values[name] or ())
    try:
        values["outcome"] = Outcome(values["outcome"])
    except ValueError:
        values["outcome"] = Outcome.GAVE_UP
    return SumeRecord(**values)
