"""How retries wait: a real sleep, or a recording when tests switch sleeping off."""

from __future__ import annotations

import threading
import time
from typing import Callable, List, Optional


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
        self._horizon = 0.0  # the most seconds any thread has recorded (its time furthest on)

    @property
    def waits(self) -> List[float]:
        """Every wait recorded so far, in order (a copy)."""
        with self._lock:
            return list(self._waits)

    @property
    def total(self) -> float:
        """Seconds that would have been slept, by every thread."""
        with self._lock:
            return sum(self._waits)

    def slept_here(self) -> float:
        """Seconds this thread would have slept; its retries add it to their clock."""
        return float(getattr(self._local, "slept", 0.0))

    def record(self, seconds: float) -> None:
        """Note one wait instead of sleeping."""
        slept = self.slept_here() + seconds
        self._local.slept = slept
        with self._lock:
            self._waits.append(seconds)
            self._horizon = max(self._horizon, slept)

    def catch_up(self) -> float:
        """Move this thread's time up to the furthest any thread has reached; its seconds slept."""
        slept = max(self.slept_here(), self._horizon)
        self._local.slept = slept
        return slept

    @property
    def horizon(self) -> float:
        """The furthest any thread's time has reached (what :meth:`catch_up` moves a thread to)."""
        return self._horizon

    def clear(self) -> None:
        """Forget the recorded waits."""
        with self._lock:
            self._waits.clear()

    def __repr__(self) -> str:
        return f"SleepRecorder(waits={self.waits!r})"


_recorder: Optional[SleepRecorder] = None


def active_recorder() -> Optional[SleepRecorder]:
    """The recorder in force, if tests switched sleeping off."""
    return _recorder


def install_recorder(recorder: Optional[SleepRecorder]) -> Optional[SleepRecorder]:
    """Switch sleeping off (or back on with None); returns the previous recorder."""
    global _recorder
    previous, _recorder = _recorder, recorder
    return previous


def wait(seconds: float, sleep: Callable[[float], None]) -> None:
    """Sleep ``seconds`` with ``sleep``, unless a recorder is installed."""
    recorder = _recorder
    if recorder is not None:
        recorder.record(seconds)
    elif seconds > 0:
        sleep(seconds)


def now(clock: Callable[[], float]) -> float:
    """``clock()`` plus the time this thread recorded instead of slept, so deadlines hold."""
    recorder = _recorder
    return clock() + (recorder.slept_here() if recorder is not None else 0.0)


def monotonic() -> float:
    """``time.monotonic()`` plus the time this thread recorded instead of slept."""
    return now(time.monotonic)


def shared_monotonic() -> float:
    """The clock of state every thread shares (a fleet's turns): ``time.monotonic()`` in
    production; under ``no_sleep()`` the virtual time of the thread furthest on, which the
    calling thread catches up to (see :meth:`SleepRecorder.catch_up`)."""
    recorder = _recorder
    if recorder is None:
        return time.monotonic()
    return time.monotonic() + recorder.catch_up()


def virtual_offset() -> float:
    """Seconds the shared clock is ahead of real time (0 outside ``no_sleep()``)."""
    recorder = _recorder
    return recorder.catch_up() if recorder is not None else 0.0


def virtual_horizon() -> float:
    """What :func:`virtual_offset` reads now, without moving this thread's time: for stamping an
    event whose age is told later (0 outside ``no_sleep()``)."""
    recorder = _recorder
    return recorder.horizon if recorder is not None else 0.0


def default_sleep(seconds: float) -> None:
    """time.sleep looked up at call time, so monkeypatching time.sleep still works."""
    time.sleep(seconds)
