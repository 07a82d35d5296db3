"""Observers that tests name by dotted path in SUME["OBSERVERS"]."""

from __future__ import annotations

import threading
from typing import Any, List


class CountingObserver:
    """Counts outcomes; one instance per construction, so tests can see how many were built."""

    built = 0

    def __init__(self) -> None:
        type(self).built += 1
        self._lock = threading.Lock()
        self.outcomes: List[Any] = []

    def on_outcome(self, record: Any) -> None:
        """Keep the record."""
        with self._lock:
            self.outcomes.append(record)


#: An observer object named directly by its path: used as it is.
SHARED = CountingObserver()


def make_observer() -> CountingObserver:
    """A factory: called with no arguments."""
    return CountingObserver()


class NotAnObserver:
    """Has none of the observer hooks."""


class JobCounter:
    """Has on_job only: counts job events by kind."""

    def __init__(self) -> None:
        self.kinds: List[str] = []

    def on_job(self, event: Any) -> None:
        """Keep the event's kind."""
        self.kinds.append(event.kind)


class NeedsArguments:
    """Cannot be built with no arguments."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint

    def on_outcome(self, record: Any) -> None:
        """Never called."""


NUMBER = 42
