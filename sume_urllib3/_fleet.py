"""Pacing before every attempt: cooldowns, a learned or configured pace, and slow start, per API key.

A fleet is asked before each attempt (``acquire``) and told what came back (``release``).
``LocalFleet`` keeps that state in one process, shared by every thread and session that
uses it; ``sume_urllib3.contrib.redis.RedisFleet`` shares it across processes.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import random
import re
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Dict, Mapping, Optional, Protocol, Set, Union

from . import _sleeping
from ._envelope import header
from ._errors import ConfigurationError
from ._ratelimit import Reading, may_carry_ratelimit, parse_ratelimit
from ._retry_after import parse_retry_after

log = logging.getLogger("sume_urllib3")

Rate = Union[str, float, int, None]

#: The longest cooldown one Retry-After can start (seconds): an absurd value (a year, a
#: bug) must not hold every request of a key for that long; the policy still refuses to
#: wait the full value and gives up, with the server's figure in its reason.
MAX_COOLDOWN = 600.0

#: The KeyId of requests sent without an API key.
ANONYMOUS = "anonymous"
# A key whose pace is unknown leaves slow start (and takes the lock-free path) once this
# many requests may be in flight: by then the server has had every chance to say its pace.
_OPEN_FACTOR = 16
_MIN_RATE = 1.0 / 86400.0  # one a day: below any real quota, so never a floor that beats one
_MAX_RATE = 1e6
_MAX_BURST = 1_000_000
_PROBE = 0.01  # a pace learned from 429s alone creeps up 1% per success, to find a raised quota
_PROBE_HEADERS = 0.05  # an estimated pace creeps up 5% per reply while over half the quota is left
_FIRST_RTT = 0.05  # seconds; how long slow start guesses a response takes before measuring one
_STALE = 60.0  # seconds after which an unreleased slow-start ticket no longer holds a slot
_EPS = 1e-9
_UNITS = {
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hour": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
}
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*/\s*([a-z]+?)s?\s*$")


def fleet_key(api_key: Union[str, bytes, None], origin: str = "") -> str:
    """The fleet's name for the key a request sends to an origin: a hash, never the key.

    ``"k"`` + 16 hex digits of the SHA-256 of (origin, key); a keyless request is paced per
    origin (``"o"`` + 16 hex digits), and only one with neither is :data:`ANONYMOUS`. Two
    base URLs (staging and production, two test servers) never share a pace, and neither
    do two tenants' keys sent by one session.
    """
    scope = origin.lower().encode("utf-8", "surrogatepass") + b"\0"
    if not api_key:
        return "o" + hashlib.sha256(scope).hexdigest()[:16] if origin else ANONYMOUS
    data = api_key if isinstance(api_key, bytes) else api_key.encode("utf-8", "surrogatepass")
    return "k" + hashlib.sha256(scope + data).hexdigest()[:16]


@dataclass(frozen=True)
class Grant:
    """The fleet's answer before one attempt: wait this long, then send; or do not send.

    ``wait`` is seconds from now (>= the caller's ``not_before``); ``refused`` a reason
    when nothing may be sent; ``source`` why there is a wait beyond ``not_before``
    ("pace", "cooldown" or "slow_start"); ``again`` asks a first attempt to wait, then
    acquire again; ``fallback`` marks a grant made locally because a shared store
    failed; ``token`` is opaque, for ``release``.
    """

    wait: float = 0.0
    refused: Optional[str] = None
    source: Optional[str] = None
    again: bool = False
    fallback: bool = False
    token: object = None


#: The success-path answer, shared so granting costs no allocation.
GRANT_NOW = Grant()


class Fleet(Protocol):
    """What a session asks before every attempt and tells after every response."""

    def acquire(
        self, key_id: str, *, time_left: float, retry: Optional[str] = None, not_before: float = 0.0
    ) -> Grant:
        """Reserve a turn for one attempt of a request of this API key; never raises or blocks."""
        ...

    def release(
        self,
        key_id: str,
        grant: Grant,
        status: Optional[int],
        headers: Optional[Mapping[str, str]],
    ) -> None:
        """Learn from what the attempt got (status None: no response); never raises."""
        ...


class _Ticket:
    """An in-flight slow-start attempt: when it was sent, and which key state counted it."""

    __slots__ = ("sent", "state")

    def __init__(self, sent: float, state: _Key) -> None:
        self.sent = sent
        self.state = state


class _Key:
    """Everything one process knows about one API key's pace. Guarded by ``lock``."""

    __slots__ = (
        "again",
        "burst",
        "cooldown_len",
        "cooldown_until",
        "cooldowns",
        "cwnd",
        "distrust",
        "flight",
        "held",
        "lock",
        "ok_since",
        "oks",
        "open",
        "rate",
        "refused",
        "source",
        "srtt",
        "tat",
        "throttled",
        "waited",
    )

    def __init__(self, rate: Optional[float], burst: int, window: int) -> None:
        self.lock = threading.Lock()
        self.open = False  # nothing known, nothing held: acquire answers GRANT_NOW without the lock
        self.rate = rate  # requests per second, or None while unknown
        self.burst = burst
        self.source: Optional[str] = "configured" if rate is not None else None
        self.tat = -math.inf  # GCRA's theoretical arrival time
        self.cooldown_until = -math.inf
        self.cooldown_len = 0.0
        self.cwnd = window
        self.flight: Set[_Ticket] = set()  # first attempts sent during slow start, not yet answered
        self.distrust = False  # a 429 came at a pace read from headers: take the next reading as is
        self.srtt: Optional[float] = None
        self.oks = 0  # successes since the last 429, and when the first of them came
        self.ok_since = 0.0
        self.held = self.refused = self.again = self.cooldowns = self.throttled = 0
        self.waited: Dict[str, float] = {"pace": 0.0, "cooldown": 0.0, "slow_start": 0.0}


class LocalFleet:
    """Paces the requests of one process per API key, shared by every thread and session.

    * **Cooldown**: a 429 or 503 with ``Retry-After`` holds every request of that key until
      it ends; held requests are released one pace step apart (or, while the pace is
      unknown, at random over a window as long as the cooldown), never all at once. One
      INFO line on the ``sume_urllib3`` logger says when a cooldown starts (naming the
      key's hash, never the key).
    * **Pace**: GCRA at ``rate`` (``"10/min"``, ``"20/s"``, ``"100/h"``, or requests per
      second as a number) with ``burst`` turns at once; else at the pace the server
      states (``RateLimit-*``, ``X-RateLimit-*``, the IETF draft ``RateLimit`` and
      ``RateLimit-Policy``), kept in step with its ``Remaining``; else at the rate that got
      through before a 429. A configured rate is never exceeded. There is no floor: a
      10/min quota is paced at 10/min.
    * **Slow start**: while a key's pace is unknown, only ``initial_window`` first
      attempts are in flight at once (more come back ``again``); each success opens the
      window by one, as TCP slow start does, until the pace is known or the window is
      wide enough to stop counting. A lone request is never delayed.
    * **Deadline**: a turn that would come after ``time_left`` is refused at once, with a
      reason naming the pace, and nothing is reserved.

    ``burst`` defaults to 1: turns are spaced evenly, which no quota (fixed or sliding
    window, token bucket) can reject. Thread-safe; when nothing is known and nothing is
    held, ``acquire`` is one dictionary look-up. ``clock`` (monotonic seconds), ``wall``
    (Unix time, for ``X-RateLimit-Reset`` timestamps) and ``rng`` (a ``random.Random`` or
    a callable returning [0, 1)) are injectable. After ``os.fork()`` the child starts
    with no state; a pickled fleet keeps its configuration only.
    """

    _default: ClassVar[Optional[LocalFleet]] = None
    _default_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        rate: Rate = None,
        burst: Optional[int] = None,
        *,
        clock: Callable[[], float] = _sleeping.shared_monotonic,
        rng: Union[random.Random, Callable[[], float], None] = None,
        initial_window: int = 4,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._rate_config = rate
        self._rate = parse_rate(rate)
        self._burst = _check_int(burst, "burst", 1, _MAX_BURST) if burst is not None else 1
        if burst is not None and self._rate is None:
            raise ConfigurationError("burst needs a rate: LocalFleet(rate='10/min', burst=5)")
        self._window = _check_int(initial_window, "initial_window", 1, 10_000)
        for name, value in (("clock", clock), ("wall", wall)):
            if not callable(value):
                raise ConfigurationError(f"{name} must be callable, got {type(value).__name__}")
        if rng is not None and not isinstance(rng, random.Random) and not callable(rng):
            raise ConfigurationError(f"rng must be a random.Random or a callable, got {type(rng).__name__}")
        self._clock = clock
        self._wall = wall
        self._rng = rng
        self._random: Callable[[], float] = (
            random.random if rng is None else rng.random if isinstance(rng, random.Random) else rng
        )
        self._keys: Dict[str, _Key] = {}
        _FLEETS.add(self)

    @classmethod
    def default(cls) -> LocalFleet:
        """The one process-wide fleet every session shares unless given another."""
        fleet = LocalFleet._default
        if fleet is None:
            with LocalFleet._default_lock:
                if LocalFleet._default is None:
                    # Time a test's no_sleep() mode recorded instead of slept counts here too.
                    LocalFleet._default = LocalFleet()
                fleet = LocalFleet._default
        return fleet

    # -- configuration -----------------------------------------------------------------

    @property
    def rate(self) -> Optional[float]:
        """The configured pace in requests per second, or None (learned)."""
        return self._rate

    @property
    def burst(self) -> int:
        """Turns a configured pace grants at once."""
        return self._burst

    @property
    def initial_window(self) -> int:
        """First attempts in flight at once for a key whose pace is unknown."""
        return self._window

    def __repr__(self) -> str:
        rate = "learned" if self._rate is None else _describe_rate(self._rate)
        return f"<LocalFleet rate={rate} burst={self._burst} keys={len(self._keys)}>"

    def __reduce__(self) -> Any:
        if self is LocalFleet._default:
            return (LocalFleet.default, ())
        return (_rebuild, (type(self), self._rate_config, self._burst if self._rate else None, self._window))

    # -- the protocol --------------------------------------------------------------------

    def acquire(
        self, key_id: str, *, time_left: float, retry: Optional[str] = None, not_before: float = 0.0
    ) -> Grant:
        """Reserve a turn for one attempt; see :class:`Fleet` and the class docstring."""
        state = self._keys.get(key_id)
        if state is not None and state.open:
            if not not_before:
                return GRANT_NOW
            if retry is not None and 0.0 < not_before <= time_left:
                # An open key has no pace, no cooldown and no slow start: the caller's own
                # wait is the turn (retries take no slow-start slot).
                return Grant(wait=not_before)
        try:
            return self._acquire(state, key_id, time_left, retry, not_before)
        except Exception:  # pacing must never cost a request
            log.debug("sume_urllib3: fleet acquire failed; sending unpaced", exc_info=True)
            return GRANT_NOW

    def release(
        self,
        key_id: str,
        grant: Grant,
        status: Optional[int],
        headers: Optional[Mapping[str, str]],
    ) -> None:
        """Learn cooldowns and the pace from one response; see :class:`Fleet`."""
        try:
            state = self._keys.get(key_id)
            if state is None:
                return  # a grant from before a fork (or a stranger's key): nothing to account
            if (
                state.open
                and status != 429
                and not may_carry_ratelimit(headers)
                and (status != 503 or headers is None or header(headers, "Retry-After") is None)
            ):
                return  # an open key and nothing to learn (no 429, no Retry-After, no RateLimit)
            reading = parse_ratelimit(headers, self._wall) if headers is not None else None
            if state.open and reading is None and status != 429 and status != 503:
                return
            self._release(state, key_id, grant, status, headers, reading)
        except Exception:
            log.debug("sume_urllib3: fleet release failed; ignored", exc_info=True)

    # -- introspection (tests, benchmarks, metrics) -------------------------------------------

    def pace(self, key_id: str) -> Optional[float]:
        """The pace a key is held to, in requests per second, or None while unknown."""
        state = self._keys.get(key_id)
        if state is None:
            return self._rate
        return state.rate

    def stats(self) -> Dict[str, float]:
        """Counters over every key: requests held, refused, sent ``again``, seconds waited."""
        totals: Dict[str, float] = {
            "held": 0,
            "refused": 0,
            "again": 0,
            "cooldowns": 0,
            "throttled": 0,
            "waited_pace": 0.0,
            "waited_cooldown": 0.0,
            "waited_slow_start": 0.0,
        }
        for state in list(self._keys.values()):
            with state.lock:
                totals["held"] += state.held
                totals["refused"] += state.refused
                totals["again"] += state.again
                totals["cooldowns"] += state.cooldowns
                totals["throttled"] += state.throttled
                for source, seconds in state.waited.items():
                    totals["waited_" + source] += seconds
        return totals

    # -- inside ----------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget every key's cooldown, pace and turns (a test's end; a fork's child)."""
        self._keys = {}

    _reset = reset  # the name earlier releases used

    def _state(self, key_id: str) -> _Key:
        state = self._keys.get(key_id)
        if state is None:
            # setdefault is atomic: two threads creating one key both get the same state.
            state = self._keys.setdefault(key_id, _Key(self._rate, self._burst, self._window))
        return state

    def _acquire(
        self,
        state: Optional[_Key],
        key_id: str,
        time_left: float,
        retry: Optional[str],
        not_before: float,
    ) -> Grant:
        now = self._clock()
        floor = _seconds(not_before)
        left = _seconds(time_left, default=math.inf)
        if state is None:
            state = self._state(key_id)
        with state.lock:
            start = now + floor
            source: Optional[str] = None
            if state.cooldown_until > start + _EPS:
                start, source = state.cooldown_until, "cooldown"
            if state.rate is not None:
                step = 1.0 / state.rate
                turn = max(start, state.tat - (state.burst - 1) * step)
                if turn > start + _EPS:
                    source = "pace"
                wait = turn - now
                if wait > left + _EPS:
                    return self._refuse(state, source, wait, left)
                state.tat = max(state.tat, turn) + step
                return self._granted(state, wait, floor, source, None)
            if source == "cooldown":
                # Nobody knows the pace: spread the held requests over a window as long as the
                # cooldown, so they do not all come back at the same instant.
                start += self._random() * state.cooldown_len
            wait = start - now
            if wait > left + _EPS:
                return self._refuse(state, source, wait, left)
            if retry is None and source == "cooldown":
                state.again += 1
                state.waited["cooldown"] += wait
                return Grant(wait=wait, source="cooldown", again=True)
            if retry is not None:
                # Slow start counts first attempts only: a retry is already bounded by the
                # policy and the budget, and may sleep a long backoff holding no slot.
                return self._granted(state, wait, floor, source, None)
            if len(state.flight) >= state.cwnd and not self._purge(state, now):
                pause = min(max(state.srtt if state.srtt is not None else _FIRST_RTT, 0.001), 1.0)
                pause *= 0.5 + self._random()
                if pause < left:  # a request about to miss its deadline goes rather than waits
                    state.again += 1
                    state.waited["slow_start"] += pause
                    return Grant(wait=pause, source="slow_start", again=True)
            ticket = _Ticket(now + wait, state)
            state.flight.add(ticket)
            if state.cooldown_until <= now and state.cwnd >= self._window * _OPEN_FACTOR:
                state.open = True
            return self._granted(state, wait, floor, source, ticket)

    def _purge(self, state: _Key, now: float) -> bool:
        """Forget in-flight tickets never released (a caller that died mid-request)."""
        stale = now - max(_STALE, 10.0 * (state.srtt or 0.0))
        lost = [ticket for ticket in state.flight if ticket.sent < stale]
        state.flight.difference_update(lost)
        return bool(lost) and len(state.flight) < state.cwnd

    def _granted(self, state: _Key, wait: float, floor: float, source: Optional[str], token: object) -> Grant:
        wait = max(wait, floor)
        if wait <= 0.0 and token is None:
            return GRANT_NOW
        if source is not None and wait > floor + _EPS:
            state.held += 1
            state.waited[source] += wait - floor
        else:
            source = None
        return Grant(wait=max(wait, 0.0), source=source, token=token)

    def _refuse(self, state: _Key, source: Optional[str], wait: float, left: float) -> Grant:
        state.refused += 1
        if source == "pace" and state.rate is not None:
            why = f"pace {_describe_rate(state.rate)} ({state.source})"
        elif source == "cooldown":
            why = "pace: cooldown (the server's Retry-After)"
        else:
            why = "pace"
        return Grant(
            wait=wait,
            refused=f"{why}: next turn in {wait:.1f}s, after the deadline ({max(left, 0.0):.1f}s left)",
            source=source,
        )

    def _release(
        self,
        state: _Key,
        key_id: str,
        grant: Grant,
        status: Optional[int],
        headers: Optional[Mapping[str, str]],
        reading: Optional[Reading],
    ) -> None:
        retry_after = None
        if (status == 429 or status == 503) and headers is not None:
            retry_after = parse_retry_after(header(headers, "Retry-After"), self._wall)
            if retry_after is not None:
                retry_after = min(retry_after, MAX_COOLDOWN)
        now = self._clock()
        with state.lock:
            ticket = grant.token
            if isinstance(ticket, _Ticket) and ticket in state.flight:
                state.flight.discard(ticket)
                rtt = now - ticket.sent
                if rtt >= 0.0:
                    state.srtt = rtt if state.srtt is None else 0.8 * state.srtt + 0.2 * rtt
            if reading is not None:
                self._learn(state, reading, now)
            if status == 429:
                self._throttled(state, now, retry_after)
            elif status is not None and status < 400:
                state.oks += 1
                if state.oks == 1:
                    state.ok_since = now
                if state.rate is None:
                    state.cwnd += 1
                elif state.source == "429s":
                    state.rate = self._cap(state.rate * (1.0 + _PROBE))
            if retry_after is not None and retry_after > 0.0:
                self._cool(state, key_id, now, retry_after, status)

    def _learn(self, state: _Key, reading: Reading, now: float) -> None:
        limit, remaining, reset, window = reading
        if limit is None or limit < 1.0:
            pass
        elif window is not None and window > 0.0:
            self._set_rate(state, limit / window, limit, "headers")
        elif remaining is not None and reset is not None and reset > 0.0 and remaining < limit:
            # A token bucket refills limit - remaining turns within `reset` (rounded up to whole
            # seconds): a lower bound on its rate, best when the quota has run dry. Pacing is
            # needed only from then on: commit at the first dry reading; later, raise to a
            # higher bound, take a dry reading as is after a 429, and probe upwards while over
            # half the quota is left (a full bucket hides how fast it refills).
            bound = (limit - remaining) / reset
            dry = remaining < 1.0
            if state.source in (None, "429s"):
                if dry:
                    self._set_rate(state, bound, limit, "headers~")
            elif state.source == "headers~":
                rate = state.rate or 0.0
                if bound > rate or (dry and state.distrust):
                    self._set_rate(state, bound, limit, "headers~")
                elif 2.0 * remaining >= limit:
                    state.rate = self._cap(rate * (1.0 + _PROBE_HEADERS))
        if remaining is None:
            return
        if state.rate is not None:
            step = 1.0 / state.rate
            state.tat = max(state.tat, now + (state.burst - remaining + len(state.flight)) * step)
            if remaining < 1.0 and reset is not None and state.source in ("headers~", "429s"):
                # Empty, at a pace only estimated: nothing before the quota is back (one turn
                # then, the rest one step apart), which holds for a fixed window too.
                state.tat = max(state.tat, now + reset + (state.burst - 1) * step)
        elif remaining < 1.0 and reset is not None and reset > 0.0:
            # Nothing left and no pace to space the rest: hold the key until the quota resets.
            state.cooldown_until = max(state.cooldown_until, now + reset)
            state.cooldown_len = max(state.cooldown_len, reset)
            state.open = False

    def _set_rate(self, state: _Key, rate: float, limit: float, source: str) -> None:
        capped = self._cap(rate)
        if self._rate is not None and source == "headers~":
            capped = self._rate  # a lower bound never undercuts what the user configured
        if state.rate is None:
            state.tat = max(state.tat, self._clock() + len(state.flight) / capped)
        state.rate, state.source, state.distrust = capped, source, False
        state.burst = max(1, min(int(limit), _MAX_BURST))
        if self._rate is not None:
            state.burst = min(state.burst, self._burst)
            if capped >= self._rate:
                state.source = "configured"
        state.open = False

    def _throttled(self, state: _Key, now: float, retry_after: Optional[float]) -> None:
        state.throttled += 1
        was_open = state.open
        state.open = False
        if was_open and state.source is None:
            # An open key stopped counting its successes (its success path takes no lock), so
            # they say nothing about the server's rate: slow start again, from half the window.
            state.cwnd = max(1, state.cwnd // 2)
            state.flight.clear()
        elif state.source == "headers~":
            state.distrust = True
        elif state.source in (None, "429s"):
            if state.oks > 0:
                # What got through since the last 429 is what the server admits.
                span = max(now - state.ok_since, retry_after or 1.0)
                state.rate = self._cap(state.oks / span)
                state.burst, state.source = 1, "429s"
                state.tat = max(state.tat, now)
            elif state.rate is not None:
                state.rate = self._cap(state.rate * 0.5)
            else:
                state.cwnd = max(1, state.cwnd // 2)
        state.oks = 0

    def _cool(self, state: _Key, key_id: str, now: float, seconds: float, status: Optional[int]) -> None:
        until = now + seconds
        if until <= state.cooldown_until:
            return
        starting = state.cooldown_until <= now
        state.cooldown_until, state.cooldown_len = until, seconds
        state.open = False
        if state.rate is not None:
            # An empty bucket when the cooldown ends: one turn then, the rest one step apart.
            state.tat = max(state.tat, until + (state.burst - 1) / state.rate)
        if starting:
            state.cooldowns += 1
            log.info(
                "sume_urllib3: cooldown for key %s: %s with Retry-After %.1fs; holding its requests",
                key_id,
                status,
                seconds,
            )

    def _cap(self, rate: float) -> float:
        rate = min(max(rate, _MIN_RATE), _MAX_RATE)
        return min(rate, self._rate) if self._rate is not None else rate


_FLEETS: weakref.WeakSet[LocalFleet] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # Another thread of the parent may have held this lock at the fork: the child's is new.
    LocalFleet._default_lock = threading.Lock()
    for fleet in list(_FLEETS):
        fleet._reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _rebuild(cls: type, rate: Rate, burst: Optional[int], window: int) -> LocalFleet:
    fleet = cls(rate, burst, initial_window=window)
    assert isinstance(fleet, LocalFleet)
    return fleet


def parse_rate(rate: Rate) -> Optional[float]:
    """Requests per second from ``"10/min"``, ``"20/s"``, ``"100/h"`` or a number; None stays None."""
    if rate is None:
        return None
    if isinstance(rate, bool):
        raise ConfigurationError(f"rate must be like '10/min', '20/s' or a number, got {rate!r}")
    if isinstance(rate, (int, float)):
        value = float(rate)
    elif isinstance(rate, str):
        match = _RATE.match(rate.lower())
        unit = _UNITS.get(match.group(2)) if match else None
        if match is None or unit is None:
            raise ConfigurationError(f"rate must be like '10/min', '20/s' or '100/h', got {rate[:40]!r}")
        value = float(match.group(1)) / unit
    else:
        raise ConfigurationError(f"rate must be a str or a number, got {type(rate).__name__}")
    if not math.isfinite(value) or value <= 0.0:
        raise ConfigurationError(f"rate must be a finite number of requests > 0, got {rate!r}")
    if not _MIN_RATE <= value <= _MAX_RATE:
        raise ConfigurationError(f"rate must be between 1/day and {_MAX_RATE:g}/s, got {rate!r}")
    return value


def _describe_rate(rate: float) -> str:
    if rate >= 1.0:
        return f"{rate:.3g}/s"
    if rate * 60.0 >= 1.0:
        return f"{rate * 60.0:.3g}/min"
    return f"{rate * 3600.0:.3g}/h"


def _check_int(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"{name} must be an int, got {value!r}")
    if not low <= value <= high:
        raise ConfigurationError(f"{name} must be between {low} and {high}, got {value!r}")
    return value


def _seconds(value: Any, default: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return default
    return max(float(value), 0.0)


__all__ = ["ANONYMOUS", "GRANT_NOW", "Fleet", "Grant", "LocalFleet", "fleet_key", "parse_rate"]
