"""RedisFleet: one pace, one cooldown and one retry budget per API key across processes and hosts."""

from __future__ import annotations

import atexit
import logging
import math
import re
import threading
import time
import weakref
from dataclasses import astuple
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Tuple, Union

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ... import _fork, _sleeping
from ..._config import check_clock
from ...exceptions import ConfigurationError
from ...pacing import RetryBudget
from ...pacing import _core as _pacing
from ...pacing.store import RELEASE_LATER, Lesson, StoreFleet, check_prefix, release_need
from . import _scripts
from ._scripts import micros

log = logging.getLogger("sume_urllib3")

_DEFAULT_BUDGET = RetryBudget()
_PLAIN = (str, bytes, int, float, bool)
_CLIENT_WINDOW = 60.0  # a process that used a key within this many seconds still shares it
# Seconds a lesson told late waits for a call to carry it: a tenth of the second a 429's
# measurement spans at least.
_LATE = 0.1
# Lessons of one key a process holds at most: the one that fills them is told at once, with them
# (a key whose responses outrun its acquires still costs one call per this many).
_MAX_LATE = 32


class _Late(NamedTuple):
    """A lesson told late (RELEASE_LATER): when it was learned, by when it must reach Redis,
    and the attempt and response it is about."""

    learned_at: int  # µs on the fleet's lesson clock (RedisFleet._lesson_now)
    due: float  # time.monotonic()
    turn: _pacing.Turn
    status: int
    lesson: Lesson


class RedisFleet(StoreFleet):
    """A Fleet whose state lives in Redis, so every process and host using an API key paces together.

    The rules are LocalFleet's, :mod:`sume_urllib3.pacing._core`, ported step for step to
    ``acquire.lua`` and ``release.lua``; docs/guide/pacing.md ("Many processes: Redis") says what
    is stored (``{prefix:v2:kid}:s``, ``:i``, ``:c``, one cluster hash slot per key), when a
    release is a call of its own (:func:`~sume_urllib3.pacing.store.release_need`) and how it
    fails open (as every shared ``StoreFleet``, with ``backoff`` and ``max_backoff``). Redis
    ``TIME`` is the clock.

    ``url_or_client``: a ``redis://``, ``rediss://`` or ``unix://`` URL (a URL is always one
    node), or a ``redis.Redis`` or ``redis.cluster.RedisCluster`` client, which keeps its own
    timeouts and retries: give it a short ``socket_timeout`` (and ``retry=Retry(NoBackoff(),
    0)``) so a failure falls back at once. ``rate`` and ``burst`` as for :class:`LocalFleet`;
    ``retry_budget``'s ratio, window and floor set the fleet-wide budget (None: none); ``ttl``
    how long an idle key's state is kept; ``timeout`` seconds for a call before pacing locally.
    ``clock`` and ``rng`` drive the backoff and spreads; ``server_clock`` replaces Redis
    ``TIME`` (for tests). Thread-safe and fork-safe; pickling keeps the configuration only.
    """

    _scope = "fleet-wide"

    def __init__(
        self,
        url_or_client: Union[str, Any],
        *,
        rate: Union[str, float, None] = None,
        burst: Optional[int] = None,
        prefix: str = "sume",
        timeout: float = 0.05,
        initial_window: int = 4,
        retry_budget: Optional[RetryBudget] = _DEFAULT_BUDGET,
        ttl: float = 3600.0,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        rng: Union[Any, Callable[[], float], None] = None,
        server_clock: Optional[Callable[[], float]] = None,
    ) -> None:
        # A pickled fleet's comes as it was.
        self._source = url_or_client if isinstance(url_or_client, _Source) else _Source(url_or_client)
        self._prefix = check_prefix(prefix)
        if server_clock is not None:
            check_clock(server_clock, "server_clock")
        self._server_clock = server_clock
        settings = dict(url_or_client=self._source, rate=rate, burst=burst, prefix=prefix, timeout=timeout,
                        initial_window=initial_window, retry_budget=retry_budget, ttl=ttl, backoff=backoff,
                        max_backoff=max_backoff)
        super().__init__(settings, clock=clock, wall=time.time, rng=rng)
        with _flusher._lock:
            _instances.add(self)

    def _after_fork(self) -> None:
        """Connections, scripts and lessons told late of this process."""
        super()._after_fork()
        try:
            self._client = self._source.client(self._timeout)
        except (ValueError, TypeError) as exc:  # redis-py's verdict on the URL; never echo the URL
            why = type(exc).__name__
            raise ConfigurationError(f"url_or_client is not a valid Redis URL ({why})") from None
        self._acquire_script = self._client.register_script(_scripts.ACQUIRE_LUA)
        self._release_script = self._client.register_script(_scripts.RELEASE_LUA)
        # Lessons told late, per key, oldest first: the parent's stay with the parent (it tells
        # them); a child's calls carry only its own.
        self._late_lock = threading.Lock()
        self._late: Dict[str, List[_Late]] = {}
        # A key whose lessons a flush is telling Redis: a call for it waits for that to land, so
        # the state never sees this process's lessons out of order.
        self._in_transit: Dict[str, threading.Event] = {}

    # -- the store: the scripts -----------------------------------------------------------------

    def _transact(self, kid: str, rule: Callable[..., Any], **args: Any) -> Any:
        """The rule's port: acquire.lua for ``_core.acquire``; release.lua, or a lesson told late,
        for ``_core.release``."""
        return self._reserve(kid, **args) if rule is _pacing.acquire else self._learn(kid, **args)

    def _reserve(
        self, kid: str, retry: int, not_before: int, time_left: int, rand: float, entry: str
    ) -> _pacing.Turn:
        budget = self._retry_budget
        args = [
            *self._common_args(), retry, not_before, time_left, rand, entry,
            int(self._ttl * 1000), *((-1, 0, 0) if budget is None else astuple(budget.allowance)),
            self._client_id, micros(_CLIENT_WINDOW), *self._carried(kid),
        ]
        reply = self._acquire_script(keys=list(_scripts.keys(self._prefix, kid)), args=_scripts.as_args(args))
        turn, clients = _scripts.parse_turn(reply, entry)
        self._clients = max(1, clients)
        return turn

    def _learn(self, kid: str, turn: Optional[_pacing.Turn], status: int, lesson: Lesson) -> bool:
        if turn is None:
            return False  # not a turn Redis granted
        if release_need(turn, status, lesson) == RELEASE_LATER:
            self._tell_later(kid, _Late(self._lesson_now(), time.monotonic() + _LATE, turn, status, lesson))
            return False
        return self._run_release(kid, [*self._carried(kid), *_scripts.lesson_args(0, turn, status, lesson)])

    def _store_name(self) -> str:
        return "Redis fleet"

    # -- lessons told late ----------------------------------------------------------------

    def _lesson_now(self) -> int:
        """µs on the clock the scripts' ``now`` comes from (Redis TIME or ``server_clock``, plus
        ``no_sleep()``'s virtual time), up to a constant: the difference of two is a lesson's age."""
        clock = time.monotonic if self._server_clock is None else self._server_clock
        return micros(clock()) + micros(_sleeping.virtual_horizon())

    def _tell_later(self, kid: str, late: _Late) -> None:
        """Keep a lesson for this process's next call for the key (or the flusher's, once due)."""
        with self._late_lock:
            first = not self._late
            lessons = self._late.setdefault(kid, [])
            lessons.append(late)
            full = len(lessons) >= _MAX_LATE
        if full:
            self._flush(kid)
        elif first:
            _flusher.watch()

    def _carried(self, kid: str) -> List[Any]:
        """The key's lessons told late, as script arguments, taken for the call about to be made.

        After a flush still telling Redis earlier ones (at most ``timeout``): lessons land in order.
        """
        if not self._late and not self._in_transit:
            return []  # the common case, without the lock
        with self._late_lock:
            lessons = self._late.pop(kid, None)
            landing = self._in_transit.get(kid)
        if landing is not None:
            landing.wait(self._timeout)
        return self._lesson_args(lessons) if lessons else []

    def _lesson_args(self, lessons: List[_Late]) -> List[Any]:
        now = self._lesson_now()
        args: List[Any] = []
        for late in lessons:
            args += _scripts.lesson_args(max(0, now - late.learned_at), late.turn, late.status, late.lesson)
        return args

    def _flush(self, kid: str) -> None:
        """Tell Redis one key's lessons that no call carried in time (one release call); never raises.

        While Redis is down they are dropped, as a release of theirs would have been skipped.
        """
        with self._late_lock:
            if not self._late.get(kid):
                return
            earlier = self._in_transit.get(kid)
            # In transit before the lessons leave _late: _carried's look without the lock never
            # finds neither.
            landing = self._in_transit[kid] = threading.Event()
            lessons = self._late.pop(kid)
        try:
            if earlier is not None:
                earlier.wait(self._timeout)
            if self._clock() >= self._down_until:
                self._run_release(kid, self._lesson_args(lessons))
                self._recovered()
        except Exception as exc:
            self._failed(exc)
        finally:
            with self._late_lock:
                if self._in_transit.get(kid) is landing:
                    del self._in_transit[kid]
            landing.set()

    def _flush_due(self, now: float) -> float:
        """Flush every key whose oldest lesson is due by ``now`` (time.monotonic()); when the oldest
        lesson still held is due (inf: none is)."""
        with self._late_lock:
            due = [kid for kid, lessons in self._late.items() if lessons[0].due <= now]
        for kid in due:
            self._flush(kid)
        with self._late_lock:
            return min((lessons[0].due for lessons in self._late.values()), default=math.inf)

    # -- Redis ------------------------------------------------------------------------------

    def _common_args(self) -> List[int]:
        """ARGV 1-5 of both scripts: now (0: Redis TIME) and the skew no_sleep() adds, in
        microseconds; the configured interval (0: learned), burst and first window."""
        now = 0 if self._server_clock is None else micros(self._server_clock())
        return [now, micros(_sleeping.virtual_offset()), self._config.interval, self._burst, self._window]

    def _run_release(self, kid: str, lessons: List[Any]) -> bool:
        """release.lua on ``lessons`` (script arguments, oldest first): did one start a cooldown?"""
        args = [*self._common_args(), int(self._ttl * 1000), *lessons]
        keys = list(_scripts.keys(self._prefix, kid)[:2])
        return int(self._release_script(keys=keys, args=_scripts.as_args(args))) == 1

    def _snapshot(self) -> Tuple[List[Tuple[str, _pacing.State]], int]:
        """Every key's state and Redis's clock (µs), read with SCAN, HGETALL and ZRANGE only."""
        client = self._client
        now, skew = self._common_args()[:2]
        if not now:
            seconds, micro = client.time()
            now = int(seconds) * _pacing.SECOND + int(micro)
        head = "{" + self._prefix + ":" + _scripts.LAYOUT + ":"
        fields = _scripts.fields()
        states = []
        for name in client.scan_iter(match=head + "*}:s", count=1000):
            kid = _text(name)[len(head) : -3]
            state_key, flight_key, _ = _scripts.keys(self._prefix, kid)
            raw = {_text(k): _text(v) for k, v in client.hgetall(state_key).items()}
            try:
                values = {f: type(d)(float(raw[f])) if f in raw else d for f, d in fields.items()}
            except ValueError:
                continue  # not a state of this layout
            st = _pacing.State(**values)  # type: ignore[arg-type]
            st.flight = {_text(m): int(end) for m, end in client.zrange(flight_key, 0, -1, withscores=True)}
            states.append((kid, st))
        return states, now + skew

    def __repr__(self) -> str:
        pace = "learned" if self._rate is None else f"{self._rate:g}/s burst {self._burst}"
        return f"RedisFleet({self._source.describe()}, prefix={self._prefix!r}, pace={pace})"


# -- configuration ------------------------------------------------------------------------


class _Source:
    """Where the Redis connection comes from: a URL (we own the pool) or the caller's client."""

    def __init__(self, url_or_client: Any) -> None:
        self.url: Optional[str] = None
        self.given: Any = None
        if isinstance(url_or_client, str):
            if not url_or_client.startswith(("redis://", "rediss://", "unix://")):
                raise ConfigurationError(
                    "url_or_client must be a redis://, rediss:// or unix:// URL or a Redis client"
                )
            self.url = url_or_client
        elif callable(getattr(url_or_client, "register_script", None)):
            self.given = url_or_client
        else:
            raise ConfigurationError(
                "url_or_client must be a Redis URL or a redis.Redis or redis.cluster.RedisCluster client, "
                f"got {type(url_or_client).__name__}"
            )

    def client(self, timeout: float) -> Any:
        if self.url is None:
            return self.given
        # No retries inside redis-py: a failed call falls back at once and Redis is retried later.
        return redis.Redis.from_url(
            self.url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
            retry_on_timeout=False,
            health_check_interval=0,
        )

    def describe(self) -> str:
        if self.url is None:
            return type(self.given).__name__
        # Never show a password: not in the userinfo, not as ?password= in the query.
        url = re.sub(r"//[^@/]*@", "//***@", self.url)
        base, sep, _query = url.partition("?")
        return base + ("?***" if sep else "")

    def __reduce__(self) -> Any:
        if self.url is not None:
            return (_Source, (self.url,))
        nodes = getattr(self.given, "nodes_manager", None)
        if nodes is not None:  # a redis.cluster.RedisCluster: the nodes it knows, their settings,
            # and its retry policy (how long a cluster error takes to fail over to local pacing)
            startup = [(n.host, n.port) for n in nodes.startup_nodes.values()]
            retry = getattr(self.given, "retry", None)
            retry = retry if isinstance(retry, Retry) else None
            return (_source_from_cluster, (startup, _plain(nodes.connection_kwargs), retry))
        pool = getattr(self.given, "connection_pool", None)
        if pool is None:
            raise TypeError("a RedisFleet built from this client cannot be pickled; build it from a URL")
        return (_source_from_pool, (pool.connection_class, _plain(pool.connection_kwargs)))


def _plain(kwargs: Mapping[str, Any]) -> Dict[str, Any]:
    """Plain settings only (host, port, db, credentials, timeouts, TLS paths); redis-py's own
    helpers in the kwargs hold locks and callbacks, and are rebuilt by the new client."""
    return {k: v for k, v in kwargs.items() if isinstance(v, _PLAIN) or v is None}


def _source_from_pool(connection_class: Any, kwargs: Dict[str, Any]) -> _Source:
    pool = redis.ConnectionPool(connection_class=connection_class, **kwargs)
    return _Source(redis.Redis(connection_pool=pool))


def _source_from_cluster(
    startup: List[Tuple[str, int]], kwargs: Dict[str, Any], retry: Optional[Retry]
) -> _Source:
    from redis.cluster import ClusterNode, RedisCluster

    kwargs = {k: v for k, v in kwargs.items() if k not in ("host", "port")}  # each node's own
    if retry is not None:
        kwargs["retry"] = retry
    nodes = [ClusterNode(h, p) for h, p in startup]  # type: ignore[no-untyped-call,unused-ignore]
    return _Source(RedisCluster(startup_nodes=nodes, **kwargs))


#: Every RedisFleet of this process: at exit, each tells Redis what it still holds.
_instances: weakref.WeakSet[RedisFleet] = weakref.WeakSet()


class _Flusher:
    """One daemon thread per process that tells Redis the lessons no call carried within _LATE.

    It sleeps until the oldest lesson any fleet holds is due, or until woken (``watch``); it never
    runs a request's code, and a failed flush fails open as any call does.
    """

    def __init__(self) -> None:
        self._after_fork()
        _fork.track(self)

    def _after_fork(self) -> None:
        """No thread yet (again in a forked child: threads do not cross a fork)."""
        # Also guards adding to _instances: a WeakSet listed while another thread adds to it
        # raises RuntimeError, which would end the thread.
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def watch(self) -> None:
        """A fleet holds lessons again: the thread looks when they are due."""
        with self._lock:
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="sume-redis-lessons", daemon=True)
                try:
                    thread.start()
                except RuntimeError:  # at interpreter shutdown: the atexit hook tells what is held
                    return
                self._thread = thread
        self._wake.set()

    def _run(self) -> None:
        while True:
            # Cleared before the look at what is due: a lesson kept after it wakes the next wait.
            self._wake.clear()
            due = math.inf
            for fleet in self.fleets():
                try:
                    due = min(due, fleet._flush_due(time.monotonic()))
                except Exception:  # a bug here must not end the thread every fleet relies on
                    log.exception("telling Redis the lessons told late failed")
            self._wake.wait(None if due == math.inf else max(0.0, due - time.monotonic()))

    def fleets(self) -> List[RedisFleet]:
        """Every RedisFleet of this process now."""
        with self._lock:
            return list(_instances)


_flusher = _Flusher()


@atexit.register
def _tell_at_exit() -> None:
    """What this process learned and has not told Redis yet, before it goes (fail-open, bounded
    by ``timeout`` per key; once Redis fails the rest is dropped)."""
    _fork.check()  # a child forked without at-fork hooks holds its parent's lessons: they are not its own
    for fleet in _flusher.fleets():
        fleet._flush_due(math.inf)  # one call per key, dropped once Redis fails


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
