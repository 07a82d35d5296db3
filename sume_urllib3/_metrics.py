"""Thread-safe counters of outcomes, retry reasons, attempts, pacing and jobs."""

from __future__ import annotations

import collections
import threading
import weakref
from typing import Any, Collection, Counter, Dict

from . import _fork
from ._helpers import LockFreePickle
from ._record import JOB_EVENT_KINDS, Outcome, RetryEvent, SumeRecord

#: Distinct retry reasons counted before the rest go under "other": codes come from the
#: server, and a label set that grows without bound is a memory leak in a metrics store.
MAX_REASONS = 50
#: What ``on_job`` counts: polls, and how waited-for jobs ended.
#: ``snapshot()["jobs"]``'s keys: each JobEvent kind, a poll counted as "polls".
JOB_EVENTS = tuple("polls" if kind == "poll" else kind for kind in JOB_EVENT_KINDS)
_OUTCOMES = tuple(outcome.value for outcome in Outcome)
# Outcome -> its value, looked up rather than computed (Enum.value is a slow descriptor).
_KEYS: Dict[Any, str] = {outcome: outcome.value for outcome in Outcome}


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


class SumeMetrics(LockFreePickle):
    """An observer that counts outcomes, retries by reason, attempts, pacing and jobs.

    One object may serve many sessions (Django shares one per process); every method is
    thread-safe. ``snapshot()`` gives plain dicts with string keys.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()
        _LIVE.add(self)

    def _reset(self) -> None:
        self._outcomes: Counter[str] = collections.Counter(dict.fromkeys(_OUTCOMES, 0))
        self._retries: Counter[str] = collections.Counter()
        self._attempts: Counter[int] = collections.Counter()
        self._held = 0
        self._paced = 0.0
        self._refused = 0
        self._fallbacks = 0
        self._jobs: Counter[str] = collections.Counter(dict.fromkeys(JOB_EVENTS, 0))

    def on_retry(self, event: RetryEvent) -> None:
        """Count one retry under its reason."""
        reason = retry_reason(event)
        with self._lock:
            retries = self._retries
            if reason not in retries and len(retries) >= MAX_REASONS:
                reason = "other"  # bounded_reason, inline: this runs on every retry
            retries[reason] += 1

    def on_outcome(self, record: SumeRecord) -> None:
        """Count one logical request: its outcome, attempts and the time the fleet held it."""
        key = _KEYS.get(record.outcome) or str(record.outcome)
        with self._lock:
            self._outcomes[key] += 1
            self._attempts[record.attempts] += 1
        if record.paced or record.fleet_refused or record.fleet_fallbacks:
            self._count_pacing(record)

    def _count_pacing(self, record: SumeRecord) -> None:
        with self._lock:
            if record.paced:
                self._held += 1
                self._paced += record.paced
            if record.fleet_refused:
                self._refused += 1
            self._fallbacks += record.fleet_fallbacks

    def on_job(self, event: Any) -> None:
        """Count one job event (a ``JobEvent``): a poll, or a wait that completed, failed or timed out."""
        kind = getattr(event, "kind", None)
        key = "polls" if kind == "poll" else kind
        if not isinstance(key, str) or key not in self._jobs:
            return  # a kind this version does not know: nothing to count it under
        with self._lock:
            self._jobs[key] += 1

    @property
    def total(self) -> int:
        """Logical requests counted so far."""
        with self._lock:
            return sum(self._outcomes.values())

    def snapshot(self) -> Dict[str, Dict[str, Any]]:
        """A consistent copy: outcomes, retries, attempts, pacing and jobs, string keys."""
        with self._lock:
            return {
                "outcomes": dict(self._outcomes),
                "retries": dict(sorted(self._retries.items())),
                "attempts": {str(n): self._attempts[n] for n in sorted(self._attempts)},
                "pacing": {
                    "held": self._held,
                    "wait_seconds": round(self._paced, 6),
                    "refused": self._refused,
                    "fleet_fallbacks": self._fallbacks,
                },
                "jobs": dict(self._jobs),
            }

    def reset(self) -> None:
        """Set every counter back to zero."""
        with self._lock:
            self._reset()

    def __setstate__(self, state: Dict[str, Any]) -> None:
        super().__setstate__(state)
        _LIVE.add(self)

    def __repr__(self) -> str:
        snap = self.snapshot()
        return f"SumeMetrics(total={sum(snap['outcomes'].values())}, outcomes={snap['outcomes']!r})"


# Counters made in this process: a forked child (gunicorn --preload) starts its own at zero,
# with new locks (another thread may have held one at the fork, and would never let go).
_LIVE: weakref.WeakSet[SumeMetrics] = weakref.WeakSet()


def _fresh_in_child() -> None:
    for metrics in list(_LIVE):
        metrics._lock = threading.Lock()
        metrics._reset()


_fork.in_child(_fresh_in_child)
