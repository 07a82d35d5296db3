"""Thread-safe counters of outcomes, retry reasons and attempts."""

from __future__ import annotations

import threading
from typing import Any, Collection, Dict

from ._policy import Outcome
from ._record import RetryEvent, SumeRecord

#: Distinct retry reasons counted before the rest go under "other": codes come from the
#: server, and a label set that grows without bound is a memory leak in a metrics store.
MAX_REASONS = 50


def bounded_reason(reason: str, seen: Collection[str]) -> str:
    """``reason`` itself while fewer than MAX_REASONS are known, else "other"."""
    return reason if reason in seen or len(seen) < MAX_REASONS else "other"


def retry_reason(event: RetryEvent) -> str:
    """The label a retry is counted under: error code, else status, else error class."""
    if event.code:
        return event.code
    if event.status is not None:
        return str(event.status)
    if event.error:
        return event.error
    return "unknown"


class SumeMetrics:
    """An observer that counts outcomes, retries by reason and attempts per request."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._outcomes: Dict[str, int] = _zero_outcomes()
        self._retries: Dict[str, int] = {}
        self._attempts: Dict[int, int] = {}

    def on_retry(self, event: RetryEvent) -> None:
        """Count one retry under its reason."""
        reason = retry_reason(event)
        with self._lock:
            reason = bounded_reason(reason, self._retries)
            self._retries[reason] = self._retries.get(reason, 0) + 1

    def on_outcome(self, record: SumeRecord) -> None:
        """Count one logical request: its outcome and how many attempts it took."""
        outcome = Outcome(record.outcome).value
        with self._lock:
            self._outcomes[outcome] += 1
            self._attempts[record.attempts] = self._attempts.get(record.attempts, 0) + 1

    @property
    def total(self) -> int:
        """Logical requests counted so far."""
        with self._lock:
            return sum(self._outcomes.values())

    def snapshot(self) -> Dict[str, Dict[str, int]]:
        """A consistent copy: ``{"outcomes": ..., "retries": ..., "attempts": ...}``, string keys."""
        with self._lock:
            return {
                "outcomes": dict(self._outcomes),
                "retries": dict(sorted(self._retries.items())),
                "attempts": {str(n): self._attempts[n] for n in sorted(self._attempts)},
            }

    def reset(self) -> None:
        """Set every counter back to zero."""
        with self._lock:
            self._outcomes = _zero_outcomes()
            self._retries = {}
            self._attempts = {}

    def __getstate__(self) -> Dict[str, Any]:
        with self._lock:
            state = {k: v for k, v in self.__dict__.items() if k != "_lock"}
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        snap = self.snapshot()
        return f"SumeMetrics(total={sum(snap['outcomes'].values())}, outcomes={snap['outcomes']!r})"


def _zero_outcomes() -> Dict[str, int]:
    return {outcome.value: 0 for outcome in Outcome}
