"""Pacing before every attempt: cooldowns, a learned or configured pace, and slow start, per API key.

A fleet is asked before each attempt (``acquire``) and told what came back (``release``).
``LocalFleet`` keeps that state in one process, shared by every thread and session that
uses it; ``HostFleet`` shares it across the processes of a host (a file), and
``sume_urllib3.contrib.redis.RedisFleet`` across hosts (Redis).
"""

from __future__ import annotations

import abc
import itertools
import logging
import math
import operator
import os
import random
import re
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Dict, List, Mapping, NamedTuple, Optional, Protocol, Tuple, Union

from .. import _fork, _sleeping
from .._config import check_clock, check_int, check_rng
from .._envelope import parse_retry_after
from .._errors import ConfigurationError
from . import _core as _pacing
from ._budget import RetryBudget
from ._signals import ANONYMOUS, fleet_key, may_carry_ratelimit, parse_ratelimit

log = logging.getLogger("sume_urllib3")

Rate = Union[str, float, int, None]

#: The longest cooldown one Retry-After can start (seconds): an absurd value (a year, a
#: bug) must not hold every request of a key for that long; the policy still refuses to
#: wait the full value and gives up, with the server's figure in its reason.
MAX_COOLDOWN = 600.0

#: Keys (origin and API key pairs) a LocalFleet holds state for at most, by default (about
#: 1 KB each): past it, the least recently used idle entry goes first.
MAX_KEYS = 10_000
#: Seconds an entry may stay unused before a LocalFleet forgets it, by default, when it holds
#: nothing that still runs (a cooldown, a turn reserved ahead, an attempt in flight, a quota
#: reading before its Reset) and no pace; one holding a pace (stated by the server or learned
#: from its 429s) is kept PACE_KEPT times as long (an hour, as RedisFleet's ttl keeps it): a
#: quota outlasts minutes of quiet, a slow-start window does not (TCP restarts its own after
#: an idle spell too).
IDLE = 300.0
PACE_KEPT = 12
_MAX_IDLE = 86_400.0
_MAX_MAX_KEYS = 10_000_000
# Lock-free acquires of a key between two looks at the clock (is a sweep due?): a counter in
# the key's slots is cheaper than a clock read on the path that answers GRANT_NOW.
_SWEEP_EVERY = 1024
# Entries a sweep for room leaves, as a share of max_keys: the next one is that many new keys
# away, so its O(n log n) sorting is paid once per tenth of the cap, not per new key.
_ROOM = 0.9
_MIN_RATE = 1.0 / 86400.0  # one a day: below any real quota, so never a floor that beats one
_MAX_RATE = 1e6
_MAX_BURST = 1_000_000
_STATS = (
    "held",
    "refused",
    "again",
    "cooldowns",
    "throttled",
    "waited_pace",
    "waited_cooldown",
    "waited_slow_start",
)
# How much an entry holds, in the order a sweep for room evicts: nothing but a slow-start
# window; a pace (stated or learned); something still running (a cooldown, a turn reserved
# ahead, a quota reading before its Reset, an attempt in flight).
_PLAIN, _PACE, _RUNNING = 0, 1, 2
# A sweep sorts entries by rank, then last use, as one int (µs clocks stay far below 2**62).
_RANK_SHIFT = 62
_ORDER = operator.itemgetter(0)
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
    """One key's pacing state (the core's), its lock, and counters. Guarded by ``lock``.

    ``ticks`` counts lock-free acquires down from _SWEEP_EVERY (at 0 one looks at the clock); a
    sweep finding it moved sets it back and stamps ``seen``: how a sweep knows when a key that
    only took the lock-free path was last used (that path reads no clock). ``gone`` marks an
    entry a sweep evicted.
    """

    __slots__ = (
        "again",
        "cooldowns",
        "gone",
        "held",
        "lock",
        "open",
        "refused",
        "seen",
        "state",
        "throttled",
        "ticks",
        "waited",
    )

    def __init__(self, now: int = 0) -> None:
        self.lock = threading.Lock()
        self.state = _pacing.State()
        # Nothing known, nothing held, the window wide: acquire answers GRANT_NOW without the lock.
        self.open = False
        self.held = self.refused = self.again = self.cooldowns = self.throttled = 0
        self.waited: Dict[str, float] = {"pace": 0.0, "cooldown": 0.0, "slow_start": 0.0}
        self.ticks = _SWEEP_EVERY
        self.gone = False
        self.seen = now


class LocalFleet:
    """Paces the requests of one process per key, shared by every thread and session.

    The rules are :mod:`sume_urllib3.pacing._core`'s (docs/how-it-works.md): a ``Retry-After`` cooldown
    that holds every request of the key and releases them spread out; a configured ``rate``
    (``"10/min"``, ``"20/s"``, ``"100/h"``, or requests per second as a number) with ``burst``
    turns at once, which headers never make faster (a slower stated pace wins) and 429s
    slow; the pace a server states (``RateLimit-Policy``, a limit with a window);
    ``Remaining``/``Reset`` as a budget of
    attempts; and, while nothing is known, a slow-start window of ``initial_window`` first
    attempts in flight, with the pace the server admitted learned from its 429s. A turn
    that would come after the request's deadline is refused at once, reserving nothing.
    A lone request is never delayed. One INFO line on the ``sume_urllib3`` logger says
    when a cooldown starts (naming the key's hash, never the key). With ``retry_budget`` (a
    :class:`RetryBudget` whose ratio, window and floor it applies per key, as ``RedisFleet``
    does fleet-wide) a ``retry="error"`` turn waits until the budget has room for it, and is
    refused only when that comes after its deadline.

    ``HostFleet`` runs the same rules on a file and ``contrib.redis.RedisFleet`` in Redis (a
    conformance table in the tests checks all three). Thread-safe; when nothing is known and
    nothing is held, ``acquire`` is one dictionary look-up. ``clock`` (monotonic seconds; by
    default the shared clock that ``no_sleep()`` drives), ``wall`` (Unix time, for ``X-RateLimit-Reset``
    timestamps) and ``rng`` (a ``random.Random`` or a callable returning [0, 1)) are
    injectable. ``reset()`` forgets every key. After ``os.fork()`` the child starts with
    no state, whether or not the fork ran Python's at-fork hooks (uWSGI forks from C: every
    path that takes a lock first compares ``os.getpid()`` with the fleet's); a pickled fleet
    keeps its configuration only.

    Bounded: an entry that holds nothing still running (a cooldown, a turn reserved ahead,
    an attempt in flight, a quota reading before its Reset) is forgotten once unused for
    ``idle`` seconds (default :data:`IDLE`, five minutes), or :data:`PACE_KEPT` times as
    long when it holds a pace; at most ``max_keys`` entries (default :data:`MAX_KEYS`) are
    kept, the least recently used idle ones going first. Entries still running go only when
    they alone pass ``max_keys`` (one WARNING says so). Sweeps are amortized: one runs when a
    new key passes ``max_keys`` (and frees a tenth of it), or, at most every ``idle / 4``
    seconds, from an acquire that looks at the clock (every one that takes a lock, and every
    1024th lock-free one of a key), so a request never pays for a scan of its own.
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
        max_keys: int = MAX_KEYS,
        idle: float = IDLE,
        retry_budget: Optional[RetryBudget] = None,
    ) -> None:
        self._rate_config = rate
        self._rate = parse_rate(rate)
        self._burst = check_burst(burst) if burst is not None else 1
        if burst is not None and self._rate is None:
            raise ConfigurationError("burst needs a rate: LocalFleet(rate='10/min', burst=5)")
        self._window = check_int(initial_window, "initial_window", 1, 10_000)
        self._max_keys = check_int(max_keys, "max_keys", 1, _MAX_MAX_KEYS)
        self._idle = check_seconds_between(idle, "idle", 1.0, _MAX_IDLE)
        for name, value, default in (("clock", clock, _sleeping.shared_monotonic), ("wall", wall, time.time)):
            if value is not default:  # reading the shared clock under no_sleep() moves this thread's time
                check_clock(value, name)
        check_rng(rng)
        self._clock = clock
        self._wall = wall
        self._rng = rng
        self._random: Callable[[], float] = (
            random.random if rng is None else rng.random if isinstance(rng, random.Random) else rng
        )
        if retry_budget is not None and not isinstance(retry_budget, RetryBudget):
            raise ConfigurationError(
                f"retry_budget must be a RetryBudget or None, got {type(retry_budget).__name__}"
            )
        self._retry_budget = retry_budget
        self._config = _pacing.Config(
            interval=interval_us(self._rate), burst=self._burst, window=self._window,
            retries=None if retry_budget is None else retry_budget.allowance,
        )
        self._entries = itertools.count(1)
        self._keys: Dict[str, _Key] = {}
        self._idle_us = round(self._idle * 1_000_000)
        self._start_afresh()
        _FLEETS.add(self)

    def _start_afresh(self) -> None:
        """What belongs to this process: the sweeper's lock and clock, and the pid they are for."""
        self._pid = os.getpid()
        # Never waited on: a thread that finds another sweeping goes on with its request.
        self._sweep_lock = threading.Lock()
        self._sweep_at = 0  # the fleet's clock (µs) from which the next acquire sweeps
        self._warned_live = False
        # Counters of evicted entries, so stats() still counts what they did.
        self._retired: Dict[str, float] = dict.fromkeys(_STATS, 0)

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
        rate = "learned" if self._rate is None else _describe_rate(self._rate)
        return f"<LocalFleet rate={rate} burst={self._burst} keys={len(self._keys)}>"

    def __reduce__(self) -> Any:
        if self is LocalFleet._default:
            return (LocalFleet.default, ())
        burst = self._burst if self._rate else None
        config = (self._rate_config, burst, self._window, self._max_keys, self._idle, self._retry_budget)
        return (_rebuild, (type(self), *config))

    # -- the protocol --------------------------------------------------------------------

    def acquire(
        self, key_id: str, *, time_left: float, retry: Optional[str] = None, not_before: float = 0.0
    ) -> Grant:
        """Reserve a turn for one attempt; see :class:`Fleet` and the class docstring."""
        key = self._keys.get(key_id)
        if key is not None and key.open:
            key.ticks -= 1  # marks it used (racy, and fine: a lost decrement delays one clock look)
            if not not_before:
                if key.ticks > 0:
                    return GRANT_NOW
                return self._tick(key)
            if retry is not None and 0.0 < not_before <= time_left:
                return Grant(wait=not_before)  # nothing paces an open key: the caller's wait is the turn
        try:
            return self._acquire(key_id, time_left, retry, not_before)
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
        self._start_afresh()

    # -- introspection (tests, benchmarks, metrics) -------------------------------------------

    def pace(self, key_id: str) -> Optional[float]:
        """The pace a key is held to now, in requests per second, or None while unknown."""
        self._check_pid()
        key = self._keys.get(key_id)
        if key is None:
            return self._rate
        with key.lock:
            interval, _ = _pacing.pace(key.state, self._config, self._now())
        return _pacing.SECOND / interval if interval else None

    def stats(self) -> Dict[str, float]:
        """Counters over every key: requests held, refused, sent ``again``, seconds waited."""
        self._check_pid()
        totals = dict(self._retired)  # what evicted entries did still counts
        for key in list(self._keys.values()):
            with key.lock:
                _add_counters(totals, key)
        return totals

    # -- inside ----------------------------------------------------------------------------

    def _now(self) -> int:
        return round(self._clock() * 1_000_000)

    def _acquire(self, key_id: str, time_left: float, retry: Optional[str], not_before: float) -> Grant:
        self._check_pid()  # before any lock: one a parent's thread held at a fork stays held
        floor = _seconds(not_before)
        left = _seconds(time_left, default=math.inf)
        while True:
            key = self._entry(key_id)
            with key.lock:
                if key.gone:
                    continue  # a sweep evicted it between the look-up and the lock: a new entry
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
                grant = self._grant(key, turn, floor, left)
            if now >= self._sweep_at:
                self._sweep(now)
            return grant

    # -- bounded state ---------------------------------------------------------------------

    def _check_pid(self) -> None:
        if self._pid != os.getpid():
            self._forked()

    def _forked(self) -> None:
        """A process forked without at-fork hooks (uWSGI's workers): start afresh, as a hook would.

        Every per-process reset runs (the HTTP pools' too, once per process); this fleet's
        own, if it was somehow not among them, after.
        """
        _fork.check()
        if self._pid != os.getpid():
            self.reset()

    def _entry(self, key_id: str) -> _Key:
        """The key's entry, made if new (evicting for room when that passes max_keys)."""
        key = self._keys.get(key_id)
        if key is not None and not key.gone:
            return key
        now = self._now()
        new = _Key(now)  # seen now: no sweep takes it before its acquire does
        # setdefault is atomic: two threads creating one key both get the same state.
        key = self._keys.setdefault(key_id, new)
        if key.gone:  # evicted, still in the dict for an instant: replace it
            self._keys.pop(key_id, None)
            key = self._keys.setdefault(key_id, new)
        if key is new and len(self._keys) > self._max_keys:
            self._sweep(now, spare=key_id)
        return key

    def _tick(self, key: _Key) -> Grant:
        """Every _SWEEP_EVERY lock-free acquires of a key: a look at the clock, and a sweep when due."""
        key.ticks = _SWEEP_EVERY - 1  # counting again, and still marked used
        try:
            self._check_pid()
            now = self._now()
            if now >= self._sweep_at:
                self._sweep(now)
        except Exception:  # pacing must never cost a request
            log.debug("sume_urllib3: fleet sweep failed", exc_info=True)
        return GRANT_NOW

    def _sweep(self, now: int, spare: Optional[str] = None) -> None:
        """Evict idle entries, and when past max_keys, the least recently used (``spare`` aside).

        One thread sweeps at a time; another finding it busy goes on with its request.
        """
        lock = self._sweep_lock
        if not lock.acquire(blocking=False):
            return
        try:
            self._sweep_at = now + self._idle_us // 4
            keys = self._keys
            before = len(keys)
            # (eviction order: rank, then last use, as one int; key_id; entry) of the entries left
            kept: List[Tuple[int, str, _Key]] = []
            plain_after, pace_after = now - self._idle_us, now - self._idle_us * PACE_KEPT
            # The loop runs once per entry and sweep: its tests are written out, not called.
            # Over a copy made in one C call: list(keys.items()) makes a tuple per entry, and a
            # garbage collection one of them sets off can let another thread add a key halfway
            # ("dictionary changed size during iteration", seen on Python 3.8).
            for key_id, key in keys.copy().items():
                if key.ticks != _SWEEP_EVERY:  # used lock-free since the last sweep
                    key.ticks = _SWEEP_EVERY
                    key.seen = now
                st = key.state
                flight = st.flight
                if (
                    st.cooldown_until > now
                    or st.theoretical_arrival > now  # a turn reserved ahead (a configured pace)
                    or st.budget_until > now  # a quota reading before its Reset
                    # One C call, atomic under the GIL: a release on another thread may empty
                    # the entry between a separate emptiness test and max() (ValueError).
                    or max(flight.values(), default=0) > now
                ):
                    rank = _RUNNING
                elif st.learned_interval or st.stated_interval:
                    rank = _PACE
                else:
                    rank = _PLAIN
                since = st.last_seen if st.last_seen > key.seen else key.seen  # an acquire or release
                if (
                    rank == _RUNNING
                    or since > (plain_after if rank == _PLAIN else pace_after)
                    or key_id == spare
                    or not self._evict(key_id, key)
                ):
                    kept.append(((rank << _RANK_SHIFT) + since, key_id, key))
            room = max(1, int(self._max_keys * _ROOM))
            if len(keys) > self._max_keys and len(kept) > room:
                self._make_room(kept, len(kept) - room, spare)
            if before >= 1024 and len(keys) < before // 4:
                self._compact()
        finally:
            lock.release()

    def _make_room(self, kept: List[Tuple[int, str, _Key]], excess: int, spare: Optional[str]) -> None:
        """Evict ``excess`` entries, least recently used first; one still running only past max_keys."""
        kept.sort(key=_ORDER)  # by rank, then last use
        over = len(kept) - self._max_keys  # entries still running go only to bring it back to the cap
        for order, key_id, key in kept:
            if excess <= 0:
                break
            if key_id == spare:
                continue
            if order >> _RANK_SHIFT == _RUNNING:
                if over <= 0:
                    break
                if not self._warned_live:
                    self._warned_live = True
                    log.warning(
                        "sume_urllib3: LocalFleet holds more than max_keys=%d keys with a cooldown, "
                        "a reserved turn or an attempt in flight; forgetting the least recently used "
                        "of them (raise max_keys)",
                        self._max_keys,
                    )
            if self._evict(key_id, key):
                excess -= 1
                over -= 1

    def _evict(self, key_id: str, key: _Key) -> bool:
        """Remove one entry unless a thread holds or has just used it; keep what it counted."""
        if not key.lock.acquire(blocking=False):
            return False  # in use this instant
        try:
            if key.ticks != _SWEEP_EVERY or self._keys.get(key_id) is not key:
                return False
            key.gone = True
            self._keys.pop(key_id, None)
            _add_counters(self._retired, key)
            return True
        finally:
            key.lock.release()

    def _compact(self) -> None:
        """A dict keeps the table of its largest size: copy it once most of its entries are gone.

        An entry another thread inserts into the old dict meanwhile is carried over; one
        inserted after that pass (a thread that read the attribute just before the swap) is a
        new entry again at its next acquire.
        """
        old = self._keys
        self._keys = new = dict(old)
        for key_id, key in old.copy().items():  # a copy in one C call, as in _sweep
            if not key.gone:
                new.setdefault(key_id, key)

    def _grant(self, key: _Key, turn: _pacing.Turn, floor: float, left: float) -> Grant:
        """``grant_for``'s grant, with the refusal worded from the key's state, counted in its stats."""
        why = self._why(key.state, _pacing.SOURCES[turn.source]) if turn.code == _pacing.REFUSED else None
        grant = grant_for(turn.code, turn, floor, left, token=_Token(key, turn), why=why)
        if grant.refused:
            key.refused += 1
        elif grant.again:
            key.again += 1
            if grant.source is not None:
                key.waited[grant.source] += grant.wait
        elif grant.source is not None:
            key.held += 1
            key.waited[grant.source] += grant.wait - floor
        return grant

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
        if self._pid != os.getpid():  # before the lock: one a parent's thread held at a fork stays held
            self._forked()
            return  # an entry of the parent's (a grant from before a fork no hook told us about)
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
        seconds = parse_retry_after(headers.get("Retry-After"), wall)
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


def grant_for(
    code: int,
    turn: _pacing.Turn,
    floor: float,
    time_left: float,
    *,
    token: Any = None,
    why: Optional[str] = None,
) -> Grant:
    """The grant of a turn the pacing core decided, for every fleet: ``code`` is its answer (a
    store's own, which may say NO_BUDGET), ``floor`` the caller's own wait. ``token`` goes with
    the grant to ``release`` (the turn itself by default); ``why`` words a refusal (by default
    the turn's source)."""
    wait = turn.wait / _pacing.SECOND
    source = _pacing.SOURCES[turn.source]
    if code == _pacing.REFUSED:
        return Grant(wait=wait, refused=refusal(why or source or "pace", wait, time_left), source=source)
    if code == _pacing.NO_BUDGET:
        return budget_refused(wait, time_left)
    if code == _pacing.AGAIN:
        return Grant(wait=wait, source=source, again=True)
    held = source if wait > floor + 1e-9 else None
    return Grant(wait=max(wait, floor), source=held, token=turn if token is None else token)


def budget_refused(wait: float, time_left: float) -> Grant:
    """A retry the fleet's retry budget holds past its deadline (``wait`` > 0) or for good (0)."""
    why = "retry budget: the fleet's retries for this API key are spent"
    if wait > 0:  # it refills: the retry's unit comes back after the deadline
        return Grant(wait=wait, refused=refusal(why, wait, time_left))
    return Grant(refused=why)


def _rebuild(
    cls: type, rate: Rate, burst: Optional[int], window: int, max_keys: int = MAX_KEYS, idle: float = IDLE,
    retry_budget: Optional[RetryBudget] = None,
) -> LocalFleet:
    fleet = cls(rate, burst, initial_window=window, max_keys=max_keys, idle=idle, retry_budget=retry_budget)
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
        if match is None:
            raise ConfigurationError(f"rate must be like '10/min', '20/s' or '100/h', got {rate[:40]!r}")
        unit = _unit(match.group(2))
        if unit is None:
            unknown = match.group(2)[:20]
            raise ConfigurationError(
                f"rate must be a number per one of {_UNIT_NAMES}; {unknown!r} is not a unit "
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


def _unit(name: str) -> Optional[float]:
    """Seconds in a rate's unit, or None. Only the words take a plural "s": "ms" is not
    "m" (minutes) plus a plural, it is milliseconds, which no quota is counted in."""
    if name in _UNITS:
        return _UNITS[name]
    if len(name) > 2 and name.endswith("s") and len(name[:-1]) > 1:
        return _UNITS.get(name[:-1])
    return None


def _describe_rate(rate: float) -> str:
    if rate >= 1.0:
        return f"{rate:.3g}/s"
    if rate * 60.0 >= 1.0:
        return f"{rate * 60.0:.3g}/min"
    return f"{rate * 3600.0:.3g}/h"


def _add_counters(totals: Dict[str, float], key: _Key) -> None:
    totals["held"] += key.held
    totals["refused"] += key.refused
    totals["again"] += key.again
    totals["cooldowns"] += key.cooldowns
    totals["throttled"] += key.throttled
    for source, seconds in key.waited.items():
        totals["waited_" + source] += seconds


def check_seconds_between(value: Any, name: str, low: float, high: float) -> float:
    """``value`` as seconds when a finite number within [low, high]; else ConfigurationError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not (math.isfinite(value) and low <= value <= high):
        raise ConfigurationError(f"{name} must be between {low:g} and {high:g} seconds, got {value!r}")
    return float(value)


#: RedisFleet's ``prefix``: Redis key text without braces (the cluster hash tag is the fleet's).
#: Here rather than in contrib.redis, as REDIS_TIMEOUT, so Django's check reads them without redis.
REDIS_PREFIX = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
#: RedisFleet's ``timeout`` (seconds): below a millisecond no Redis answers in time.
REDIS_TIMEOUT = (0.001, 60.0)


def check_burst(value: Any, name: str = "burst") -> int:
    """A burst both fleets can use: an int from 1 to 1,000,000."""
    return check_int(value, name, 1, _MAX_BURST)


def check_prefix(value: Any, name: str = "prefix") -> str:
    """A RedisFleet key prefix (see REDIS_PREFIX)."""
    if not isinstance(value, str) or not REDIS_PREFIX.match(value):
        shown = repr(value[:70]) if isinstance(value, str) else type(value).__name__
        raise ConfigurationError(
            f"{name} must be 1-64 characters of letters, digits and _.:- (no braces), got {shown}"
        )
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


# Failing open: a fleet that shares its state (in Redis, in a host file) paces locally while
# that store fails, and never blocks a request on it.
#
# ``RedisFleet`` and ``HostFleet`` share this part, written once: the counters, the backoff
# before the store is tried again (spread, so processes do not retry it in step), the local
# ``LocalFleet`` of the outage (a configured rate shared among the processes seen lately), and
# the two log lines (one WARNING when an outage starts, one INFO when it ends).

pass

log = logging.getLogger("sume_urllib3")


class Local(NamedTuple):
    """``Grant.token`` of a turn the local fallback fleet gave."""

    fleet: Fleet
    grant: Grant


class FailOpen(abc.ABC):
    """Outage handling for a shared fleet; the fleet sets these attributes in each process.

    ``_outage_lock`` guards the counters and the outage state; ``_backoff``/``_max_backoff``
    bound the wait before the store is tried again; ``_clock`` and ``_random`` are the fleet's.
    A subclass says what its store is called (``_store``, ``_scope``) and which local fleet
    stands in (``_local_settings``).
    """

    _outage_lock: Any
    _backoff: float
    _max_backoff: float
    _clock: Callable[[], float]
    _random: Callable[[], float]
    #: How log lines name the store ("Redis fleet", "host fleet file /run/...").
    _store: str
    #: Where the pace is shared when the store works ("fleet-wide", "host-wide").
    _scope: str

    def _start_outage_state(self) -> None:
        """A process's outage state: none yet (again in a forked child)."""
        self._down_until = 0.0  # clock() before which the store is not tried
        self._delay = self._backoff  # the next backoff after a failure
        self._outage = False
        self._clients = 1  # processes seen sharing a key lately (for the fallback's share)
        self._fallbacks = 0
        self._errors = 0
        self._local_fleet: Optional[LocalFleet] = None

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

    @abc.abstractmethod
    def _local_settings(self, share: int) -> Dict[str, Any]:
        """``LocalFleet`` arguments for an outage, a configured pace divided by ``share``."""

    def _fallback(self, kid: str, time_left: float, retry: Optional[str], not_before: float) -> Grant:
        """A turn from the local fleet of this outage, marked ``fallback``."""
        fleet = self._local()
        grant = fleet.acquire(kid, time_left=time_left, retry=retry, not_before=not_before)
        with self._outage_lock:
            self._fallbacks += 1
        return Grant(
            wait=grant.wait,
            refused=grant.refused,
            source=grant.source,
            again=grant.again,
            fallback=True,
            token=Local(fleet, grant),
        )

    @staticmethod
    def _released_locally(
        key_id: str, grant: Grant, status: Optional[int], headers: Optional[Mapping[str, str]]
    ) -> bool:
        """Release a turn the outage's local fleet gave (True); False for a turn of the store."""
        token = grant.token
        if not isinstance(token, Local):
            return False
        token.fleet.release(key_id, token.grant, status, headers)
        return True

    def _local(self) -> LocalFleet:
        """The local fleet of this outage; a configured rate is shared among the processes seen."""
        fleet = self._local_fleet
        if fleet is None:
            with self._outage_lock:
                fleet = self._local_fleet
                if fleet is None:
                    fleet = LocalFleet(**self._local_settings(max(1, self._clients)))
                    self._local_fleet = fleet
        return fleet

    def _failed(self, exc: BaseException) -> None:
        """The store failed: count it, back off (spread), and say so once per outage."""
        with self._outage_lock:
            self._errors += 1
            delay = self._delay * (0.5 + self._random())  # processes do not retry the store in step
            self._down_until = self._clock() + delay
            self._delay = min(self._delay * 2, self._max_backoff)
            first = not self._outage
            self._outage = True
        if first:
            log.warning(
                "sume_urllib3: %s unavailable (%s); pacing locally, trying it again in %.1fs",
                self._store,
                describe(exc),
                delay,
            )

    def _recovered(self) -> None:
        """The store answered: the outage (if any) is over, and its local fleet forgotten."""
        if not self._outage:
            return
        with self._outage_lock:
            was_out, self._outage = self._outage, False
            self._delay = self._backoff
            self._local_fleet = None
        if was_out:
            log.info("sume_urllib3: %s available again; pacing %s", self._store, self._scope)


def describe(exc: BaseException) -> str:
    """An error for a log line: its class and the first line of its text, at most 200 characters."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__
