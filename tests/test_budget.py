"""RetryBudget: a floor for bursts, a ratio under load, a smooth refill as old counts decay."""

from __future__ import annotations

import copy
import inspect
import math
import pickle
import threading
from typing import Any, Dict, List, Tuple

import pytest

from sume_urllib3.exceptions import ConfigurationError
from sume_urllib3.pacing._fleet import RetryBudget

from .conftest import VirtualTime


def spend_all(budget: RetryBudget, limit: int = 100_000) -> int:
    """Withdraw until refused; return how many retries were allowed."""
    n = 0
    while n < limit and budget.try_spend():
        n += 1
    return n


def test_defaults() -> None:
    """The defaults are 20% over 10 s with a floor of 10 retries per second."""
    budget = RetryBudget(clock=VirtualTime())
    assert (budget.ratio, budget.window, budget.min_per_second) == (0.2, 10.0, 10.0)
    assert budget.balance == 100.0


def test_floor_allows_a_burst_of_50_at_once() -> None:
    """A brand-new budget never throttles a burst of 50 retries."""
    budget = RetryBudget(clock=VirtualTime())
    assert all(budget.try_spend() for _ in range(50))
    assert budget.balance == 50.0


def test_refuses_once_the_balance_is_spent() -> None:
    """Under sustained failures the budget refuses, and a refusal withdraws nothing."""
    clock = VirtualTime()
    budget = RetryBudget(clock=clock)
    for _ in range(10):
        budget.record_request()
    assert spend_all(budget) == 100  # the floor, since 0.2 * 10 is smaller
    assert budget.try_spend() is False
    assert budget.balance == pytest.approx(0.0)


def test_refills_smoothly_as_its_retries_fade() -> None:
    """Spent units come back as the retries' weight decays: after one window, 1/e of them count."""
    clock = VirtualTime()
    budget = RetryBudget(clock=clock)
    assert spend_all(budget) == 100
    clock.advance(0.05)
    assert budget.try_spend() is False  # 100 * e^-0.005 + 1 is still over the floor of 100
    clock.advance(9.95)
    assert budget.balance == pytest.approx(100 - 100 / math.e)
    assert spend_all(budget) == 63


def test_a_spent_budget_tells_a_retry_when_its_unit_is_free() -> None:
    """reserve() spends the unit and says when the floor has room for it; a retry that would
    wait past its time left is refused and spends nothing (the rule a fleet's budget applies)."""
    clock = VirtualTime()
    budget = RetryBudget(clock=clock)
    assert spend_all(budget) == 100
    assert budget.reserve(time_left=0.05) is None
    assert budget.reserve() == pytest.approx(10 * math.log(100 / 99), abs=1e-6)  # 0.1005 s
    assert budget.reserve() == pytest.approx(10 * math.log(101 / 99), abs=1e-6)  # counted: 0.2 s
    clock.advance(0.2)
    assert budget.try_spend() is False  # both units above are taken
    assert budget.reserve() == pytest.approx(10 * math.log(102 * math.exp(-0.02) / 99), abs=1e-6)


def test_refills_gradually_never_sticks_at_zero() -> None:
    """Retrying at the floor's rate (10 a second) forever works: no retry waits half a second."""
    clock = VirtualTime()
    budget = RetryBudget(clock=clock)
    waits = []
    for _ in range(60):
        waits += [budget.reserve() for _ in range(10)]
        clock.advance(1.0)
    assert None not in waits
    assert max(w for w in waits if w is not None) < 0.5


def test_sustained_failure_settles_at_the_ratio() -> None:
    """Under total failure of busy traffic retries settle at ratio * requests, not more."""
    clock = VirtualTime()
    budget = RetryBudget(clock=clock)
    allowed = 0
    # 100 requests/s for 100 s, every one wanting 6 retries.
    for _ in range(1000):
        for _ in range(10):
            budget.record_request()
            allowed += sum(budget.try_spend() for _ in range(6))
        clock.advance(0.1)
    # Per second: 0.2 * 100 = 20 (above the 10/s floor), plus the first window's burst.
    assert 20 * 100 <= allowed <= 20 * 100 + 100 + 20


def test_ratio_accounting() -> None:
    """With 2000 requests in the window and ratio 0.2, 400 retries are allowed (above the floor)."""
    clock = VirtualTime()
    budget = RetryBudget(clock=clock)
    for _ in range(2000):
        budget.record_request()
    assert budget.balance == pytest.approx(400.0)
    assert spend_all(budget) == 400


def test_ratio_only_without_floor() -> None:
    """min_per_second=0 leaves only ratio tokens; none at all before any request."""
    clock = VirtualTime()
    budget = RetryBudget(ratio=0.1, min_per_second=0, clock=clock)
    assert budget.try_spend() is False
    for _ in range(100):
        budget.record_request()
    assert spend_all(budget) == 10


def test_float_products_do_not_lose_a_token() -> None:
    """0.57 * 100 is 56.999... in floating point; the 57th retry is still allowed."""
    budget = RetryBudget(ratio=0.57, min_per_second=0, clock=VirtualTime())
    for _ in range(100):
        budget.record_request()
    assert spend_all(budget) == 57


def test_requests_fade_too() -> None:
    """Requests earn retries by a weight that decays the same way: old traffic earns nothing."""
    clock = VirtualTime()
    budget = RetryBudget(min_per_second=0, clock=clock)
    for _ in range(100):
        budget.record_request()
    assert budget.balance == pytest.approx(20.0)
    clock.advance(10.0)
    assert budget.balance == pytest.approx(20 / math.e)
    clock.advance(20.0)
    assert budget.balance < 1
    assert budget.try_spend() is False


def test_requests_a_moment_apart_each_weigh_their_due() -> None:
    """Every request counts itself, decayed from its own time."""
    clock = VirtualTime()
    budget = RetryBudget(min_per_second=0, clock=clock)
    budget.record_request()
    for _ in range(99):
        clock.advance(0.005)
        budget.record_request()
    exact = 0.2 * sum(math.exp(-0.005 * k / 10.0) for k in range(100))
    assert budget.balance == pytest.approx(exact, rel=1e-9)


def test_clock_going_backwards_does_not_resurrect_or_crash() -> None:
    """A clock that steps back keeps the counts, decaying from the earlier time on."""
    clock = VirtualTime()
    budget = RetryBudget(clock=clock)
    assert budget.try_spend()
    clock.advance(-50.0)
    assert budget.try_spend()
    assert budget.balance == 98.0


def test_long_idle_clears_everything_in_one_step() -> None:
    """After a long idle gap all old entries are gone at once."""
    clock = VirtualTime()
    budget = RetryBudget(clock=clock)
    for _ in range(30):
        budget.record_request()
        budget.try_spend()
    clock.advance(1e6)
    assert budget.balance == 100.0


def test_thread_safety_16_threads() -> None:
    """16 threads racing for tokens never get more than the balance allows, in total."""
    budget = RetryBudget(clock=VirtualTime())
    for _ in range(1000):
        budget.record_request()
    start = threading.Barrier(16)
    granted = [0] * 16

    def work(n: int) -> None:
        start.wait()
        for _ in range(100):
            if budget.try_spend():
                granted[n] += 1

    threads = [threading.Thread(target=work, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(granted) == 200  # 0.2 * 1000, above the 100 floor
    assert budget.balance == pytest.approx(0.0)


def test_concurrent_deposits_are_all_counted() -> None:
    """16 threads x 500 deposits add exactly 0.2 * 8000 tokens."""
    budget = RetryBudget(min_per_second=0, clock=VirtualTime())

    def work() -> None:
        for _ in range(500):
            budget.record_request()

    threads = [threading.Thread(target=work) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert budget.balance == pytest.approx(1600.0)


def test_shared_is_a_singleton() -> None:
    """shared() returns the same default budget every time and from every thread."""
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(RetryBudget.shared())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seen.append(RetryBudget.shared())
    assert all(b is seen[0] for b in seen)
    assert isinstance(seen[0], RetryBudget)
    assert seen[0].ratio == 0.2


def test_repr_shows_balance() -> None:
    """repr names the settings and the balance."""
    budget = RetryBudget(clock=VirtualTime())
    budget.try_spend()
    assert repr(budget) == "RetryBudget(ratio=0.2, window=10, min_per_second=10, balance=99.0)"


#: Each argument of RetryBudget with values it cannot use (and the argument the refusal names).
BAD_SETTINGS: List[Tuple[Dict[str, Any], str]] = [
    ({"ratio": -0.1}, "ratio"),
    ({"ratio": 1000.5}, "ratio"),
    ({"ratio": math.nan}, "ratio"),
    ({"ratio": "0.2"}, "ratio"),
    ({"ratio": True}, "ratio"),
    ({"window": 0}, "window"),
    ({"window": -1.0}, "window"),
    ({"window": math.inf}, "window"),
    ({"min_per_second": -1}, "min_per_second"),
    ({"min_per_second": math.inf}, "min_per_second"),
    ({"min_per_second": None}, "min_per_second"),
    ({"clock": 5}, "clock"),
    ({"ratio": math.inf}, "ratio"),
    ({"ratio": None}, "ratio"),
    ({"window": math.nan}, "window"),
    ({"window": 1e300}, "window"),
    ({"window": 86_401}, "window"),
    ({"window": "10"}, "window"),
    ({"window": True}, "window"),
    ({"min_per_second": math.nan}, "min_per_second"),
    ({"min_per_second": 1e300}, "min_per_second"),
    ({"min_per_second": False}, "min_per_second"),
    ({"clock": None}, "clock"),
    ({"clock": lambda: "now"}, "clock"),
    ({"clock": lambda: math.nan}, "clock"),
    ({"clock": lambda: 1 / 0}, "clock"),
]


def test_the_bad_settings_cover_every_argument() -> None:
    """Every named parameter of RetryBudget has rows in BAD_SETTINGS."""
    named = set(inspect.signature(RetryBudget.__init__).parameters) - {"self"}
    assert named == {name for _kwargs, name in BAD_SETTINGS}


@pytest.mark.parametrize(("kwargs", "name"), BAD_SETTINGS)
def test_validation_names_the_argument(kwargs: Any, name: str) -> None:
    """Bad arguments raise ConfigurationError naming the argument and what it accepts."""
    with pytest.raises(ConfigurationError, match=name) as raised:
        RetryBudget(**kwargs)
    assert "must" in str(raised.value)


def test_edge_values_are_accepted() -> None:
    """ratio 0 and 1000 and a zero floor are valid."""
    RetryBudget(ratio=0)
    RetryBudget(ratio=1000)
    RetryBudget(min_per_second=0, window=0.001)


def test_a_clock_stepping_back_does_not_freeze_the_budget() -> None:
    """After the clock jumps back, spent tokens still come back within one window."""
    clock = VirtualTime()
    clock.advance(5000.0)
    budget = RetryBudget(clock=clock)
    assert 100 == spend_all(budget)
    clock.now = 1400.0  # e.g. a wall clock stepped back by NTP

    assert 0.0 == budget.balance
    clock.advance(10.0)
    assert budget.balance == pytest.approx(100 - 100 / math.e)  # as from any other spend

class MyBudget(RetryBudget):
    """A user's subclass (must survive copy and pickle as itself)."""


def test_copies_and_pickles_have_state_of_their_own() -> None:
    """A copy spending tokens never changes the original's buckets; subclasses survive."""
    original = MyBudget(clock=VirtualTime())
    twin = copy.copy(original)
    spend_all(twin)

    assert (100.0, MyBudget) == (original.balance, type(pickle.loads(pickle.dumps(original))))


def test_a_window_too_small_to_divide_is_refused() -> None:
    """window=5e-324 passes 'finite and > 0' but cannot be cut into buckets."""
    with pytest.raises(ConfigurationError, match="window"):
        RetryBudget(window=5e-324)
