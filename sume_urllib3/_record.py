"""What happened to one logical request: outcomes, the record, the retry event, observers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Protocol, Tuple

from ._util import StrEnum


class Outcome(StrEnum):
    """How a whole logical request ended."""

    OK = "ok"
    RETRIED_OK = "retried_ok"
    GAVE_UP = "gave_up"
    FIX = "fix"
    NO_RETRY = "no_retry"
    POLL = "poll"


def status_label(status: Optional[int], code: Optional[str] = None) -> str:
    """How reasons and messages name a response: "503 queue_full", "503", or "no response"."""
    if status is None:
        return "no response"
    return f"{status} {code}" if code else str(status)


#: The kinds of a ``JobEvent``: one poll, or how a wait ended (an error: an answer polling cannot
#: fix, a transport failure, the caller's ``on_status`` raising). Every observer counts these.
JOB_EVENT_KINDS = ("poll", "completed", "failed", "timed_out", "error")


def key_prefix(key: Optional[str]) -> Optional[str]:
    """The first 8 characters of an idempotency key: enough to find it, not to reuse it."""
    if not key:
        return None
    return key[:8] + "…" if len(key) > 8 else key


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


@dataclass(frozen=True)
class RetryEvent:
    """One retry about to happen: which attempt, how long we wait and why."""

    method: str
    url: str
    attempt: int  # 1-based number of this retry
    max_retries: int
    wait: float
    wait_source: str  # "retry_after" | "backoff" | "fixed" | "pace" (the fleet made it longer)
    status: Optional[int]
    code: Optional[str]
    request_id: Optional[str]
    key_prefix: Optional[str]
    reason: str
    error: Optional[str] = None  # transport error class name when there was no response


@dataclass(frozen=True)
class RequestStart:
    """A logical request about to send its first attempt (before any pacing wait)."""

    method: str
    url: str
    idempotency_key: Optional[str] = None


class SumeObserver(Protocol):
    """Receives every retry and every final outcome, on the requesting thread.

    An observer may also have ``on_start(RequestStart)`` (called once before the first
    attempt, always followed by exactly one ``on_outcome``) and ``on_job(JobEvent)`` (job
    polls and endings); neither is required. With ``on_start`` present, the request runs in
    a copy of the caller's ``contextvars`` context, so what ``on_start`` sets is seen by the
    request's other hooks and gone when the call returns (what else the call sets reaches the
    caller). A streamed response's outcome (``stream=True``) comes when its body ends, on
    whichever thread ends it, in that context.
    """

    def on_retry(self, event: RetryEvent) -> None:
        """Called before each wait."""

    def on_outcome(self, record: SumeRecord) -> None:
        """Called once per logical request, with its final record."""


def sume_record(response_or_error: Any) -> Optional[SumeRecord]:
    """The :class:`SumeRecord` of a response or an exception, typed; None when there is none.

    ``response.sume`` and ``exc.sume`` are set at run time, so type checkers cannot see
    them; this reads either, and the ``record`` of a :class:`SumeRetryError`.
    """
    record = getattr(response_or_error, "sume", None)
    if record is None:
        record = getattr(response_or_error, "record", None)
    return record if isinstance(record, SumeRecord) else None
