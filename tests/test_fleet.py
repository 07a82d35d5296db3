"""LocalFleet: cooldowns, learned and configured pace, slow start, deadlines, threads, fork, pickle."""

from __future__ import annotations

import inspect
import logging
import math
import os
import pickle
import random
import signal
import threading
from typing import Any, Dict, List, Optional, Tuple

import pytest

from sume_urllib3 import ConfigurationError, SumeAdapter
from sume_urllib3.pacing import RetryBudget
from sume_urllib3.pacing import _core as _pacing
from sume_urllib3.pacing._fleet import (
    GRANT_NOW,
    RELEASE_LATER,
    RELEASE_NEVER,
    RELEASE_NOW,
    Grant,
    LocalFleet,
    fleet_key,
    parse_rate,
    read_response,
    release_need,
)

from .conftest import VirtualTime, in_a_child_forked_from_c, in_a_forked_child

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


def test_log_lines_name_the_key_id_without_repeating_the_logger(caplog: pytest.LogCaptureFixture) -> None:
    """The logger's name says sume_urllib3 already; "key_id" is the API key's hash (an idempotency
    key is called so elsewhere), for a local fleet's cooldown and a shared store's outage alike."""
    from sume_urllib3.pacing import HostFleet

    fleet, _ = make()
    broken = HostFleet("/proc/no-such-dir/app.fleet")
    with caplog.at_level(logging.INFO, logger="sume_urllib3"):
        fleet.release(KEY, first(fleet), 429, {"Retry-After": "5"})
        broken.acquire(KEY, time_left=60.0)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith(f"cooldown for key_id {KEY}: 429 with Retry-After 5.0s")
    assert lines[1].startswith("host fleet file /proc/no-such-dir/app.fleet unavailable")
    assert not [line for line in lines if line.startswith("sume_urllib3")]


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


def test_a_retry_budget_holds_error_retries_per_key_and_survives_pickling() -> None:
    """retry_budget: once the floor (2 units here) is spent an error retry waits for room, one
    past its deadline is refused, each key has its own counts, and a pickled fleet keeps the
    rule (not the counts); anything but a RetryBudget is refused by name."""
    fleet, _ = make(retry_budget=RetryBudget(ratio=0, window=10, min_per_second=0.2))
    assert [fleet.acquire(KEY, time_left=60, retry="error").wait for _ in range(2)] == [0.0, 0.0]
    held = fleet.acquire(KEY, time_left=60, retry="error")
    assert (held.refused, held.wait) == (None, pytest.approx(10 * math.log(2), abs=1e-6))
    refused = fleet.acquire(KEY, time_left=1.0, retry="error")
    assert "retry budget" in (refused.refused or "")
    assert fleet.acquire("k" + "1" * 16, time_left=60, retry="error").wait == 0.0
    copy = pickle.loads(pickle.dumps(fleet))
    assert [copy.acquire(KEY, time_left=60, retry="error").wait for _ in range(3)][1:] == [
        0.0, pytest.approx(10 * math.log(2), abs=0.5)]  # on the real clock: a loaded machine lets time pass
    with pytest.raises(ConfigurationError, match="retry_budget"):
        LocalFleet(retry_budget=0.2)  # type: ignore[arg-type]


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


#: Each argument of LocalFleet with values it cannot use (and the argument the refusal names).
BAD_SETTINGS: List[Tuple[Dict[str, Any], str]] = [
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
    ({"rate": "10/ms"}, "rate"),
    ({"rate": "10/hs"}, "rate"),
    ({"rate": "10/"}, "rate"),
    ({"rate": "/s"}, "rate"),
    ({"rate": "-1/s"}, "rate"),
    ({"rate": "1e3/s"}, "rate"),
    ({"rate": "1/week"}, "rate"),
    ({"rate": 1e7}, "rate"),
    ({"rate": 1e-9}, "rate"),
    ({"rate": b"10/s"}, "rate"),
    ({"rate": "1/s", "burst": -1}, "burst"),
    ({"rate": "1/s", "burst": 10**9}, "burst"),
    ({"rate": "1/s", "burst": "5"}, "burst"),
    ({"initial_window": 0}, "initial_window"),
    ({"initial_window": -4}, "initial_window"),
    ({"initial_window": 10_001}, "initial_window"),
    ({"initial_window": 4.0}, "initial_window"),
    ({"initial_window": True}, "initial_window"),
    ({"initial_window": None}, "initial_window"),
    ({"max_keys": 0}, "max_keys"),
    ({"max_keys": -1}, "max_keys"),
    ({"max_keys": 10**12}, "max_keys"),
    ({"max_keys": 1e4}, "max_keys"),
    ({"max_keys": False}, "max_keys"),
    ({"max_keys": None}, "max_keys"),
    ({"idle": 0}, "idle"),
    ({"idle": -300.0}, "idle"),
    ({"idle": 0.5}, "idle"),
    ({"idle": math.nan}, "idle"),
    ({"idle": math.inf}, "idle"),
    ({"idle": 1e9}, "idle"),
    ({"idle": "300"}, "idle"),
    ({"idle": True}, "idle"),
    ({"clock": 5}, "clock"),
    ({"clock": None}, "clock"),
    ({"clock": lambda: "now"}, "clock"),
    ({"clock": lambda: math.nan}, "clock"),
    ({"clock": lambda: 1 / 0}, "clock"),
    ({"wall": 5}, "wall"),
    ({"wall": lambda: math.inf}, "wall"),
    ({"rng": "seed"}, "rng"),
    ({"rng": 5}, "rng"),
    ({"rng": True}, "rng"),
    ({"retry_budget": 0.2}, "retry_budget"),
    ({"retry_budget": "RetryBudget()"}, "retry_budget"),
]


def test_the_bad_settings_cover_every_argument() -> None:
    """Every named parameter of LocalFleet has rows in BAD_SETTINGS."""
    named = set(inspect.signature(LocalFleet.__init__).parameters) - {"self"}
    assert named == {field for _kwargs, field in BAD_SETTINGS}


@pytest.mark.parametrize(("kwargs", "field"), BAD_SETTINGS)
def test_bad_configuration_names_the_field(kwargs: Dict[str, Any], field: str) -> None:
    """Bad values raise ConfigurationError naming the field and what it accepts."""
    with pytest.raises(ConfigurationError, match=field) as raised:
        LocalFleet(**kwargs)
    assert any(word in str(raised.value) for word in ("must", "needs"))


def test_an_unknown_rate_unit_is_refused_listing_the_units() -> None:
    """'10/ms' was read as 10 per minute: a unit the fleet does not know is refused, units listed."""
    with pytest.raises(ConfigurationError) as raised:
        LocalFleet(rate="10/ms")
    assert "'ms' is not a unit" in str(raised.value)
    assert "s, sec, second, m, min, minute, h, hr, hour, d or day" in str(raised.value)
    assert parse_rate("10/mins") == parse_rate("10/min") == parse_rate("10/m")
    assert parse_rate("3/hrs") == parse_rate("3/hours") == parse_rate("3/h")


def test_bounds_at_their_limits_are_accepted() -> None:
    """The smallest and largest max_keys and idle are usable settings, and pickling keeps them."""
    for max_keys, idle in ((1, 1.0), (10_000_000, 86_400.0)):
        fleet = LocalFleet(max_keys=max_keys, idle=idle)
        copy = pickle.loads(pickle.dumps(fleet))
        assert (copy.max_keys, copy.idle) == (max_keys, idle)


def test_rng_may_be_a_random_instance() -> None:
    """A seeded random.Random drives the spread reproducibly."""
    waits = []
    for _ in range(2):
        fleet = LocalFleet(clock=VirtualTime(now=5000.0), rng=random.Random(7))
        fleet.release(KEY, fleet.acquire(KEY, time_left=60), 429, {"Retry-After": "10"})
        waits.append(fleet.acquire(KEY, time_left=60).wait)
    assert waits[0] == waits[1]
    assert 10 <= waits[0] < 20


# -- bounded state ----------------------------------------------------------------------------


def tenant(n: int) -> str:
    return fleet_key(f"sk_tenant_{n}", "https://api.sume.example")


def once(fleet: LocalFleet, key_id: str, status: int = 200, headers: Optional[Dict[str, str]] = None) -> None:
    """One request of ``key_id``: a turn, then its answer."""
    fleet.release(key_id, fleet.acquire(key_id, time_left=30.0), status, headers or {})


def test_ten_thousand_tenants_once_each_then_an_idle_spell_leave_one_entry() -> None:
    """The issue's case: after idle seconds unused, entries holding nothing running are forgotten."""
    fleet, clock = make()
    for n in range(10_000):
        once(fleet, tenant(n))
    assert fleet.entries == 10_000
    clock.advance(fleet.idle)
    once(fleet, KEY)  # the next acquire that looks at the clock sweeps
    assert fleet.entries == 1


def test_an_entry_is_kept_while_it_is_used_within_idle_seconds() -> None:
    """Idle means unused: a tenant calling every few minutes keeps its entry."""
    fleet, clock = make(idle=60.0)
    for _ in range(5):
        once(fleet, tenant(1))
        clock.advance(59.0)
        once(fleet, tenant(2))
    assert fleet.entries == 2


def test_a_pace_is_kept_pace_kept_times_as_long() -> None:
    """A pace the server stated outlives a plain entry: gone after PACE_KEPT x idle, not idle."""
    fleet, clock = make(idle=60.0)
    once(fleet, tenant(1), headers={"RateLimit-Policy": "10;w=1"})
    once(fleet, tenant(2))
    clock.advance(61.0)
    once(fleet, KEY)
    assert fleet.pace(tenant(1)) == pytest.approx(10 / 1.01)
    assert fleet.entries == 2
    clock.advance(60.0 * 12)
    once(fleet, KEY)
    assert fleet.entries == 1


def test_a_running_cooldown_is_never_forgotten_for_idleness() -> None:
    """A key cooling down for ten minutes keeps its entry past idle, then goes once it ends."""
    fleet, clock = make(idle=60.0)
    fleet.release(KEY, first(fleet), 429, {"Retry-After": "600"})
    clock.advance(500.0)
    once(fleet, tenant(1))
    assert first(fleet, time_left=30.0).refused is not None  # still held, still known
    clock.advance(100.0 + 61.0)
    once(fleet, tenant(1))
    assert fleet.entries == 1


def test_an_attempt_in_flight_keeps_its_entry() -> None:
    """An entry with an attempt still out is not idle, whatever the clock says."""
    fleet, clock = make(idle=1.0)
    fleet.acquire(KEY, time_left=math.inf)  # in flight for its lease: 2 s before any answer
    clock.advance(1.5)
    once(fleet, tenant(1))
    assert fleet.entries == 2


def test_past_max_keys_the_least_recently_used_go_first() -> None:
    """A new key past max_keys evicts the least recently used entries (a tenth of the cap)."""
    fleet, clock = make(max_keys=10)
    for n in range(10):
        once(fleet, tenant(n))
        clock.advance(1.0)
    once(fleet, tenant(0))  # used again: now the most recent
    once(fleet, tenant(10))
    assert fleet.entries == 9
    kept = set(fleet._keys)
    assert {tenant(0), tenant(10)} <= kept
    assert not {tenant(1), tenant(2)} & kept


def test_past_max_keys_a_running_cooldown_outlasts_idle_entries() -> None:
    """Room is made from entries holding nothing running first, however old the cooldown is."""
    fleet, clock = make(max_keys=3)
    fleet.release(KEY, first(fleet), 429, {"Retry-After": "600"})
    for n in range(4):
        clock.advance(1.0)
        once(fleet, tenant(n))
    assert KEY in fleet._keys
    assert first(fleet, time_left=30.0).refused is not None


def test_running_entries_past_max_keys_go_least_recently_used_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Only when entries still running alone pass the cap do they go, the oldest first; logged once."""
    fleet, clock = make(max_keys=2)
    with caplog.at_level(logging.WARNING, logger="sume_urllib3"):
        for n in range(4):
            clock.advance(1.0)
            once(fleet, tenant(n), 429, {"Retry-After": "600"})
    assert set(fleet._keys) == {tenant(2), tenant(3)}
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "max_keys=2" in warnings[0].getMessage()


def test_an_open_key_used_only_lock_free_is_not_idle() -> None:
    """A key past slow start (acquire reads no clock for it) keeps its entry while it is used."""
    fleet, clock = make(initial_window=1, idle=60.0)
    for _ in range(63):
        once(fleet, KEY)
    assert first(fleet) is GRANT_NOW
    for _ in range(3):
        clock.advance(50.0)
        assert first(fleet) is GRANT_NOW  # lock-free: only marks the entry used
        once(fleet, tenant(1))  # a new key's acquire reads the clock, and sweeps when due
    assert KEY in fleet._keys
    clock.advance(121.0)  # unused for idle seconds, and one sweep period to see it
    once(fleet, tenant(2))
    assert KEY not in fleet._keys


def test_lock_free_acquires_look_at_the_clock_once_per_1024() -> None:
    """The lock-free path reads no clock per call, yet an idle spell ends with a sweep there too."""
    reads: List[int] = []
    clock = VirtualTime(now=5000.0)

    def counting() -> float:
        reads.append(1)
        return clock.now

    fleet = LocalFleet(clock=counting, initial_window=1)
    for _ in range(63):
        once(fleet, KEY)
    once(fleet, tenant(1))
    clock.advance(fleet.idle)
    del reads[:]
    for _ in range(2048):
        assert fleet.acquire(KEY, time_left=30.0) is GRANT_NOW
    assert len(reads) == 2
    assert fleet.entries == 1  # tenant(1) went at the first of them


def test_new_keys_past_max_keys_sweep_once_per_tenth_of_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Room is made in batches, so a stream of new keys costs O(log n) each, not a scan each."""
    sweeps: List[int] = []
    sweep = LocalFleet._sweep

    def counted(self: LocalFleet, now: int, spare: Optional[str] = None) -> None:
        sweeps.append(now)
        sweep(self, now, spare)

    monkeypatch.setattr(LocalFleet, "_sweep", counted)
    fleet, _ = make(max_keys=100)
    for n in range(1_000):
        once(fleet, tenant(n))
        assert fleet.entries <= 100
    assert len(sweeps) <= 1 + 900 // 10 + 1


def test_stats_keep_counting_what_forgotten_entries_did() -> None:
    """Evicting an entry never takes its holds, refusals or waits out of stats()."""
    fleet, clock = make("1/s", idle=1.0)
    first(fleet)
    assert first(fleet).source == "pace"
    before = fleet.stats()
    clock.advance(5.0)
    fleet.acquire(tenant(1), time_left=30.0)
    assert KEY not in fleet._keys
    assert fleet.stats() == before


def test_a_grant_of_a_forgotten_entry_is_released_harmlessly() -> None:
    """An answer arriving after its entry was evicted changes nothing and raises nothing."""
    fleet, clock = make(idle=1.0)
    grant = first(fleet)
    clock.advance(10.0)  # past its lease: the attempt is presumed dead
    once(fleet, tenant(1))
    assert KEY not in fleet._keys
    fleet.release(KEY, grant, 429, {"Retry-After": "60"})
    assert first(fleet).wait == 0.0


# -- fork without at-fork hooks -------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_from_c_starts_with_no_state() -> None:
    """uWSGI forks from C (no at-fork hook runs): the child's first use still starts afresh."""
    fleet, _ = make(initial_window=1)
    fleet.release(KEY, first(fleet), 429, {"Retry-After": "100"})
    first(fleet)
    other = fleet.acquire(tenant(1), time_left=30.0)  # in flight, holding the only slot
    assert fleet.acquire(tenant(1), time_left=30.0).again

    def child() -> str:
        waits = (first(fleet).wait, fleet.acquire(tenant(1), time_left=30.0).again)
        return repr((waits, fleet.stats()["cooldowns"], fleet.stats()["again"]))

    assert in_a_child_forked_from_c(child) == repr(((0.0, False), 0, 0))
    assert first(fleet).wait > 90  # the parent keeps its own
    fleet.release(tenant(1), other, 200, {})


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_lock_held_at_a_c_fork_does_not_hang_the_child() -> None:
    """A key's lock some thread of the parent held at the fork is never waited on in the child."""
    fleet, _ = make(initial_window=1)
    first(fleet)
    lock = fleet._lock
    lock.acquire()  # as a parent thread inside acquire() at the moment uWSGI forks
    try:

        def child() -> str:
            signal.alarm(5)  # a hang kills the child, and the parent reads nothing
            return repr(first(fleet).wait)

        assert in_a_child_forked_from_c(child) == "0.0"
    finally:
        lock.release()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_an_open_key_answers_at_once_in_a_child_forked_from_c() -> None:
    """The lock-free path (no pid check) holds no lock and no attempt: a child may use it as is."""
    fleet, _ = make(initial_window=1)
    for _ in range(63):
        once(fleet, KEY)
    assert in_a_child_forked_from_c(lambda: repr(first(fleet) is GRANT_NOW)) == "True"


def test_threads_making_room_at_once_stay_bounded_and_never_fail(caplog: pytest.LogCaptureFixture) -> None:
    """Eight threads sending 2,000 new keys each past max_keys=100: every acquire is paced (none
    falls back to unpaced after an internal error) and the fleet ends within its bound."""
    clock = VirtualTime(now=5000.0)
    fleet = LocalFleet(clock=clock, rng=lambda: 0.5, max_keys=100)

    def work(offset: int) -> None:
        for n in range(2_000):
            kid = tenant(offset * 10_000 + n)
            fleet.release(kid, fleet.acquire(kid, time_left=30.0), 200, {})

    with caplog.at_level(logging.DEBUG, logger="sume_urllib3"):
        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not [r for r in caplog.records if "failed" in r.getMessage()]
    once(fleet, KEY)  # a thread that found another sweeping went on; the next new key sweeps
    assert fleet.entries <= 100


# -- cooldowns and stale paces, and whose clock a fleet follows ----------------------


def test_an_absurd_retry_after_holds_the_key_no_longer_than_max_cooldown() -> None:
    """Retry-After: 99999999999 starts a cooldown of MAX_COOLDOWN_US, not of three thousand years."""
    most = _pacing.MAX_COOLDOWN_US / _pacing.SECOND
    now = [1000.0]
    fleet = LocalFleet(clock=lambda: now[0])
    grant = fleet.acquire("k1", time_left=60.0)
    fleet.release("k1", grant, 503, {"Retry-After": "99999999999"})

    later = fleet.acquire("k1", time_left=10 * most)

    assert later.refused is None
    assert most <= later.wait <= 2 * most


def test_an_open_key_throttled_once_is_not_held_to_a_stale_pace() -> None:
    """One 429 after an hour of open traffic does not turn 10/s into one request a minute."""
    now = [0.0]
    fleet = LocalFleet(clock=lambda: now[0])
    for _ in range(80):  # slow start opens the key
        grant = fleet.acquire("k1", time_left=60.0)
        now[0] += 0.01
        fleet.release("k1", grant, 200, {})
    for _ in range(36_000):  # an hour at 10/s on the lock-free path
        now[0] += 0.1
        fleet.release("k1", fleet.acquire("k1", time_left=60.0), 200, {})

    fleet.release("k1", fleet.acquire("k1", time_left=60.0), 429, {})

    assert fleet.pace("k1") is None or fleet.pace("k1") > 1.0  # type: ignore[operator]
    assert fleet.acquire("k1", time_left=30.0).refused is None


def test_an_adapter_with_an_injected_clock_paces_on_that_clock() -> None:
    """SumeAdapter(clock=...) gets a fleet of its own, as SumeSession does, not the real-time one."""
    assert SumeAdapter(clock=lambda: 0.0).fleet is not LocalFleet.default()
    assert SumeAdapter().fleet is LocalFleet.default()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_429_on_an_open_key_after_a_c_fork_never_waits_on_a_parents_lock() -> None:
    """The lock-free acquire checks no pid, so the release that must learn (a 429) checks it before
    taking the key's lock: one a parent's thread held at the fork would never be released."""
    fleet, _ = make(initial_window=1)
    for _ in range(63):
        once(fleet, KEY)
    lock = fleet._lock
    lock.acquire()
    try:

        def child() -> str:
            signal.alarm(5)  # a hang kills the child, and the parent reads nothing
            grant = first(fleet)
            fleet.release(KEY, grant, 429, {"Retry-After": "30"})
            return repr((grant is GRANT_NOW, fleet.entries))

        assert in_a_child_forked_from_c(child) == repr((True, 0))
    finally:
        lock.release()


# -- what a response's release needs (every fleet asks release_need) ----------------------

_LEARNED = _pacing.Turn(_pacing.SEND, 0, _pacing.NONE, learning=True)
_CONFIGURED = _pacing.Turn(_pacing.SEND, 0, _pacing.NONE)
_HELD = _pacing.Turn(_pacing.SEND, 0, _pacing.NONE, entry="e0")  # a slow-start slot, or a quota's
_POLICY = {"RateLimit-Policy": "10;w=1", "RateLimit-Limit": "10"}


@pytest.mark.parametrize(
    ("turn", "status", "headers", "need"),
    [
        (_CONFIGURED, 200, {}, RELEASE_NEVER),
        (_CONFIGURED, 200, {"RateLimit-Reset": "5"}, RELEASE_NEVER),  # a Reset alone counts nothing
        (_LEARNED, 200, {}, RELEASE_LATER),  # one more admitted, the pace's creep
        (_LEARNED, None, None, RELEASE_LATER),  # an answer lost under a learned pace is admitted
        (_LEARNED, 500, {}, RELEASE_LATER),  # a response time
        (_LEARNED, 429, {}, RELEASE_NOW),
        (_CONFIGURED, 429, {}, RELEASE_NOW),
        (_LEARNED, 503, {"Retry-After": "1"}, RELEASE_NOW),
        (_LEARNED, 200, {"RateLimit-Remaining": "3", "RateLimit-Reset": "1"}, RELEASE_NOW),
        (_CONFIGURED, 200, _POLICY, RELEASE_NOW),
        (_HELD, 200, {}, RELEASE_NOW),  # other processes wait for the slot
        (_HELD._replace(learning=True), 200, {}, RELEASE_NOW),
    ],
)
def test_what_a_release_needs_is_decided_once_for_every_fleet(
    turn: _pacing.Turn, status: Optional[int], headers: Optional[Dict[str, str]], need: int
) -> None:
    """At once what other processes must know now; late what only counts; nothing when nothing changes."""
    assert need == release_need(turn, status or 0, read_response(status, headers))


def test_a_late_lesson_never_moves_the_idle_clock_back() -> None:
    """The core's release at an earlier time than the key was last seen (RedisFleet tells a plain
    success late, after another process's call) keeps the later time: no false new busy spell."""
    st, cfg = _pacing.State(last_seen=5 * _pacing.SECOND), _pacing.Config()
    turn = _pacing.Turn(_pacing.SEND, 0, _pacing.NONE, slot=4 * _pacing.SECOND, learning=True)
    _pacing.release(st, cfg, 4_500_000, turn=turn._replace(seq=1, inflight=1), status=200,
                    lesson=_pacing.Lesson(0, -1, -1, -1, -1))
    assert (5 * _pacing.SECOND, 1, 500_000) == (st.last_seen, st.successes, st.response_time)
