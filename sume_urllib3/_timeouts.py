"""Per-attempt timeouts: every form requests accepts, each capped by the time left."""

from __future__ import annotations

import functools
import time
from typing import Any, Callable, Optional, Tuple, Union

from urllib3.util.timeout import Timeout

from . import _sleeping
from ._checks import MAX_SECONDS
from ._errors import ConfigurationError

#: What ``timeout=`` may be: seconds, a (connect, read) pair whose members may be None
#: (wait forever), or a urllib3 ``Timeout``, exactly as ``requests`` accepts per call.
TimeoutSpec = Union[float, Tuple[Optional[float], Optional[float]], Timeout, None]

#: The shortest timeout an attempt is given when little time is left: an attempt that
#: may start at all gets a chance to connect, and the overshoot stays under a tenth of a second.
MIN_ATTEMPT_TIMEOUT = 0.1


def check_timeout(timeout: Any, name: str = "timeout") -> TimeoutSpec:
    """``timeout`` unchanged when requests would accept it and a socket can use it (at most
    ``MAX_SECONDS``: a longer one raises ``OverflowError`` on every request); else a
    ConfigurationError."""
    if timeout is None:
        return timeout
    if isinstance(timeout, Timeout):
        values = (timeout._connect, timeout._read, timeout.total)
        if not all(v is None or v is Timeout.DEFAULT_TIMEOUT or _seconds(v) for v in values):
            raise ConfigurationError(
                f"{name}: a urllib3 Timeout's connect, read and total must be None or seconds > 0 "
                f"and at most {MAX_SECONDS:.0f}, got {timeout!r}"
            )
        return timeout
    if isinstance(timeout, tuple):
        if len(timeout) != 2 or not all(v is None or _seconds(v) for v in timeout):
            raise ConfigurationError(
                f"{name} must be seconds > 0 and at most {MAX_SECONDS:.0f}, a (connect, read) pair of "
                f"them (None: no limit) or a urllib3 Timeout, got {timeout!r}"
            )
        return timeout
    if not _seconds(timeout):
        # requests' own wording is kept ("must be an int, float or None"): callers match on it.
        raise ConfigurationError(
            f"{name} must be seconds > 0 and at most {MAX_SECONDS:.0f} (it must be an int, float or "
            f"None), a (connect, read) pair or a urllib3 Timeout, got {timeout!r}"
        )
    return timeout  # type: ignore[no-any-return]


def _seconds(value: Any) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and 0 < value <= MAX_SECONDS  # NaN and inf fail this too, and an int past float range
    )


class DeadlineTimeout(Timeout):
    """A urllib3 ``Timeout`` whose every attempt is capped by the time left to a deadline.

    urllib3 calls ``clone()`` at the start of every attempt of one ``urlopen``, retries
    included, so the cap follows the clock: no attempt's connect or read may outlive the
    logical request's ``max_elapsed``.
    """

    deadline: float
    clock: Callable[[], float]

    def __init__(
        self,
        timeout: TimeoutSpec,
        deadline: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        base = _as_timeout(timeout)
        super().__init__(total=base.total, connect=base._connect, read=base._read)
        self.deadline = deadline
        self.clock = clock

    def clone(self) -> Timeout:
        """A plain Timeout for one attempt, its total capped by the time left."""
        left = max(self.deadline - _sleeping.now(self.clock), MIN_ATTEMPT_TIMEOUT)
        total = min(self.total, left) if isinstance(self.total, (int, float)) else left
        return _timeout(self._connect, self._read, total)


def capped(timeout: TimeoutSpec, deadline: float, clock: Callable[[], float]) -> TimeoutSpec:
    """``timeout`` capped by the deadline, when the clock is real time.

    An injected clock or a test's no-sleep mode measures time that did not really
    pass, so socket timeouts are left as they are there.
    """
    if not on_real_time(clock):
        return timeout
    base = _as_timeout(timeout)
    # Made on every request: copy the checked values rather than validate them again.
    result: DeadlineTimeout = object.__new__(DeadlineTimeout)
    result.__dict__.update(base.__dict__)
    result.deadline, result.clock = deadline, clock
    return result


def on_real_time(clock: Callable[[], float]) -> bool:
    """Whether ``clock`` is the time sockets wait in (not a test's injected or no-sleep time)."""
    return clock is time.monotonic and _sleeping.active_recorder() is None


@functools.lru_cache(maxsize=64)
def _checked(timeout: Union[float, Tuple[Optional[float], Optional[float]], None]) -> Timeout:
    if isinstance(timeout, tuple):
        return Timeout(connect=timeout[0], read=timeout[1])
    return Timeout(connect=timeout, read=timeout)


def _as_timeout(timeout: TimeoutSpec) -> Timeout:
    """A validated urllib3 Timeout for any form requests accepts (cached: one per value)."""
    if isinstance(timeout, Timeout):
        return timeout
    return _checked(timeout)


def _timeout(connect: Any, read: Any, total: Optional[float]) -> Timeout:
    """A Timeout from values already validated (urllib3 checks them again in ``__init__``)."""
    result: Timeout = object.__new__(Timeout)
    result.__dict__.update(_connect=connect, _read=read, total=total, _start_connect=None)
    return result
