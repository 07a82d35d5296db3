"""RedisFleet's round trips on a real redis-server: one EVALSHA per attempt for plain successes
under a configured or a learned pace; what other processes must know told at once; what is told
late (``RELEASE_LATER``) reaching Redis in order, on a timer, at exit, never across a fork.

Round trips are counted by the server itself (``INFO commandstats``), not by a fake.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, Iterator, Optional

import pytest

if os.environ.get("SUME_REQUIRE_REDIS") != "1":  # CI requires redis-py: an ImportError fails there
    pytest.importorskip("redis", reason="redis-py is not installed (pip install 'sume-urllib3[redis]')")

import redis

from sume_urllib3.contrib.redis import RedisFleet, _redis_fleet, _scripts
from sume_urllib3.contrib.redis._scripts import keys
from sume_urllib3.pacing import LocalFleet
from sume_urllib3.pacing._core import SECOND, Turn
from sume_urllib3.pacing._fleet import Grant, Lesson, fleet_key

from ..conftest import VirtualTime, in_a_child_forked_from_c, in_a_forked_child
from ..redis_server import RedisServer

KID = fleet_key("sk_live_round_trips")
#: A response that only counts, and three that other processes must hear of at once.
PLAIN: Dict[str, str] = {}
AT_ONCE = [
    pytest.param(429, {}, id="429"),
    pytest.param(503, {"Retry-After": "1"}, id="503 Retry-After"),
    pytest.param(200, {"RateLimit-Policy": "10;w=1", "RateLimit-Limit": "10"}, id="RateLimit-Policy"),
]


@pytest.fixture
def server(redis_server: RedisServer) -> RedisServer:
    return redis_server


@pytest.fixture
def direct(server: RedisServer) -> Iterator[Any]:
    """A plain client of the test server: another process's view of the state, and its counters."""
    client = redis.Redis.from_url(server.url, socket_timeout=5)
    yield client
    client.close()


@pytest.fixture
def no_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lessons told late wait a minute for the flusher: only calls (or a test) carry them."""
    monkeypatch.setattr(_redis_fleet, "_LATE", 60.0)


def evalshas(client: Any) -> int:
    """EVALSHA calls the server has run so far."""
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def state(client: Any, prefix: str = "sume") -> Dict[str, int]:
    raw = client.hgetall(keys(prefix, KID)[0])
    return {k.decode(): int(float(v)) for k, v in raw.items()}


def make(server: RedisServer, clock: VirtualTime, **kwargs: Any) -> RedisFleet:
    kwargs.setdefault("rng", random.Random(7))
    return RedisFleet(server.url, server_clock=clock, clock=clock, timeout=5.0, **kwargs)


def turn_of(grant: Grant) -> Turn:
    assert isinstance(grant.token, Turn), grant
    return grant.token


def learn_a_pace(fleet: Any, clock: VirtualTime) -> None:
    """Slow start's four in flight, three admitted and a 429: a pace of 1/3 s learned from 429s."""
    grants = [fleet.acquire(KID, time_left=math.inf) for _ in range(4)]
    clock.advance(0.01)
    for grant in grants[:3]:
        fleet.release(KID, grant, 200, {})
    fleet.release(KID, grants[3], 429, {})


def attempt(fleet: Any, clock: VirtualTime, status: Optional[int] = 200, headers: Any = PLAIN) -> Grant:
    """One attempt: a turn, sent at it, answered 20 ms later."""
    grant = fleet.acquire(KID, time_left=math.inf)
    clock.advance(grant.wait + 0.02)
    fleet.release(KID, grant, status, headers)
    return grant


# -- one round trip per attempt ---------------------------------------------------------------------


@pytest.mark.usefixtures("no_timer")
def test_plain_successes_under_a_learned_pace_cost_one_evalsha_per_attempt(
    server: RedisServer, direct: Any
) -> None:
    """Twenty plain successes under a pace learned from 429s: twenty EVALSHAs (each acquire carries
    the success before it); the last one's lesson waits for the next call, and one flush tells it."""
    clock = VirtualTime()
    fleet = make(server, clock)
    learn_a_pace(fleet, clock)
    before = evalshas(direct)
    turns = [turn_of(attempt(fleet, clock)) for _ in range(20)]
    assert all(t.learning and not t.entry for t in turns)  # the case that cost two round trips
    assert 20 == evalshas(direct) - before
    assert [KID] == list(fleet._late)
    fleet._flush_due(math.inf)
    assert 21 == evalshas(direct) - before
    assert 20 == state(direct)["successes"]  # the 429 started a new count: these twenty
    assert (0, 0) == (fleet.fallbacks, fleet.errors)


@pytest.mark.usefixtures("no_timer")
def test_plain_successes_under_a_configured_pace_cost_one_evalsha_per_attempt(
    server: RedisServer, direct: Any
) -> None:
    """A configured pace: nothing to count, nothing held, nothing sent after the answer."""
    clock = VirtualTime()
    fleet = make(server, clock, rate="10/s")
    fleet.acquire(KID, time_left=math.inf)  # the script loaded
    before = evalshas(direct)
    turns = [turn_of(attempt(fleet, clock)) for _ in range(20)]
    assert not any(t.learning or t.entry for t in turns)
    assert 20 == evalshas(direct) - before
    assert {} == fleet._late


@pytest.mark.usefixtures("no_timer")
@pytest.mark.parametrize(("status", "headers"), AT_ONCE)
def test_what_other_processes_must_know_is_told_at_once(
    server: RedisServer, direct: Any, status: int, headers: Dict[str, str]
) -> None:
    """A 429, a Retry-After or rate-limit headers under a learned pace: release calls Redis at once,
    carrying this process's lessons told late before its own (they were learned first)."""
    clock = VirtualTime()
    fleet, other = make(server, clock), make(server, clock)
    learn_a_pace(fleet, clock)
    attempt(fleet, clock)
    attempt(fleet, clock)  # its acquire carried the first success; this one waits
    seen = state(direct)
    before = evalshas(direct)
    attempt(fleet, clock, status, headers)
    assert 2 == evalshas(direct) - before  # the acquire, and the release at once
    assert {} == fleet._late
    after = state(direct)
    if status == 429:  # a new round, measured over both successes: the carried one came first
        assert (seen["epoch"] + 1, seen["successes"] + 1) == (after["epoch"], after["measured_successes"])
    elif "Retry-After" in headers:  # the carried success counted; the 503 holds every process
        assert seen["successes"] + 1 == after["successes"]
        assert after["cooldown_until"] > round(clock.now * SECOND)
        assert "cooldown" == other.acquire(KID, time_left=math.inf).source
    else:  # the carried success and this one counted; the stated pace (10/s, 1% slack) fleet-wide
        assert (seen["successes"] + 2, 101_000) == (after["successes"], after["stated_interval"])


# -- lessons told late reach Redis, exactly ------------------------------------------------------------


def _events(fleet: Any, clock: VirtualTime) -> None:
    """Successes answered late and early, idle spells past IDLE_US, a lost answer, a 500 and a
    new 429 round: every branch a lesson told late takes, and one told at once after them."""
    learn_a_pace(fleet, clock)
    for gap, status in [(0.05, 200), (0.3, 200), (1.5, 200), (0.0, None), (0.2, 500), (1.2, 200),
                        (0.0, 200), (0.0, 429), (0.1, 200), (2.0, 200), (0.5, 200)]:
        attempt(fleet, clock, status)
        clock.advance(gap)


def test_lessons_told_late_leave_the_state_python_computes_releasing_each_at_once(
    server: RedisServer, direct: Any
) -> None:
    """The same events on LocalFleet (the core, each release at once) and RedisFleet (plain successes
    carried by the next call, at their own times): every field of the key's state agrees."""
    clock = VirtualTime()
    local = LocalFleet(clock=clock, wall=clock, rng=lambda: 0.5)
    _events(local, clock)
    core = local._keys[KID].state

    clock = VirtualTime()
    fleet = make(server, clock, rng=lambda: 0.5, retry_budget=None)
    _events(fleet, clock)
    clock.advance(5.0)  # told long after: each lesson still lands at its own time
    fleet._flush_due(math.inf)

    expected = {k: int(v) for k, v in dataclasses.asdict(core).items() if k != "flight"}
    assert expected == {k: v for k, v in state(direct).items() if k in expected}
    assert core.learned_interval > 0  # a pace learned from 429s was in force throughout


def test_an_idle_keys_last_success_reaches_redis_on_the_timer(server: RedisServer, direct: Any) -> None:
    """No further call for the key: the flusher tells Redis within _LATE (0.1 s; 5 s allowed here,
    on a loaded machine), and another process paces by what it taught."""
    clock = VirtualTime()
    fleet, other = make(server, clock), make(server, clock)
    learn_a_pace(fleet, clock)
    attempt(fleet, clock)
    attempt(fleet, clock)  # its acquire carried the first success; its own waits for no call
    seen = state(direct)
    assert fleet._late
    deadline = time.monotonic() + 5.0
    while fleet._late or fleet._in_transit:
        assert time.monotonic() < deadline, "the flusher never told Redis"
        time.sleep(0.01)
    taught = state(direct)
    assert seen["successes"] + 1 == taught["successes"]
    assert taught["learned_interval"] < seen["learned_interval"]  # the pace crept up, fleet-wide
    turn = turn_of(other.acquire(KID, time_left=math.inf))
    assert taught["theoretical_arrival"] == turn.slot


@pytest.mark.usefixtures("no_timer")
def test_a_lesson_told_after_another_process_called_never_moves_the_idle_clock_back(
    server: RedisServer, direct: Any
) -> None:
    """Process A's success (t), B's acquire (t + 0.5 s), A's flush of the success: the key was last
    seen at t + 0.5 s, so B's acquire at t + 1.2 s is no new busy spell (IDLE_US is 1 s) and the
    count of admitted attempts the next 429 measures by goes on."""
    clock = VirtualTime()
    one, two = make(server, clock), make(server, clock)
    learn_a_pace(one, clock)
    attempt(one, clock)
    one._flush_due(math.inf)
    assert 1 == state(direct)["successes"]
    grant = one.acquire(KID, time_left=math.inf)
    clock.advance(grant.wait + 0.02)
    one.release(KID, grant, 200, {})
    clock.advance(0.5)
    two.acquire(KID, time_left=math.inf)
    clock.advance(0.1)
    one._flush_due(math.inf)
    clock.advance(0.6)
    two.acquire(KID, time_left=math.inf)
    assert 2 == state(direct)["successes"]


@pytest.mark.usefixtures("no_timer")
def test_lessons_are_told_once_at_most_whatever_the_order_of_calls(server: RedisServer, direct: Any) -> None:
    """A flush, an acquire and a release of one key, one after another: each lesson counted once."""
    clock = VirtualTime()
    fleet = make(server, clock)
    learn_a_pace(fleet, clock)
    base = state(direct)["successes"]
    attempt(fleet, clock)
    fleet._flush_due(math.inf)
    fleet._flush_due(math.inf)  # nothing left: no call
    attempt(fleet, clock)
    attempt(fleet, clock)
    fleet._flush_due(math.inf)
    assert base + 3 == state(direct)["successes"]


@pytest.mark.usefixtures("no_timer")
def test_a_key_whose_answers_outrun_its_acquires_is_told_every_32_lessons(
    server: RedisServer, direct: Any
) -> None:
    """Many attempts in flight answered before the next acquire: the 32nd lesson is told at once with
    the 31 before it (one call), so a process never holds more than that of one key."""
    clock = VirtualTime()
    fleet = make(server, clock)
    learn_a_pace(fleet, clock)
    grants = [fleet.acquire(KID, time_left=math.inf) for _ in range(40)]
    clock.advance(20.0)
    before, base = evalshas(direct), state(direct)["successes"]
    for grant in grants:
        fleet.release(KID, grant, 200, {})
    assert 1 == evalshas(direct) - before
    assert base + 32 == state(direct)["successes"]
    assert 8 == len(fleet._late[KID])


@pytest.mark.usefixtures("no_timer")
def test_threads_telling_lessons_late_lose_none_and_tell_none_twice(server: RedisServer, direct: Any) -> None:
    """Eight threads, 25 plain successes each, on one fleet and key: each counted exactly once."""
    clock = VirtualTime()
    fleet = make(server, clock)
    learn_a_pace(fleet, clock)

    def work() -> None:
        for _ in range(25):
            fleet.release(KID, fleet.acquire(KID, time_left=math.inf), 200, {})

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    fleet._flush_due(math.inf)
    assert (200, 0, 0) == (state(direct)["successes"], fleet.errors, fleet.fallbacks)


# -- fork, exit, outages ---------------------------------------------------------------------------


@pytest.mark.slow  # real time: runs in CI's slow step
def test_a_process_tells_what_it_holds_as_it_exits(server: RedisServer, direct: Any) -> None:
    """A process whose last plain success no call carried, exiting at once: its atexit hook tells it."""
    code = f"""
import math
from sume_urllib3.contrib.redis import RedisFleet, _redis_fleet
_redis_fleet._LATE = 60.0  # no timer: only the exit can tell it
fleet = RedisFleet({server.url!r}, timeout=5.0)
grants = [fleet.acquire({KID!r}, time_left=math.inf) for _ in range(4)]
for grant in grants[:3]:
    fleet.release({KID!r}, grant, 200, {{}})
fleet.release({KID!r}, grants[3], 429, {{}})
fleet.release({KID!r}, fleet.acquire({KID!r}, time_left=math.inf), 200, {{}})
assert fleet._late, "told at once?"
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)
    assert 1 == state(direct)["successes"]




def _child_carries_nothing(fleet: RedisFleet) -> Callable[[], str]:
    def child() -> str:
        grant = fleet.acquire(KID, time_left=math.inf)  # would carry the parent's lessons, if it held them
        _redis_fleet._tell_at_exit()  # and so would the child's exit
        return f"{grant.fallback} {len(fleet._late)}"

    return child


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.usefixtures("no_timer")
@pytest.mark.parametrize(
    "fork", [in_a_forked_child, in_a_child_forked_from_c], ids=["os.fork", "fork from C"]
)
def test_a_forked_child_never_tells_its_parents_lessons(
    server: RedisServer, direct: Any, fork: Callable[[Callable[[], str]], str]
) -> None:
    """Lessons held at a fork stay the parent's: a child's acquire and exit tell none of them, the
    parent tells each once (with or without at-fork hooks: uWSGI forks from C)."""
    clock = VirtualTime()
    fleet = make(server, clock)
    learn_a_pace(fleet, clock)
    base = state(direct)["successes"]
    grants = [fleet.acquire(KID, time_left=math.inf) for _ in range(5)]
    for grant in grants:
        fleet.release(KID, grant, 200, {})
    assert 5 == len(fleet._late[KID])
    assert "False 0" == fork(_child_carries_nothing(fleet))
    assert base == state(direct)["successes"]
    fleet._flush_due(math.inf)
    assert base + 5 == state(direct)["successes"]


@pytest.mark.usefixtures("no_timer")
def test_lessons_held_when_redis_dies_are_dropped_and_nothing_raises(server: RedisServer) -> None:
    """Redis gone: the flush fails open (counted, the outage begins), the next acquire paces locally,
    and a plain success during the outage is not held for a Redis that is not there."""
    clock = VirtualTime()
    fleet = make(server, clock, backoff=30.0)
    learn_a_pace(fleet, clock)
    attempt(fleet, clock)
    server.kill()
    fleet._flush_due(math.inf)
    assert ({}, 1, False) == (fleet._late, fleet.errors, fleet.healthy)
    grant = fleet.acquire(KID, time_left=math.inf)
    assert grant.fallback
    fleet.release(KID, grant, 200, {})
    assert {} == fleet._late


def test_a_lesson_is_the_arguments_learn_lua_reads_in_its_order() -> None:
    """LESSON_ARGV arguments, in learn_from's order: a lesson of another length or order would shift
    or misread every one after it."""
    args = _scripts.lesson_args(5, Turn(0, 0, 0, 1, 2, 3, 4, "e", True), 200, Lesson(7, 10, 9, 8, 6))
    assert _scripts.LESSON_ARGV == len(args)
    assert [5, "e", 1, 2, 3, 4, 200, 7, 10, 9, 8, 6] == args
