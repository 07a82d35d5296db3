"""LocalFleet: cooldowns, learned and configured pace, slow start, deadlines, threads, fork, pickle."""

from __future__ import annotations

import logging
import math
import os
import pickle
import random
import threading
from typing import Any, Dict, List, Optional

import pytest

from sume_urllib3 import ConfigurationError
from sume_urllib3._fleet import GRANT_NOW, Grant, LocalFleet, fleet_key, parse_rate

from .conftest import VirtualTime, in_a_forked_child

API_KEY = "sk_live_SECRET_0123456789abcdef"
KEY = fleet_key(API_KEY)


def make(rate: Any = None, burst: Optional[int] = None, **kwargs: Any) -> tuple[LocalFleet, VirtualTime]:
    clock = VirtualTime(now=5000.0)
    kwargs.setdefault("rng", lambda: 0.5)
    return LocalFleet(rate, burst, clock=clock, **kwargs), clock


def first(fleet: LocalFleet, time_left: float = math.inf) -> Grant:
    return fleet.acquire(KEY, time_left=time_left)


def test_fleet_key_is_a_hash_never_the_key() -> None:
    """fleet_key names a key by 16 hex digits of its SHA-256; no key is "anonymous"."""
    kid = fleet_key(API_KEY)
    assert kid.startswith("k")
    assert len(kid) == 17
    assert API_KEY not in kid
    assert fleet_key(API_KEY) == kid != fleet_key(API_KEY + "x")
    assert fleet_key(API_KEY.encode()) == kid
    assert fleet_key(None) == fleet_key("") == "anonymous"


# -- slow start --------------------------------------------------------------------------


def test_a_lone_request_is_never_delayed() -> None:
    """The first request of a key nothing is known about is sent at once."""
    fleet, _ = make()
    grant = first(fleet)
    assert (grant.wait, grant.again, grant.refused) == (0.0, False, None)


def test_slow_start_admits_the_window_then_opens_one_per_success() -> None:
    """While the pace is unknown only initial_window first attempts fly; each success adds one."""
    fleet, clock = make(initial_window=2)
    flying = [first(fleet), first(fleet)]
    held = first(fleet)
    assert held.again
    assert held.source == "slow_start"
    assert held.wait == pytest.approx(0.05)
    clock.now += 0.02
    fleet.release(KEY, flying[0], 200, {})
    assert not first(fleet).again
    assert not first(fleet).again
    assert first(fleet).again


def test_slow_start_waits_about_one_measured_round_trip() -> None:
    """A held first attempt is asked to come back after about the measured response time."""
    fleet, clock = make(initial_window=1)
    grant = first(fleet)
    clock.now += 0.2
    fleet.release(KEY, grant, 500, {})  # a failure frees the slot without opening the window
    first(fleet)
    assert first(fleet).wait == pytest.approx(0.2)  # srtt 0.2 * (0.5 + rng 0.5)


def test_slow_start_never_holds_retries_or_a_request_at_its_deadline() -> None:
    """Retries take no slow-start slot; a first attempt with too little time left goes anyway."""
    fleet, _ = make(initial_window=1)
    first(fleet)
    assert fleet.acquire(KEY, time_left=10, retry="error").again is False
    assert first(fleet, time_left=0.01).again is False


def test_enough_successes_without_any_pace_leave_slow_start_for_the_fast_path() -> None:
    """A key that never says its pace stops being counted: acquire answers GRANT_NOW itself."""
    fleet, _ = make(initial_window=1)
    for _ in range(63):  # the window stops counting at 64 (tests/contrib/test_pacing_conformance.py)
        fleet.release(KEY, first(fleet), 200, {"Content-Type": "application/json"})
    assert first(fleet) is GRANT_NOW
    fleet.release(KEY, GRANT_NOW, 200, {})
    assert first(fleet) is GRANT_NOW


def test_unreleased_tickets_stop_holding_slots_after_a_minute() -> None:
    """A caller that died mid-request does not block the key forever."""
    fleet, clock = make(initial_window=1)
    first(fleet)
    assert first(fleet).again
    clock.now += 61
    assert not first(fleet).again


# -- cooldown ---------------------------------------------------------------------------


def test_one_info_line_when_a_cooldown_starts_naming_the_hash(caplog: pytest.LogCaptureFixture) -> None:
    """The cooldown is logged once at INFO with the key's hash, never the key, not per request."""
    fleet, clock = make()
    with caplog.at_level(logging.INFO, logger="sume_urllib3"):
        fleet.release(KEY, first(fleet), 429, {"Retry-After": "5"})
        clock.now += 1
        fleet.release(KEY, fleet.acquire(KEY, time_left=60, retry="throttle"), 429, {"Retry-After": "5"})
        for _ in range(5):
            first(fleet)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    assert KEY in lines[0]
    assert "5.0s" in lines[0]
    assert API_KEY not in lines[0]
    assert caplog.records[0].levelno == logging.INFO


def test_503_without_retry_after_starts_no_cooldown() -> None:
    """Only a server-stated wait holds the key; a bare 503 is the retry policy's business."""
    fleet, _ = make()
    fleet.release(KEY, first(fleet), 503, {})
    assert first(fleet).wait == 0.0
    assert fleet.stats()["cooldowns"] == 0


def test_keys_are_paced_apart() -> None:
    """One key's cooldown does not hold another key's requests."""
    fleet, _ = make()
    fleet.release(KEY, first(fleet), 429, {"Retry-After": "30"})
    other = fleet_key("sk_other")
    assert fleet.acquire(other, time_left=10).wait == 0.0


# -- configured and learned pace ------------------------------------------------------


def test_configured_rate_spaces_turns_evenly() -> None:
    """rate='10/min' gives turns 0, 6, 12 s apart; a lone request still goes at once."""
    fleet, _ = make("10/min")
    grants = [first(fleet) for _ in range(3)]
    assert [g.wait for g in grants] == pytest.approx([0.0, 6.0, 12.0])
    assert [g.source for g in grants] == [None, "pace", "pace"]


def test_configured_burst_then_pace() -> None:
    """burst=3 lets three go at once, then one per step; the bucket refills with time."""
    fleet, clock = make("20/s", burst=3)
    assert [first(fleet).wait for _ in range(5)] == pytest.approx([0, 0, 0, 0.05, 0.10])
    clock.now += 10
    assert [first(fleet).wait for _ in range(3)] == pytest.approx([0, 0, 0])


def test_turn_after_the_deadline_is_refused_and_reserves_nothing() -> None:
    """A turn past time_left is refused with a reason naming the pace; the turn stays free."""
    fleet, _ = make("10/min")
    first(fleet, 10)
    first(fleet, 10)
    refused = first(fleet, 10)
    assert refused.refused == "pace 10/min (configured): next turn in 12.0s, after the deadline (10.0s left)"
    assert first(fleet, 20).wait == pytest.approx(12.0)
    assert fleet.stats()["refused"] == 1


def test_retry_whose_own_wait_passes_the_deadline_is_refused() -> None:
    """A not_before beyond time_left is refused too (nothing to send in time)."""
    fleet, _ = make()
    assert fleet.acquire(KEY, time_left=2, retry="throttle", not_before=5).refused


def test_empty_quota_at_an_estimated_pace_waits_for_the_reset() -> None:
    """Remaining 0 with Reset 30 holds the key until the quota is back."""
    fleet, _ = make()
    headers = {"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "30"}
    fleet.release(KEY, first(fleet), 200, headers)
    assert first(fleet).wait == pytest.approx(30.0)


def test_pace_learned_from_429s_is_what_got_through() -> None:
    """Without headers, successes since the last 429 over the Retry-After window set the pace."""
    fleet, _clock = make(initial_window=32)
    for _ in range(20):
        fleet.release(KEY, first(fleet), 200, {})
    fleet.release(KEY, first(fleet), 429, {"Retry-After": "1"})
    assert fleet.pace(KEY) == pytest.approx(20.0)
    assert [first(fleet).wait for _ in range(3)] == pytest.approx([1.0, 1.05, 1.10])


@pytest.mark.parametrize(
    "headers",
    [
        {"RateLimit-Limit": "0", "RateLimit-Remaining": "-3", "RateLimit-Reset": "x"},
        {"RateLimit-Policy": "0;w=0"},
        {"RateLimit-Limit": "1e999", "Retry-After": "soon"},
        {"Retry-After": "-5"},
        {"Retry-After": "Wed, 99 Foo 2015 07:28:00 GMT"},
        {"RateLimit": "\x00" * 100},
    ],
)
def test_garbage_headers_never_raise_or_hold(headers: Dict[str, str]) -> None:
    """Unreadable headers teach nothing: release does not raise and nothing is held."""
    fleet, _ = make()
    fleet.release(KEY, first(fleet), 429, headers)
    assert first(fleet).wait == 0.0


def test_release_of_an_unknown_key_or_odd_input_is_ignored() -> None:
    """release never raises, whatever it is given; acquire never raises on odd numbers."""
    fleet, _ = make()
    fleet.release("knever", GRANT_NOW, 200, None)
    fleet.release(KEY, first(fleet), None, None)
    fleet.release(KEY, Grant(token=object()), 200, {"RateLimit-Limit": "10"})
    assert fleet.acquire(KEY, time_left=float("nan"), not_before=float("nan")).refused is None


# -- threads, fork, pickle ------------------------------------------------------------


def test_threads_get_distinct_evenly_spaced_turns() -> None:
    """Eight threads acquiring at one instant get every turn exactly once, 0.01 s apart."""
    fleet, _ = make("100/s")
    waits: List[float] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def worker() -> None:
        start.wait()
        mine = [first(fleet).wait for _ in range(250)]
        with lock:
            waits.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(round(w * 100) for w in waits) == list(range(2000))


def test_threads_share_slow_start_accounting() -> None:
    """Under contention exactly initial_window first attempts are granted before any answer."""
    fleet, _ = make(initial_window=4)
    grants: List[Grant] = []
    start = threading.Barrier(8)

    def worker() -> None:
        start.wait()
        grants.extend(first(fleet) for _ in range(50))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(not g.again for g in grants) == 4


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_starts_with_no_state() -> None:
    """After os.fork() the child has neither the parent's cooldown nor its locks."""
    fleet, _ = make("1/min")
    first(fleet)
    fleet.release(KEY, first(fleet), 429, {"Retry-After": "100"})
    assert first(fleet).wait > 100
    child_wait = float(in_a_forked_child(lambda: repr(first(fleet).wait)))
    assert child_wait == 0.0
    assert first(fleet).wait > 100  # the parent keeps its own


def test_pickle_keeps_configuration_not_state() -> None:
    """A pickled fleet has the same rate, burst and window, but no cooldowns or turns."""
    fleet, _ = make("10/min", burst=2, initial_window=7)
    fleet.release(KEY, first(fleet), 429, {"Retry-After": "100"})
    copy = pickle.loads(pickle.dumps(fleet))
    assert (copy.rate, copy.burst, copy.initial_window) == (10 / 60, 2, 7)
    assert copy.acquire(KEY, time_left=1).wait == 0.0
    assert pickle.loads(pickle.dumps(LocalFleet.default())) is LocalFleet.default()
    assert pickle.loads(pickle.dumps(LocalFleet())).rate is None


def test_repr_and_stats_name_no_key() -> None:
    """repr and stats never show a key or its hash list."""
    fleet, _ = make("20/s")
    first(fleet)
    assert API_KEY not in repr(fleet)
    assert KEY not in repr(fleet)
    assert repr(fleet) == "<LocalFleet rate=20/s burst=1 keys=1>"
    assert set(fleet.stats()) >= {"held", "refused", "waited_pace", "waited_cooldown", "waited_slow_start"}


# -- configuration -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "per_second"),
    [
        ("10/min", 1 / 6),
        ("20/s", 20.0),
        ("100/h", 100 / 3600),
        ("2.5/sec", 2.5),
        ("30 / minute", 0.5),
        (4, 4.0),
    ],
)
def test_rate_forms(text: Any, per_second: float) -> None:
    """Rates are 'N/s', 'N/min', 'N/h' (and spelled-out units) or a number per second."""
    assert parse_rate(text) == pytest.approx(per_second)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"rate": "fast"}, "rate"),
        ({"rate": "10/fortnight"}, "rate"),
        ({"rate": 0}, "rate"),
        ({"rate": -1.0}, "rate"),
        ({"rate": float("nan")}, "rate"),
        ({"rate": float("inf")}, "rate"),
        ({"rate": True}, "rate"),
        ({"rate": [10]}, "rate"),
        ({"rate": "1/s", "burst": 0}, "burst"),
        ({"rate": "1/s", "burst": 1.5}, "burst"),
        ({"rate": "1/s", "burst": True}, "burst"),
        ({"burst": 5}, "burst"),
        ({"initial_window": 0}, "initial_window"),
        ({"clock": 5}, "clock"),
        ({"rng": "seed"}, "rng"),
    ],
)
def test_bad_configuration_names_the_field(kwargs: Dict[str, Any], field: str) -> None:
    """Bad values raise ConfigurationError naming the field."""
    with pytest.raises(ConfigurationError, match=field):
        LocalFleet(**kwargs)


def test_rng_may_be_a_random_instance() -> None:
    """A seeded random.Random drives the spread reproducibly."""
    waits = []
    for _ in range(2):
        fleet = LocalFleet(clock=VirtualTime(now=5000.0), rng=random.Random(7))
        fleet.release(KEY, fleet.acquire(KEY, time_left=60), 429, {"Retry-After": "10"})
        waits.append(fleet.acquire(KEY, time_left=60).wait)
    assert waits[0] == waits[1]
    assert 10 <= waits[0] < 20
