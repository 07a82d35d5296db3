"""Per-logical-request state, handed from the session and adapter to the retry."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from ._policy import Decision, Verdict, status_label
from ._record import SumeRecord


@dataclass(frozen=True)
class Attempt:
    """One consulted attempt: what came back and what the policy said about it."""

    status: Optional[int]
    code: Optional[str]
    request_id: Optional[str]
    next_action: Optional[str]
    decision: Decision
    error: Optional[str] = None

    @property
    def label(self) -> str:
        """ "503 queue_full", "402", or "no response" for a transport error."""
        return "no response" if self.status is None else status_label(self.status, self.code)


@dataclass
class RequestState:
    """Mutable state of one logical request; owned by the thread that sends it."""

    start: float
    method: str = ""
    url: str = ""
    key: Optional[str] = None
    replayable: bool = True
    attempts: List[Attempt] = field(default_factory=list)
    hops: int = 1  # requests sent without a retry: the first, and one per redirect

    @property
    def retries(self) -> int:
        """Retries decided so far (each one sends one more request)."""
        return sum(1 for a in self.attempts if a.decision.verdict is Verdict.RETRY)

    @property
    def waits(self) -> Tuple[float, ...]:
        """The waits decided so far, in order."""
        return tuple(a.decision.wait or 0.0 for a in self.attempts if a.decision.retry)


@dataclass
class LogicalRequest:
    """One session request across its redirects: start, attempts so far, final record.

    ``owner`` is the adapter that serves it, so an unrelated adapter used meanwhile
    (say, from a response hook) keeps its own accounting.
    """

    start: float
    owner: object = None
    attempts: List[Attempt] = field(default_factory=list)
    hops: int = 0
    record: Optional[SumeRecord] = None


#: Set by SumeAdapter.send for the duration of one send; read by SumeRetry.increment.
current_request: ContextVar[Optional[RequestState]] = ContextVar("sume_request", default=None)
#: Set by SumeSession.request so the deadline and the outcome span redirects.
current_logical: ContextVar[Optional[LogicalRequest]] = ContextVar("sume_logical", default=None)
