"""Shared fixtures: a fake Sume server, a virtual clock, deterministic jitter.

Nothing here isolates fleets between tests: the shipped pytest plugin does, opted into
below as users opt in (tests/testing/test_plugin_isolation.py).
"""

from __future__ import annotations

import ctypes
import os
import random
import ssl
from typing import Any, Callable, Iterator, List, Optional

import pytest

from sume_urllib3 import Policy, SumeSession
from sume_urllib3.testing import FakeSume

from .raw_server import Handler, Loopback, echo

pytest_plugins = ["sume_urllib3.testing.plugin"]

API_KEY = "sk_live_SECRET_0123456789abcdef"


def in_a_forked_child(report: Callable[[], str], fork: Callable[[], int] = os.fork) -> str:
    """Run ``report`` in a child made by ``fork`` (``os.fork`` by default) and return what it
    returned (the child exits at once, whatever happens; an exception there returns "")."""
    read, write = os.pipe()
    pid = fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            os.write(write, report().encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        answer = pipe.read()
    os.waitpid(pid, 0)
    return answer


def in_a_child_forked_from_c(report: Callable[[], str]) -> str:
    """As :func:`in_a_forked_child`, but forked by libc's ``fork()`` as uWSGI forks its workers:
    no ``os.register_at_fork`` hook runs in the child (nor in the parent)."""
    fork = ctypes.PyDLL(None).fork  # PyDLL: the GIL stays held across the call, as in a C fork
    fork.restype = ctypes.c_int
    return in_a_forked_child(report, fork)


class VirtualTime:
    """A monotonic clock that only moves when something sleeps on it, or the test moves it.

    Pass ``vt.clock`` (or ``vt`` itself: it is callable) where a clock is injected and
    ``vt.sleep`` where a sleep is; ``vt.sleeps`` lists every sleep, ``vt.advance`` moves time
    without counting as one.
    """

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.sleeps: List[float] = []

    def __call__(self) -> float:
        return self.now

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def fake() -> Iterator[FakeSume]:
    """A started FakeSume on 127.0.0.1."""
    with FakeSume() as server:
        yield server


@pytest.fixture
def vtime() -> VirtualTime:
    """Virtual time: retries sleep on it without waiting."""
    return VirtualTime()


@pytest.fixture
def make_session(fake: FakeSume, vtime: VirtualTime) -> Iterator[Callable[..., SumeSession]]:
    """Build SumeSessions against the fake server with virtual time and seeded jitter."""
    sessions: List[SumeSession] = []

    def make(**kwargs: Any) -> SumeSession:
        kwargs.setdefault("base_url", fake.url + "/v1")
        kwargs.setdefault("sleep", vtime.sleep)
        kwargs.setdefault("clock", vtime.clock)
        kwargs.setdefault("rng", random.Random(1234))
        kwargs.setdefault("policy", Policy())
        session = SumeSession(kwargs.pop("api_key", API_KEY), **kwargs)
        sessions.append(session)
        return session

    yield make
    for session in sessions:
        session.close()


@pytest.fixture
def raw_server() -> Iterator[Callable[[Handler], Loopback]]:
    """Start raw loopback servers (tests/raw_server.py) for a test; every one is stopped at its end."""
    started: List[Loopback] = []

    def start(handler: Handler = echo, tls: Optional[ssl.SSLContext] = None) -> Loopback:
        started.append(Loopback(handler, tls))
        return started[-1]

    yield start
    for one in started:
        one.stop()
