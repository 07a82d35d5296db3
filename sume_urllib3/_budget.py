"""A Finagle-style retry budget: retries may add only a fraction of recent traffic."""

from __future__ import annotations

import math
import threading
import time
import weakref
from typing import Any, Callable, ClassVar, Dict, List, Optional, Type

from . import _fork
from ._errors import ConfigurationError

# The window is cut into this many buckets, so an entry expires between
# (1 - 1/_BUCKETS) * window and window after it was made; memory and time per call
# stay constant however busy the session is.
_BUCKETS = 10
# ratio * requests is a float product; without a little slack 0.57 * 100 = 56.99999...
# would refuse the 57th token.
_EPSILON = 1e-9


class RetryBudget:
    """Allows retries up to ``ratio`` of the last ``window`` seconds' requests, with a floor.

    The allowance is the larger of ``ratio`` per logical request and a floor of
    ``min_per_second * window``; the balance is that allowance minus the retries made,
    where requests and retries count only while they are younger than ``window``. A new
    budget can therefore retry a burst of ``min_per_second * window`` at once (low
    traffic such as cron jobs can always retry), a spent budget refills as its old
    retries age out and new requests arrive, and under sustained failure of busy
    traffic retries settle at ``ratio`` of it. Thread-safe; O(1) per call.
    """

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
        if self._window < 1e-3:  # buckets of window/10 must stay a usable float divisor
            raise ConfigurationError(f"window must be at least 0.001 seconds, got {window!r}")
        self._min_per_second = _check(min_per_second, "min_per_second", high=1e6)
        _check_clock(clock)
        self._clock = clock
        self._width = self._window / _BUCKETS
        self._reserve = self._min_per_second * self._window
        self._lock = threading.Lock()
        self._bucket_requests: List[int] = [0] * _BUCKETS
        self._bucket_retries: List[int] = [0] * _BUCKETS
        self._head: Optional[int] = None  # absolute index of the newest bucket
        # The newest bucket's time span: a deposit inside it needs no lock and no advance.
        self._head_start = math.inf
        self._head_end = -math.inf
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
        """Retry tokens deposited per logical request."""
        return self._ratio

    @property
    def window(self) -> float:
        """Seconds a deposit or a withdrawal counts for."""
        return self._window

    @property
    def min_per_second(self) -> float:
        """Retries per second allowed whatever the traffic (the floor)."""
        return self._min_per_second

    @property
    def balance(self) -> float:
        """Retry tokens available now."""
        with self._lock:
            self._advance()
            return self._balance()

    def record_request(self) -> None:
        """Deposit ``ratio`` tokens for one logical request (not for its retries).

        Every request makes one deposit, so the common case takes no lock: two threads
        depositing at the same instant may count one request instead of two, which only
        makes the budget a little stricter; buckets are still advanced under the lock.
        """
        now = self._clock()
        if self._head_start <= now < self._head_end:
            self._bucket_requests[self._head % _BUCKETS] += 1  # type: ignore[operator]
            return
        with self._lock:
            slot = self._advance()
            self._bucket_requests[slot] += 1

    def try_spend(self) -> bool:
        """Withdraw one token for a retry; False (and nothing withdrawn) when too few are left."""
        with self._lock:
            slot = self._advance()
            if self._balance() < 1.0 - _EPSILON:
                return False
            self._bucket_retries[slot] += 1
            return True

    def __reduce__(self) -> Any:
        if self is RetryBudget._shared:
            return (RetryBudget.shared, ())  # still the one process-wide budget
        return (_blank, (type(self),), self.__getstate__())

    def __getstate__(self) -> Dict[str, Any]:
        with self._lock:  # a consistent picture, with bucket lists of its own
            state = {k: v for k, v in self.__dict__.items() if k != "_lock"}
            state["_bucket_requests"] = list(self._bucket_requests)
            state["_bucket_retries"] = list(self._bucket_retries)
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        _LIVE.add(self)

    def _start_over(self) -> None:
        """Forget every deposit and withdrawal, with a new lock (after a fork)."""
        self._lock = threading.Lock()
        self._clear()
        self._head, self._head_start, self._head_end = None, math.inf, -math.inf

    def __repr__(self) -> str:
        return (
            f"RetryBudget(ratio={self._ratio:g}, window={self._window:g}, "
            f"min_per_second={self._min_per_second:g}, balance={self.balance:.1f})"
        )

    def _balance(self) -> float:
        # The floor is a minimum allowance, not a bonus: at busy times only the ratio counts,
        # so a total outage amplifies traffic by 1 + ratio, not 1 + ratio + floor/rate.
        return max(self._reserve, self._ratio * sum(self._bucket_requests)) - sum(self._bucket_retries)

    def _advance(self) -> int:
        """Expire buckets older than the window; return the slot of the current bucket."""
        now = self._clock()
        head = self._head
        if head is not None and self._head_start <= now < self._head_end:
            return head % _BUCKETS  # still the newest bucket: nothing expires
        index = math.floor(now / self._width) if math.isfinite(now) else None
        if head is None:
            head = index if index is not None else 0
        elif index is not None and index > head:
            if index - head >= _BUCKETS:
                self._clear()
            else:
                for absolute in range(head + 1, index + 1):
                    self._bucket_requests[absolute % _BUCKETS] = 0
                    self._bucket_retries[absolute % _BUCKETS] = 0
            head = index
        elif index is not None and index < head:
            # The clock stepped back (a wall clock, or a budget unpickled on another host):
            # keep the counts, all in the newest bucket, so they age out within one window
            # instead of the budget waiting for the clock to catch up.
            requests, retries = sum(self._bucket_requests), sum(self._bucket_retries)
            self._clear()
            head = index
            self._bucket_requests[head % _BUCKETS] = requests
            self._bucket_retries[head % _BUCKETS] = retries
        self._set_head(head)
        return head % _BUCKETS

    def _set_head(self, head: int) -> None:
        self._head = head
        # Publish the span last: the lock-free deposit reads it before the head.
        self._head_start, self._head_end = head * self._width, (head + 1) * self._width

    def _clear(self) -> None:
        self._bucket_requests = [0] * _BUCKETS
        self._bucket_retries = [0] * _BUCKETS


# Budgets made in this process: a forked child starts each one afresh, as a new process
# would (the parent's traffic is not the child's).
_LIVE: weakref.WeakSet[RetryBudget] = weakref.WeakSet()


def _fresh_in_child() -> None:
    for budget in list(_LIVE):
        budget._start_over()


_fork.in_child(_fresh_in_child)


def _blank(cls: Type[RetryBudget]) -> RetryBudget:
    return cls.__new__(cls)


def _check_clock(clock: Any) -> None:
    """Checked once here, so a clock that cannot be read fails the constructor, not a request."""
    if not callable(clock):
        raise ConfigurationError(f"clock must be a callable returning seconds, got {type(clock).__name__}")
    try:
        now = clock()
    except Exception as exc:
        raise ConfigurationError(
            f"clock must be a callable returning seconds; reading it raised {type(exc).__name__}"
        ) from None
    if isinstance(now, bool) or not isinstance(now, (int, float)) or not math.isfinite(now):
        raise ConfigurationError(f"clock must return a finite number of seconds, got {type(now).__name__}")


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
