"""A Finagle-style retry budget: retries may add only a fraction of recent traffic (the rule is
``_pacing.retry_wait``, the one RedisFleet runs in Lua)."""

from __future__ import annotations

import copy
import math
import threading
import time
import weakref
from typing import Any, Callable, ClassVar, Dict, Optional, Type

from .. import _fork
from .._config import check_clock
from .._errors import ConfigurationError
from . import _core as _pacing


class RetryBudget:
    """Allows retries up to ``ratio`` of recent requests, with a floor of ``min_per_second``.

    Requests and retries are counted with a weight that decays by e every ``window``
    seconds; the allowance is the larger of ``ratio`` per request and the floor's
    ``min_per_second * window``, and a retry needs one unit of it free. A new budget can
    therefore retry a burst of ``min_per_second * window`` at once (low traffic such as cron
    jobs can always retry), a spent one refills smoothly, and under sustained failure of busy
    traffic retries settle at ``ratio`` of it. The same rule as a fleet's budget
    (``RedisFleet(retry_budget=...)``, ``LocalFleet(retry_budget=...)``): :meth:`reserve`
    says how long a retry waits for its unit, as the fleet's turn does; :meth:`try_spend`
    is a retry that cannot wait. Thread-safe; O(1) per call.
    """

    # record_request's step (µs), set per budget; 0 (always decay) for one unpickled from a
    # release that did not have it.
    _step = 0
    _shared: ClassVar[Optional[RetryBudget]] = None
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        ratio: float = 0.2,
        window: float = 10.0,
        min_per_second: float = 10.0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ratio = _check(ratio, "ratio", high=1000.0)
        # A day at most: a budget counts recent traffic, and RedisFleet hands the window to Lua
        # in microseconds, exact as a double only up to about 285 years (absurd far sooner).
        self._window = _check(window, "window", positive=True, high=86_400.0)
        if self._window < 1e-3:  # counts decay per window, in whole microseconds
            raise ConfigurationError(f"window must be at least 0.001 seconds, got {window!r}")
        self._min_per_second = _check(min_per_second, "min_per_second", high=1e6)
        check_clock(clock, "clock")
        self._clock = clock
        self._allowance = _pacing.RetryAllowance(
            self._ratio, round(self._window * _pacing.SECOND), self._min_per_second
        )
        self._lock = threading.Lock()
        self._counts = _pacing.RetryCounts()
        # record_request's step (µs): a 1024th of the window, 10 ms by default.
        self._step = self._allowance.window // 1024
        _LIVE.add(self)

    @classmethod
    def shared(cls) -> RetryBudget:
        """The one process-wide budget with default settings, created on first use."""
        budget = RetryBudget._shared
        if budget is None:
            with RetryBudget._shared_lock:
                if RetryBudget._shared is None:
                    RetryBudget._shared = RetryBudget()
                budget = RetryBudget._shared
        return budget

    @property
    def ratio(self) -> float:
        """Retries each logical request earns."""
        return self._ratio

    @property
    def window(self) -> float:
        """Seconds in which a request or a retry counts for 1/e of what it did."""
        return self._window

    @property
    def min_per_second(self) -> float:
        """Retries per second allowed whatever the traffic (the floor)."""
        return self._min_per_second

    @property
    def allowance(self) -> _pacing.RetryAllowance:
        """The rule in microseconds, as a fleet applies it to each key (its counts are the key's)."""
        return self._allowance

    @property
    def balance(self) -> float:
        """Retry units available now."""
        with self._lock:
            counts, allowance = self._counts, self._allowance
            _pacing.retry_wait(counts, allowance, self._now(), _pacing.FIRST)  # decays to now
            floor = allowance.floor * allowance.window / _pacing.SECOND
            return max(floor, allowance.ratio * counts.recent_firsts) - counts.recent_retries

    def record_request(self) -> None:
        """Count one logical request (not its retries): it earns ``ratio`` of a retry."""
        now = self._now()
        with self._lock:
            counts = self._counts
            if 0 <= now - counts.counted_at < self._step:
                # Every request calls this: within a step of the counts' time it is counted as
                # of that time, without decaying them (an exp) first. It then weighs at most
                # e**(-1/1024) less than it should, 0.1%: a budget a hair stricter.
                counts.recent_firsts += 1
                return
            _pacing.retry_wait(counts, self._allowance, now, _pacing.FIRST)
            _pacing.count_attempt(counts, _pacing.FIRST)

    def reserve(self, time_left: float = math.inf) -> Optional[float]:
        """Spend one unit for a retry: the seconds it waits for the unit to be free (0: now), or
        None (nothing spent) when that wait passes ``time_left`` or the floor never refills."""
        with self._lock:
            wait = _pacing.retry_wait(self._counts, self._allowance, self._now(), _pacing.ERROR)
            if wait < 0 or wait > time_left * _pacing.SECOND:
                return None
            _pacing.count_attempt(self._counts, _pacing.ERROR)
            return wait / _pacing.SECOND

    def try_spend(self) -> bool:
        """Spend one unit for a retry that cannot wait; False (and nothing spent) when none is free."""
        return self.reserve(0.0) is not None

    def _now(self) -> int:
        now = self._clock()
        return round(now * _pacing.SECOND) if math.isfinite(now) else self._counts.counted_at

    def __reduce__(self) -> Any:
        if self is RetryBudget._shared:
            return (RetryBudget.shared, ())  # still the one process-wide budget
        return (_blank, (type(self),), self.__getstate__())

    def __getstate__(self) -> Dict[str, Any]:
        with self._lock:  # a consistent picture, with counts of its own
            state = {k: v for k, v in self.__dict__.items() if k != "_lock"}
            state["_counts"] = copy.copy(self._counts)
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        _LIVE.add(self)

    def _start_over(self) -> None:
        """Forget every request and retry, with a new lock (after a fork)."""
        self._lock = threading.Lock()
        self._counts = _pacing.RetryCounts()

    def __repr__(self) -> str:
        return (
            f"RetryBudget(ratio={self._ratio:g}, window={self._window:g}, "
            f"min_per_second={self._min_per_second:g}, balance={self.balance:.1f})"
        )

# Budgets made in this process: a forked child starts each one afresh, as a new process
# would (the parent's traffic is not the child's).
_LIVE: weakref.WeakSet[RetryBudget] = weakref.WeakSet()


def _fresh_in_child() -> None:
    for budget in list(_LIVE):
        budget._start_over()


_fork.in_child(_fresh_in_child)


def _blank(cls: Type[RetryBudget]) -> RetryBudget:
    return cls.__new__(cls)


def _check(value: Any, name: str, *, high: float = math.inf, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(f"{name} must be a number, got {value!r}")
    low_ok = value > 0 if positive else value >= 0
    if not math.isfinite(value) or not low_ok or value > high:
        need = "> 0" if positive else ">= 0"
        if math.isfinite(high):
            need = f"between 0 and {high:g}"
        raise ConfigurationError(f"{name} must be finite and {need}, got {value!r}")
    return float(value)
