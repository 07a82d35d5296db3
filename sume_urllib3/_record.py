"""What happened to one logical request: the record, the retry event, the observer protocol."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol, Tuple

from ._policy import Outcome


@dataclass(frozen=True)
class SumeRecord:
    """The outcome of one logical request, attached to responses as ``response.sume``.

    ``attempts`` counts requests sent; ``waits`` are the seconds slept between them;
    ``request_ids`` are the server's ids, one per attempt that got one. It never holds
    a secret: only the first characters of the idempotency key are shown by ``repr``.
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
    wait_source: str  # "retry_after" | "backoff" | "fixed"
    status: Optional[int]
    code: Optional[str]
    request_id: Optional[str]
    key_prefix: Optional[str]
    reason: str
    error: Optional[str] = None  # transport error class name when there was no response


class SumeObserver(Protocol):
    """Receives every retry and every final outcome, on the requesting thread."""

    def on_retry(self, event: RetryEvent) -> None:
        """Called before each wait."""

    def on_outcome(self, record: SumeRecord) -> None:
        """Called once per logical request, with its final record."""


def key_prefix(key: Optional[str]) -> Optional[str]:
    """The first 8 characters of an idempotency key: enough to find it, not to reuse it."""
    if not key:
        return None
    return key[:8] + "…" if len(key) > 8 else key
