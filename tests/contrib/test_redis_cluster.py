"""RedisFleet on a real three-master Redis Cluster, through a ``redis.cluster.RedisCluster`` client.

Every key's state (``{prefix:kid}:s``, ``:i``, ``:c``) lives in one hash slot, so both scripts
run on the node owning it; different keys land on different nodes. The conformance table runs
here unchanged, and a cluster error (slot not served, a stalled node, MOVED after a reshard)
either is followed by the client or falls open to local pacing with a log line and the counters.
A URL always means one node: RedisFleet builds a ``redis.Redis`` for it, so a cluster needs a client.
"""

from __future__ import annotations

import itertools
import logging
import math
import multiprocessing
import os
import pickle
import random
import re
from typing import Any, Callable, Iterator, List, Tuple

import pytest

if os.environ.get("SUME_REQUIRE_REDIS") != "1":  # CI requires redis-py: an ImportError fails there
    pytest.importorskip("redis", reason="redis-py is not installed (pip install 'sume-urllib3[redis]')")

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster as ClusterClient
from redis.retry import Retry

from sume_urllib3.contrib.redis import RedisFleet
from sume_urllib3.contrib.redis._scripts import keys
from sume_urllib3.pacing._core import Turn
from sume_urllib3.pacing._fleet import Fleet, Grant, fleet_key

from ..conftest import VirtualTime, in_a_forked_child
from .conftest import _missing
from .redis_cluster import RedisCluster
from .test_pacing_conformance import SCENARIOS, _check

#: Twelve API keys whose slots cover all three nodes (slots 0-5460, 5461-10922, 10923-16383).
KIDS = [fleet_key(f"sk_live_cluster_{i}") for i in range(12)]
KID = KIDS[0]
US = 1_000_000

# Three servers and redis-cli --cluster create (about 2 s of its own polling), then ~65 tests.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisCluster]:
    """Three cluster-enabled redis-servers on free loopback ports, joined by redis-cli --cluster create."""
    found = RedisCluster.find()
    if found is None:
        _missing("redis-server or redis-cli is not on PATH: the Redis Cluster tests start a real cluster")
        raise AssertionError("unreachable")  # pragma: no cover
    try:
        found.start()
    except (RuntimeError, OSError) as exc:
        _missing(f"Redis Cluster mode could not start on this machine: {exc}")
    try:
        yield found
    finally:
        found.stop()


def connect(cluster: RedisCluster, **kwargs: Any) -> ClusterClient:
    """A cluster client as we recommend it: short timeouts, no client-side retries (fail open at once)."""
    kwargs.setdefault("socket_timeout", 0.5)
    kwargs.setdefault("socket_connect_timeout", 0.5)
    kwargs.setdefault("retry", Retry(NoBackoff(), 0))
    return ClusterClient(host="127.0.0.1", port=cluster.nodes[0].port, **kwargs)


@pytest.fixture(scope="module")
def shared(cluster: RedisCluster) -> Iterator[ClusterClient]:
    """One client for the module (its discovery costs a COMMAND and a CLUSTER SLOTS round trip)."""
    c = connect(cluster)
    yield c
    c.close()


@pytest.fixture
def client(cluster: RedisCluster, shared: ClusterClient) -> ClusterClient:
    """The module's client, every node emptied and its scripts flushed."""
    for node in cluster.nodes:
        with redis.Redis(host="127.0.0.1", port=node.port) as direct:
            direct.flushall()
            direct.script_flush()
    return shared


def make(client: Any, **kwargs: Any) -> RedisFleet:
    kwargs.setdefault("rng", random.Random(7))
    return RedisFleet(client, **kwargs)


def slot(grant: Grant) -> int:
    """The turn a grant reserved, in microseconds on the Redis clock."""
    assert isinstance(grant.token, Turn), grant
    return grant.token.slot


def owner_port(cluster: RedisCluster, kid: str) -> int:
    return cluster.owner(keys("sume", kid)[0]).port


# -- one slot per key, keys across nodes ------------------------------------------------------


def test_each_keys_state_lives_in_one_slot_on_the_node_serving_it(
    cluster: RedisCluster, client: ClusterClient
) -> None:
    """Twelve keys on three nodes: each key paces on its own (0 then 0.1 s), its :s, :i and :c share
    one CLUSTER KEYSLOT, and they are stored on the node serving that slot (the scripts ran there)."""
    clock = VirtualTime()
    fleet = make(client, rate="10/s", server_clock=clock)
    learning = make(client, server_clock=clock, prefix="learn")  # a learned pace keeps :i entries
    for kid in KIDS:
        assert [0.0, 0.1] == pytest.approx([fleet.acquire(kid, time_left=math.inf).wait for _ in range(2)])
        held = learning.acquire(kid, time_left=math.inf)
        assert isinstance(held.token, Turn)
        assert held.token.entry  # an in-flight entry in :i
        learning.release(kid, learning.acquire(kid, time_left=math.inf), 429, {"Retry-After": "1"})
    assert (0, 0, 0, 0) == (fleet.fallbacks, fleet.errors, learning.fallbacks, learning.errors)
    served = {n.port: set(n.slots()) for n in cluster.nodes}
    used = set()
    for prefix in ("sume", "learn"):
        for kid in KIDS:
            names = keys(prefix, kid)
            slots = {client.cluster_keyslot(name) for name in names}  # CLUSTER KEYSLOT, on the server
            assert 1 == len(slots), names
            port = next(p for p, s in served.items() if slots <= s)
            with redis.Redis(host="127.0.0.1", port=port) as node:  # that node alone, no redirects
                stored = node.exists(*names)
            assert stored == (3 if prefix == "learn" else 2), names  # a configured pace keeps no :i
            used.add(port)
    assert set(served) == used


def test_two_fleets_share_a_configured_pace_one_interval_apart(
    client: ClusterClient, cluster: RedisCluster
) -> None:
    """Two RedisFleet objects on their own cluster clients (as two processes) alternate on keys
    served by different nodes: every turn distinct, exactly one interval apart."""
    clock = VirtualTime()
    one = make(client, rate="20/s", server_clock=clock)
    two = make(connect(cluster), rate="20/s", server_clock=clock)
    picked = {owner_port(cluster, kid): kid for kid in KIDS}
    assert 3 == len(picked)
    start = round(clock.now * US)
    for kid in picked.values():
        turns = [slot(f.acquire(kid, time_left=math.inf)) for f in (one, two) * 5]
        assert [start + i * 50_000 for i in range(10)] == turns
    assert (0, 0) == (one.errors, two.errors)


def test_a_pace_learned_from_headers_by_one_fleet_paces_the_other(
    client: ClusterClient, cluster: RedisCluster
) -> None:
    """RateLimit-Policy 10;w=1 seen by one fleet spaces the other's turns 0.101 s apart, and a 429
    learned by one holds the other (cooldown, then the halved pace)."""
    clock = VirtualTime()
    one, two = make(client, server_clock=clock), make(connect(cluster), server_clock=clock)
    grant = one.acquire(KID, time_left=math.inf)
    one.release(KID, grant, 200, {"RateLimit-Policy": "10;w=1", "RateLimit-Remaining": "2"})
    waits = [two.acquire(KID, time_left=math.inf).wait for _ in range(4)]
    assert [0.0, 0.101, 0.202, 0.303] == pytest.approx(waits, abs=1e-6)
    other = KIDS[1]
    grants = [one.acquire(other, time_left=math.inf) for _ in range(4)]
    for g in grants[:3]:
        one.release(other, g, 200, {})
    clock.now += 0.01
    one.release(other, grants[3], 429, {"Retry-After": "1"})  # 3 admitted over 1 s
    held = [two.acquire(other, time_left=math.inf) for _ in range(3)]
    assert [1.0, 1.333334, 1.666668] == pytest.approx([g.wait for g in held], abs=1e-6)
    assert ["cooldown", "pace", "pace"] == [g.source for g in held]


def test_the_retry_budget_is_shared_across_fleets(client: ClusterClient, cluster: RedisCluster) -> None:
    """retry="error" spends one fleet-wide budget per key (kept in the key's slot too)."""
    from sume_urllib3.pacing import RetryBudget

    clock = VirtualTime()
    budget = RetryBudget(ratio=0.5, window=10.0, min_per_second=0.05)
    one, two = (make(c, retry_budget=budget, server_clock=clock) for c in (client, connect(cluster)))
    for f in (one, two) * 2:
        f.acquire(KID, time_left=math.inf)
    assert [None, None] == [f.acquire(KID, time_left=math.inf, retry="error").refused for f in (one, two)]
    assert "retry budget" in str(one.acquire(KID, time_left=math.inf, retry="error").refused)


# -- the conformance table ----------------------------------------------------------------------

_prefixes = itertools.count()


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_conformance_table_on_the_cluster(name: str, shared: ClusterClient) -> None:
    """Every scenario of tests/contrib/test_pacing_conformance.py, on RedisFleet over the cluster."""

    def fleet(clock: Callable[[], float], rng: Callable[[], float], **config: Any) -> Fleet:
        return RedisFleet(
            shared, server_clock=clock, clock=clock, rng=rng, prefix=f"conf{next(_prefixes)}", **config
        )

    _check(fleet, name)


# -- processes: pickling and fork ----------------------------------------------------------------


def test_pickling_rebuilds_a_cluster_client_with_the_same_settings(client: ClusterClient) -> None:
    """A fleet on a RedisCluster pickles the nodes, plain settings and retry policy; the copy
    reconnects to the same cluster and shares the pace with the original."""
    clock = VirtualTime()
    fleet = make(client, rate="10/s", server_clock=clock)
    copy = pickle.loads(pickle.dumps(fleet))
    assert isinstance(copy._client, ClusterClient)
    assert copy._client is not client
    assert 0.5 == copy._client.nodes_manager.connection_kwargs["socket_timeout"]
    assert 0 == copy._client.retry._retries  # (redis-py < 6 has no get_retries())
    assert repr(fleet) == repr(copy) == "RedisFleet(RedisCluster, prefix='sume', pace=10/s burst 1)"
    copy._server_clock = clock  # a test clock is not configuration: it is not pickled
    turns = [slot(f.acquire(KID, time_left=math.inf)) for f in (fleet, copy, fleet, copy)]
    assert [turns[0] + i * 100_000 for i in range(4)] == turns
    assert (0, 0) == (copy.fallbacks, copy.errors)


def _turns_in_a_process(args: Tuple[RedisFleet, str, int]) -> List[int]:
    fleet, kid, count = args
    turns = [slot(fleet.acquire(kid, time_left=math.inf)) for _ in range(count)]
    assert 0 == fleet.fallbacks
    return turns


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
def test_processes_share_one_pace_through_pickled_fleets(client: ClusterClient) -> None:
    """Three processes (fleets pickled to them) get distinct turns at least one interval apart."""
    fleet = make(client, rate="100/s")
    with multiprocessing.get_context("fork").Pool(3) as pool:
        per_process = pool.map(_turns_in_a_process, [(fleet, KID, 10)] * 3)
    turns = sorted(t for chunk in per_process for t in chunk)
    assert 30 == len(set(turns))
    assert min(b - a for a, b in zip(turns, turns[1:])) >= 10_000


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_paces_through_the_cluster(client: ClusterClient) -> None:
    """After os.fork() the child's cluster client opens its own connections; the parent still works."""
    fleet = make(client, rate="1000/s")
    assert not fleet.acquire(KID, time_left=math.inf).fallback

    def child() -> str:
        grants = [fleet.acquire(kid, time_left=math.inf) for kid in KIDS[:6]]
        return "ok" if all(not g.fallback for g in grants) and fleet.fallbacks == 0 else "fallback"

    assert "ok" == in_a_forked_child(child)
    assert not any(fleet.acquire(kid, time_left=math.inf).fallback for kid in KIDS[:6])
    assert fleet.fallbacks == 0


# -- cluster trouble: followed, or failed open ----------------------------------------------------


def test_a_flushed_script_is_loaded_again_on_every_node(client: ClusterClient, cluster: RedisCluster) -> None:
    """SCRIPT FLUSH on every node: the next EVALSHA gets NOSCRIPT, the script is loaded again, no fallback."""
    fleet = make(client, rate="10/s")
    for kid in KIDS:
        fleet.acquire(kid, time_left=math.inf)
    for node in cluster.nodes:
        node.cli("SCRIPT", "FLUSH")
    grants = [fleet.acquire(kid, time_left=math.inf) for kid in KIDS]
    assert not any(g.fallback for g in grants)
    assert all("pace" == g.source for g in grants)
    assert 0 == fleet.errors


def test_a_resharded_slot_is_followed_with_its_state(client: ClusterClient, cluster: RedisCluster) -> None:
    """The key's slot migrates to another node with its state (MOVED, a node without the script):
    the fleet follows and the pace goes on from the same state."""
    clock = VirtualTime()
    fleet = make(client, rate="10/s", server_clock=clock)
    start = round(clock.now * US)
    assert [start, start + 100_000] == [slot(fleet.acquire(KID, time_left=math.inf)) for _ in range(2)]
    name = keys("sume", KID)[0]
    number, home = cluster.keyslot(name), cluster.owner(name)
    away = next(n for n in cluster.nodes if n is not home)
    away.cli("SCRIPT", "FLUSH")
    cluster.move_slot(number, away)
    try:
        assert away is cluster.owner(name)
        turns = [slot(fleet.acquire(KID, time_left=math.inf)) for _ in range(2)]
        assert [start + 200_000, start + 300_000] == turns
        assert (0, 0) == (fleet.fallbacks, fleet.errors)
    finally:
        cluster.move_slot(number, home)


def test_a_slot_not_served_falls_open_with_a_log_line_and_comes_back(
    client: ClusterClient, cluster: RedisCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """CLUSTERDOWN (the key's slot not served): local pacing at once, one WARNING naming the error,
    the fallback counter; other keys' nodes are not asked during the backoff; back after it."""
    clock = VirtualTime()
    fleet = make(client, rate="10/s", clock=clock, backoff=1.0)
    assert not fleet.acquire(KID, time_left=math.inf).fallback
    name = keys("sume", KID)[0]
    number, home = cluster.keyslot(name), cluster.owner(name)
    home.cli("CLUSTER", "DELSLOTS", str(number))
    try:
        with caplog.at_level(logging.INFO, logger="sume_urllib3"):
            grants = [fleet.acquire(KID, time_left=math.inf) for _ in range(3)]
            assert all(g.fallback and g.refused is None for g in grants)
            assert [0.0, 0.1, 0.2] == pytest.approx([g.wait for g in grants])  # local pacing, this rate
            assert (3, 1) == (fleet.fallbacks, fleet.errors)
            for g in grants:
                fleet.release(KID, g, 200, {})
    finally:
        home.cli("CLUSTER", "ADDSLOTS", str(number))
        cluster.wait_ok()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert 1 == len(warnings)
    # The EVALSHA's CLUSTERDOWN, or the topology refresh redis-py runs on it finding the slot uncovered.
    assert re.search(r"Redis fleet unavailable \((ClusterDownError|RedisClusterException): ", warnings[0])
    clock.now += 1.6  # past the backoff (1 s with jitter in [0.5, 1.5))
    with caplog.at_level(logging.INFO, logger="sume_urllib3"):
        assert not fleet.acquire(KID, time_left=math.inf).fallback
    assert fleet.healthy
    assert any("available again" in r.getMessage() for r in caplog.records)


def test_a_stalled_node_costs_one_socket_timeout_then_nothing(
    client: ClusterClient, cluster: RedisCluster
) -> None:
    """The node serving the key stops answering (SIGSTOP): one call waits the client's socket_timeout,
    then local pacing without asking Redis until the backoff ends."""
    clock = VirtualTime()
    fleet = make(connect(cluster, socket_timeout=0.2), rate="10/s", clock=clock)
    assert not fleet.acquire(KID, time_left=math.inf).fallback
    node = cluster.owner(keys("sume", KID)[0])
    node.pause()
    try:
        grants = [fleet.acquire(KID, time_left=math.inf) for _ in range(10)]
    finally:
        node.resume()
    assert all(g.fallback for g in grants)
    assert (10, 1) == (fleet.fallbacks, fleet.errors)


def test_a_url_is_one_node_a_key_served_elsewhere_falls_open_on_moved(
    cluster: RedisCluster, client: ClusterClient, caplog: pytest.LogCaptureFixture
) -> None:
    """RedisFleet("redis://node") talks to that node only: a key whose slot another node serves gets
    MOVED, which fails open (logged) rather than pacing wrongly. For a cluster, pass a RedisCluster."""
    first = cluster.nodes[0]
    kid = next(k for k in KIDS if owner_port(cluster, k) != first.port)
    fleet = RedisFleet(f"redis://127.0.0.1:{first.port}/0", rate="10/s", timeout=1.0)
    with caplog.at_level(logging.WARNING, logger="sume_urllib3"):
        assert fleet.acquire(kid, time_left=math.inf).fallback
    # MovedError since redis-py 6; a ResponseError reading "MOVED <slot> <node>" before it.
    said = caplog.records[-1].getMessage()
    assert re.search(r"Redis fleet unavailable \((MovedError: |ResponseError: MOVED )", said)
