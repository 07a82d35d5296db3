"""The pure retry policy: the default table, body overrides, waits, caps and validation."""

from __future__ import annotations

import calendar
import dataclasses
import email.utils
import math
import random
from typing import Any, List, Optional, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sume_urllib3 import SumeSession
from sume_urllib3._cli import render_table
from sume_urllib3._envelope import RETRY_AFTER_CEILING, ErrorEnvelope
from sume_urllib3._policy import (
    ANY,
    DEFAULT_RULES,
    IN_USE_WAIT,
    Decision,
    Policy,
    Rule,
    Verdict,
)
from sume_urllib3._record import Outcome
from sume_urllib3.exceptions import ConfigurationError
from sume_urllib3.testing import FakeSume, Reply, no_sleep

#: 2015-10-21 07:28:00 UTC, the wall clock for every HTTP-date test.
NOW = float(calendar.timegm((2015, 10, 21, 7, 28, 0, 0, 0, 0)))
IN_USE = "idempotency_key_in_use"


def low() -> float:
    """An rng that always draws the bottom of the jitter range."""
    return 0.0


def high() -> float:
    """An rng that always draws the top of the jitter range."""
    return 1.0


def clock() -> float:
    """The injected wall clock."""
    return NOW


def summary(decision: Decision) -> Tuple[Verdict, Optional[float], Optional[str]]:
    """The parts of a decision that drive behaviour (the reason is prose)."""
    return (decision.verdict, decision.wait, decision.source)


# --- the default table -------------------------------------------------------------------


@pytest.mark.parametrize("code", [None, "rate_limit_exceeded", "queue_full", "brand_new_code"])
@pytest.mark.parametrize("status", [429, 503])
def test_429_and_503_retry_after_backoff_for_any_code(status: int, code: Optional[str]) -> None:
    """429 and 503 are retried whatever the code, after the backoff when there is no Retry-After."""
    assert (Verdict.RETRY, 0.5, "backoff") == summary(Policy().decide(status, code, rng=low))


@pytest.mark.parametrize("code", [None, "rate_limit_exceeded", "queue_full"])
@pytest.mark.parametrize("status", [429, 503])
def test_429_and_503_wait_for_retry_after(status: int, code: Optional[str]) -> None:
    """429 and 503 wait exactly what Retry-After asks for, not the backoff."""
    assert (Verdict.RETRY, 12.0, "retry_after") == summary(Policy().decide(status, code, "12", rng=low))


def test_409_in_use_waits_in_use_wait() -> None:
    """409 idempotency_key_in_use is retried after in_use_wait (1.0 s), a fixed wait."""
    assert (Verdict.RETRY, 1.0, "fixed") == summary(Policy().decide(409, IN_USE, rng=low))


@pytest.mark.parametrize("attempt", [0, 3, 5])
def test_409_in_use_wait_does_not_grow_with_attempts(attempt: int) -> None:
    """The in-use wait is fixed: it does not back off exponentially."""
    assert (Verdict.RETRY, 1.0, "fixed") == summary(Policy().decide(409, IN_USE, attempt=attempt, rng=high))


def test_409_in_use_larger_retry_after_wins() -> None:
    """A Retry-After larger than in_use_wait replaces it."""
    assert (Verdict.RETRY, 3.0, "retry_after") == summary(Policy().decide(409, IN_USE, "3"))


@pytest.mark.parametrize("retry_after", ["0", "0.5", "1", "-5"])
def test_409_in_use_wait_is_a_floor(retry_after: str) -> None:
    """A Retry-After at or below in_use_wait does not shorten it."""
    assert (Verdict.RETRY, 1.0, "fixed") == summary(Policy().decide(409, IN_USE, retry_after))


def test_409_in_use_uses_the_policy_in_use_wait() -> None:
    """The 409-in-use row reads in_use_wait from the policy it belongs to."""
    assert (Verdict.RETRY, 2.5, "fixed") == summary(Policy(in_use_wait=2.5).decide(409, IN_USE))


@pytest.mark.parametrize("retry_after", [None, "5"])
@pytest.mark.parametrize("code", [None, "idempotency_conflict", "something_else", "IDEMPOTENCY_KEY_IN_USE"])
def test_409_other_codes_are_fix(code: Optional[str], retry_after: Optional[str]) -> None:
    """Any other 409 code (or none) is the caller's to fix, Retry-After or not."""
    assert (Verdict.FIX, None, None) == summary(Policy().decide(409, code, retry_after))


@pytest.mark.parametrize("retry_after", [None, "5"])
@pytest.mark.parametrize("code", [None, "insufficient_credits", "invalid_request", "not_found"])
@pytest.mark.parametrize("status", [400, 401, 402, 404])
def test_400_401_402_404_are_fix(status: int, code: Optional[str], retry_after: Optional[str]) -> None:
    """400, 401, 402 and 404 are never retried: the caller must fix the request."""
    assert (Verdict.FIX, None, None) == summary(Policy().decide(status, code, retry_after))


@pytest.mark.parametrize("retry_after", [None, "5"])
@pytest.mark.parametrize("status", [403, 405, 418, 422, 500, 502, 504, 599])
def test_other_errors_are_no_retry(status: int, retry_after: Optional[str]) -> None:
    """Every other status >= 400 is not retried, whatever Retry-After says."""
    assert (Verdict.NO_RETRY, None, None) == summary(Policy().decide(status, "internal", retry_after))


@pytest.mark.parametrize("status", [100, 200, 204, 301, 304, 399])
def test_below_400_is_no_retry_even_with_hints(status: int) -> None:
    """A status below 400 is not an error: no retry, and body hints cannot change that."""
    hints = ErrorEnvelope(retryable=True, next_action="poll")
    assert (Verdict.NO_RETRY, None, None) == summary(Policy().decide(status, None, "1", hints=hints))


def test_default_rules_are_the_documented_table() -> None:
    """The default table is exactly the documented rows, in order."""
    expected = (
        Rule(429, ANY, Verdict.RETRY),
        Rule(503, ANY, Verdict.RETRY),
        Rule(409, IN_USE, Verdict.RETRY, IN_USE_WAIT),
        Rule(409, ANY, Verdict.FIX),
        Rule(400, ANY, Verdict.FIX),
        Rule(401, ANY, Verdict.FIX),
        Rule(402, ANY, Verdict.FIX),
        Rule(404, ANY, Verdict.FIX),
    )
    assert expected == DEFAULT_RULES
    assert expected == Policy().rules


def test_reasons_name_status_and_code() -> None:
    """Every decision explains itself with the status and the code."""
    assert "402 insufficient_credits: the caller must fix the request; not retried" == (
        Policy().decide(402, "insufficient_credits").reason
    )
    assert "429 queue_full: retry in 12.0s (retry_after)" == Policy().decide(429, "queue_full", "12").reason


# --- body overrides ----------------------------------------------------------------------


@pytest.mark.parametrize(("status", "code"), [(429, None), (429, "queue_full"), (503, None), (409, IN_USE)])
def test_retryable_false_stops_a_retry_row(status: int, code: Optional[str]) -> None:
    """Body retryable=false turns a RETRY row into NO_RETRY and says so."""
    decision = Policy().decide(status, code, "1", hints=ErrorEnvelope(retryable=False))
    assert (Verdict.NO_RETRY, None, None) == summary(decision)
    assert "retryable=false" in decision.reason


@pytest.mark.parametrize("attempt", [0, 2])
@pytest.mark.parametrize("status", [500, 502, 418])
def test_retryable_true_turns_no_retry_into_backoff_retry(status: int, attempt: int) -> None:
    """Body retryable=true turns a NO_RETRY status into a RETRY after the backoff."""
    decision = Policy().decide(status, None, attempt=attempt, hints=ErrorEnvelope(retryable=True), rng=low)
    assert (Verdict.RETRY, 0.5 * 2**attempt, "backoff") == summary(decision)


@pytest.mark.parametrize("status", [500, 502, 418])
def test_retryable_true_on_no_retry_row_respects_retry_after(status: int) -> None:
    """A NO_RETRY status made retryable by the body still honours Retry-After."""
    decision = Policy().decide(status, None, "7", hints=ErrorEnvelope(retryable=True), rng=low)
    assert (Verdict.RETRY, 7.0, "retry_after") == summary(decision)


@pytest.mark.parametrize(
    ("status", "code"),
    [(400, None), (401, None), (402, "insufficient_credits"), (404, None), (409, "idempotency_conflict")],
)
def test_retryable_true_leaves_fix_as_fix(status: int, code: Optional[str]) -> None:
    """A FIX row stays FIX even when the body claims the error is retryable."""
    decision = Policy().decide(status, code, "1", hints=ErrorEnvelope(retryable=True))
    assert (Verdict.FIX, None, None) == summary(decision)


@pytest.mark.parametrize("next_action", ["poll", "poll_job", "poll_status", "POLL_JOB", "then_poll_later"])
@pytest.mark.parametrize(
    ("status", "code"), [(429, None), (503, "queue_full"), (409, IN_USE), (500, None), (402, None)]
)
def test_next_action_poll_yields_poll(status: int, code: Optional[str], next_action: str) -> None:
    """A next_action containing "poll" means POLL (never resubmit), even over a RETRY row."""
    decision = Policy().decide(status, code, "1", hints=ErrorEnvelope(next_action=next_action))
    assert (Verdict.POLL, None, None) == summary(decision)
    assert next_action in decision.reason


def test_next_action_poll_wins_over_retryable_true() -> None:
    """POLL beats retryable=true: a job that exists is polled, not submitted again."""
    hints = ErrorEnvelope(retryable=True, next_action="poll_job")
    assert Verdict.POLL == Policy().decide(503, None, hints=hints).verdict


@pytest.mark.parametrize("next_action", ["resubmit", "contact_support", "top_up", ""])
def test_other_next_actions_keep_the_table_verdict(next_action: str) -> None:
    """A next_action without "poll" does not change the verdict."""
    hints = ErrorEnvelope(next_action=next_action)
    assert Verdict.RETRY == Policy().decide(429, None, hints=hints).verdict
    assert Verdict.FIX == Policy().decide(402, None, hints=hints).verdict


@pytest.mark.parametrize(
    ("status", "hints", "expected"),
    [
        (429, ErrorEnvelope(retryable=False), Verdict.RETRY),
        (500, ErrorEnvelope(retryable=True), Verdict.NO_RETRY),
        (429, ErrorEnvelope(next_action="poll"), Verdict.RETRY),
        (402, ErrorEnvelope(next_action="poll_job"), Verdict.FIX),
    ],
)
def test_trust_body_false_ignores_hints(status: int, hints: ErrorEnvelope, expected: Verdict) -> None:
    """With trust_body=False only the table decides."""
    assert expected == Policy(trust_body=False).decide(status, None, hints=hints).verdict


def test_empty_hints_change_nothing() -> None:
    """An envelope with no fields leaves the table verdict alone."""
    hints = ErrorEnvelope()
    assert (Verdict.RETRY, 0.5, "backoff") == summary(Policy().decide(429, hints=hints, rng=low))
    assert (Verdict.FIX, None, None) == summary(Policy().decide(402, hints=hints))


# --- the reference results of the default table --------------------------------------------
def default_wait(status: int, code: Optional[str], retry_after: Any, attempt: int) -> Optional[float]:
    """The default policy's wait at elapsed 0, or None for "do not retry"."""
    decision = Policy().decide(status, code, retry_after, attempt, 0.0)
    return decision.wait if decision.retry else None



def test_default_wait_reference_402_insufficient_credits() -> None:
    """402 insufficient_credits is not retried."""
    assert default_wait(402, "insufficient_credits", None, 0) is None


def test_default_wait_reference_409_conflict() -> None:
    """409 idempotency_conflict is not retried."""
    assert default_wait(409, "idempotency_conflict", None, 0) is None


def test_default_wait_reference_409_in_use() -> None:
    """409 idempotency_key_in_use waits exactly one second."""
    assert 1.0 == default_wait(409, "idempotency_key_in_use", None, 0)


def test_default_wait_reference_429_retry_after() -> None:
    """429 queue_full with Retry-After 12 at attempt 1 waits exactly 12 seconds."""
    assert 12.0 == default_wait(429, "queue_full", "12", 1)


@pytest.mark.parametrize("repeat", range(20))
def test_default_wait_reference_503_backoff(repeat: int) -> None:
    """503 at attempt 2 waits within the documented 0.5-4.0 s (in fact 2-4 s with the default jitter)."""
    wait = default_wait(503, None, None, 2)
    assert wait is not None
    assert 0.5 <= wait <= 4.0
    assert 2.0 <= wait <= 4.0


@pytest.mark.parametrize("retry_after", [None, "1", "0"])
@pytest.mark.parametrize("attempt", [6, 7, 50, 10**6])
@pytest.mark.parametrize(("status", "code"), [(429, None), (429, "queue_full"), (503, None), (409, IN_USE)])
def test_default_wait_attempt_6_and_later_is_none(
    status: int, code: Optional[str], attempt: int, retry_after: Optional[str]
) -> None:
    """From attempt index 6 on, no retryable row is retried any more."""
    assert default_wait(status, code, retry_after, attempt) is None


@pytest.mark.parametrize("retry_after", ["soon", "", "1m0s", "1e999", "Fri, 99 Foo", "\x00"])
def test_default_wait_never_raises_on_bad_retry_after(retry_after: str) -> None:
    """A garbage Retry-After falls back to the backoff instead of raising."""
    wait = default_wait(429, None, retry_after, 0)
    assert wait is not None
    assert 0.5 <= wait <= 1.0


def test_default_wait_returns_none_past_the_budget() -> None:
    """A wait longer than max_elapsed (elapsed 0) returns None."""
    assert default_wait(429, None, "121", 0) is None
    assert 120.0 == default_wait(429, None, "120", 0)


# --- attempt cap --------------------------------------------------------------------------


@pytest.mark.parametrize("attempt", [6, 7, 10**6])
@pytest.mark.parametrize(("status", "code"), [(429, None), (503, None), (409, IN_USE), (500, None)])
def test_attempt_cap_stops_every_retryable_row(status: int, code: Optional[str], attempt: int) -> None:
    """At attempt >= max_retries a retryable error becomes STOP naming the cap."""
    hints = ErrorEnvelope(retryable=True)
    decision = Policy().decide(status, code, "1", attempt=attempt, hints=hints)
    assert (Verdict.STOP, None, None) == summary(decision)
    assert "attempt cap reached (6 retries)" in decision.reason


def test_attempt_cap_follows_max_retries() -> None:
    """max_retries=2 allows attempt indexes 0 and 1 only."""
    policy = Policy(max_retries=2)
    verdicts = [policy.decide(503, attempt=n, rng=low).verdict for n in range(4)]
    assert [Verdict.RETRY, Verdict.RETRY, Verdict.STOP, Verdict.STOP] == verdicts


def test_max_retries_zero_never_retries() -> None:
    """max_retries=0 stops at the first failure."""
    assert Verdict.STOP == Policy(max_retries=0).decide(429, attempt=0).verdict


def test_attempt_cap_does_not_touch_fix() -> None:
    """The cap only converts retries: a FIX stays FIX at any attempt."""
    assert Verdict.FIX == Policy().decide(402, attempt=10).verdict


# --- backoff and jitter -------------------------------------------------------------------

BOUNDS = [
    (0, 0.5, 1.0),
    (1, 1.0, 2.0),
    (2, 2.0, 4.0),
    (3, 4.0, 8.0),
    (4, 8.0, 16.0),
    (5, 16.0, 32.0),
    (6, 30.0, 60.0),
    (7, 30.0, 60.0),
    (50, 30.0, 60.0),
    (10**6, 30.0, 60.0),
]


@pytest.mark.parametrize(("attempt", "lowest", "highest"), BOUNDS)
def test_backoff_range_per_attempt(attempt: int, lowest: float, highest: float) -> None:
    """backoff = min(60, 2**attempt) * U(0.5, 1.0): the jitter ends hit these bounds exactly."""
    policy = Policy()
    assert (lowest, highest) == (policy.backoff(attempt, low), policy.backoff(attempt, high))


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize(("attempt", "lowest", "highest"), BOUNDS)
def test_backoff_random_draws_stay_in_range(attempt: int, lowest: float, highest: float, seed: int) -> None:
    """Seeded random draws stay inside the range, and never overflow for huge attempts."""
    assert lowest <= Policy().backoff(attempt, random.Random(seed)) <= highest


@pytest.mark.parametrize("attempt", [50, 1000, 10**6])
def test_backoff_is_capped_through_decide_without_overflow(attempt: int) -> None:
    """A policy that allows many retries still caps the wait at backoff_max (no OverflowError)."""
    policy = Policy(max_retries=1000, max_elapsed=10**6)
    if attempt < policy.max_retries:
        assert (Verdict.RETRY, 60.0, "backoff") == summary(policy.decide(503, attempt=attempt, rng=high))
    else:
        assert Verdict.STOP == policy.decide(503, attempt=attempt, rng=high).verdict
    assert 60.0 == policy.backoff(attempt, high)


def test_schedule_with_rng_at_zero_is_half_the_doubling() -> None:
    """rng=lambda: 0.0 gives base * 2**n * 0.5 for every retry the cap allows."""
    schedule = [Policy().decide(503, attempt=n, rng=low).wait for n in range(6)]
    assert [0.5, 1.0, 2.0, 4.0, 8.0, 16.0] == schedule


def test_schedule_with_seeded_random_is_exact() -> None:
    """random.Random(7) gives the formula's draws, one per retry, in order."""
    draws = random.Random(7)
    expected = [min(60.0, 1.0 * 2**n) * draws.uniform(0.5, 1.0) for n in range(6)]
    rng = random.Random(7)
    assert expected == [Policy().decide(429, attempt=n, rng=rng).wait for n in range(6)]


def test_schedule_with_seeded_random_is_reproducible() -> None:
    """The same seed gives the same schedule twice."""

    def run() -> List[Optional[float]]:
        rng = random.Random(7)
        return [Policy().decide(503, attempt=n, rng=rng).wait for n in range(6)]

    assert run() == run()


def test_backoff_base_and_max_shape_the_schedule() -> None:
    """backoff_base scales the doubling and backoff_max caps it."""
    policy = Policy(backoff_base=0.25, backoff_max=1.5, max_retries=10)
    assert [0.25, 0.5, 1.0, 1.5, 1.5] == [policy.backoff(n, high) for n in range(5)]


@pytest.mark.parametrize("attempt", [0, 1, 3, 5])
def test_full_jitter_spans_zero_to_the_ceiling(attempt: int) -> None:
    """jitter=(0.0, 1.0) is full jitter: anything from 0 to base * 2**attempt."""
    policy = Policy(jitter=(0.0, 1.0))
    assert (0.0, float(2**attempt)) == (policy.backoff(attempt, low), policy.backoff(attempt, high))
    assert (Verdict.RETRY, 0.0, "backoff") == summary(policy.decide(503, attempt=attempt, rng=low))


def test_rng_callable_interpolates_the_jitter_range() -> None:
    """A callable rng u maps to low + (high - low) * u."""
    assert 0.75 == Policy().backoff(0, lambda: 0.5)


# --- Retry-After forms --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [
        ("12", 12.0),
        ("0", 0.0),
        ("1.5", 1.5),
        (" 10 ", 10.0),
        (b"7", 7.0),
        (3, 3.0),
        (2.5, 2.5),
        ("-5", 0.0),
        (-5.0, 0.0),
        ("Wed, 21 Oct 2015 07:27:00 GMT", 0.0),
        ("Wed, 21 Oct 2015 07:28:30 GMT", 30.0),
        ("Wed, 21 Oct 2015 08:28:00 +0100", 0.0),
    ],
)
def test_retry_after_forms_set_the_wait(retry_after: Any, expected: float) -> None:
    """Delta seconds, decimals, padding, bytes, numbers and HTTP-dates (past means 0) set the wait."""
    decision = Policy().decide(429, None, retry_after, attempt=3, rng=low, now=clock)
    assert (Verdict.RETRY, expected, "retry_after") == summary(decision)


@pytest.mark.parametrize(
    "retry_after", ["soon", "", "   ", "1m0s", "1e999", "inf", "nan", "0x10", float("nan")]
)
def test_garbage_retry_after_falls_back_to_backoff(retry_after: Any) -> None:
    """A Retry-After that is not delta seconds or a date is ignored: the backoff applies."""
    decision = Policy().decide(429, None, retry_after, attempt=1, rng=low, now=clock)
    assert (Verdict.RETRY, 1.0, "backoff") == summary(decision)


@pytest.mark.parametrize(
    "retry_after", ["9" * 20, "Fri, 31 Dec 9999 23:59:59 GMT", float("inf"), 10.0**300, RETRY_AFTER_CEILING]
)
def test_absurd_retry_after_stops_and_says_why(retry_after: Any) -> None:
    """A Retry-After far past the budget is not started: STOP naming what was asked and what was left."""
    decision = Policy().decide(429, "queue_full", retry_after, elapsed=30.0, now=clock)
    assert (Verdict.STOP, None, None) == summary(decision)
    assert "server asked to wait" in decision.reason
    assert "only 90.0s of the 120.0s budget is left" in decision.reason


def test_twenty_digit_retry_after_reason_is_exact() -> None:
    """The STOP reason quotes the (clamped) request and the remaining budget."""
    decision = Policy().decide(429, "queue_full", "9" * 20, elapsed=30.0)
    expected = (
        "429 queue_full: server asked to wait 1e+09s (retry_after) "
        "but only 90.0s of the 120.0s budget is left"
    )
    assert expected == decision.reason


# --- the elapsed budget -------------------------------------------------------------------


def test_retry_after_ending_past_the_budget_stops() -> None:
    """Retry-After 100 with 30 s elapsed of 120 would end at 130 s: STOP."""
    decision = Policy().decide(503, None, "100", elapsed=30.0)
    assert Verdict.STOP == decision.verdict
    assert "server asked to wait 100.0s" in decision.reason
    assert "budget" in decision.reason


def test_retry_after_ending_exactly_at_the_budget_is_allowed() -> None:
    """Retry-After 90 with 30 s elapsed of 120 ends exactly at the limit: RETRY."""
    assert (Verdict.RETRY, 90.0, "retry_after") == summary(Policy().decide(503, None, "90", elapsed=30.0))


def test_backoff_ending_past_the_budget_stops() -> None:
    """A backoff wait that would cross max_elapsed stops with a reason naming the budget."""
    decision = Policy(max_elapsed=10.0).decide(503, None, attempt=4, elapsed=2.5, rng=low)
    assert (Verdict.STOP, None, None) == summary(decision)
    assert "503: next wait is 8.0s (backoff) but only 7.5s of the 10.0s budget is left" == decision.reason


def test_backoff_ending_exactly_at_the_budget_is_allowed() -> None:
    """elapsed + wait == max_elapsed is still inside the budget."""
    decision = Policy(max_elapsed=10.0).decide(503, None, attempt=4, elapsed=2.0, rng=low)
    assert (Verdict.RETRY, 8.0, "backoff") == summary(decision)


def test_fixed_wait_ending_past_the_budget_stops() -> None:
    """The in-use wait is bounded by the budget too."""
    decision = Policy().decide(409, IN_USE, elapsed=119.5)
    assert Verdict.STOP == decision.verdict
    assert "only 0.5s of the 120.0s budget is left" in decision.reason


def test_elapsed_past_the_budget_reports_nothing_left() -> None:
    """Past the budget already, any wait stops and the reason says 0.0s is left (never negative)."""
    decision = Policy().decide(503, None, "1", elapsed=500.0)
    assert Verdict.STOP == decision.verdict
    assert "only 0.0s of the 120.0s budget is left" in decision.reason


# --- Decision -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code", "retry_after", "source"),
    [
        (429, None, "3", "retry_after"),
        (429, None, None, "backoff"),
        (409, IN_USE, None, "fixed"),
        (409, IN_USE, "5", "retry_after"),
    ],
)
def test_decision_source_names_where_the_wait_came_from(
    status: int, code: Optional[str], retry_after: Optional[str], source: str
) -> None:
    """source is "retry_after", "backoff" or "fixed"."""
    assert source == Policy().decide(status, code, retry_after, rng=low).source


def test_decision_retry_property() -> None:
    """Decision.retry is True for RETRY only."""
    assert [True, False, False, False, False] == [Decision(v).retry for v in Verdict]


def test_verdict_and_outcome_values_are_strings() -> None:
    """Verdicts and outcomes print as their documented string values."""
    assert ["retry", "fix", "no_retry", "stop", "poll"] == [str(v) for v in Verdict]
    assert ["ok", "retried_ok", "gave_up", "fix", "no_retry", "poll"] == [str(o) for o in Outcome]
    assert "retry" == Verdict.RETRY


# --- transport errors ---------------------------------------------------------------------


@pytest.mark.parametrize("replay_safe", [True, False])
def test_connect_failure_is_retried_for_any_request(replay_safe: bool) -> None:
    """A connection never made is safe to retry, replay-safe or not."""
    decision = Policy().decide_error("connect", attempt=2, replay_safe=replay_safe, rng=low)
    assert (Verdict.RETRY, 2.0, "backoff") == summary(decision)


def test_read_failure_is_retried_when_replay_safe() -> None:
    """A failure after sending is retried only when the request may be sent twice."""
    decision = Policy().decide_error("read", attempt=1, replay_safe=True, rng=low)
    assert (Verdict.RETRY, 1.0, "backoff") == summary(decision)


def test_read_failure_is_not_retried_when_not_replay_safe() -> None:
    """A failure after sending a non-replay-safe request is never resent."""
    decision = Policy().decide_error("read", replay_safe=False)
    assert (Verdict.NO_RETRY, None, None) == summary(decision)
    assert "not replay-safe" in decision.reason


@pytest.mark.parametrize("kind", ["other", "ssl", "", "CONNECT"])
def test_other_transport_errors_are_not_retried(kind: str) -> None:
    """Any other transport failure is not something a retry fixes."""
    assert Verdict.NO_RETRY == Policy().decide_error(kind).verdict


@pytest.mark.parametrize("kind", ["connect", "read"])
def test_transport_retries_stop_at_the_attempt_cap(kind: str) -> None:
    """Transport retries count against the same attempt cap."""
    decision = Policy().decide_error(kind, attempt=6)
    assert Verdict.STOP == decision.verdict
    assert "attempt cap" in decision.reason


@pytest.mark.parametrize("kind", ["connect", "read"])
def test_transport_retries_respect_the_deadline(kind: str) -> None:
    """A transport backoff that would cross max_elapsed stops; exactly at the limit retries."""
    policy = Policy(max_elapsed=10.0)
    assert Verdict.STOP == policy.decide_error(kind, attempt=3, elapsed=6.5, rng=low).verdict
    assert (Verdict.RETRY, 4.0, "backoff") == summary(
        policy.decide_error(kind, attempt=3, elapsed=6.0, rng=low)
    )


# --- custom rules -------------------------------------------------------------------------


def test_custom_rules_replace_the_table() -> None:
    """User rows are the whole table: unlisted statuses fall to NO_RETRY."""
    policy = Policy(rules=[Rule(500, ANY, Verdict.RETRY)])
    assert (Verdict.RETRY, 0.5, "backoff") == summary(policy.decide(500, rng=low))
    assert Verdict.NO_RETRY == policy.decide(429).verdict


def test_custom_rules_first_match_wins() -> None:
    """A specific row listed before a catch-all row wins, and vice versa."""
    specific_first = Policy(rules=[Rule(429, "queue_full", Verdict.FIX), Rule(429, ANY, Verdict.RETRY)])
    any_first = Policy(rules=[Rule(429, ANY, Verdict.RETRY), Rule(429, "queue_full", Verdict.FIX)])
    assert [Verdict.FIX, Verdict.RETRY] == [
        specific_first.decide(429, c).verdict for c in ("queue_full", "x")
    ]
    assert [Verdict.RETRY, Verdict.RETRY] == [any_first.decide(429, c).verdict for c in ("queue_full", "x")]


def test_custom_rules_accept_tuples() -> None:
    """Rows may be (status, code, verdict[, wait]) tuples; they become Rule objects in a tuple."""
    policy = Policy(rules=[(500, None, "retry", 2), (418, "teapot", Verdict.FIX)])
    assert (Rule(500, ANY, Verdict.RETRY, 2.0), Rule(418, "teapot", Verdict.FIX)) == policy.rules
    assert all(isinstance(rule, Rule) for rule in policy.rules)


def test_custom_fixed_wait_row_and_larger_retry_after() -> None:
    """A fixed-wait row waits its seconds unless Retry-After asks for more."""
    policy = Policy(rules=[(500, None, "retry", 2.0)])
    assert (Verdict.RETRY, 2.0, "fixed") == summary(policy.decide(500))
    assert (Verdict.RETRY, 2.0, "fixed") == summary(policy.decide(500, None, "1"))
    assert (Verdict.RETRY, 5.0, "retry_after") == summary(policy.decide(500, None, "5"))


def test_custom_in_use_wait_row() -> None:
    """A user row with IN_USE_WAIT uses the policy's in_use_wait."""
    policy = Policy(rules=[Rule(423, ANY, Verdict.RETRY, IN_USE_WAIT)], in_use_wait=0.25)
    assert (Verdict.RETRY, 0.25, "fixed") == summary(policy.decide(423, "locked"))


def test_rule_normalises_verdict_and_wait() -> None:
    """Rule converts a verdict string to Verdict and an int wait to float."""
    rule = Rule(429, ANY, "retry", 3)  # type: ignore[arg-type]
    assert (Verdict.RETRY, 3.0) == (rule.verdict, rule.wait)
    assert isinstance(rule.wait, float)


@pytest.mark.parametrize(
    ("rule", "status", "code", "expected"),
    [
        (Rule(409, ANY, Verdict.FIX), 409, None, True),
        (Rule(409, ANY, Verdict.FIX), 409, "x", True),
        (Rule(409, "x", Verdict.FIX), 409, "x", True),
        (Rule(409, "x", Verdict.FIX), 409, "y", False),
        (Rule(409, "x", Verdict.FIX), 409, None, False),
        (Rule(409, ANY, Verdict.FIX), 410, None, False),
    ],
)
def test_rule_matches_status_and_code(rule: Rule, status: int, code: Optional[str], expected: bool) -> None:
    """A row matches its status and its code; ANY matches any code or none."""
    assert expected == rule.matches(status, code)


def test_the_code_any_as_the_table_prints_it_means_any() -> None:
    """``RULES: [(429, "any", "retry")]``, spelt as ``python -m sume_urllib3 table`` prints ANY,
    is ANY (it matched only the literal code "any"), and the table prints it back the same."""
    policy = Policy(rules=[(429, "any", "retry"), (503, "ANY", "retry")])

    assert (ANY, ANY) == (policy.rules[0].code, policy.rules[1].code)
    assert Verdict.RETRY is policy.decide(429, "rate_limit_exceeded").verdict
    assert Verdict.RETRY is policy.decide(503, None).verdict
    assert Rule(429, "any", Verdict.RETRY) == Rule(429, ANY, Verdict.RETRY)
    assert "429     any   retry" in render_table(policy)


def test_a_rule_with_the_code_any_retries_on_a_real_server(fake: FakeSume) -> None:
    """On loopback: a 429 rate_limit_exceeded under ``(429, "any", "retry")`` is retried."""
    fake.script("POST", "/v1/avatars", Reply.error(429, "rate_limit_exceeded", retry_after=0), Reply(201))
    policy = Policy(rules=[(429, "any", "retry")])

    with no_sleep(), SumeSession("sk_test_any", base_url=fake.url + "/v1", policy=policy) as session:
        response = session.post("avatars", json={"name": "Ada"})

    assert (201, 2) == (response.status_code, response.sume.attempts)  # type: ignore[attr-defined]


# --- Policy validation --------------------------------------------------------------------

NUMERIC_FIELDS = ["max_retries", "max_elapsed", "backoff_base", "backoff_max", "in_use_wait", "peek_limit"]


@pytest.mark.parametrize(
    "value", [-1, -0.5, float("nan"), float("inf"), float("-inf"), True, False, "1", None]
)
@pytest.mark.parametrize("field", NUMERIC_FIELDS)
def test_bad_numbers_raise_configuration_error_naming_the_field(field: str, value: Any) -> None:
    """Negative, NaN, infinite, bool, str and None values are rejected, naming the field."""
    with pytest.raises(ConfigurationError, match=field):
        Policy(**{field: value})


@pytest.mark.parametrize("field", ["max_retries", "peek_limit"])
def test_count_fields_must_be_ints(field: str) -> None:
    """max_retries and peek_limit are counts: a float is rejected."""
    with pytest.raises(ConfigurationError, match=field):
        Policy(**{field: 2.0})


def test_max_elapsed_must_be_positive() -> None:
    """A zero time budget could never retry: rejected."""
    with pytest.raises(ConfigurationError, match="max_elapsed"):
        Policy(max_elapsed=0)


def test_configuration_error_is_a_value_error() -> None:
    """ConfigurationError can be caught as ValueError."""
    with pytest.raises(ValueError, match="max_retries"):
        Policy(max_retries=-1)


def test_zero_is_valid_where_it_makes_sense() -> None:
    """max_retries, backoff_base, backoff_max, in_use_wait and peek_limit may be 0."""
    policy = Policy(max_retries=0, backoff_base=0, backoff_max=0, in_use_wait=0, peek_limit=0)
    assert (0, 0.0, 0.0, 0.0, 0) == (
        policy.max_retries,
        policy.backoff_base,
        policy.backoff_max,
        policy.in_use_wait,
        policy.peek_limit,
    )


def test_int_seconds_become_floats() -> None:
    """Seconds given as ints are stored as floats."""
    policy = Policy(max_elapsed=60, backoff_base=2, backoff_max=30, in_use_wait=3)
    assert [float] * 4 == [
        type(v) for v in (policy.max_elapsed, policy.backoff_base, policy.backoff_max, policy.in_use_wait)
    ]


@pytest.mark.parametrize(
    "jitter",
    [
        (),
        (0.5,),
        (1.0, 0.5),
        (0.0, 0.0),
        "0.5,1.0",
        "ab",
        (0.1, 0.5, 1.0),
        (-0.1, 1.0),
        (float("nan"), 1.0),
        (0.5, float("inf")),
        ("0.5", 1.0),
        (True, 1.0),
        None,
        0.5,
        {0.5, 1.0},
    ],
)
def test_bad_jitter_is_rejected(jitter: Any) -> None:
    """jitter must be a non-empty, non-inverted (low, high) pair of finite numbers >= 0."""
    with pytest.raises(ConfigurationError, match="jitter"):
        Policy(jitter=jitter)


def test_jitter_list_becomes_tuple() -> None:
    """A [low, high] list is accepted and stored as a tuple of floats."""
    assert (0.0, 1.0) == Policy(jitter=[0, 1]).jitter


@pytest.mark.parametrize("rules", ["429", b"429", None, 429, {"status": 429}])
def test_rules_must_be_a_sequence(rules: Any) -> None:
    """rules given as a str, bytes, None, int or dict is rejected, naming rules."""
    with pytest.raises(ConfigurationError, match="rules"):
        Policy(rules=rules)


@pytest.mark.parametrize(
    "row",
    [
        (429,),
        (429, None),
        (429, None, "retry", None, "extra"),
        "429",
        429,
        None,
        ("429", None, "retry"),
        (99, None, "retry"),
        (600, None, "retry"),
        (True, None, "retry"),
        (429, 5, "retry"),
        (429, None, "maybe"),
        (429, None, "RETRY"),
        (429, None, "retry", -1),
        (429, None, "retry", float("nan")),
        (429, None, "retry", float("inf")),
        (429, None, "retry", "soon"),
        (429, None, "retry", True),
    ],
)
def test_bad_rule_rows_are_rejected(row: Any) -> None:
    """A row with the wrong shape, status, code, verdict or wait is rejected, naming rules."""
    with pytest.raises(ConfigurationError, match="rules"):
        Policy(rules=[Rule(503, ANY, Verdict.RETRY), row])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"status": 99, "code": None, "verdict": Verdict.RETRY},
        {"status": 429.0, "code": None, "verdict": Verdict.RETRY},
        {"status": 429, "code": b"x", "verdict": Verdict.RETRY},
        {"status": 429, "code": None, "verdict": "later"},
        {"status": 429, "code": None, "verdict": ["retry"]},
        {"status": 429, "code": None, "verdict": Verdict.RETRY, "wait": -0.1},
        {"status": 429, "code": None, "verdict": Verdict.RETRY, "wait": "in-use"},
    ],
)
def test_bad_rule_objects_are_rejected(kwargs: Any) -> None:
    """Rule validates itself: bad status, code, verdict or wait raise ConfigurationError."""
    with pytest.raises(ConfigurationError, match="rules"):
        Rule(**kwargs)


def test_trust_body_must_be_a_bool() -> None:
    """trust_body="yes" is rejected, naming the field."""
    with pytest.raises(ConfigurationError, match="trust_body"):
        Policy(trust_body="yes")  # type: ignore[arg-type]


def test_policy_is_frozen() -> None:
    """A policy cannot be changed in place."""
    policy = Policy()
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.max_retries = 3  # type: ignore[misc]


def test_rule_is_frozen() -> None:
    """A rule cannot be changed in place."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_RULES[0].status = 500  # type: ignore[misc]


def test_replace_returns_a_changed_copy() -> None:
    """replace() gives a new validated policy and leaves the original alone."""
    policy = Policy()
    changed = policy.replace(max_retries=3, jitter=[0, 1])
    assert (3, (0.0, 1.0)) == (changed.max_retries, changed.jitter)
    assert (6, (0.5, 1.0)) == (policy.max_retries, policy.jitter)


@pytest.mark.parametrize(
    ("field", "value"), [("max_retries", -1), ("max_elapsed", 0), ("jitter", (1, 0)), ("rules", "429")]
)
def test_replace_validates_again(field: str, value: Any) -> None:
    """replace() with a bad value raises ConfigurationError naming the field."""
    with pytest.raises(ConfigurationError, match=field):
        Policy().replace(**{field: value})


def test_policies_with_equal_fields_are_equal() -> None:
    """Policies compare by value, so configuration can be compared and cached."""
    assert Policy(max_retries=3) == Policy().replace(max_retries=3)
    assert hash(Policy(max_retries=3)) == hash(Policy().replace(max_retries=3))


# --- properties ---------------------------------------------------------------------------

CODES = st.one_of(
    st.none(),
    st.sampled_from(
        [IN_USE, "idempotency_conflict", "queue_full", "rate_limit_exceeded", "insufficient_credits"]
    ),
    st.text(max_size=30),
)
HINTS = st.one_of(
    st.none(),
    st.builds(
        ErrorEnvelope,
        code=st.one_of(st.none(), st.text(max_size=20)),
        message=st.one_of(st.none(), st.text(max_size=20)),
        request_id=st.one_of(st.none(), st.text(max_size=20)),
        retryable=st.one_of(st.none(), st.booleans()),
        next_action=st.one_of(
            st.none(), st.sampled_from(["poll", "poll_job", "POLL_STATUS", "resubmit"]), st.text(max_size=20)
        ),
    ),
)
HTTP_DATES = st.integers(0, 2**33).map(lambda stamp: email.utils.formatdate(stamp, usegmt=True))
RETRY_AFTERS = st.one_of(
    st.none(),
    st.text(max_size=40),
    st.binary(max_size=40),
    st.floats(),
    st.integers(-(10**30), 10**30),
    st.integers(-(10**30), 10**30).map(str),
    st.decimals(allow_nan=False, allow_infinity=False).map(str),
    HTTP_DATES,
)
ELAPSED = st.floats(min_value=0.0, allow_nan=False, allow_infinity=True)
ATTEMPTS = st.integers(0, 10**6)
SEEDS = st.integers(0, 2**32)
FIX_ROWS = st.one_of(
    st.tuples(st.sampled_from([400, 401, 402, 404]), CODES),
    st.tuples(st.just(409), CODES.filter(lambda c: c != IN_USE)),
)
POLICIES = st.one_of(
    st.just(Policy()),
    st.builds(
        Policy,
        max_retries=st.integers(0, 1000),
        max_elapsed=st.floats(min_value=1e-3, max_value=1e9),
        backoff_base=st.floats(min_value=0.0, max_value=1e6),
        backoff_max=st.floats(min_value=0.0, max_value=1e6),
        # The cap property below needs jitter <= 1; above 1 the formula itself exceeds backoff_max.
        jitter=st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 1.0))
        .map(lambda pair: (min(pair), max(pair)))
        .filter(lambda pair: pair[1] > 0),
        in_use_wait=st.floats(min_value=0.0, max_value=1e6),
        trust_body=st.booleans(),
    ),
)
PROPERTY = settings(max_examples=300, deadline=None)


@PROPERTY
@given(FIX_ROWS, RETRY_AFTERS, ATTEMPTS, ELAPSED, HINTS, SEEDS)
def test_property_fix_rows_are_never_retried(
    row: Tuple[int, Optional[str]], retry_after: Any, attempt: int, elapsed: float, hints: Any, seed: int
) -> None:
    """A FIX row is never retried, whatever Retry-After, attempt, elapsed or body hints say."""
    status, code = row
    decision = Policy().decide(status, code, retry_after, attempt, elapsed, hints, rng=random.Random(seed))
    assert decision.verdict in (Verdict.FIX, Verdict.POLL)
    assert not decision.retry


@pytest.mark.slow  # real time: runs in CI's slow step
@PROPERTY
@given(POLICIES, st.integers(100, 599), CODES, RETRY_AFTERS, ATTEMPTS, ELAPSED, HINTS, SEEDS)
def test_property_only_retry_after_or_fixed_exceeds_backoff_max(
    policy: Policy,
    status: int,
    code: Any,
    retry_after: Any,
    attempt: int,
    elapsed: float,
    hints: Any,
    seed: int,
) -> None:
    """A wait above backoff_max can only come from Retry-After or a fixed row."""
    decision = policy.decide(status, code, retry_after, attempt, elapsed, hints, rng=random.Random(seed))
    if decision.retry and decision.source == "backoff":
        assert decision.wait is not None
        assert decision.wait <= policy.backoff_max


@pytest.mark.slow  # real time: runs in CI's slow step
@PROPERTY
@given(POLICIES, st.integers(100, 599), CODES, RETRY_AFTERS, ATTEMPTS, ELAPSED, HINTS, SEEDS)
def test_property_retry_never_crosses_max_elapsed(
    policy: Policy,
    status: int,
    code: Any,
    retry_after: Any,
    attempt: int,
    elapsed: float,
    hints: Any,
    seed: int,
) -> None:
    """A RETRY decision always ends within the elapsed budget."""
    decision = policy.decide(status, code, retry_after, attempt, elapsed, hints, rng=random.Random(seed))
    if decision.retry:
        assert decision.wait is not None
        assert elapsed + decision.wait <= policy.max_elapsed


@PROPERTY
@given(POLICIES, st.sampled_from(["connect", "read", "other"]), ATTEMPTS, ELAPSED, st.booleans(), SEEDS)
def test_property_transport_retry_never_crosses_max_elapsed(
    policy: Policy, kind: str, attempt: int, elapsed: float, replay_safe: bool, seed: int
) -> None:
    """A transport RETRY stays within the attempt cap and the elapsed budget."""
    decision = policy.decide_error(kind, attempt, elapsed, replay_safe=replay_safe, rng=random.Random(seed))
    if decision.retry:
        assert decision.wait is not None
        assert attempt < policy.max_retries
        assert elapsed + decision.wait <= policy.max_elapsed


@PROPERTY
@given(st.integers(100, 599), CODES, RETRY_AFTERS, ATTEMPTS, ELAPSED, HINTS, SEEDS)
def test_property_decide_never_raises(
    status: int, code: Any, retry_after: Any, attempt: int, elapsed: float, hints: Any, seed: int
) -> None:
    """decide returns a well-formed Decision for any input: a finite wait >= 0 exactly when retrying."""
    decision = Policy().decide(status, code, retry_after, attempt, elapsed, hints, rng=random.Random(seed))
    assert isinstance(decision.verdict, Verdict)
    assert isinstance(decision.reason, str)
    assert decision.reason
    if decision.retry:
        assert decision.wait is not None
        assert math.isfinite(decision.wait)
        assert decision.wait >= 0.0
        assert decision.source in ("retry_after", "backoff", "fixed")
    else:
        assert (None, None) == (decision.wait, decision.source)


@PROPERTY
@given(st.integers(100, 599), CODES, RETRY_AFTERS, st.integers(-5, 10**6))
def test_property_default_wait_never_raises(status: int, code: Any, retry_after: Any, attempt: int) -> None:
    """The default wait is None or a wait within the default 120 s budget for any input."""
    wait = default_wait(status, code, retry_after, attempt)
    assert wait is None or 0.0 <= wait <= 120.0
    if attempt >= 6:
        assert wait is None


# -- Retry-After jitter (opt-in) -----------------------------------------------------


def test_retry_after_is_exact_by_default() -> None:
    """Without retry_after_jitter the server's Retry-After is waited exactly."""
    assert 12.0 == Policy().decide(429, "queue_full", "12", 1, rng=lambda: 0.99).wait


@pytest.mark.parametrize(("draw", "expected"), [(0.0, 10.0), (0.5, 12.5), (1.0, 15.0)])
def test_retry_after_jitter_only_ever_adds(draw: float, expected: float) -> None:
    """retry_after_jitter=0.5 waits Retry-After * (1 + U(0, 0.5)): never less than asked."""
    decision = Policy(retry_after_jitter=0.5).decide(503, None, "10", 0, rng=lambda: draw)

    assert (expected, "retry_after") == (decision.wait, decision.source)


def test_retry_after_jitter_still_respects_the_deadline() -> None:
    """A jittered wait that would cross max_elapsed stops instead."""
    decision = Policy(retry_after_jitter=1.0, max_elapsed=15.0).decide(429, None, "10", 0, rng=lambda: 0.9)

    assert Verdict.STOP == decision.verdict


@pytest.mark.parametrize("value", [-0.1, 1.5, float("nan"), "0.5", True])
def test_retry_after_jitter_is_validated(value: object) -> None:
    """retry_after_jitter must be a number in [0, 1]; the error names the field."""
    with pytest.raises(ConfigurationError, match="retry_after_jitter"):
        Policy(retry_after_jitter=value)  # type: ignore[arg-type]


def test_replace_refuses_an_unknown_field() -> None:
    """Policy.replace(bogus=1) is a ConfigurationError naming the field, like the constructor."""
    with pytest.raises(ConfigurationError, match="bogus"):
        Policy().replace(bogus=1)


# --- retry_after_spread: lone clients stop waking in step -----------------------------------


@pytest.mark.parametrize(
    ("attempt", "draw", "expected"), [(0, 0.0, 1.0), (0, 1.0, 5.0), (2, 0.5, 9.0), (5, 1.0, 61.0)]
)
def test_retry_after_spread_adds_a_window_that_doubles_per_attempt(
    attempt: int, draw: float, expected: float
) -> None:
    """retry_after_spread=4 waits Retry-After + U(0, min(backoff_max, 4 * 2**attempt))."""
    decision = Policy(retry_after_spread=4.0, max_elapsed=1000.0).decide(
        429, None, "1", attempt, rng=lambda: draw
    )

    assert (Verdict.RETRY, "retry_after", expected) == (decision.verdict, decision.source, decision.wait)


def test_retry_after_spread_leaves_fixed_and_backoff_waits_alone() -> None:
    """Only a server's Retry-After is spread: in_use_wait and the backoff are as without it."""
    spread = Policy(retry_after_spread=4.0)

    assert 1.0 == spread.decide(409, "idempotency_key_in_use", None, 0, rng=lambda: 1.0).wait
    assert (
        Policy().decide(503, None, None, 1, rng=lambda: 0.5).wait
        == spread.decide(503, None, None, 1, rng=lambda: 0.5).wait
    )


def test_retry_after_spread_still_respects_the_deadline() -> None:
    """A spread wait that would end past max_elapsed is not started."""
    decision = Policy(retry_after_spread=4.0, max_elapsed=3.0).decide(429, None, "2", 0, rng=lambda: 1.0)

    assert Verdict.STOP is decision.verdict


def test_retry_after_spread_is_checked() -> None:
    """A negative or non-number spread is a ConfigurationError naming the field."""
    with pytest.raises(ConfigurationError, match="retry_after_spread"):
        Policy(retry_after_spread=-1.0)
