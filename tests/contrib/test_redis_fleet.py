"""RedisFleet: the shared pace, cooldown, slow start and retry budget on a real redis-server."""

from __future__ import annotations

import inspect
import logging
import math
import multiprocessing
import os
import pickle
import random
import threading
from typing import Any, Dict, List, Tuple

import pytest

if os.environ.get("SUME_REQUIRE_REDIS") != "1":  # CI requires redis-py: an ImportError fails there
    pytest.importorskip("redis", reason="redis-py is not installed (pip install 'sume-urllib3[redis]')")

import redis

from sume_urllib3 import ConfigurationError
from sume_urllib3.contrib.redis import RedisFleet
from sume_urllib3.pacing import RetryBudget
from sume_urllib3.pacing._core import Turn
from sume_urllib3.pacing._fleet import GRANT_NOW, Grant, fleet_key
from sume_urllib3.pacing._signals import origin_name

from ..conftest import VirtualTime, in_a_child_forked_from_c, in_a_forked_child
from ..redis_server import RedisServer

API_KEY = "sk_live_SECRET_0123456789abcdef"
KID = fleet_key(API_KEY)
US = 1_000_000


@pytest.fixture
def server(redis_server: RedisServer) -> RedisServer:
    """The running redis-server, emptied for this test."""
    return redis_server


def make(server: RedisServer, **kwargs: Any) -> RedisFleet:
    """A fleet on the test server with seeded randomness."""
    kwargs.setdefault("rng", random.Random(7))
    return RedisFleet(server.url, **kwargs)


def slot(grant: Grant) -> int:
    """The turn a grant reserved, in microseconds on the Redis clock."""
    assert isinstance(grant.token, Turn), grant
    return grant.token.slot


def test_a_configured_burst_goes_at_once_then_one_turn_per_interval(server: RedisServer) -> None:
    """rate="10/s", burst=3: three turns now, then 0.1 s apart, across fleet objects."""
    clock = VirtualTime()
    one = make(server, rate="10/s", burst=3, server_clock=clock)
    two = make(server, rate="10/s", burst=3, server_clock=clock)
    waits = [f.acquire(KID, time_left=math.inf).wait for f in (one, two, one, two, one, two)]
    assert [0.0, 0.0, 0.0, 0.1, 0.2, 0.3] == pytest.approx(waits, abs=1e-6)
    assert ["pace"] * 3 == [f.acquire(KID, time_left=math.inf).source for f in (one, two, one)]


def test_a_turn_after_the_deadline_is_refused_and_reserves_nothing(server: RedisServer) -> None:
    """The refusal names the pace and the time left; the next caller gets the same turn."""
    clock = VirtualTime()
    fleet = make(server, rate="1/s", server_clock=clock)
    assert 0.0 == fleet.acquire(KID, time_left=10.0).wait
    refused = fleet.acquire(KID, time_left=0.5)
    assert "pace: next turn in 1.0s, after the deadline (0.5s left)" == refused.refused
    assert refused.token is None
    assert 1.0 == pytest.approx(fleet.acquire(KID, time_left=10.0).wait)


def test_a_retry_after_holds_every_process_then_releases_one_turn_per_interval(server: RedisServer) -> None:
    """A 429 with Retry-After seen by one fleet holds another's requests, released spread, not at once.

    The 429 also halves the configured 10/s (rule 5): held turns come 0.2 s apart.
    """
    clock = VirtualTime()
    seen, other = (make(server, rate="10/s", burst=5, server_clock=clock) for _ in range(2))
    grant = seen.acquire(KID, time_left=math.inf)
    seen.release(KID, grant, 429, {"Retry-After": "2"})
    held = [other.acquire(KID, time_left=math.inf) for _ in range(4)]
    assert [2.0, 2.2, 2.4, 2.6] == pytest.approx([g.wait for g in held], abs=1e-6)
    assert ["cooldown", "pace", "pace", "pace"] == [g.source for g in held]
    assert other.acquire(KID, time_left=1.0).refused is not None


def test_a_retry_that_waits_anyway_is_not_charged_to_the_pace(server: RedisServer) -> None:
    """Grant.wait is at least not_before; source stays None when the pace adds nothing."""
    clock = VirtualTime()
    fleet = make(server, rate="10/s", server_clock=clock)
    grant = fleet.acquire(KID, time_left=math.inf, retry="throttle", not_before=3.0)
    assert (3.0, None) == (grant.wait, grant.source)


# -- learning the pace -------------------------------------------------------------------------


def test_the_pace_is_learned_from_ratelimit_headers_fleet_wide(server: RedisServer) -> None:
    """RateLimit-Policy 10;w=1 seen by one fleet paces every fleet (0.1 s plus 1% slack).

    With Remaining and Reset tracked the burst is the stated limit; without, turns are spaced.
    """
    clock = VirtualTime()
    one, two = make(server, server_clock=clock), make(server, server_clock=clock)
    grant = one.acquire(KID, time_left=math.inf)
    one.release(KID, grant, 200, {"RateLimit-Policy": "10;w=1", "RateLimit-Remaining": "2"})
    waits = [two.acquire(KID, time_left=math.inf).wait for _ in range(4)]
    assert [0.0, 0.101, 0.202, 0.303] == pytest.approx(waits, abs=1e-6)
    grant = one.acquire(KID, time_left=math.inf)
    tracked = {"RateLimit-Policy": "10;w=1", "RateLimit-Remaining": "2", "RateLimit-Reset": "1"}
    one.release(KID, grant, 200, tracked)
    waits = [two.acquire(KID, time_left=math.inf).wait for _ in range(3)]
    assert [0.0, 0.0, 0.101] == pytest.approx(waits, abs=1e-6)  # two left, then a probe one interval on


def test_the_pace_is_learned_from_429s_alone(server: RedisServer) -> None:
    """Without headers, what got through before a 429 becomes the pace (4 in 2 s: 0.5 s apart),
    the first turn one step after the 429 (the quota it reported is empty)."""
    clock = VirtualTime()
    fleet = make(server, initial_window=8, server_clock=clock)
    grants = [fleet.acquire(KID, time_left=math.inf) for _ in range(5)]
    for grant in grants[:4]:
        fleet.release(KID, grant, 200, {})
    clock.now += 2.0
    fleet.release(KID, grants[4], 429, {})
    waits = [fleet.acquire(KID, time_left=math.inf).wait for _ in range(3)]
    assert [0.5, 1.0, 1.5] == pytest.approx(waits, abs=1e-6)


def test_slow_start_bounds_the_first_wave_across_processes(server: RedisServer) -> None:
    """Unknown pace: initial_window attempts in flight across all fleets; more come back `again`."""
    clock = VirtualTime()
    fleets = [make(server, initial_window=3, server_clock=clock) for _ in range(3)]
    grants = [fleets[i % 3].acquire(KID, time_left=math.inf) for i in range(5)]
    assert [False, False, False, True, True] == [g.again for g in grants]
    assert [0.0, 0.0, 0.0] == [g.wait for g in grants[:3]]
    assert {"slow_start"} == {g.source for g in grants[3:]}
    assert all(0.0 < g.wait <= 0.075 for g in grants[3:])
    fleets[2].release(KID, grants[0], 200, {})
    assert not fleets[1].acquire(KID, time_left=math.inf).again  # one freed, and the window grew
    assert not fleets[0].acquire(KID, time_left=math.inf).again
    assert fleets[0].acquire(KID, time_left=math.inf).again


def test_a_lone_request_is_never_delayed_and_retries_never_get_again(server: RedisServer) -> None:
    """The first attempt of a new key goes at once; a retry past the window still gets a turn."""
    clock = VirtualTime()
    fleet = make(server, initial_window=1, server_clock=clock)
    assert (0.0, False) == (fleet.acquire(KID, time_left=math.inf).wait, False)
    retry = fleet.acquire(KID, time_left=math.inf, retry="error", not_before=0.2)
    assert (0.2, False, None) == (retry.wait, retry.again, retry.refused)


def test_the_retry_budget_is_shared_and_throttle_waits_do_not_spend_it(server: RedisServer) -> None:
    """retry="error" spends the fleet-wide budget; retry="throttle" never does. Spent, it waits
    for its floor to refill (each waiting retry counted, so the next waits longer), and is
    refused only when that wait passes the deadline."""
    from sume_urllib3.pacing import RetryBudget

    clock = VirtualTime()
    budget = RetryBudget(ratio=0.5, window=10.0, min_per_second=0.3)  # floor: 3 retries per window
    one, two = (make(server, retry_budget=budget, server_clock=clock) for _ in range(2))  # no pace
    assert all(f.acquire(KID, time_left=math.inf, retry="throttle").refused is None for f in (one, two) * 5)
    assert 0.0 == one.acquire(KID, time_left=math.inf, retry="error").wait
    assert 0.0 == two.acquire(KID, time_left=math.inf, retry="error").wait
    assert 0.0 == one.acquire(KID, time_left=math.inf, retry="error").wait
    # Spent (3 of 3): 3 * exp(-t / 10) + 1 <= 3 at t = 10 ln 1.5; then 4 counted: 10 ln 2.
    def due(ln_of: float) -> float:  # whole microseconds, rounded up, as the script computes
        return math.ceil(10e6 * math.log(ln_of)) / 1e6

    assert due(1.5) == two.acquire(KID, time_left=math.inf, retry="error").wait
    assert due(2.0) == one.acquire(KID, time_left=math.inf, retry="error").wait
    late = two.acquire(KID, time_left=5.0, retry="error")
    assert late.refused == (
        "retry budget: the fleet's retries for this API key are spent: "
        "next turn in 9.2s, after the deadline (5.0s left)"
    )
    assert due(2.5) == late.wait  # 5 counted over a floor of 3 - 1; the refused one reserved nothing
    assert due(2.5) == two.acquire(KID, time_left=10.0, retry="error").wait


def test_a_retry_budget_whose_floor_never_refills_refuses_at_once(server: RedisServer) -> None:
    """A floor under one retry per window never lets a waiting retry through: refused now."""
    from sume_urllib3.pacing import RetryBudget

    clock = VirtualTime()
    budget = RetryBudget(ratio=0.5, window=10.0, min_per_second=0.05)  # floor: half a retry
    fleet = make(server, retry_budget=budget, server_clock=clock)
    for _ in range(4):  # four first attempts allow 0.5 each: 2 retries
        fleet.acquire(KID, time_left=math.inf)
    assert fleet.acquire(KID, time_left=math.inf, retry="error").refused is None
    assert fleet.acquire(KID, time_left=math.inf, retry="error").refused is None
    spent = fleet.acquire(KID, time_left=math.inf, retry="error")
    assert "retry budget: the fleet's retries for this API key are spent" == spent.refused


# -- processes, threads, fork, pickling ---------------------------------------------------------


def _turns_in_a_process(args: Tuple[RedisFleet, str, int]) -> List[int]:
    fleet, kid, count = args
    return [slot(fleet.acquire(kid, time_left=math.inf)) for _ in range(count)]


def test_several_processes_share_one_pace(server: RedisServer) -> None:
    """Four processes (fleets pickled to them) get distinct turns at least one interval apart."""
    fleet = RedisFleet(server.url, rate="50/s")
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    with multiprocessing.get_context(method).Pool(4) as pool:
        per_process = pool.map(_turns_in_a_process, [(fleet, KID, 15)] * 4)
    turns = sorted(t for chunk in per_process for t in chunk)
    assert 60 == len(set(turns))
    assert min(b - a for a, b in zip(turns, turns[1:])) >= 20_000


def test_threads_share_one_pace(server: RedisServer) -> None:
    """Eight threads on one fleet object get 80 distinct turns exactly one interval apart."""
    clock = VirtualTime()
    fleet = make(server, rate="100/s", server_clock=clock)
    turns: List[int] = []
    lock = threading.Lock()

    def work() -> None:
        mine = [slot(fleet.acquire(KID, time_left=math.inf)) for _ in range(10)]
        with lock:
            turns.extend(mine)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    start = round(clock.now * US)
    assert [start + i * 10_000 for i in range(80)] == sorted(turns)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_gets_its_own_connections(server: RedisServer) -> None:
    """After os.fork() the child paces through Redis on fresh connections; the parent still works."""
    fleet = make(server, rate="1000/s")
    assert not fleet.acquire(KID, time_left=math.inf).fallback

    def child() -> str:
        grants = [fleet.acquire(KID, time_left=math.inf) for _ in range(3)]
        return "ok" if all(not g.fallback for g in grants) and fleet.fallbacks == 0 else "fallback"

    assert "ok" == in_a_forked_child(child)
    assert not fleet.acquire(KID, time_left=math.inf).fallback
    assert fleet.fallbacks == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_worker_forked_from_c_counts_as_a_process_of_its_own(server: RedisServer) -> None:
    """uWSGI forks from C (no at-fork hook runs): the worker still gets a client id of its own,
    so Redis counts two processes sharing the key, not one (the outage share would be wrong)."""
    fleet = make(server, rate="1000/s")
    assert not fleet.acquire(KID, time_left=math.inf).fallback
    parent_id = fleet._client_id

    def child() -> str:
        grant = fleet.acquire(KID, time_left=math.inf)
        mine = fleet._client_id
        named = mine.split("-")[0] == str(os.getpid())
        return f"{grant.fallback} {fleet._clients} {named} {mine != parent_id}"

    assert in_a_child_forked_from_c(child) == "False 2 True True"
    members = server.cli("ZRANGE", "{sume:v2:" + KID + "}:c", "0", "-1").split()
    assert len(members) == 2
    assert parent_id in members


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_worker_forked_from_c_starts_without_the_parents_outage(server: RedisServer) -> None:
    """Counters, the outage and its backoff are the parent's: a worker forked from C asks Redis at once."""
    clock = VirtualTime()
    fleet = make(server, clock=clock, backoff=30.0)
    server.kill()
    assert fleet.acquire(KID, time_left=math.inf).fallback
    server.start()
    assert fleet.acquire(KID, time_left=math.inf).fallback  # the parent waits out its backoff

    def child() -> str:
        grant = fleet.acquire(KID, time_left=math.inf)
        return f"{grant.fallback} {fleet.fallbacks} {fleet.errors} {fleet.healthy}"

    assert in_a_child_forked_from_c(child) == "False 0 0 True"
    assert (fleet.fallbacks, fleet.errors, fleet.healthy) == (2, 1, False)


def test_pickling_keeps_the_configuration_and_nothing_else(server: RedisServer) -> None:
    """A pickled fleet is rebuilt from its URL and settings, with fresh counters and connections."""
    fleet = make(server, rate="10/min", burst=2, prefix="app1", timeout=0.2)
    fleet.acquire(KID, time_left=math.inf)
    fleet.acquire(KID, time_left=math.inf)
    copy = pickle.loads(pickle.dumps(fleet))
    assert repr(fleet) == repr(copy)
    assert (copy._config.interval, copy._burst, copy._timeout) == (6_000_000, 2, 0.2)
    assert copy._client is not fleet._client
    assert 0 == copy.fallbacks
    assert 6.0 == pytest.approx(copy.acquire(KID, time_left=math.inf).wait, abs=0.05)


def test_a_fleet_built_on_a_client_pickles_its_connection_settings(server: RedisServer) -> None:
    """A fleet from a redis.Redis client pickles the pool's settings and reconnects on load."""
    client = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=1)
    copy = pickle.loads(pickle.dumps(RedisFleet(client, rate="5/s")))
    assert not copy.acquire(KID, time_left=math.inf).fallback


def test_repr_never_shows_a_password() -> None:
    """The URL's password is masked in repr."""
    fleet = RedisFleet("redis://user:hunter2@127.0.0.1:1/0")
    assert "hunter2" not in repr(fleet)
    assert "redis://***@127.0.0.1:1/0" in repr(fleet)


# -- what reaches Redis ----------------------------------------------------------------------------


def test_redis_holds_no_key_text_and_everything_expires(server: RedisServer) -> None:
    """redis-cli --scan and every stored value show hashes only, never the API key; all keys have TTLs."""
    fleet = make(server)
    for key_id in (KID, API_KEY):  # the raw key by mistake is hashed too
        grant = fleet.acquire(key_id, time_left=math.inf)
        fleet.release(key_id, grant, 429, {"Retry-After": "1", "RateLimit-Limit": "10"})
    names = server.cli("--scan").split()
    assert names
    assert all(n.startswith("{sume:v2:k") for n in names)
    dump = " ".join(names + [server.cli("--no-raw", "DUMP", n) for n in names])
    assert API_KEY not in dump
    assert API_KEY[:12] not in dump
    assert all(0 < int(server.cli("PTTL", n)) for n in names)
    tags = {n.split("}")[0] for n in names}
    assert {"{sume:v2:" + KID, "{sume:v2:" + fleet_key(API_KEY)} == tags  # each key in one cluster slot


def _ttls(server: RedisServer, kid: str) -> Dict[str, int]:
    """Every key of one API key in Redis, with its PTTL (-1: no expiry)."""
    names = server.cli("--scan", "--pattern", "{sume:v2:" + kid + "}:*").split()
    return {name.rsplit(":", 1)[1]: int(server.cli("PTTL", name)) for name in names}


def test_every_key_a_script_writes_carries_a_ttl(server: RedisServer) -> None:
    """Whatever path a script takes (a turn, again, refused, no budget, an answer), every key it
    writes expires: an idle tenant's keys leave Redis within ttl (and any cooldown or turn it holds)."""
    fleet = make(server, initial_window=1, ttl=60.0)
    no_budget = make(server, ttl=60.0, retry_budget=RetryBudget(ratio=0, window=1.0, min_per_second=0))
    tenants = [fleet_key(f"sk_tenant_{n}") for n in range(6)]
    send, again, refused, spent, answered, throttled = tenants
    fleet.acquire(send, time_left=math.inf)  # a turn and an attempt in flight
    fleet.acquire(again, time_left=math.inf)
    assert fleet.acquire(again, time_left=math.inf).again
    fleet.release(refused, fleet.acquire(refused, time_left=math.inf), 429, {"Retry-After": "30"})
    assert fleet.acquire(refused, time_left=1.0).refused
    assert no_budget.acquire(spent, time_left=math.inf, retry="error").refused
    fleet.release(answered, fleet.acquire(answered, time_left=math.inf), 200, {"RateLimit-Policy": "5;w=1"})
    fleet.release(throttled, fleet.acquire(throttled, time_left=math.inf), 429, {"Retry-After": "300"})
    for kid in tenants:
        ttls = _ttls(server, kid)
        assert {"s", "c"} <= set(ttls), kid
        assert all(0 < ttl for ttl in ttls.values()), (kid, ttls)
        cooling = 300_000 if kid == throttled else 30_000 if kid == refused else 0
        assert ttls["s"] <= max(60_000, cooling + 1_000), (kid, ttls)
        assert ttls["c"] <= 61_000


def test_the_in_flight_set_outlives_every_lease_in_it(server: RedisServer) -> None:
    """A later attempt with a short deadline never shortens the set's expiry under an earlier lease."""
    fleet = make(server, initial_window=4)
    fleet.acquire(KID, time_left=math.inf)  # out for up to 2 s before any answer
    fleet.acquire(KID, time_left=0.1)
    assert _ttls(server, KID)["i"] > 2_000


# -- failing open ------------------------------------------------------------------------------------


def test_redis_killed_and_restarted(server: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    """Killed: local grants at once, one WARNING, no retry of Redis during the backoff; back after it."""
    clock = VirtualTime()
    fleet = make(server, rate="10/s", clock=clock, backoff=1.0)
    assert not fleet.acquire(KID, time_left=math.inf).fallback
    server.kill()
    with caplog.at_level(logging.INFO, logger="sume_urllib3"):
        grants = [fleet.acquire(KID, time_left=math.inf) for _ in range(5)]
        assert all(g.fallback for g in grants)
        assert (5, 1) == (fleet.fallbacks, fleet.errors)  # one failed call, then no more tries
        for g in grants:
            fleet.release(KID, g, 200, {})
        server.start()
        assert fleet.acquire(KID, time_left=math.inf).fallback  # still backing off
        clock.now += 1.6  # the backoff is 1 s with jitter in [0.5, 1.5)
        back = fleet.acquire(KID, time_left=math.inf)
    assert not back.fallback
    assert fleet.healthy
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert 1 == len(warnings)
    assert "Redis fleet unavailable" in warnings[0].getMessage()
    assert any("available again" in r.getMessage() for r in caplog.records)


def test_a_local_grant_paces_at_this_process_share_of_the_rate(server: RedisServer) -> None:
    """When Redis fails, the configured rate is split among the processes Redis last saw."""
    clock = VirtualTime()
    fleets = [make(server, rate="10/s", burst=1, clock=clock) for _ in range(2)]
    for f in [*fleets, fleets[0]]:  # the second call of the first sees both
        f.acquire(KID, time_left=math.inf)
    server.kill()
    waits = [fleets[0].acquire(KID, time_left=math.inf).wait for _ in range(3)]
    assert [0.0, 0.2, 0.4] == pytest.approx(waits, abs=1e-6)


def test_a_flushed_script_is_loaded_again(server: RedisServer) -> None:
    """After SCRIPT FLUSH the next call reloads the script (NOSCRIPT) and still paces through Redis."""
    fleet = make(server, rate="10/s")
    fleet.acquire(KID, time_left=math.inf)
    server.cli("SCRIPT", "FLUSH")
    grant = fleet.acquire(KID, time_left=math.inf)
    assert (False, 0) == (grant.fallback, fleet.errors)
    fleet.release(KID, grant, 429, {"Retry-After": "1"})
    server.cli("SCRIPT", "FLUSH")
    assert "cooldown" == fleet.acquire(KID, time_left=math.inf).source


def test_a_redis_that_refuses_scripts_falls_back(server: RedisServer) -> None:
    """A user without scripting rights (NOPERM) gets local pacing, counted, instead of an error."""
    server.cli("ACL", "SETUSER", "noscripts", "on", "nopass", "~*", "+@all", "-@scripting")
    fleet = RedisFleet(f"redis://noscripts@127.0.0.1:{server.port}/0", rate="10/s")
    grant = fleet.acquire(KID, time_left=math.inf)
    assert grant.fallback
    assert grant.refused is None
    assert (1, 1) == (fleet.fallbacks, fleet.errors)
    fleet.release(KID, grant, 200, {})
    server.cli("ACL", "DELUSER", "noscripts")


def test_a_full_redis_falls_back(server: RedisServer) -> None:
    """A Redis over maxmemory (OOM on write) gets local pacing instead of an error."""
    fleet = make(server, rate="10/s")
    server.cli("CONFIG", "SET", "maxmemory-policy", "noeviction")
    server.cli("CONFIG", "SET", "maxmemory", "1")
    grant = fleet.acquire(KID, time_left=math.inf)
    assert grant.fallback
    assert not fleet.healthy


def test_a_stalled_redis_costs_one_timeout_then_nothing(server: RedisServer) -> None:
    """A Redis that answers nothing (SIGSTOP) fails one call after `timeout`, then is not asked again."""
    clock = VirtualTime()
    fleet = make(server, rate="10/s", clock=clock, timeout=0.05)
    fleet.acquire(KID, time_left=math.inf)
    server.pause()
    try:
        grants = [fleet.acquire(KID, time_left=math.inf) for _ in range(20)]
    finally:
        server.resume()
    assert all(g.fallback for g in grants)
    assert 1 == fleet.errors  # only the first call waited for the timeout
    assert 0.05 == fleet._client.connection_pool.connection_kwargs["socket_timeout"]


def test_release_never_raises(server: RedisServer) -> None:
    """Strangers' grants, missing headers and a dead Redis are all ignored by release()."""
    fleet = make(server)
    fleet.release(KID, GRANT_NOW, None, None)
    grant = fleet.acquire(KID, time_left=math.inf)
    server.kill()
    fleet.release(KID, grant, 503, {"Retry-After": "garbage", "RateLimit-Limit": "x"})
    assert 1 == fleet.errors


# -- configuration ------------------------------------------------------------------------------------


#: Each argument of RedisFleet with values it cannot use (and the argument the refusal names).
BAD_SETTINGS: List[Tuple[Dict[str, Any], str]] = [
    ({"url_or_client": "http://localhost"}, "url_or_client"),
    ({"url_or_client": 42}, "url_or_client"),
    ({"rate": "fast"}, "rate"),
    ({"rate": -1}, "rate"),
    ({"rate": "10/s", "burst": 0}, "burst"),
    ({"burst": 3}, "burst"),
    ({"prefix": "a{b}"}, "prefix"),
    ({"prefix": ""}, "prefix"),
    ({"timeout": 0}, "timeout"),
    ({"timeout": "1"}, "timeout"),
    ({"initial_window": 0}, "initial_window"),
    ({"retry_budget": 0.2}, "retry_budget"),
    ({"ttl": math.inf}, "ttl"),
    ({"backoff": math.nan}, "backoff"),
    ({"clock": 3}, "clock"),
    ({"rng": "seed"}, "rng"),
    ({"url_or_client": None}, "url_or_client"),
    ({"rate": "10/ms"}, "rate"),
    ({"rate": math.nan}, "rate"),
    ({"rate": True}, "rate"),
    ({"rate": "10/s", "burst": 10**9}, "burst"),
    ({"rate": "10/s", "burst": 2.0}, "burst"),
    ({"rate": "10/s", "burst": True}, "burst"),
    ({"prefix": None}, "prefix"),
    ({"prefix": "x" * 65}, "prefix"),
    ({"prefix": "a b"}, "prefix"),
    ({"timeout": -1}, "timeout"),
    ({"timeout": 1e-6}, "timeout"),
    ({"timeout": 61}, "timeout"),
    ({"timeout": math.nan}, "timeout"),
    ({"timeout": True}, "timeout"),
    ({"initial_window": -1}, "initial_window"),
    ({"initial_window": 10_001}, "initial_window"),
    ({"initial_window": 4.0}, "initial_window"),
    ({"retry_budget": True}, "retry_budget"),
    ({"ttl": 0}, "ttl"),
    ({"ttl": 0.5}, "ttl"),
    ({"ttl": -1}, "ttl"),
    ({"ttl": 1e12}, "ttl"),
    ({"ttl": math.nan}, "ttl"),
    ({"ttl": "3600"}, "ttl"),
    ({"backoff": 0}, "backoff"),
    ({"backoff": 1e9}, "backoff"),
    ({"backoff": False}, "backoff"),
    ({"max_backoff": -30}, "max_backoff"),
    ({"max_backoff": math.inf}, "max_backoff"),
    ({"max_backoff": 1e9}, "max_backoff"),
    ({"clock": None}, "clock"),
    ({"clock": lambda: "now"}, "clock"),
    ({"clock": lambda: math.inf}, "clock"),
    ({"server_clock": 5}, "server_clock"),
    ({"server_clock": lambda: math.nan}, "server_clock"),
    ({"rng": 5}, "rng"),
]


def test_the_bad_settings_cover_every_argument() -> None:
    """Every named parameter of RedisFleet has rows in BAD_SETTINGS."""
    named = set(inspect.signature(RedisFleet.__init__).parameters) - {"self"}
    assert named == {field for _kwargs, field in BAD_SETTINGS}


@pytest.mark.parametrize(("kwargs", "field"), BAD_SETTINGS)
def test_bad_settings_name_the_field(kwargs: Dict[str, Any], field: str) -> None:
    """Each bad argument raises ConfigurationError naming it and what it accepts, before any connection."""
    url = kwargs.pop("url_or_client", "redis://127.0.0.1:1/0")
    with pytest.raises(ConfigurationError, match=field) as raised:
        RedisFleet(url, **kwargs)
    assert any(word in str(raised.value) for word in ("must", "needs", "units are"))


def test_a_bad_url_is_not_echoed() -> None:
    """A URL redis-py cannot read raises ConfigurationError without repeating it (it may hold a password)."""
    with pytest.raises(ConfigurationError) as info:
        RedisFleet("redis://user:hunter2@127.0.0.1:notaport/0")
    assert "hunter2" not in str(info.value)


def test_a_session_paces_through_redis_without_the_key_reaching_it(
    server: RedisServer, fake: Any
) -> None:
    """SumeSession(fleet=RedisFleet(...)) asks Redis before each attempt; Redis stores hashes only."""
    from sume_urllib3 import SumeSession

    fleet = make(server, rate="100/s")
    fake.script("GET", "/v1/models", 200, 200, 200)
    with SumeSession(API_KEY, base_url=fake.url + "/v1", fleet=fleet) as session:
        for _ in range(3):
            assert 200 == session.get("models").status_code
    names = server.cli("--scan").split()
    kid = fleet_key(API_KEY, origin_name(fake.url))  # one entry per (origin, key sent)
    assert {"{sume:v2:" + kid + "}:s", "{sume:v2:" + kid + "}:c"} == set(names)
    assert API_KEY not in " ".join(server.cli("--no-raw", "DUMP", n) for n in names)
    assert 0 == fleet.fallbacks


def test_a_redis_fleet_repr_never_shows_a_password_in_the_query() -> None:
    """redis://host/0?password=... is shown without its query."""
    shown = repr(RedisFleet("redis://127.0.0.1:6399/0?password=s3cr3t-pw"))

    assert "s3cr3t" not in shown


# -- issue 48: Redis's clock, and an outage met by many threads ---------------------------------


def test_redis_clock_stepping_back_does_not_hold_the_key(server: RedisServer) -> None:
    """A failover to a replica whose clock is 120 s slow (or an NTP step): the key's state is from a
    clock ahead, and starts afresh (as HostFleet's does), rather than refusing every request for 120 s."""
    now = [5000.0]
    fleet = make(server, rate="10/s", server_clock=lambda: now[0])
    assert fleet.acquire(KID, time_left=5.0).refused is None
    now[0] -= 120.0
    grants = [fleet.acquire(KID, time_left=5.0) for _ in range(10)]
    assert [g.refused for g in grants] == [None] * 10
    assert max(g.wait for g in grants) < 1.0
    client = redis.Redis.from_url(server.url)
    state = {k.decode(): v.decode() for k, v in client.hgetall(f"{{sume:v2:{KID}}}:s").items()}
    assert int(state["last_seen"]) == 4880 * US  # the state is the new clock's


@pytest.mark.slow  # real time: runs in CI's slow step
def test_threads_failing_in_one_pause_double_the_backoff_once(
    server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Sixteen threads meet a Redis paused for 0.3 s (CLIENT PAUSE): one backoff, the one the WARNING
    names, and the fleet is back on Redis after it, not after sixteen doublings."""
    import time

    fleet = make(server, rate="100/s", timeout=0.05, rng=lambda: 0.3)
    assert fleet.acquire(KID, time_left=60.0).fallback is False
    caplog.set_level(logging.WARNING, logger="sume_urllib3")
    redis.Redis.from_url(server.url).execute_command("CLIENT", "PAUSE", 300, "ALL")
    threads = [threading.Thread(target=lambda: fleet.acquire(KID, time_left=60.0)) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    warned = time.monotonic()
    while fleet.acquire(KID, time_left=60.0).fallback and time.monotonic() - warned < 5.0:
        time.sleep(0.02)
    assert time.monotonic() - warned < 0.8 + 0.5
    assert fleet.healthy
    assert fleet.errors >= 2
    (message,) = [r.getMessage() for r in caplog.records if "unavailable" in r.getMessage()]
    assert message.endswith("trying it again in 0.8s")
