"""When the polls of a job wait go, and how long each may take: pure, times in and times out.

``Jobs.wait`` carries this out; nothing here sends, sleeps or reads a clock.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

from urllib3.util.timeout import Timeout

#: Without a server hint, each wait is the previous one times this, up to ``max_interval``.
GROWTH = 1.5
#: Each unhinted wait is multiplied by U(low, high): spreads pollers, never exceeds max_interval.
JITTER = (0.95, 1.0)
#: The least time the last poll is given to come back before the deadline; polls that took
#: longer raise it to twice the slowest round trip seen in the wait, up to MAX_LAST_POLL_MARGIN
#: (a slower server has its last poll cut by the deadline rather than the wait end early).
LAST_POLL_MARGIN = 0.05
MAX_LAST_POLL_MARGIN = 1.0


class PollSchedule:
    """When the polls of one wait go: the one place that decides, from clock times and hints.

    One deadline. After a poll, the next one goes after the server's hint (never sooner
    than ``interval``), else after the unhinted pause, which grows x1.5 up to
    ``max_interval``. The last poll goes as late as it can and still come back by the
    deadline: ``margin`` before it, the time a poll is given to come back (twice the
    slowest round trip seen, at least LAST_POLL_MARGIN). An unhinted poll after which no
    other could fit is that last poll, so it moves there.
    """

    def __init__(self, deadline: float, interval: float, max_interval: float) -> None:
        self.deadline = deadline
        self.interval = interval
        self.max_interval = max_interval
        self.delay = interval  # the next unhinted pause, before jitter
        self.margin = LAST_POLL_MARGIN

    @property
    def latest(self) -> float:
        """The last moment a poll may start and still come back by the deadline."""
        return self.deadline - self.margin

    def took(self, round_trip: float) -> None:
        """Note how long a poll took on the wire: the last one gets twice the slowest."""
        self.margin = min(max(self.margin, 2.0 * round_trip), MAX_LAST_POLL_MARGIN)

    def next_poll(
        self, now: float, hint: Optional[float], jitter: Callable[[], float]
    ) -> Tuple[Optional[float], str]:
        """Seconds from ``now`` to the next poll, or None and why no poll fits before the deadline."""
        if hint is not None:
            pause = max(hint, self.interval)  # the server knows best, but never a tight loop
            if self.fits(now, pause):
                return pause, ""
            return None, f"the server asked to wait {pause:.1f}s more, past the deadline"
        pause = self.delay * jitter()
        self.delay = min(self.delay * GROWTH, self.max_interval)
        last = self.latest - now  # the longest pause after which a poll still comes back in time
        # Two polls closer than this would be a tight loop at the end of a short wait.
        gap = min(self.interval, self.margin)
        if pause <= last - gap - self.margin / 2:
            return pause, ""  # another poll can still follow this one
        if last >= gap:
            return last, ""  # the last poll: as late as it can go
        return None, "no time is left for another poll"

    def fits(self, now: float, pause: float) -> bool:
        """True when a poll ``pause`` seconds from ``now`` still comes back by the deadline."""
        return now + pause <= self.latest


def _limits(base: Any) -> Tuple[Optional[float], Optional[float]]:
    """The (connect, read) limits of a session timeout in any form requests takes; None: no limit."""
    if isinstance(base, Timeout):
        total = _number(base.total)
        connect, read = _number(base._connect), _number(base._read)
        if total is None:
            return connect, read
        return _least(connect, total), _least(read, total)
    if isinstance(base, tuple):
        return _number(base[0]), _number(base[1])
    return _number(base), _number(base)


def _number(value: Any) -> Optional[float]:
    """Seconds, or None for no limit (None, or urllib3's "socket default" marker)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _least(limit: Optional[float], cap: float) -> float:
    return cap if limit is None else min(limit, cap)


def poll_timeout(base: Any, left: float) -> Tuple[float, float]:
    """The session's (connect, read) timeout, neither part longer than ``left``."""
    connect, read = _limits(base)
    return _least(connect, left), _least(read, left)


def cut_by_deadline(base: Any, left: float) -> bool:
    """True when the time left, not the session's own timeout ``base``, limited the poll."""
    return any(part is None or left < part for part in _limits(base))
