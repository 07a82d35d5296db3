"""Pacing before every attempt: cooldowns, a learned or configured pace, and slow start, per API key.

A fleet is asked before each attempt (``acquire``) and told what came back (``release``).
``LocalFleet`` keeps that state in one process, shared by every thread and session that
uses it; ``sume_urllib3.contrib.redis.RedisFleet`` shares it across processes.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import math
import random
import re
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Dict, Mapping, NamedTuple, Optional, Protocol, Union

from . import _fork, _pacing, _sleeping
from ._envelope import header
from ._errors import ConfigurationError
from ._ratelimit import may_carry_ratelimit, parse_ratelimit
from ._retry_after import parse_retry_after

log = logging.getLogger("sume_urllib3")

Rate = Union[str, float, int, None]

#: The longest cooldown one Retry-After can start (seconds): an absurd value (a year, a
#: bug) must not hold every request of a key for that long; the policy still refuses to
#: wait the full value and gives up, with the server's figure in its reason.
MAX_COOLDOWN = 600.0

#: The KeyId of requests sent without an API key.
ANONYMOUS = "anonymous"
_MIN_RATE = 1.0 / 86400.0  # one a day: below any real quota, so never a floor that beats one
_MAX_RATE = 1e6
_MAX_BURST = 1_000_000
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


class _Token:
    """Grant.token of a LocalFleet turn: the key state that granted it and the core's stamp."""

    __slots__ = ("key", "turn")

    def __init__(self, key: _Key, turn: _pacing.Turn) -> None:
        self.key = key
        self.turn = turn


class _Key:
    """One key's pacing state (the core's), its lock, and counters. Guarded by ``lock``."""

    __slots__ = ("again", "cooldowns", "held", "lock", "open", "refused", "state", "throttled", "waited")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.state = _pacing.State()
        # Nothing known, nothing held, the window wide: acquire answers GRANT_NOW without the lock.
        self.open = False
        self.held = self.refused = self.again = self.cooldowns = self.throttled = 0
        self.waited: Dict[str, float] = {"pace": 0.0, "cooldown": 0.0, "slow_start": 0.0}


class LocalFleet:
    """Paces the requests of one process per key, shared by every thread and session.

    The rules are :mod:`sume_urllib3._pacing`'s (README "Pacing"): a ``Retry-After`` cooldown
    that holds every request of the key and releases them spread out; a configured ``rate``
    (``"10/min"``, ``"20/s"``, ``"100/h"``, or requests per second as a number) with ``burst``
    turns at once, which headers never change and only 429s slow; the pace a server states
    (``RateLimit-Policy``, a limit with a window); ``Remaining``/``Reset`` as a budget of
    attempts; and, while nothing is known, a slow-start window of ``initial_window`` first
    attempts in flight, with the pace the server admitted learned from its 429s. A turn
    that would come after the request's deadline is refused at once, reserving nothing.
    A lone request is never delayed. One INFO line on the ``sume_urllib3`` logger says
    when a cooldown starts (naming the key's hash, never the key).

    ``contrib.redis.RedisFleet`` runs the same rules in Redis (a conformance table in the
    tests checks both). Thread-safe; when nothing is known and nothing is held, ``acquire``
    is one dictionary look-up. ``clock`` (monotonic seconds; by default the shared clock
    that ``no_sleep()`` drives), ``wall`` (Unix time, for ``X-RateLimit-Reset``
    timestamps) and ``rng`` (a ``random.Random`` or a callable returning [0, 1)) are
    injectable. ``reset()`` forgets every key. After ``os.fork()`` the child starts with
    no state; a pickled fleet keeps its configuration only.
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
        self._config = _pacing.Config(
            interval=interval_us(self._rate), burst=self._burst, window=self._window
        )
        self._entries = itertools.count(1)
        self._keys: Dict[str, _Key] = {}
        _FLEETS.add(self)

    @classmethod
    def default(cls) -> LocalFleet:
        """The one process-wide fleet every session shares unless given another."""
        fleet = LocalFleet._default
        if fleet is None:
            with LocalFleet._default_lock:
                if LocalFleet._default is None:
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
        key = self._keys.get(key_id)
        if key is not None and key.open:
            if not not_before:
                return GRANT_NOW
            if retry is not None and 0.0 < not_before <= time_left:
                return Grant(wait=not_before)  # nothing paces an open key: the caller's wait is the turn
        try:
            return self._acquire(key_id, key, time_left, retry, not_before)
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
            token = grant.token
            key = token.key if isinstance(token, _Token) else self._keys.get(key_id)
            if key is None or self._keys.get(key_id) is not key:
                return  # a grant from before a reset or a fork: nothing of ours to account
            if key.open and status != 429 and not may_carry_ratelimit(headers) and status != 503:
                return  # the lock-free path: an open key and nothing to learn
            self._release(key_id, key, token, status, headers)
        except Exception:
            log.debug("sume_urllib3: fleet release failed; ignored", exc_info=True)

    def reset(self) -> None:
        """Forget every key's cooldown, pace and turns (a test's end; a fork's child)."""
        self._keys = {}

    # -- introspection (tests, benchmarks, metrics) -------------------------------------------

    def pace(self, key_id: str) -> Optional[float]:
        """The pace a key is held to now, in requests per second, or None while unknown."""
        key = self._keys.get(key_id)
        if key is None:
            return self._rate
        with key.lock:
            interval, _ = _pacing.pace(key.state, self._config, self._now())
        return _pacing.SECOND / interval if interval else None

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
        for key in list(self._keys.values()):
            with key.lock:
                totals["held"] += key.held
                totals["refused"] += key.refused
                totals["again"] += key.again
                totals["cooldowns"] += key.cooldowns
                totals["throttled"] += key.throttled
                for source, seconds in key.waited.items():
                    totals["waited_" + source] += seconds
        return totals

    # -- inside ----------------------------------------------------------------------------

    def _now(self) -> int:
        return round(self._clock() * 1_000_000)

    def _acquire(
        self, key_id: str, key: Optional[_Key], time_left: float, retry: Optional[str], not_before: float
    ) -> Grant:
        if key is None:
            # setdefault is atomic: two threads creating one key both get the same state.
            key = self._keys.setdefault(key_id, _Key())
        floor = _seconds(not_before)
        left = _seconds(time_left, default=math.inf)
        with key.lock:
            now = self._now()
            turn = _pacing.acquire(
                key.state,
                self._config,
                now,
                retry=_pacing.RETRY_KINDS.get(retry, _pacing.ERROR),
                not_before=round(floor * 1_000_000),
                time_left=-1 if math.isinf(left) else round(left * 1_000_000),
                rand=self._random(),
                entry=str(next(self._entries)),
            )
            key.open = _pacing.is_open(key.state, self._config, now)
            return self._grant(key, turn, floor, left)

    def _grant(self, key: _Key, turn: _pacing.Turn, floor: float, left: float) -> Grant:
        wait = turn.wait / 1_000_000
        source = _pacing.SOURCES[turn.source]
        if turn.code == _pacing.REFUSED:
            key.refused += 1
            return Grant(wait=wait, refused=self._refusal(key, source, wait, left), source=source)
        if turn.code == _pacing.AGAIN:
            key.again += 1
            if source is not None:
                key.waited[source] += wait
            return Grant(wait=wait, source=source, again=True)
        token = _Token(key, turn)
        if source is not None and wait > floor + 1e-9:
            key.held += 1
            key.waited[source] += wait - floor
        else:
            source = None
        return Grant(wait=max(wait, floor), source=source, token=token)

    def _refusal(self, key: _Key, source: Optional[str], wait: float, left: float) -> str:
        return refusal(self._why(key.state, source), wait, left)

    def _why(self, st: _pacing.State, source: Optional[str]) -> str:
        """What holds a refused turn, in words (the rule and, with a pace, its rate and origin)."""
        if source == "cooldown":
            return "pace: cooldown (the server's Retry-After)"
        if source != "pace":
            return "pace"
        now = self._now()
        if st.budget_left <= 0 and st.budget_until > now:
            return "pace: the server's quota is spent until its Reset"
        interval, _ = _pacing.pace(st, self._config, now)
        if not interval:
            return "pace"
        if interval == st.learned_interval:
            origin = "learned from 429s"
        elif interval == st.stated_interval and interval != self._config.interval:
            origin = "stated by the server"
        else:
            origin = "configured"
        return f"pace {_describe_rate(_pacing.SECOND / interval)} ({origin})"

    def _release(
        self,
        key_id: str,
        key: _Key,
        token: object,
        status: Optional[int],
        headers: Optional[Mapping[str, str]],
    ) -> None:
        lesson = read_response(status, headers, self._wall)
        turn = token.turn if isinstance(token, _Token) else None
        code = status or 0
        if turn is not None and not _pacing.must_release(
            turn, code, lesson.retry_after, lesson.limit, lesson.remaining, lesson.window
        ):
            return
        with key.lock:
            now = self._now()
            st = key.state
            if turn is None:  # granted on the lock-free path: as if just now, in this round
                turn = _pacing.Turn(_pacing.SEND, 0, 0, 0, st.seq, st.epoch, len(st.flight))
            started = _pacing.release(
                st,
                self._config,
                now,
                entry=turn.entry,
                slot=turn.slot,
                seq=turn.seq,
                epoch=turn.epoch,
                inflight=turn.inflight,
                status=code,
                **lesson._asdict(),
            )
            if status == 429:
                key.throttled += 1
            if started:
                key.cooldowns += 1
            key.open = _pacing.is_open(st, self._config, now)
        if started:
            log.info(
                "sume_urllib3: cooldown for key %s: %s with Retry-After %.1fs; holding its requests",
                key_id,
                status,
                lesson.retry_after / 1_000_000,
            )


class Lesson(NamedTuple):
    """What one response tells the pacing rules, in the core's units (-1: not said)."""

    retry_after: int  # µs, 0 when none (only a 429's or 503's counts)
    limit: int
    remaining: int
    reset: int  # µs
    window: int  # µs


def read_response(
    status: Optional[int], headers: Optional[Mapping[str, str]], wall: Callable[[], float] = time.time
) -> Lesson:
    """The Retry-After and RateLimit fields of one response, as both fleets pass them to the core."""
    retry_after = 0
    if (status == 429 or status == 503) and headers is not None:
        seconds = parse_retry_after(header(headers, "Retry-After"), wall)
        if seconds is not None and seconds > 0:
            retry_after = round(min(seconds, MAX_COOLDOWN) * 1_000_000)
    reading = parse_ratelimit(headers, wall) if headers is not None and may_carry_ratelimit(headers) else None
    if reading is None:
        return Lesson(retry_after, -1, -1, -1, -1)
    limit, remaining, reset, window = reading
    return Lesson(
        retry_after,
        -1 if limit is None else int(min(limit, 1e12)),
        -1 if remaining is None else int(min(remaining, 1e12)),
        -1 if reset is None else round(min(reset, 1e7) * 1_000_000),
        -1 if window is None else round(min(window, 1e7) * 1_000_000),
    )


def refusal(why: str, wait: float, time_left: float) -> str:
    """A refused turn's reason, as every fleet words it: what holds it, and when versus the deadline."""
    return f"{why}: next turn in {wait:.1f}s, after the deadline ({max(time_left, 0.0):.1f}s left)"


def interval_us(rate: Optional[float]) -> int:
    """Microseconds between turns at ``rate`` requests per second (0 for None: learn it)."""
    return 0 if rate is None else max(1, round(1_000_000 / rate))


_FLEETS: weakref.WeakSet[LocalFleet] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # Another thread of the parent may have held this lock at the fork: the child's is new.
    LocalFleet._default_lock = threading.Lock()
    for fleet in list(_FLEETS):
        fleet.reset()


_fork.in_child(_after_fork_in_child)


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


__all__ = [
    "ANONYMOUS",
    "GRANT_NOW",
    "Fleet",
    "Grant",
    "Lesson",
    "LocalFleet",
    "fleet_key",
    "interval_us",
    "parse_rate",
    "read_response",
    "refusal",
]
