"""Switch retry sleeping off and record the waits instead: the virtual clock of tests."""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator, List

from .. import _sleeping
from ..pacing._fleet import shared_monotonic

__all__ = ["SleepRecorder", "no_sleep", "shared_monotonic"]  # the clock FakeSume's quota shares


class SleepRecorder:
    """Collects the waits retries asked for, and lets time appear to pass by that much.

    Time passes per thread, as real sleeps do: one thread's recorded waits never eat
    into another thread's deadline. A fleet, whose turns every thread shares, reads the
    clock through :meth:`catch_up`: a thread that asks for a turn first moves up to the
    furthest time any thread has reached, as it would have in real time while the others
    slept, so the turns it is given are on the same clock as theirs.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waits: List[float] = []
        self._local = threading.local()
        self.horizon = 0.0
        """The furthest any thread's time has reached (what :meth:`catch_up` moves a thread to)."""

    @property
    def waits(self) -> List[float]:
        """Every wait recorded so far, in order (a copy)."""
        with self._lock:
            return list(self._waits)

    @property
    def total(self) -> float:
        """Seconds that would have been slept, by every thread."""
        return sum(self.waits)

    def slept_here(self) -> float:
        """Seconds this thread would have slept; its retries add it to their clock."""
        return float(getattr(self._local, "slept", 0.0))

    def record(self, seconds: float) -> None:
        """Note one wait instead of sleeping."""
        slept = self.slept_here() + seconds
        self._local.slept = slept
        with self._lock:
            self._waits.append(seconds)
            self.horizon = max(self.horizon, slept)

    def catch_up(self) -> float:
        """Move this thread's time up to the furthest any thread has reached; its seconds slept."""
        slept = max(self.slept_here(), self.horizon)
        self._local.slept = slept
        return slept

    def clear(self) -> None:
        """Forget the recorded waits."""
        with self._lock:
            self._waits.clear()

    def __repr__(self) -> str:
        return f"SleepRecorder(waits={self.waits!r})"


@contextlib.contextmanager
def no_sleep() -> Iterator[SleepRecorder]:
    """Within this block, retries record their waits instead of sleeping.

    Time appears to pass by the recorded waits, so deadlines still behave as in
    production: a test can assert "waited 1.0 s then 2.3 s, then gave up at the
    deadline" instantly. Process-wide, restored on exit: one virtual clock for every thread,
    so the waits of threads retrying at once add up, and count against each one's deadline.
    """
    recorder = SleepRecorder()
    previous = _sleeping.install_recorder(recorder)
    try:
        yield recorder
    finally:
        _sleeping.install_recorder(previous)
