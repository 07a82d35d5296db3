"""PollSchedule: when each poll of a wait goes, from times and hints alone (no clock, no sockets)."""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import pytest
from urllib3.util.timeout import Timeout

from sume_urllib3._jobs import (
    GROWTH,
    LAST_POLL_MARGIN,
    MAX_LAST_POLL_MARGIN,
    PollSchedule,
    cut_by_deadline,
    poll_timeout,
)


def lowest() -> float:
    """The bottom of the jitter range: every unhinted pause is 0.95 x its delay."""
    return 0.95


def no_jitter() -> float:
    return 1.0


def run(plan: PollSchedule, hints: Optional[List[Optional[float]]] = None) -> Tuple[List[float], str]:
    """Poll times from 0 until the plan stops (each poll takes no time), and why it stopped."""
    now, times, index = 0.0, [0.0], 0
    while True:
        hint = hints[min(index, len(hints) - 1)] if hints else None
        pause, why = plan.next_poll(now, hint, lowest)
        if pause is None:
            return times, why
        now += pause
        times.append(now)
        index += 1


def test_unhinted_pauses_start_at_interval_and_grow_to_max_interval() -> None:
    """1, 1.5, 2.25... x GROWTH, never above max_interval (no jitter here)."""
    plan = PollSchedule(deadline=1000.0, interval=1.0, max_interval=5.0)

    pauses = [plan.next_poll(0.0, None, no_jitter)[0] for _ in range(6)]

    assert [1.0, GROWTH, GROWTH**2, GROWTH**3, 5.0, 5.0] == pytest.approx(pauses)


def test_the_issues_wait_ends_with_a_poll_just_before_its_deadline() -> None:
    """timeout 2, interval 0.3: 0, 0.285, 0.7125, 1.35375, then 2 - margin; then nothing fits."""
    times, why = run(PollSchedule(deadline=2.0, interval=0.3, max_interval=20.0))

    assert [0.0, 0.285, 0.7125, 1.35375, 2.0 - LAST_POLL_MARGIN] == pytest.approx(times)
    assert "no time is left for another poll" == why


def test_a_poll_no_other_could_follow_moves_to_the_last_moment() -> None:
    """A pause landing 0.04 s before the latest start would leave no room: that poll goes at the latest."""
    plan = PollSchedule(deadline=10.0, interval=1.0, max_interval=20.0)
    plan.delay = 9.9 / 0.95  # the next pause would end at 9.9, 0.05 s before the latest start (9.95)

    pause, _ = plan.next_poll(0.0, None, lowest)

    assert 10.0 - LAST_POLL_MARGIN == pytest.approx(pause)


@pytest.mark.parametrize("timeout", [1.0, 2.0, 10.0, 60.0, 600.0])
@pytest.mark.parametrize("interval", [0.01, 0.05, 0.3, 1.0, 5.0, 20.0])
def test_the_last_poll_is_never_more_than_max_interval_or_a_tenth_before_the_deadline(
    timeout: float, interval: float
) -> None:
    """The issue's target, as a plan: the last poll at or after T - max(interval, 0.1), every one before T."""
    times, _ = run(PollSchedule(deadline=timeout, interval=interval, max_interval=20.0))

    assert timeout - max(interval, 0.1) <= times[-1] < timeout
    assert times[-1] == pytest.approx(timeout - LAST_POLL_MARGIN)


def test_a_hint_spaces_the_polls_but_never_below_interval() -> None:
    """Hints of 0.2 and 3 with interval 1: pauses of 1 and 3."""
    plan = PollSchedule(deadline=100.0, interval=1.0, max_interval=20.0)

    assert (1.0, "") == plan.next_poll(0.0, 0.2, lowest)
    assert (3.0, "") == plan.next_poll(0.0, 3.0, lowest)


def test_a_hint_past_the_deadline_ends_the_plan_and_says_what_the_server_asked() -> None:
    """Polls never come sooner than the server asked: a hint past the latest start ends the wait."""
    plan = PollSchedule(deadline=60.0, interval=1.0, max_interval=20.0)

    assert (None, "the server asked to wait 120.0s more, past the deadline") == plan.next_poll(
        0.0, 120.0, lowest
    )


def test_hinted_polls_stop_when_the_next_hint_would_cross_the_deadline() -> None:
    """recommended 2 s, timeout 10: polls at 0, 2, 4, 6, 8 (10 would not come back in time)."""
    times, why = run(PollSchedule(deadline=10.0, interval=1.0, max_interval=20.0), hints=[2.0])

    assert [0.0, 2.0, 4.0, 6.0, 8.0] == times
    assert why.startswith("the server asked to wait 2.0s more")


def test_slow_polls_give_the_last_one_twice_the_slowest_round_trip_up_to_a_cap() -> None:
    """A 0.2 s round trip: the last poll starts 0.4 s before the deadline; 3 s ones are capped."""
    plan = PollSchedule(deadline=10.0, interval=1.0, max_interval=20.0)
    plan.took(0.01)
    assert 10.0 - LAST_POLL_MARGIN == plan.latest  # fast polls keep the floor

    plan.took(0.2)
    plan.took(0.1)
    assert 10.0 - 0.4 == pytest.approx(plan.latest)  # the slowest counts

    plan.took(3.0)
    assert 10.0 - MAX_LAST_POLL_MARGIN == pytest.approx(plan.latest)


def test_a_held_poll_may_go_at_the_latest_start_not_after_it() -> None:
    """A held poll (a cooldown) goes when it still comes back before the deadline, else not at all."""
    plan = PollSchedule(deadline=100.0, interval=1.0, max_interval=20.0)

    assert not plan.hold(0.0, 100.0)
    assert plan.hold(0.0, 100.0 - LAST_POLL_MARGIN)
    assert 100.0 - LAST_POLL_MARGIN == plan.due_in(0.0)


@pytest.mark.parametrize(
    ("session_timeout", "capped"),
    [
        (Timeout(connect=2, read=5), (1.0, 1.0)),
        (Timeout(connect=0.5, read=5), (0.5, 1.0)),
        (Timeout(total=0.3), (0.3, 0.3)),
        (Timeout(connect=0.2, total=0.5), (0.2, 0.5)),
        (Timeout(connect=2), (1.0, 1.0)),
        ((0.5, None), (0.5, 1.0)),
        (3, (1.0, 1.0)),
        (None, (1.0, 1.0)),
    ],
    ids=[
        "Timeout(2,5)",
        "Timeout(0.5,5)",
        "Timeout(total)",
        "Timeout(0.2,total)",
        "Timeout(2)",
        "(0.5,None)",
        "3",
        "None",
    ],
)
def test_a_polls_timeout_is_the_sessions_capped_by_the_time_left(
    session_timeout: Any, capped: Tuple[float, float]
) -> None:
    """Any form of session timeout: a poll with 1 s left gets (connect, read), neither past it."""
    assert capped == poll_timeout(session_timeout, 1.0)


@pytest.mark.parametrize(
    ("session_timeout", "left", "cut"),
    [
        (Timeout(connect=2, read=5), 1.0, True),
        (Timeout(connect=2, read=5), 9.0, False),
        (Timeout(total=3), 2.0, True),
        (Timeout(total=3), 4.0, False),
        ((5, None), 100.0, True),
        (5, 4.0, True),
        (5, 6.0, False),
        (None, 6.0, True),
    ],
)
def test_a_poll_that_timed_out_was_cut_by_the_deadline_only_when_less_was_left(
    session_timeout: Any, left: float, cut: bool
) -> None:
    """A timeout ends the wait ("ran out of time") when the time left was under the session's limit."""
    assert cut is cut_by_deadline(session_timeout, left)
