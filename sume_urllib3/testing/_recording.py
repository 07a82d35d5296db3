"""An observer that keeps what it is told, for assertions in tests."""

from __future__ import annotations

import threading
from typing import List

from .. import SumeRecord
from ..observe import RetryEvent


class RecordingObserver:
    """Keeps every retry event and every outcome record, in order; thread-safe.

    Pass it as ``SumeSession(observers=[recorder])`` (or to ``SumeRetry``/``SumeAdapter``)
    and assert on ``recorder.retries`` and ``recorder.outcomes``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._retries: List[RetryEvent] = []
        self._outcomes: List[SumeRecord] = []

    @property
    def retries(self) -> List[RetryEvent]:
        """Every retry event so far (a copy)."""
        with self._lock:
            return list(self._retries)

    @property
    def outcomes(self) -> List[SumeRecord]:
        """Every final record so far (a copy)."""
        with self._lock:
            return list(self._outcomes)

    def on_retry(self, event: RetryEvent) -> None:
        """Keep one retry event."""
        with self._lock:
            self._retries.append(event)

    def on_outcome(self, record: SumeRecord) -> None:
        """Keep one final record."""
        with self._lock:
            self._outcomes.append(record)

    def __repr__(self) -> str:
        return f"RecordingObserver(retries={len(self.retries)}, outcomes={len(self.outcomes)})"
