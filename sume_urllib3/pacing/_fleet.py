"""Pacing before every attempt, per API key: :class:`StoreFleet` (what every fleet shares),
``LocalFleet`` (this process's memory), :class:`RetryBudget`, and the settings every fleet
checks alike (the rate, the burst)."""

from __future__ import annotations

import copy
import functools
import itertools
import logging
import math
import os
import random
import re
import threading
import time
import weakref
from dataclasses import dataclass
from typing import (
    Any,
    Callable,
    ClassVar,
    Dict,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Protocol,
    Tuple,
    Union,
)

from .. import _fork, _sleeping
from .._config import check_clock, check_int, check_rng, check_seconds
from .._envelope import parse_retry_after
from .._errors import ConfigurationError
from . import _core
from ._core import Lesson
from ._signals import ANONYMOUS, QUOTA_NAME, fleet_key, parse_ratelimit

log = logging.getLogger("sume_urllib3")

Rate = Union[str, float, int, None]

#: Keys (origin and API key pairs) a LocalFleet holds state for at most, by default (about
#: 1 KB each): past it, the least recently used idle entry goes first.
MAX_KEYS = 10_000
#: Seconds unused before a LocalFleet forgets an entry holding nothing still running, by default;
#: one holding a pace is kept PACE_KEPT times as long (an hour, as RedisFleet's ttl keeps it): a
#: quota outlasts minutes of quiet, a slow-start window does not (TCP restarts its own too).
IDLE = 300.0
PACE_KEPT = 12
#: RedisFleet's ``prefix``: Redis key text without braces (the cluster hash tag is the fleet's).
#: Here rather than in contrib.redis, as check_timeout, so Django's check reads it without redis.
REDIS_PREFIX = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")

_MAX_IDLE = 86_400.0
_MAX_MAX_KEYS = 10_000_000
_MAX_BACKOFF = 86_400.0  # a day: past that, an outage would never be retried in a process's life
_MAX_WINDOW = 10_000
# Lock-free acquires of a key between two looks at the clock (is a sweep due?): a counter in
# the key's slots stands in for the clock on the path that answers GRANT_NOW.
_SWEEP_EVERY = 1024
#: How a refusal names whose pace held it (``_core.pace_source``).
_WHOSE = {"learned": "learned from 429s", "stated": "stated by the server", "configured": "configured"}
# Entries a sweep for room leaves, as a share of max_keys: the next one is that many new keys
# away, so its O(n log n) sorting is paid once per tenth of the cap, not per new key.
_ROOM = 0.9
_MIN_RATE = 1.0 / 86400.0  # one a day: below any real quota, so never a floor that beats one
_MAX_RATE = 1e6
_MAX_BURST = 1_000_000
_STATS = ("held", "refused", "again", "cooldowns", "throttled", "waited_pace", "waited_cooldown",
          "waited_slow_start")
# How much an entry holds (_rank), in the order a sweep for room evicts.
_PLAIN, _PACE, _RUNNING = 0, 1, 2
# What telling a store about one response needs (``release_need``).
#: Nothing: the response changes nothing the store keeps.
RELEASE_NEVER = 0
#: A place in this process's next call for the key (a little late).
RELEASE_LATER = 1
#: A call of its own, at once: other clients must know now.
RELEASE_NOW = 2
_SAYS_NOTHING = Lesson(0, -1, -1, -1, -1)
_KEY_ID = re.compile(r"^([ko][0-9a-f]{16}|anonymous)$")
_UNITS = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0,
          "h": 3600.0, "hr": 3600.0, "hour": 3600.0, "d": 86400.0, "day": 86400.0}
# Only the words take a plural "s": "ms" is not "m" (minutes) plus a plural, it is milliseconds,
# which no quota is counted in.
_UNITS.update({name + "s": seconds for name, seconds in _UNITS.items() if len(name) > 1})
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*/\s*([a-z]+)\s*$")
_UNIT_NAMES = "s, sec, second, m, min, minute, h, hr, hour, d or day (the words also plural)"


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


#: The answer when nothing holds an attempt.
GRANT_NOW = Grant()


class Fleet(Protocol):
    """What a session asks before every attempt and tells after every response."""

    def acquire(
        self, key_id: str, *, time_left: float, retry: Optional[str] = None, not_before: float = 0.0
    ) -> Grant:
        """Reserve a turn for one attempt of a request of this API key; never raises or blocks."""
        ...

    def release(
        self, key_id: str, grant: Grant, status: Optional[int], headers: Optional[Mapping[str, str]]
    ) -> None:
        """Learn from what the attempt got (status None: no response); never raises."""
        ...


def shared_monotonic() -> float:
    """The fleets' clock, the one every thread shares: ``time.monotonic()``, plus in test mode
    (``_sleeping``'s one switch) the time of the thread furthest on, which the caller catches up to."""
    virtual = _sleeping._virtual
    return time.monotonic() if virtual is None else time.monotonic() + virtual.catch_up()


def read_response(
    status: Optional[int], headers: Optional[Mapping[str, str]], wall: Callable[[], float] = time.time
) -> Lesson:
    """What one response teaches the rules: its Retry-After and RateLimit fields, in the core's units."""
    if headers is None:
        return _SAYS_NOTHING
    found = parse_ratelimit(headers, wall) if QUOTA_NAME.search(" ".join(map(str, headers))) else None
    lesson = found or _SAYS_NOTHING
    if status == 429 or status == 503:
        seconds = parse_retry_after(headers.get("Retry-After"), wall, date=headers.get("Date"))
        if seconds is not None and seconds > 0:
            return lesson._replace(retry_after=round(min(seconds * _core.SECOND, _core.MAX_COOLDOWN_US)))
    return lesson


def release_need(turn: Optional[_core.Turn], status: int, lesson: Lesson) -> int:
    """What telling a store about one response needs (StoreFleet.release asks, for every store).

    RELEASE_NOW for a 429, a Retry-After, rate-limit headers or an in-flight entry to free.
    RELEASE_LATER for what only counts, under a pace learned from 429s (one more admitted, the
    pace's creep, a response time): told with its own time, in order with this process's later
    lessons, as a slower answer would have come. RELEASE_NEVER under a configured pace, or for a
    key past slow start (a turn of a store's lock-free path is None).
    """
    quota = lesson.retry_after > 0 or lesson.remaining >= 0 or (lesson.limit >= 1 and lesson.window > 0)
    if (turn is not None and turn.entry) or status == 429 or quota:
        return RELEASE_NOW
    return RELEASE_LATER if turn is not None and turn.learning else RELEASE_NEVER


class _Local(NamedTuple):
    """``Grant.token`` of a turn the local fleet of an outage gave."""

    fleet: Fleet
    grant: Grant


class StoreFleet:
    """A fleet whose rules are :mod:`._core`'s, run by a store on its state: the part every store
    shares (what a store implements: :mod:`sume_urllib3.pacing.store`).

    Failing open (a shared store, ``_shared``): when the store fails, the attempt is paced at
    once by a local :class:`LocalFleet` (``Grant.fallback``; a configured rate shared among the
    processes seen lately), one WARNING is logged per outage and one INFO at its end,
    :attr:`fallbacks` and :attr:`errors` count, and the store is tried again only after a
    backoff (``backoff`` seconds, doubling per failed try up to ``max_backoff``, spread so
    processes do not retry it in step; calls that fail within one backoff do not double it). A
    store in memory fails only by a bug: the attempt goes unpaced.
    """

    #: The store is shared by other processes: key ids are hashes, and an outage paces locally.
    _shared: ClassVar[bool] = True
    #: Where the pace is shared when the store works ("fleet-wide", "host-wide"), for log lines.
    _scope: ClassVar[str] = ""
    #: The constructor's arguments a pickled copy is built with.
    _settings: Dict[str, Any]

    def __init__(
        self,
        settings: Dict[str, Any],
        *,
        clock: Callable[[], float],
        wall: Callable[[], float],
        rng: Union[random.Random, Callable[[], float], None],
    ) -> None:
        """Check what every store is configured with: ``settings`` holds its constructor's arguments
        (``rate``, ``burst``, ``initial_window``, ``retry_budget``; a shared store's ``timeout``,
        ``ttl``, ``backoff`` and ``max_backoff`` too)."""
        self._settings = settings
        rate, burst, retry_budget = settings["rate"], settings["burst"], settings["retry_budget"]
        self._rate = parse_rate(rate)
        self._burst = check_burst(burst) if burst is not None else 1
        if burst is not None and self._rate is None:
            raise ConfigurationError(f"burst needs a rate: {type(self).__name__}(rate='10/min', burst=5)")
        if "timeout" in settings:
            self._timeout = check_timeout(settings["timeout"])
            self._ttl = check_ttl(settings["ttl"])
        self._window = check_int(settings["initial_window"], "initial_window", 1, _MAX_WINDOW)
        if retry_budget is not None and not isinstance(retry_budget, RetryBudget):
            raise ConfigurationError(
                f"retry_budget must be a RetryBudget or None, got {type(retry_budget).__name__}"
            )
        self._retry_budget = retry_budget
        for name, value, default in (("clock", clock, shared_monotonic), ("wall", wall, time.time)):
            if value is not default:  # reading the shared clock under no_sleep() moves this thread's time
                check_clock(value, name)
        check_rng(rng)
        self._clock, self._wall = clock, wall
        self._random: Callable[[], float] = (
            random.random if rng is None else rng.random if isinstance(rng, random.Random) else rng
        )
        self._backoff = check_seconds(settings.get("backoff", 1.0), "backoff", low=0.001, high=_MAX_BACKOFF)
        most = check_seconds(settings.get("max_backoff", 30.0), "max_backoff", low=0.001, high=_MAX_BACKOFF)
        self._max_backoff = max(self._backoff, most)
        self._config = _core.Config(
            interval=0 if self._rate is None else max(1, round(_core.SECOND / self._rate)),
            burst=self._burst,
            window=self._window,
            retries=None if retry_budget is None else retry_budget.allowance,
        )
        self._after_fork()
        _fork.track(self)
        _FLEETS.add(self)

    def _after_fork(self) -> None:
        """What belongs to this process, made at first and afresh in a forked child: lock, counters,
        outage (a store adds its own: connections, keys)."""
        self._lock = threading.Lock()  # counters and outage state
        self._stats: Dict[str, float] = dict.fromkeys(_STATS, 0)
        self._down_until = 0.0  # clock() before which the store is not tried
        self._delay = self._backoff  # the next backoff after a failure
        self._outage = False
        self._clients = 1  # processes seen sharing a key lately (for the fallback's share)
        self._fallbacks = self._errors = 0
        self._local_fleet: Optional[LocalFleet] = None
        self._entries = itertools.count(1)
        # Keys seen with nothing pacing them, as the store knows them (``_is_open`` confirms one).
        self._open: Dict[str, Any] = {}
        # This process, as a shared store's other clients see it (a forked child is another).
        self._client_id = f"{os.getpid()}-{os.urandom(6).hex()}"

    # -- the store's part -------------------------------------------------------------------

    def _transact(self, kid: str, rule: Callable[..., Any], **args: Any) -> Any:
        """``rule(state, config, now, **args)`` (``_core.acquire`` or ``_core.release``) on the key's
        state in one transaction, storing what it left; a release may answer False without it for a
        key the store forgot. A store running a port of the rules runs the rule's port instead."""
        raise NotImplementedError

    def _is_open(self, key_id: str) -> bool:
        """Whether a key in ``_open`` (the keys a store saw nothing pace) still is: an acquire then
        answers without a transaction."""
        return False

    def _why(self, kid: str, source: str) -> str:
        """What holds a refused turn, in words."""
        return source

    def _snapshot(self) -> Tuple[List[Tuple[str, _core.State]], int]:
        """A copy of every key's state and the store's clock (µs), read without writing anything
        and without waiting on a writer (``pacing.status``)."""
        raise TypeError(f"{type(self).__name__} keeps no state that can be read from outside")

    def _now(self) -> int:
        """The fleet's clock in the core's microseconds."""
        return round(self._clock() * _core.SECOND)

    def reset(self) -> None:
        """Forget this process's outage (a store of its own also forgets every key: a test's end)."""
        with self._lock:
            self._down_until, self._delay, self._outage, self._local_fleet = 0.0, self._backoff, False, None

    def __reduce__(self) -> Any:
        """The configuration, never the state: a shared store's retry budget goes as its settings
        (the store keeps its counts)."""
        settings = dict(self._settings)
        budget = settings.get("retry_budget")
        if self._shared and budget is not None:
            settings["retry_budget"] = RetryBudget(budget.ratio, budget.window, budget.min_per_second)
        return (functools.partial(type(self), **settings), ())

    # -- the Fleet protocol -------------------------------------------------------------------

    def acquire(
        self, key_id: str, *, time_left: float, retry: Optional[str] = None, not_before: float = 0.0
    ) -> Grant:
        """Reserve a turn for one attempt; never raises, never waits on the store past its timeout."""
        lone = not not_before or (retry is not None and 0.0 < not_before <= time_left)
        if lone and key_id in self._open and self._is_open(key_id):  # a retry's own wait is its turn
            return Grant(wait=not_before) if not_before else GRANT_NOW
        try:
            if os.getpid() != _fork.pid:  # before any lock or outage: a parent's belong to the parent
                _fork.check()
            kid = _safe_key_id(key_id) if self._shared else key_id
            floor = not_before if not_before > 0 else 0.0  # NaN or below 0: no floor
            left = max(time_left, 0.0) if time_left == time_left else math.inf  # NaN: no deadline
            if self._down_until and self._clock() < self._down_until:
                return self._fallback(kid, time_left, retry, not_before)
            kind = _core.RETRY_KINDS.get(retry, _core.ERROR)
            limit = -1 if math.isinf(left) else round(left * _core.SECOND)
            entry = f"{self._client_id}.{next(self._entries)}" if self._shared else str(next(self._entries))
            turn: _core.Turn = self._transact(
                kid, _core.acquire, retry=kind, not_before=round(floor * _core.SECOND), time_left=limit,
                rand=self._random(), entry=entry,
            )
        except Exception as exc:  # any trouble with the store: fail open at once
            self._failed(exc)
            return self._fallback(key_id, time_left, retry, not_before)
        if self._outage:
            self._recovered()
        wait, source = turn.wait / _core.SECOND, _core.SOURCES[turn.source]
        if turn.code == _core.SEND:
            if wait <= floor + 1e-9:
                return Grant(wait=max(wait, floor), token=turn)
            grant = Grant(wait=wait, source=source, token=turn)
            self._count("held", source, wait - floor)
        elif turn.code == _core.AGAIN:
            grant = Grant(wait=wait, source=source, again=True)
            self._count("again", source, wait)
        elif turn.code == _core.REFUSED:
            why = self._why(kid, source or "pace")
            grant = Grant(wait=wait, refused=refusal(why, wait, left), source=source)
            self._count("refused")
        else:  # NO_BUDGET: the retry's unit comes back after the deadline (wait > 0) or never
            why = "retry budget: the fleet's retries for this API key are spent"
            grant = Grant(wait=wait, refused=refusal(why, wait, left) if wait > 0 else why)
            self._count("refused")
        return grant

    def release(
        self, key_id: str, grant: Grant, status: Optional[int], headers: Optional[Mapping[str, str]]
    ) -> None:
        """Learn cooldowns and the pace from one response and free its in-flight entry; never raises."""
        try:
            token = grant.token
            if isinstance(token, _Local):  # a turn of an outage's local fleet
                token.fleet.release(key_id, token.grant, status, headers)
                return
            if token is not None and not isinstance(token, _core.Turn):
                return  # not a turn of this kind of fleet
            lesson = read_response(status, headers, self._wall)
            code = status or 0
            if release_need(token, code, lesson) == RELEASE_NEVER:
                return  # nothing to free, nothing learned: no second transaction
            if os.getpid() != _fork.pid:
                _fork.check()
            if self._down_until and self._clock() < self._down_until and not (token and token.entry):
                return  # the store is failing and there is no in-flight entry to free
            kid = _safe_key_id(key_id) if self._shared else key_id
            started = self._transact(kid, _core.release, turn=token, status=code, lesson=lesson)
        except Exception as exc:
            self._failed(exc)
            return
        if status == 429:
            self._count("throttled")
        if started:
            self._count("cooldowns")
            log.info(
                "cooldown for key_id %s: %s with Retry-After %.1fs; holding its requests%s",
                kid, status, lesson.retry_after / _core.SECOND, f" {self._scope}" if self._scope else "",
            )

    # -- counters -----------------------------------------------------------------------------

    def _count(self, what: str, source: Optional[str] = None, waited: float = 0.0) -> None:
        with self._lock:
            self._stats[what] += 1
            if source is not None:
                self._stats["waited_" + source] += waited

    def stats(self) -> Dict[str, float]:
        """This process's counters: turns held, refused, sent ``again``, cooldowns started, 429s
        met, and seconds waited per source."""
        with self._lock:
            return dict(self._stats)

    @property
    def fallbacks(self) -> int:
        """Grants this process served from local pacing because the shared store failed."""
        return self._fallbacks

    @property
    def errors(self) -> int:
        """Calls of this process to the shared store that failed (each opens or extends an outage)."""
        return self._errors

    @property
    def healthy(self) -> bool:
        """False while this process paces locally and waits to try the shared store again."""
        return not self._outage

    # -- failing open -------------------------------------------------------------------------

    def _store_name(self) -> str:
        """How log lines name the store ("Redis fleet", "host fleet file /run/...")."""
        return type(self).__name__

    def _fallback(self, key_id: str, time_left: float, retry: Optional[str], not_before: float) -> Grant:
        """A turn from the local fleet of this outage, marked ``fallback`` (unpaced in memory)."""
        if not self._shared:
            return GRANT_NOW
        with self._lock:
            self._fallbacks += 1
            if self._local_fleet is None:
                settings: Dict[str, Any] = dict(
                    initial_window=self._window, clock=self._clock, wall=self._wall, rng=self._random
                )
                if self._rate is not None:  # a configured pace, shared among the processes seen lately
                    share = max(1, self._clients)
                    settings.update(rate=self._rate / share, burst=max(1, self._burst // share))
                self._local_fleet = LocalFleet(**settings)
            fleet = self._local_fleet
        grant = fleet.acquire(_safe_key_id(key_id), time_left=time_left, retry=retry, not_before=not_before)
        return Grant(grant.wait, grant.refused, grant.source, grant.again, True, _Local(fleet, grant))

    def _failed(self, exc: BaseException) -> None:
        """The store failed: count it, back off (spread), and say so once per outage."""
        if not self._shared:  # a bug: pacing must never cost a request
            log.debug("fleet call failed; sending unpaced", exc_info=exc)
            return
        with self._lock:
            self._errors += 1
            now = self._clock()
            if now < self._down_until:
                return  # another call of this outage, begun before it: the backoff doubles per try
            delay = self._delay * (0.5 + self._random())  # processes do not retry the store in step
            self._down_until = now + delay
            self._delay = min(self._delay * 2, self._max_backoff)
            first, self._outage = not self._outage, True
        if first:  # the error's class and the first line of its text
            lines = str(exc).splitlines()
            why = f"{type(exc).__name__}: {lines[0][:200]}" if lines and lines[0] else type(exc).__name__
            log.warning("%s unavailable (%s); pacing locally, trying it again in %.1fs",
                        self._store_name(), why, delay)

    def _recovered(self) -> None:
        """The store answered: the outage is over, and its local fleet forgotten."""
        with self._lock:
            was_out, self._outage = self._outage, False
            self._delay = self._backoff
            self._local_fleet = None
        if was_out:
            log.info("%s available again; pacing %s", self._store_name(), self._scope)


class _Key:
    """One key's state in a LocalFleet, guarded by the fleet's lock. ``ticks`` counts its lock-free
    acquires down from _SWEEP_EVERY (at 0 one looks at the clock); a sweep finding it moved stamps
    ``seen``, so a key used only lock-free is not idle."""

    __slots__ = ("seen", "state", "ticks")

    def __init__(self, now: int) -> None:
        self.state = _core.State()
        self.ticks = _SWEEP_EVERY
        self.seen = now


class LocalFleet(StoreFleet):
    """Paces the requests of one process per key, shared by every thread and session.

    The rules are :mod:`sume_urllib3.pacing._core`'s (docs/how-it-works.md); what the fleet
    does with them, and its bounds, in docs/guide/pacing.md. ``rate`` is a configured pace
    (:func:`parse_rate`: ``"10/min"``, ``"20/s"``, ``"100/h"`` or requests per second) with
    ``burst`` turns at once; ``initial_window`` first attempts are in flight while nothing is
    known; ``retry_budget`` (a :class:`RetryBudget`) applies its ratio, window and floor per
    key. ``clock`` (monotonic seconds; by default the shared clock ``no_sleep()`` drives),
    ``wall`` (Unix time, for ``X-RateLimit-Reset`` timestamps) and ``rng`` (a ``random.Random``
    or a callable returning [0, 1)) are injectable. An entry holding nothing still running is
    forgotten once unused for ``idle`` seconds (:data:`IDLE`; :data:`PACE_KEPT` times as long
    with a pace); past ``max_keys`` (:data:`MAX_KEYS`) the least recently used go first.

    Thread-safe; when nothing is known and nothing is held, ``acquire`` is one dictionary
    look-up. ``reset()`` forgets every key, as a forked child does; a pickled fleet keeps its
    configuration.
    """

    _shared = False
    _default: ClassVar[Dict[str, LocalFleet]] = {}

    def __init__(
        self,
        rate: Rate = None,
        burst: Optional[int] = None,
        *,
        clock: Callable[[], float] = shared_monotonic,
        rng: Union[random.Random, Callable[[], float], None] = None,
        initial_window: int = 4,
        wall: Callable[[], float] = time.time,
        max_keys: int = MAX_KEYS,
        idle: float = IDLE,
        retry_budget: Optional[RetryBudget] = None,
    ) -> None:
        self._max_keys = check_int(max_keys, "max_keys", 1, _MAX_MAX_KEYS)
        self._idle = check_seconds(idle, "idle", low=1.0, high=_MAX_IDLE)
        self._idle_us = round(self._idle * _core.SECOND)
        settings = dict(rate=rate, burst=burst, initial_window=initial_window, max_keys=max_keys, idle=idle,
                        retry_budget=retry_budget)
        super().__init__(settings, clock=clock, wall=wall, rng=rng)

    def _after_fork(self) -> None:
        super()._after_fork()
        self.reset()

    @classmethod
    def default(cls) -> LocalFleet:
        """The one process-wide fleet every session shares unless given another."""
        fleet = LocalFleet._default.get("fleet")
        if fleet is None:  # two threads may build one each: setdefault keeps the first for both
            fleet = LocalFleet._default.setdefault("fleet", LocalFleet())
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

    @property
    def max_keys(self) -> int:
        """Entries (origin and API key pairs) the fleet holds state for at most."""
        return self._max_keys

    @property
    def idle(self) -> float:
        """Seconds unused after which an entry holding nothing still running is forgotten."""
        return self._idle

    @property
    def entries(self) -> int:
        """Entries the fleet holds state for now."""
        return len(self._keys)

    def __repr__(self) -> str:
        rate = "learned" if self._rate is None else describe_rate(self._rate)
        return f"<LocalFleet rate={rate} burst={self._burst} keys={len(self._keys)}>"

    def __reduce__(self) -> Any:
        if self is LocalFleet._default.get("fleet"):
            return (LocalFleet.default, ())
        return super().__reduce__()

    def reset(self) -> None:
        """Forget every key's cooldown, pace and turns (a test's end; a fork's child)."""
        super().reset()
        with self._lock:
            self._keys: Dict[str, _Key] = {}
            self._open = {}
            self._sweep_at = 0  # the fleet's clock (µs) from which the next acquire sweeps
            self._warned_live = False

    def pace(self, key_id: str) -> Optional[float]:
        """The pace a key is held to now, in requests per second, or None while unknown."""
        if os.getpid() != _fork.pid:
            _fork.check()
        key = self._keys.get(key_id)
        if key is None:
            return self._rate
        with self._lock:
            interval, _ = _core.pace(key.state, self._config, self._now())
        return _core.SECOND / interval if interval else None

    # -- the store: one lock ------------------------------------------------------------------

    def _is_open(self, key_id: str) -> bool:
        """The lock-free path: a tick counted for a key nothing paces."""
        key = self._open.get(key_id)
        if key is None:  # swept meanwhile
            return False
        key.ticks -= 1  # marks it used (racy, and fine: a lost decrement delays one clock look)
        if key.ticks <= 0:
            self._tick(key)
        return True

    def _transact(self, kid: str, rule: Callable[..., Any], **args: Any) -> Any:
        """``rule`` under the fleet's lock; only an acquire makes an entry (a release for a key
        forgotten since, by a reset, a fork or a sweep, has nothing of ours to account)."""
        acquiring = rule is _core.acquire
        with self._lock:
            now = self._now()
            key = self._keys.get(kid)
            if key is None:
                if not acquiring:
                    return False
                key = self._keys[kid] = _Key(now)
            result = rule(key.state, self._config, now, **args)
            if _core.is_open(key.state, self._config, now):
                self._open[kid] = key
            else:
                self._open.pop(kid, None)
            if len(self._keys) > self._max_keys or (acquiring and now >= self._sweep_at):
                self._sweep(now, kid)
        return result

    def _snapshot(self) -> Tuple[List[Tuple[str, _core.State]], int]:
        with self._lock:
            return [(kid, copy.deepcopy(key.state)) for kid, key in self._keys.items()], self._now()

    def _why(self, kid: str, source: str) -> str:
        """What holds a refused turn, in words (the rule and, with a pace, its rate and origin)."""
        key = self._keys.get(kid)
        if source == "cooldown":
            return "pace: cooldown (the server's Retry-After)"
        if source != "pace" or key is None:
            return "pace"
        st, now = key.state, self._now()
        if st.budget_left <= 0 and st.budget_until > now:
            return "pace: the server's quota is spent until its Reset"
        interval, _ = _core.pace(st, self._config, now)
        if not interval:
            return "pace"
        origin = _WHOSE[_core.pace_source(st, self._config, interval)]
        return f"pace {describe_rate(_core.SECOND / interval)} ({origin})"

    # -- bounded state ---------------------------------------------------------------------

    def _tick(self, key: _Key) -> None:
        """Every _SWEEP_EVERY lock-free acquires of a key: a look at the clock, and a sweep when due."""
        key.ticks = _SWEEP_EVERY - 1  # counting again, and still marked used
        try:
            if os.getpid() != _fork.pid:
                _fork.check()
            now = self._now()
            if now >= self._sweep_at:
                with self._lock:
                    self._sweep(now)
        except Exception:  # pacing must never cost a request
            log.debug("fleet sweep failed", exc_info=True)

    def _sweep(self, now: int, spare: str = "") -> None:
        """Forget idle entries; past max_keys, the least recently used too, down to _ROOM of it
        (``spare``, in use, aside): those holding nothing running first, one still running only to
        bring the count back to max_keys. Under the fleet's lock."""
        self._sweep_at = now + self._idle_us // 4
        # Per rank, the last use before which an entry is idle (one still running never is).
        idle_before = (now - self._idle_us, now - self._idle_us * PACE_KEPT, -math.inf)
        kept: List[Tuple[int, int, str, _Key]] = []
        for key_id, key in list(self._keys.items()):
            if key.ticks != _SWEEP_EVERY:  # used lock-free since the last sweep
                key.ticks, key.seen = _SWEEP_EVERY, now
            rank, since = _rank(key.state, now), max(key.state.last_seen, key.seen)
            if since > idle_before[rank] or key_id == spare:
                kept.append((rank, since, key_id, key))
            else:
                del self._keys[key_id]
                self._open.pop(key_id, None)
        if len(self._keys) <= self._max_keys:
            return
        room = max(1, int(self._max_keys * _ROOM))
        for rank, _, key_id, key in sorted(kept, key=lambda entry: entry[:2]):
            if len(self._keys) <= (self._max_keys if rank == _RUNNING else room):
                break
            if key_id == spare or key.ticks != _SWEEP_EVERY:  # in use: this call's, or lock-free
                continue
            if rank == _RUNNING and not self._warned_live:
                self._warned_live = True
                log.warning(
                    "LocalFleet holds more than max_keys=%d keys with a cooldown, a reserved turn or an "
                    "attempt in flight; forgetting the least recently used of them (raise max_keys)",
                    self._max_keys,
                )
            del self._keys[key_id]
            self._open.pop(key_id, None)


def _rank(st: _core.State, now: int) -> int:
    """How much an entry holds (the order a sweep for room evicts in)."""
    if (
        st.cooldown_until > now
        or st.theoretical_arrival > now  # a turn reserved ahead (a configured pace)
        or st.budget_until > now  # a quota reading before its Reset
        or max(st.flight.values(), default=0) > now
    ):
        return _RUNNING
    return _PACE if st.learned_interval or st.stated_interval else _PLAIN


#: Every fleet of this process (``reset_fleets`` forgets what each knows).
_FLEETS: weakref.WeakSet[StoreFleet] = weakref.WeakSet()


def reset_fleets() -> None:
    """Forget what every ``LocalFleet`` and ``HostFleet`` of this process knows (tests): each one's
    :meth:`~StoreFleet.reset`. A ``RedisFleet`` forgets only its outage (its state is shared with
    other hosts): give a test's fleet a ``prefix`` of its own."""
    for fleet in list(_FLEETS):
        fleet.reset()


class RetryBudget:
    """Allows retries up to ``ratio`` of recent requests, with a floor of ``min_per_second``.

    Requests and retries are counted with a weight that decays by e every ``window`` seconds; a
    retry needs one unit free of the larger of ``ratio`` per request and ``min_per_second *
    window`` (so low traffic such as cron jobs can always retry, and a spent budget refills
    smoothly). A fleet given one (``retry_budget=``) applies the same rule, ``_core.retry_wait``,
    per key. Thread-safe; O(1) per call.
    """

    _shared: ClassVar[Dict[str, RetryBudget]] = {}

    def __init__(
        self,
        ratio: float = 0.2,
        window: float = 10.0,
        min_per_second: float = 10.0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ratio = check_seconds(ratio, "ratio", high=1000.0, unit="")
        # From a millisecond (counts decay per window, in whole microseconds) to a day: a budget
        # counts recent traffic.
        self._window = check_seconds(window, "window", low=1e-3, high=86_400.0)
        self._min_per_second = check_seconds(min_per_second, "min_per_second", high=1e6, unit="")
        check_clock(clock, "clock")
        self._clock = clock
        window_us = round(self._window * _core.SECOND)
        self._allowance = _core.RetryAllowance(self._ratio, window_us, self._min_per_second)
        self._after_fork()
        _fork.track(self)

    def _after_fork(self) -> None:
        """Forget every request and retry, with a new lock: a child's traffic is not its parent's."""
        self._lock = threading.Lock()
        self._counts = _core.RetryCounts()

    @classmethod
    def shared(cls) -> RetryBudget:
        """The one process-wide budget with default settings, created on first use."""
        budget = RetryBudget._shared.get("budget")
        if budget is None:  # two threads may build one each: setdefault keeps the first for both
            budget = RetryBudget._shared.setdefault("budget", RetryBudget())
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
    def allowance(self) -> _core.RetryAllowance:
        """The rule in microseconds, as a fleet applies it to each key (its counts are the key's)."""
        return self._allowance

    @property
    def balance(self) -> float:
        """Retry units available now."""
        with self._lock:
            _core.retry_wait(self._counts, self._allowance, self._now(), _core.FIRST)  # decays the counts
            return _core.retry_room(self._counts, self._allowance) - self._counts.recent_retries

    def record_request(self) -> None:
        """Count one logical request (not its retries): it earns ``ratio`` of a retry."""
        with self._lock:
            _core.retry_wait(self._counts, self._allowance, self._now(), _core.FIRST)  # decays the counts
            self._counts.recent_firsts += 1

    def reserve(self, time_left: float = math.inf) -> Optional[float]:
        """Spend one unit for a retry: the seconds it waits for the unit to be free (0: now), or
        None (nothing spent) when that wait passes ``time_left`` or the floor never refills."""
        with self._lock:
            wait = _core.retry_wait(self._counts, self._allowance, self._now(), _core.ERROR)
            if wait < 0 or wait > time_left * _core.SECOND:
                return None
            self._counts.recent_retries += 1
            return wait / _core.SECOND

    def try_spend(self) -> bool:
        """Spend one unit for a retry that cannot wait; False (and nothing spent) when none is free."""
        return self.reserve(0.0) is not None

    def _now(self) -> int:
        now = self._clock()
        return round(now * _core.SECOND) if math.isfinite(now) else self._counts.counted_at

    def __reduce__(self) -> Any:
        if self is RetryBudget._shared.get("budget"):
            return (RetryBudget.shared, ())  # still the one process-wide budget
        with self._lock:  # a consistent picture, with counts of its own
            counts = _core.RetryCounts(**vars(self._counts))
        state = {"_clock": self._clock, "_counts": counts}
        return (type(self), (self._ratio, self._window, self._min_per_second), state)

    def __repr__(self) -> str:
        return (
            f"RetryBudget(ratio={self._ratio:g}, window={self._window:g}, "
            f"min_per_second={self._min_per_second:g}, balance={self.balance:.1f})"
        )


# -- settings every fleet checks alike -----------------------------------------------------------


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
        if match is None:
            raise ConfigurationError(f"rate must be like '10/min', '20/s' or '100/h', got {rate[:40]!r}")
        unit = _UNITS.get(match.group(2))
        if unit is None:
            raise ConfigurationError(
                f"rate must be a number per one of {_UNIT_NAMES}; {match.group(2)[:20]!r} is not a unit "
                f"(got {rate[:40]!r})"
            )
        value = float(match.group(1)) / unit
    else:
        raise ConfigurationError(f"rate must be a str or a number, got {type(rate).__name__}")
    if not math.isfinite(value) or value <= 0.0:
        raise ConfigurationError(f"rate must be a finite number of requests > 0, got {rate!r}")
    if not _MIN_RATE <= value <= _MAX_RATE:
        raise ConfigurationError(f"rate must be between 1/day and {_MAX_RATE:g}/s, got {rate!r}")
    return value


def describe_rate(rate: float) -> str:
    """Requests per second in words: ``10/s``, ``6/min``, ``2/h``."""
    if rate >= 1.0:
        return f"{rate:.3g}/s"
    if rate * 60.0 >= 1.0:
        return f"{rate * 60.0:.3g}/min"
    return f"{rate * 3600.0:.3g}/h"


def check_burst(value: Any, name: str = "burst") -> int:
    """A burst every fleet can use: an int from 1 to 1,000,000."""
    return check_int(value, name, 1, _MAX_BURST)


def check_timeout(value: Any, name: str = "timeout") -> float:
    """A shared store's ``timeout``: from a millisecond (no store answers sooner) to a minute."""
    return check_seconds(value, name, low=0.001, high=60.0)


def check_ttl(value: Any, name: str = "ttl") -> float:
    """A shared store's ``ttl`` for an idle key's state: from a second (Redis's scripts get whole
    milliseconds: under a second, a key could expire between calls) to 10**9 seconds."""
    return check_seconds(value, name, low=1.0, high=1e9)


def check_prefix(value: Any, name: str = "prefix") -> str:
    """A RedisFleet key prefix (see REDIS_PREFIX)."""
    return check_name(value, name, REDIS_PREFIX, "_.:- (no braces)")


def check_name(value: Any, name: str, pattern: re.Pattern[str], marks: str) -> str:
    """``value`` when ``pattern`` (1-64 letters, digits and ``marks``) matches all of it."""
    if not isinstance(value, str) or not pattern.match(value):
        shown = repr(value[:70]) if isinstance(value, str) else type(value).__name__
        raise ConfigurationError(f"{name} must be 1-64 characters of letters, digits and {marks}, got "
                                 f"{shown}")
    return value


def _safe_key_id(key_id: str) -> str:
    """The key id as given when it is a fleet_key() hash; anything else is hashed, so no key text
    leaks into a shared store."""
    if isinstance(key_id, str) and _KEY_ID.match(key_id):
        return key_id
    return fleet_key(key_id if isinstance(key_id, str) else repr(key_id))


def refusal(why: str, wait: float, time_left: float) -> str:
    """A refused turn's reason, as every fleet words it: what holds it, and when versus the deadline."""
    return f"{why}: next turn in {wait:.1f}s, after the deadline ({max(time_left, 0.0):.1f}s left)"


__all__ = ["ANONYMOUS", "GRANT_NOW", "Fleet", "Grant", "Lesson", "LocalFleet", "RetryBudget", "StoreFleet",
           "fleet_key", "parse_rate", "read_response"]
