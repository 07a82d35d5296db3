"""The deadline inside an attempt: a server that trickles bytes does not decide when a call ends.

A socket's read timeout restarts with every piece that arrives, so a server sending a byte
every 0.4 s keeps a 1 s read timeout from ever firing. Each request that runs on real time
is watched from its first send until its body is read (for ``stream=True``, until the caller
has read it, closed it or dropped it): when the deadline passes first, the socket the
request is reading is shut down, the blocked read returns at once, and the adapter turns
the failure into ``SumeReadTimeout`` with the record.

One daemon thread watches every request of the process; it looks ten times a second while
requests are in flight, and parks on an event while none is. The pools SumeAdapter makes
tell the watch which connection the request holds, and forget it the moment it goes back to
the pool, so a watch never touches a connection another request is using.

Private parts of urllib3 used here (see ``_body`` for the versions checked):
``HTTPConnectionPool._get_conn``/``_put_conn`` (where a pool hands a connection out and takes it
back: no public hook) and ``Timeout._connect``/``_read`` (the values as given, unresolved).
"""

from __future__ import annotations

import functools
import logging
import math
import socket
import threading
import time
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Union

import requests
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import EmptyPoolError, ReadTimeoutError
from urllib3.util.timeout import Timeout

from . import _fork
from ._config import MAX_SECONDS, as_seconds
from ._errors import ConfigurationError
from ._request import current
from ._util import cause_chain

log = logging.getLogger("sume_urllib3")

#: How often the watching thread looks (the deadline holds to within this).
TICK = 0.1


class Watch:
    """One request's deadline on the real monotonic clock, and the connection it reads from.

    Watched from when it is made until :meth:`end`: at ``deadline`` the socket it reads is cut
    (``max_elapsed``, the deadline the caller set, is for the error's message).
    """

    __slots__ = ("conn", "deadline", "fired", "max_elapsed")

    def __init__(self, deadline: float, max_elapsed: float) -> None:
        self.deadline = deadline
        self.max_elapsed = max_elapsed
        self.conn: Any = None
        self.fired = False
        _watchdog.watches[id(self)] = self
        if _watchdog.parked:
            _watchdog.unpark()

    def end(self) -> None:
        """The request is over (or handed its body to the caller, who reads it in its own time)."""
        _watchdog.watches.pop(id(self), None)
        self.conn = None


class _Watchdog:
    def __init__(self) -> None:
        self.watches: Dict[int, Watch] = {}
        self.lock = threading.Lock()  # guards Watch.conn between the pools and the watcher
        self._wake = threading.Event()
        self._thread: Optional[threading.Thread] = None
        # True while the thread waits on _wake (or before it starts): only then does a new watch wake it.
        self.parked = True

    def _after_fork(self) -> None:
        # The parent's thread did not cross the fork: the same object starts afresh.
        self.__init__()  # type: ignore[misc]

    def unpark(self) -> None:
        self.parked = False
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="sume-deadline", daemon=True)
            self._thread.start()
        else:
            self._wake.set()

    def _run(self) -> None:
        while True:
            if not self.watches:
                # Parked flag first, then the last look: a watch made after that look sees the
                # flag and wakes the thread; one made before it is seen here.
                self.parked = True
                self._wake.clear()
                if not self.watches:
                    self._wake.wait()
                self.parked = False
            time.sleep(TICK)
            now = time.monotonic()
            for watch in list(self.watches.values()):
                if now >= watch.deadline:
                    try:
                        self._fire(watch)
                    except Exception:  # the thread must outlive any one request's cut
                        log.exception("cutting a request at its deadline failed")

    def _fire(self, watch: Watch) -> None:
        self.watches.pop(id(watch), None)
        with self.lock:
            conn = watch.conn
            sock = _socket_of(getattr(conn, "sock", None) if conn is not None else None)
            if sock is None:
                return  # not reading (connecting is bounded by the capped connect timeout)
            watch.fired = True  # before the cut: the reading thread looks as soon as it wakes
            try:
                # The base class's shutdown, even for TLS: the reading thread gets EOF at once.
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                watch.fired = False  # already closed: nothing was cut, the error is the server's


def _socket_of(sock: Any) -> Optional[socket.socket]:
    """The OS socket under a connection's ``sock``: itself, or what a TLS layer that is not the
    ssl module's wraps (pyOpenSSL's ``WrappedSocket`` once ``inject_into_urllib3()`` ran,
    urllib3's ``SSLTransport`` through an https proxy), found by its ``socket`` attribute."""
    for _ in range(4):
        if sock is None or isinstance(sock, socket.socket):
            return sock
        sock = getattr(sock, "socket", None)
    return None


_watchdog = _Watchdog()
_fork.track(_watchdog)


def timeout_for(watch: Optional[Watch], error: Exception) -> Exception:
    """``error``, or a ``ReadTimeout`` caused by it when ``watch``'s deadline cut the read.

    The read timeout is capped to the time left, so a read that stalls times out at the
    deadline too, often just before the watch fires: requests makes that a ``ConnectionError``
    mid-body, which is the deadline all the same."""
    if watch is None or isinstance(error, requests.exceptions.Timeout):
        return error
    # A socket read timing out behind ``error`` (requests wraps urllib3's).
    read_timed_out = any(isinstance(c, (ReadTimeoutError, socket.timeout)) for c in cause_chain(error))
    if not watch.fired and not (read_timed_out and time.monotonic() >= watch.deadline):
        return error
    timeout = requests.exceptions.ReadTimeout(
        f"the deadline (max_elapsed={watch.max_elapsed:g}s) passed while the response was "
        "still arriving: the read was cut short",
        request=getattr(error, "request", None),
        response=getattr(error, "response", None),
    )
    timeout.__cause__ = error
    return timeout


class PoolWaitTimeout(EmptyPoolError, ReadTimeoutError):
    """No connection of a blocking pool came free before the request's deadline.

    An empty pool's error to urllib3 (which then puts no connection back: it took none) and a
    read timeout's to requests (``ReadTimeout``, which the adapter records as any give-up)."""

    def __init__(self, pool: Any, message: str) -> None:
        ReadTimeoutError.__init__(self, pool, None, message)


class _Watched:
    """Connection pool mixin: the request being sent notes the connection it holds, and waits
    for a free one of a blocking pool no longer than its deadline allows."""

    block: bool

    def _get_conn(self, timeout: Optional[float] = None) -> Any:
        context = current.get()
        watch = context.watch if context is not None else None
        if watch is None:
            return super()._get_conn(timeout)  # type: ignore[misc]
        conn = self._get_conn_by(watch, timeout) if self.block else super()._get_conn(timeout)  # type: ignore[misc]
        # No lock: the watcher reads watch.conn once, under the lock, and either value is right
        # (None: this tick cuts nothing; conn: the request's own socket). The order lets
        # _put_conn find the watch whenever the watcher can find the connection.
        conn._sume_watch = watch
        watch.conn = conn
        return conn

    def _get_conn_by(self, watch: Watch, timeout: Optional[float]) -> Any:
        """A connection of this blocking pool before ``watch``'s deadline, else ``PoolWaitTimeout``.

        A full pool holds the request until a connection comes back, with no bound of its own
        (requests gives none): the deadline is it. The watch cannot cut a wait (there is no
        socket yet), and a request that got its connection after the deadline would send anyway.
        """
        left = watch.deadline - time.monotonic()
        bounded = timeout is None or left < timeout
        try:
            conn = super()._get_conn(max(left, 0.0) if bounded else timeout)  # type: ignore[misc]
        except EmptyPoolError:
            if not bounded:
                raise  # the caller's own pool_timeout ran out first
            conn = None
        if conn is not None and time.monotonic() < watch.deadline:
            return conn
        if conn is not None:
            self._put_conn(conn)
        watch.fired = True  # the deadline ended it: the record says when to try again
        raise PoolWaitTimeout(
            self,
            f"the deadline (max_elapsed={watch.max_elapsed:g}s) passed while waiting for a free "
            "connection from the pool (pool_block=True: a larger pool_maxsize, or fewer "
            "responses held open, would serve it)",
        )

    def _put_conn(self, conn: Any) -> None:
        watch = getattr(conn, "_sume_watch", None)
        if watch is not None:
            with _watchdog.lock:  # a cut under way ends before the connection serves another request
                if watch.conn is conn:
                    watch.conn = None
                conn._sume_watch = None
        super()._put_conn(conn)  # type: ignore[misc]

    def __str__(self) -> str:
        # urllib3 names a pool in its messages by str(pool): the class the caller knows, not ours.
        named = next(cls for cls in type(self).__mro__ if not issubclass(cls, _Watched))
        return f"{named.__name__}(host={self.host!r}, port={self.port!r})"  # type: ignore[attr-defined]


def watched_pools(classes: Mapping[str, type]) -> Dict[str, type]:
    """A manager's ``pool_classes_by_scheme`` with each class watched, its connections kept."""
    return {scheme: _watched(cls) for scheme, cls in classes.items()}


@functools.lru_cache(maxsize=None)  # one watched class per pool class (a proxy's, urllib3's SOCKS pools)
def _watched(cls: type) -> type:
    return cls if issubclass(cls, _Watched) else type(f"Watched{cls.__name__}", (_Watched, cls), {})


#: ``PoolManager.pool_classes_by_scheme`` for SumeAdapter's pools.
POOL_CLASSES = watched_pools({"http": HTTPConnectionPool, "https": HTTPSConnectionPool})


# Per-attempt timeouts: every form requests accepts, each capped by the time left.

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
    if isinstance(timeout, Timeout):
        parts = (timeout._connect, timeout._read, timeout.total)
        valid = all(v is None or v is Timeout.DEFAULT_TIMEOUT or _seconds(v) for v in parts)
    elif isinstance(timeout, tuple):
        valid = len(timeout) == 2 and all(v is None or _seconds(v) for v in timeout)
    else:
        valid = timeout is None or _seconds(timeout)
    if not valid:
        # requests' own wording is kept ("must be an int, float or None"): callers match on it.
        raise ConfigurationError(
            f"{name} must be seconds > 0 and at most {MAX_SECONDS:.0f} (it must be an int, float or "
            f"None), a (connect, read) pair of them (None: no limit) or a urllib3 Timeout whose "
            f"connect, read and total are, got {timeout!r}"
        )
    return timeout  # type: ignore[no-any-return]


def timeout_limits(timeout: TimeoutSpec) -> Tuple[float, float]:
    """The (connect, read) limits in seconds of a timeout in any form ``check_timeout`` accepts;
    inf: no limit."""
    parts = DeadlineTimeout(timeout, math.inf)  # the parts as given, no deadline
    cap = as_seconds(parts.total, math.inf)
    return min(as_seconds(parts._connect, math.inf), cap), min(as_seconds(parts._read, math.inf), cap)


def _seconds(value: Any) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and 0 < value <= MAX_SECONDS  # NaN and inf fail this too, and an int past float range
    )


class DeadlineTimeout(Timeout):
    """A urllib3 ``Timeout`` whose every attempt is capped by the time left to a deadline.

    urllib3 calls ``clone()`` at the start of every attempt of one ``urlopen``, retries
    included, so no attempt's connect or read may outlive the request's ``max_elapsed``.
    SumeAdapter makes one for a request on real time only (an injected clock or ``no_sleep``
    measures time that did not really pass).
    """

    def __init__(
        self,
        timeout: TimeoutSpec,
        deadline: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(timeout, Timeout):
            # Its parts as given: ``read_timeout`` answers only once a connection has started.
            connect, read, total = timeout._connect, timeout._read, timeout.total
        else:
            connect, read = timeout if isinstance(timeout, tuple) else (timeout, timeout)
            total = None
        super().__init__(total=total, connect=connect, read=read)
        self.deadline = deadline
        self.clock = clock

    def clone(self) -> Timeout:
        """A plain Timeout for one attempt, its total capped by the time left."""
        left = max(self.deadline - self.clock(), MIN_ATTEMPT_TIMEOUT)
        total = min(self.total, left) if isinstance(self.total, (int, float)) else left
        return Timeout(connect=self._connect, read=self._read, total=total)
