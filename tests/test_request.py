"""RequestContext: finish (the one place attempts become a SumeRecord, tested as a pure function),
the fleet's turns, and join (the key, and whether the body can be sent again)."""

from __future__ import annotations

import dataclasses
import io
import math
import os
import pickle
import random
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest
from requests.structures import CaseInsensitiveDict
from urllib3._collections import HTTPHeaderDict

from sume_urllib3 import SumeAdapter
from sume_urllib3._idempotency import validate_idempotency_key
from sume_urllib3._policy import Decision, Policy, Verdict
from sume_urllib3._record import Outcome, SumeRecord
from sume_urllib3._request import Attempt, RequestContext, Turn
from sume_urllib3.pacing import LocalFleet, RetryBudget

from .conftest import VirtualTime

START = 100.0
KEY = "0b5f6c3e-7d1a-4c2e-9a55-1f0e2d3c4b5a"
AUTH_HINT = "; the request carried both x-api-key and Authorization: send only one"


def context(hops: int = 1, **fields: Any) -> RequestContext:
    """A context for one POST that was sent ``hops`` times without a retry."""
    ctx = RequestContext(START, method="POST", url="https://api.sume.com/v1/jobs")
    ctx.key = KEY
    ctx.hops = hops
    for name, value in fields.items():
        setattr(ctx, name, value)
    return ctx


def retry(
    wait: float,
    status: Optional[int] = 503,
    code: Optional[str] = "queue_full",
    request_id: Optional[str] = None,
    error: Optional[str] = None,
    at: float = START,
) -> Attempt:
    """A consulted attempt the policy retried after ``wait`` seconds."""
    decision = Decision(Verdict.RETRY, wait=wait, source="backoff", reason=f"retry in {wait}s")
    return Attempt(status, code, request_id, None, decision, error=error, at=at)


def final(
    verdict: Verdict,
    reason: str,
    status: Optional[int] = 503,
    code: Optional[str] = "queue_full",
    request_id: Optional[str] = None,
    next_action: Optional[str] = None,
    error: Optional[str] = None,
    at: float = START,
    retry_in: Optional[float] = None,
) -> Attempt:
    """A consulted attempt with a verdict that ends the request."""
    decision = Decision(verdict, reason=reason)
    return Attempt(status, code, request_id, next_action, decision, error=error, at=at, retry_in=retry_in)


def headers(**values: str) -> CaseInsensitiveDict[str]:
    """Response headers as requests gives them (case-insensitive); ``x_sume_request_id=`` style names."""
    return CaseInsensitiveDict({name.replace("_", "-").title(): value for name, value in values.items()})


def fields_of(record: SumeRecord) -> Dict[str, Any]:
    """Every field of a record by name."""
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}


# --- every outcome ---------------------------------------------------------------------------


def test_ok_on_the_first_attempt() -> None:
    """A 2xx with nothing consulted is "ok": one attempt, no waits, the id from the headers."""
    record = context().finish(200, headers(x_sume_request_id="req_1"), START + 0.25)
    assert fields_of(record) == {
        "idempotency_key": KEY,
        "attempts": 1,
        "outcome": Outcome.OK,
        "status": 200,
        "code": None,
        "request_id": "req_1",
        "request_ids": ("req_1",),
        "waits": (),
        "elapsed": 0.25,
        "reason": "succeeded",
        "next_action": None,
        "method": "POST",
        "url": "https://api.sume.com/v1/jobs",
        "paced": 0.0,
        "fleet_fallbacks": 0,
        "fleet_refused": False,
        "retry_in": None,
        "error": None,
    }


def test_retried_ok_after_retries() -> None:
    """A 2xx after retries is "retried_ok": the waits in order, one attempt per retry plus the first."""
    ctx = context()
    ctx.add(retry(1.0, request_id="req_1"))
    ctx.add(retry(2.5, request_id="req_2"))
    record = ctx.finish(201, headers(x_sume_request_id="req_3"), START + 4.0)
    assert record.outcome is Outcome.RETRIED_OK
    assert record.attempts == 3
    assert record.waits == (1.0, 2.5)
    assert record.request_id == "req_3"
    assert record.request_ids == ("req_1", "req_2", "req_3")
    assert record.reason == "succeeded after 2 retries"
    assert record.code is None


def test_retried_ok_after_one_retry_says_retry_in_the_singular() -> None:
    """One retry reads "succeeded after 1 retry"."""
    ctx = context()
    ctx.add(retry(1.0))
    assert ctx.finish(200, None, START + 1.0).reason == "succeeded after 1 retry"


def test_fix_carries_the_consulted_attempt() -> None:
    """A FIX verdict is "fix": code, request id, next action and reason come from that attempt."""
    ctx = context()
    ctx.add(final(Verdict.FIX, "402: pay", status=402, code="insufficient_credits", request_id="req_9",
                  next_action="top_up"))  # fmt: skip
    record = ctx.finish(402, headers(x_sume_request_id="req_other"), START + 0.1)
    assert record.outcome is Outcome.FIX
    assert (record.status, record.code, record.request_id) == (402, "insufficient_credits", "req_9")
    assert record.next_action == "top_up"
    assert record.reason == "402: pay"
    assert record.attempts == 1
    assert record.waits == ()
    assert record.retry_in is None


def test_fix_after_retries_is_still_fix() -> None:
    """A FIX after retries is "fix" whatever came before, and the waits before it are kept."""
    ctx = context()
    ctx.add(retry(0.5, request_id="req_1"))
    ctx.add(final(Verdict.FIX, "400: bad", status=400, code="invalid_request", request_id="req_2"))
    record = ctx.finish(400, None, START + 1.0)
    assert record.outcome is Outcome.FIX
    assert record.attempts == 2
    assert record.waits == (0.5,)
    assert record.request_ids == ("req_1", "req_2")


def test_poll() -> None:
    """A POLL verdict is "poll", with the server's next action."""
    ctx = context()
    ctx.add(final(Verdict.POLL, "409: poll", status=409, code="job_exists", next_action="poll_job"))
    record = ctx.finish(409, None, START)
    assert record.outcome is Outcome.POLL
    assert record.next_action == "poll_job"
    assert record.reason == "409: poll"


def test_no_retry_on_the_first_attempt() -> None:
    """NO_RETRY on the first attempt is "no_retry"."""
    ctx = context()
    ctx.add(final(Verdict.NO_RETRY, "500: not retryable", status=500, code=None))
    record = ctx.finish(500, None, START)
    assert record.outcome is Outcome.NO_RETRY
    assert record.reason == "500: not retryable"
    assert record.attempts == 1


def test_no_retry_after_a_retry_is_gave_up() -> None:
    """NO_RETRY after at least one retry is "gave_up"."""
    ctx = context()
    ctx.add(retry(1.0))
    ctx.add(final(Verdict.NO_RETRY, "503: retryable=false"))
    record = ctx.finish(503, None, START + 1.0)
    assert record.outcome is Outcome.GAVE_UP
    assert record.reason == "503: retryable=false"


def test_gave_up_after_retries() -> None:
    """STOP after retries is "gave_up": every wait, every attempt, the last attempt's code and id."""
    ctx = context()
    ctx.add(retry(1.0, request_id="req_1"))
    ctx.add(retry(2.0, request_id="req_2"))
    ctx.add(final(Verdict.STOP, "503 queue_full: attempt cap reached (2 retries)", request_id="req_3"))
    record = ctx.finish(503, headers(x_sume_request_id="req_3"), START + 3.5)
    assert record.outcome is Outcome.GAVE_UP
    assert record.attempts == 3
    assert record.waits == (1.0, 2.0)
    assert (record.status, record.code, record.request_id) == (503, "queue_full", "req_3")
    assert record.request_ids == ("req_1", "req_2", "req_3")
    assert record.reason == "503 queue_full: attempt cap reached (2 retries)"
    assert record.elapsed == 3.5


def test_stop_on_the_first_attempt_is_gave_up() -> None:
    """STOP is "gave_up" even with no retry before it (a Retry-After past the deadline)."""
    ctx = context()
    ctx.add(final(Verdict.STOP, "429: server asked to wait 300.0s", status=429, code=None))
    assert ctx.finish(429, None, START).outcome is Outcome.GAVE_UP


def test_transport_error_with_nothing_consulted() -> None:
    """A transport error before any response, with no decision, is "no_retry" and says so."""
    record = context().finish(None, None, START + 5.0)
    assert record.outcome is Outcome.NO_RETRY
    assert record.status is None
    assert record.reason == "transport error before any response"
    assert record.attempts == 1
    assert record.request_ids == ()
    assert record.error is None


def test_transport_error_refused_before_any_retry() -> None:
    """A consulted transport error the policy will not retry is "no_retry" and names the error class."""
    ctx = context()
    ctx.add(final(Verdict.NO_RETRY, "connection failed after sending; not replay-safe", status=None,
                  code=None, error="ReadTimeoutError"))  # fmt: skip
    record = ctx.finish(None, None, START + 60.0)
    assert record.outcome is Outcome.NO_RETRY
    assert record.error == "ReadTimeoutError"
    assert record.reason == "connection failed after sending; not replay-safe"
    assert record.attempts == 1


def test_transport_error_after_retries() -> None:
    """A transport error that ends retries is "gave_up", keeps the ids seen before and the error class."""
    ctx = context()
    ctx.add(retry(1.0, request_id="req_1"))
    ctx.add(retry(2.0, status=None, code=None, error="NewConnectionError"))
    ctx.add(final(Verdict.STOP, "connection failed before sending: attempt cap reached", status=None,
                  code=None, error="NewConnectionError"))  # fmt: skip
    record = ctx.finish(None, None, START + 3.0)
    assert record.outcome is Outcome.GAVE_UP
    assert record.status is None
    assert record.code is None
    assert record.request_id is None
    assert record.request_ids == ("req_1",)
    assert record.error == "NewConnectionError"
    assert record.attempts == 3
    assert record.waits == (1.0, 2.0)


def test_error_of_an_earlier_attempt_is_kept_on_a_later_success() -> None:
    """The last transport error is named even when a retry then succeeded."""
    ctx = context()
    ctx.add(retry(1.0, status=None, code=None, error="ConnectTimeoutError"))
    record = ctx.finish(200, None, START + 1.0)
    assert record.outcome is Outcome.RETRIED_OK
    assert record.error == "ConnectTimeoutError"


def test_body_failed_mid_read_on_the_first_attempt() -> None:
    """A 2xx whose body broke is "no_retry", names the error and says the body failed."""
    record = context().finish(200, headers(x_sume_request_id="req_1"), START, error="ProtocolError")
    assert record.outcome is Outcome.NO_RETRY
    assert record.status == 200
    assert record.error == "ProtocolError"
    assert record.reason == "200: the body failed mid-read (ProtocolError)"


def test_body_failed_mid_read_after_a_body_retry() -> None:
    """A body that broke again after a retry is "gave_up", with that retry's wait."""
    ctx = context()
    ctx.add(retry(0.5, status=None, code=None, error="ProtocolError"))
    record = ctx.finish(200, None, START + 1.0, error="IncompleteRead")
    assert record.outcome is Outcome.GAVE_UP
    assert record.attempts == 2
    assert record.waits == (0.5,)
    assert record.error == "IncompleteRead"
    assert record.reason == "200: the body failed mid-read (IncompleteRead)"


def test_error_body_failed_mid_read_keeps_the_consulted_attempt() -> None:
    """An error response whose body broke after the decision keeps that decision's code and id."""
    ctx = context()
    ctx.add(final(Verdict.NO_RETRY, "500: not retryable", status=500, code="internal", request_id="req_5"))
    record = ctx.finish(500, None, START, error="ProtocolError")
    assert record.outcome is Outcome.NO_RETRY
    assert (record.code, record.request_id) == ("internal", "req_5")
    assert record.reason == "500: the body failed mid-read (ProtocolError)"


def test_body_failed_mid_read_keeps_the_request_id_of_its_headers() -> None:
    """The request id of a 2xx whose body broke comes from its headers, as on a whole 2xx."""
    record = context().finish(200, headers(x_sume_request_id="req_1"), START, error="ProtocolError")
    assert record.request_id == "req_1"
    assert record.request_ids == ("req_1",)


def test_unconsulted_error_response_on_the_first_attempt() -> None:
    """A final error response nobody consulted is "no_retry", named by its status, id from its headers."""
    record = context().finish(500, headers(x_request_id="req_9"), START)
    assert record.outcome is Outcome.NO_RETRY
    assert record.reason == "500"
    assert record.code is None
    assert record.request_id == "req_9"
    assert record.request_ids == ("req_9",)


def test_unconsulted_error_response_after_retries() -> None:
    """An unconsulted error after retries (a RETRY decision then a new status) is "gave_up"."""
    ctx = context()
    ctx.add(retry(1.0, request_id="req_1"))
    record = ctx.finish(502, headers(x_sume_request_id="req_2"), START + 1.0)
    assert record.outcome is Outcome.GAVE_UP
    assert record.reason == "502"
    assert record.request_ids == ("req_1", "req_2")


def test_a_retry_decision_is_never_the_final_decision() -> None:
    """When the last consulted attempt was retried, the same status coming back is not that decision."""
    ctx = context()
    ctx.add(retry(1.0, request_id="req_1"))
    record = ctx.finish(503, headers(x_sume_request_id="req_2"), START + 1.0)
    assert record.outcome is Outcome.GAVE_UP
    assert record.code is None
    assert record.reason == "503"
    assert record.request_id == "req_2"


# --- request ids -----------------------------------------------------------------------------


def test_request_ids_in_order_without_the_final_one_twice() -> None:
    """The final consulted attempt's id is not added again from the response headers."""
    ctx = context()
    ctx.add(retry(1.0, request_id="req_1"))
    ctx.add(retry(1.0, request_id=None))
    ctx.add(final(Verdict.STOP, "stop", request_id="req_3"))
    record = ctx.finish(503, headers(x_sume_request_id="req_3"), START)
    assert record.request_ids == ("req_1", "req_3")


def test_success_with_the_same_id_as_the_last_attempt_lists_it_once() -> None:
    """A 2xx repeating the last attempt's id does not list it twice."""
    ctx = context()
    ctx.add(retry(1.0, request_id="req_1"))
    assert ctx.finish(200, headers(x_sume_request_id="req_1"), START).request_ids == ("req_1",)


def test_success_without_an_id_lists_only_the_attempts() -> None:
    """A 2xx without an id header keeps the ids of the attempts and has no request id."""
    ctx = context()
    ctx.add(retry(1.0, request_id="req_1"))
    record = ctx.finish(200, headers(content_type="application/json"), START)
    assert record.request_id is None
    assert record.request_ids == ("req_1",)


def test_x_sume_request_id_wins_over_x_request_id() -> None:
    """x-sume-request-id is preferred to x-request-id."""
    both = headers(x_request_id="generic", x_sume_request_id="sume")
    assert context().finish(200, both, START).request_id == "sume"
    assert context().finish(200, headers(x_request_id="generic"), START).request_id == "generic"


def test_a_blank_x_sume_request_id_falls_back_to_x_request_id() -> None:
    """A blank x-sume-request-id does not hide x-request-id."""
    both = headers(x_sume_request_id="   ", x_request_id="generic")
    assert context().finish(200, both, START).request_id == "generic"


def test_request_id_from_urllib3_headers_and_none() -> None:
    """urllib3's header dict works too; no headers means no id."""
    raw = HTTPHeaderDict({"X-Sume-Request-Id": "req_u3"})
    assert context().finish(200, raw, START).request_id == "req_u3"
    assert context().finish(200, None, START).request_id is None


def test_unprintable_request_id_is_made_safe() -> None:
    """Control characters in a request id become "?", so it cannot forge a log line."""
    record = context().finish(200, headers(x_sume_request_id="req_1\r\nlevel=ERROR\x1b[2J"), START)
    assert record.request_id == "req_1??level=ERROR?[2J"
    assert record.request_id is not None
    assert record.request_id.isprintable()


def test_long_request_id_is_cut() -> None:
    """A request id longer than 200 characters is cut to 200."""
    record = context().finish(200, headers(x_sume_request_id="r" * 5000), START)
    assert record.request_id == "r" * 200


# --- waits, attempts, retry_in, hints ------------------------------------------------------


def test_waits_are_only_those_of_retry_attempts() -> None:
    """Only RETRY decisions contribute waits; a STOP or NO_RETRY adds none."""
    ctx = context()
    ctx.add(retry(1.5))
    ctx.add(final(Verdict.NO_RETRY, "no"))
    ctx.add(retry(0.25))
    ctx.add(final(Verdict.STOP, "stop"))
    assert ctx.retries == 2
    assert ctx.finish(503, None, START).waits == (1.5, 0.25)


def test_attempts_count_retries_and_hops() -> None:
    """attempts = retries + hops: a redirect is one more request sent."""
    ctx = context(hops=2)
    ctx.add(retry(1.0))
    assert ctx.finish(200, None, START).attempts == 3


def test_fleet_refusal_before_sending_is_zero_attempts() -> None:
    """A fleet refusal before anything was sent records 0 attempts, "gave_up" and the fleet's reason."""
    ctx = context(hops=0, fleet_refused=True)
    ctx.add(final(Verdict.STOP, "not sent: the pace would cross the deadline", status=None, code=None))
    record = ctx.finish(None, None, START + 0.01)
    assert record.attempts == 0
    assert record.outcome is Outcome.GAVE_UP
    assert record.reason == "not sent: the pace would cross the deadline"
    assert record.fleet_refused is True
    assert record.waits == ()


def test_retry_in_counts_down_from_the_decision() -> None:
    """retry_in on a give-up is what the decision said minus the time since it was made."""
    ctx = context()
    ctx.add(final(Verdict.STOP, "429: wait 30s", status=429, code=None, at=START + 2.0, retry_in=30.0))
    assert ctx.finish(429, None, START + 12.0).retry_in == 20.0


def test_retry_in_never_goes_below_zero() -> None:
    """A retry_in already passed is 0, never negative."""
    ctx = context()
    ctx.add(final(Verdict.STOP, "429: wait 30s", status=429, code=None, at=START, retry_in=30.0))
    assert ctx.finish(429, None, START + 500.0).retry_in == 0.0


def test_retry_in_only_on_a_give_up() -> None:
    """A FIX that carries a retry_in does not put it on the record."""
    ctx = context()
    ctx.add(final(Verdict.FIX, "402: pay", status=402, code=None, retry_in=30.0))
    assert ctx.finish(402, None, START).retry_in is None


def test_auth_conflict_hint_on_401_only() -> None:
    """The "send only one auth header" hint is added to a 401 and nothing else."""
    ctx = context()
    ctx.add(final(Verdict.FIX, "401: fix", status=401, code="unauthorized"))
    assert ctx.finish(401, None, START, auth_conflict=True).reason == "401: fix" + AUTH_HINT
    assert ctx.finish(401, None, START, auth_conflict=False).reason == "401: fix"
    other = context()
    other.add(final(Verdict.FIX, "403: fix", status=403, code="forbidden"))
    assert other.finish(403, None, START, auth_conflict=True).reason == "403: fix"


def test_pacing_fields_are_carried() -> None:
    """paced, fleet_fallbacks and fleet_refused come from the context as they are."""
    record = context(paced=1.75, fallbacks=2, fleet_refused=False).finish(200, None, START)
    assert (record.paced, record.fleet_fallbacks, record.fleet_refused) == (1.75, 2, False)


def test_elapsed_is_never_negative() -> None:
    """A clock that reads before the start gives elapsed 0."""
    assert context().finish(200, None, START - 1.0).elapsed == 0.0


def test_key_method_and_url_are_the_contexts() -> None:
    """The record names the context's key, method and URL; a request without a key has None."""
    url = "https://api.sume.com/v1/models"
    record = RequestContext(START, method="GET", url=url).finish(200, None, START)
    assert (record.idempotency_key, record.method, record.url) == (None, "GET", url)
    assert record.attempts == 0  # no hop was counted: nothing says it was sent


# --- the record itself -----------------------------------------------------------------------


def test_record_has_every_field_and_equals_its_copy() -> None:
    """The record built without __init__ holds every field, equals a replace() copy and hashes."""
    ctx = context()
    ctx.add(retry(1.0, request_id="req_1"))
    record = ctx.finish(200, headers(x_sume_request_id="req_2"), START + 1.0)
    assert set(vars(record)) == {f.name for f in dataclasses.fields(SumeRecord)}
    copy = dataclasses.replace(record)
    assert copy == record
    assert hash(copy) == hash(record)
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.status = 500  # type: ignore[misc]


@pytest.mark.parametrize("status", [200, 503, None])
def test_record_pickles(status: Optional[int]) -> None:
    """Every record survives pickling unchanged (it crosses process boundaries in job queues)."""
    ctx = context(paced=0.5)
    ctx.add(final(Verdict.STOP, "stop", status=status, request_id="req_1", at=START, retry_in=3.0))
    record = ctx.finish(status, None, START + 1.0)
    clone = pickle.loads(pickle.dumps(record))
    assert clone == record
    assert fields_of(clone) == fields_of(record)


def test_repr_shows_only_the_key_prefix() -> None:
    """The record's repr never shows the whole idempotency key."""
    record = context().finish(200, None, START)
    assert KEY not in repr(record)
    assert KEY[:8] in repr(record)


# --- the context -----------------------------------------------------------------------------


def test_contexts_do_not_share_attempts() -> None:
    """Attempts added to one context never appear in another (the defaults live on the class)."""
    one, two = RequestContext(START), RequestContext(START)
    one.add(retry(1.0))
    assert len(one.attempts) == 1
    assert two.attempts == ()
    assert two.retries == 0


def test_a_record_does_not_change_when_the_context_goes_on() -> None:
    """A record is a snapshot: attempts added later do not change it."""
    ctx = context()
    ctx.add(retry(1.0, request_id="req_1"))
    record = ctx.finish(503, None, START)
    ctx.add(retry(2.0, request_id="req_2"))
    assert record.waits == (1.0,)
    assert record.request_ids == ("req_1",)


def test_deadline_is_start_plus_max_elapsed() -> None:
    """No attempt may start after start + the policy's max_elapsed: the call's own, else the one
    of the adapter the first hop joins."""
    assert RequestContext(START, policy=Policy(max_elapsed=30.0)).deadline == START + 30.0
    adapter = SumeAdapter(Policy(max_elapsed=20.0), fleet=None)
    joined = RequestContext(START)
    joined.join(adapter, "GET", "https://api.sume.com/v1/models", None, None)
    assert (joined.policy, joined.deadline) == (adapter.policy, START + 20.0)


def test_attempt_label() -> None:
    """An attempt is named "503 queue_full", "402", or "no response"."""
    assert retry(1.0).label == "503 queue_full"
    assert retry(1.0, status=402, code=None).label == "402"
    assert retry(1.0, status=None, code=None, error="ReadTimeoutError").label == "no response"


def test_constructor_keeps_what_it_is_given() -> None:
    """Policy, owner, fleet, method and URL given to the constructor are kept; the rest are defaults."""
    policy, fleet = Policy(max_retries=1), LocalFleet()
    ctx = RequestContext(5.0, policy=policy, owned=True, fleet=fleet, method="PATCH", url="https://x/y?sig=1")
    assert (ctx.start, ctx.policy, ctx.owned, ctx.fleet, ctx.method, ctx.url) == (
        5.0, policy, True, fleet, "PATCH", "https://x/y?sig=1",
    )  # fmt: skip
    assert "sig=1" not in ctx.shown_url
    bare = RequestContext(5.0)
    assert (bare.policy, bare.owned, bare.key_id, bare.method, bare.url) == (None, False, None, "", "")
    assert (bare.key, bare.replayable, bare.hops, bare.paced, bare.fallbacks) == (None, True, 0, 0.0, 0)


def test_a_request_stopped_by_something_else_says_so() -> None:
    """No response and an error name (an interrupt, a broken hook): the reason does not blame a body."""
    record = context().finish(None, None, START, error="KeyboardInterrupt")

    assert record.reason == "no response: stopped by KeyboardInterrupt before the request ended"
    assert record.error == "KeyboardInterrupt"


# --- the retry's turn: the budget and the fleet ---------------------------------------------


def test_a_throttled_retry_waits_without_spending_the_budget() -> None:
    """A retry the server paced never spends the budget; an error retry spends one unit of it."""
    vt = VirtualTime()
    budget = RetryBudget(ratio=0.0, min_per_second=0.1, window=10.0, clock=vt.clock)  # one unit
    context = RequestContext(vt.now, policy=Policy())
    common: Any = {"budget": budget, "rng": random.Random(1)}
    assert context.take_turn(vt.now, 1.0, retry="throttle", **common) == Turn(1.0)
    assert context.take_turn(vt.now, 1.0, retry="error", **common) == Turn(1.0)


def test_a_spent_budget_delays_an_error_retry_and_refuses_it_only_past_the_deadline() -> None:
    """A spent budget holds an error retry until a unit is free, as fleets do; refused past the deadline."""
    vt = VirtualTime()
    budget = RetryBudget(ratio=0.0, min_per_second=2.0, window=1.0, clock=vt.clock)  # two units
    context = RequestContext(vt.now, policy=Policy())
    common: Any = {"retry": "error", "budget": budget, "rng": random.Random(1)}
    assert context.take_turn(vt.now, 0.1, **common) == Turn(0.1)
    assert context.take_turn(vt.now, 0.1, **common) == Turn(0.1)
    delayed = context.take_turn(vt.now, 0.1, **common)
    assert delayed.refused is None
    assert delayed.wait == pytest.approx(math.log(2), abs=1e-3)  # two spent decay to one free by e a window
    late = RequestContext(vt.now, policy=Policy(max_elapsed=0.01)).take_turn(vt.now, 0.0, **common)
    assert late.refused == "retry budget exhausted"


def test_the_fleets_turn_lengthens_the_wait_and_is_told_the_answer_once() -> None:
    """Under a cooldown the wait becomes the fleet's; end_turn releases the grant exactly once."""
    vt = VirtualTime()
    fleet = LocalFleet(clock=vt.clock, rng=random.Random(3))
    context = RequestContext(vt.now, policy=Policy(), fleet=fleet)
    first = fleet.acquire("k1", time_left=60.0)
    fleet.release("k1", first, 429, {"Retry-After": "5"})
    turn = context.take_turn(vt.now, 1.0, key_id="k1", retry="throttle", rng=random.Random(1))
    assert turn.refused is None
    assert turn.wait >= 5.0
    assert context.paced > 0
    assert context.grant is not None
    released: List[Any] = []
    real_release = fleet.release
    fleet.release = lambda *args: released.append(args) or real_release(*args)  # type: ignore[method-assign]
    context.end_turn(200, {})
    context.end_turn(200, {})
    assert len(released) == 1
    assert context.grant is None


def test_a_turn_past_the_deadline_is_refused_with_a_spread_retry_in() -> None:
    """A cooldown longer than the time left refuses the retry and says when to come back, spread."""
    vt = VirtualTime()
    fleet = LocalFleet(clock=vt.clock, rng=random.Random(3))
    context = RequestContext(vt.now, policy=Policy(max_elapsed=5), fleet=fleet)
    first = fleet.acquire("k1", time_left=60.0)
    fleet.release("k1", first, 429, {"Retry-After": "30"})
    turn = context.take_turn(vt.now, 1.0, key_id="k1", retry="throttle", rng=random.Random(1))
    assert turn.refused is not None
    assert context.fleet_refused
    assert turn.retry_in is not None
    assert 29.0 <= turn.retry_in <= 60.0


# --- join: whether the body can be sent again, and the key -----------------------------------


def body_is_replayable(body: Any) -> bool:
    """Whether the first hop found ``body`` one that can be sent again."""
    context = RequestContext(START)
    context.join(SumeAdapter(fleet=None), "PUT", "https://api.sume.com/v1/files", None, body)
    return context.replayable


class Unseekable(io.RawIOBase):
    """A readable stream that says it cannot seek, as a socket or pipe does."""

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False


class BrokenSeekable:
    """A file-like object whose seekable() raises."""

    def read(self, size: int = -1) -> bytes:
        return b""

    def seekable(self) -> bool:
        raise OSError("seekable() failed")


class TellAndSeek:
    """A file-like object with read, tell and seek but no seekable()."""

    def read(self, size: int = -1) -> bytes:
        return b""

    def tell(self) -> int:
        return 0

    def seek(self, offset: int, whence: int = 0) -> int:
        return 0


class ReadOnly:
    """A file-like object with only read()."""

    def read(self, size: int = -1) -> bytes:
        return b""


def chunks() -> Iterator[bytes]:
    """A generator body: consumed by the first attempt."""
    yield b"a"
    yield b"b"


@pytest.mark.parametrize(
    "body", [None, b"", b"payload", bytearray(b"payload"), "text", '{"json": true}', io.BytesIO(b"x")]
)
def test_in_memory_bodies_are_replayable(body: Any) -> None:
    """No body, bytes, text and an in-memory file can be sent again."""
    assert body_is_replayable(body) is True


def test_a_real_file_is_replayable(tmp_path: Path) -> None:
    """A file opened from disk is seekable, so it can be sent again."""
    path = tmp_path / "upload.bin"
    path.write_bytes(b"data")
    with path.open("rb") as f:
        assert body_is_replayable(f) is True


def test_a_pipe_is_not_replayable() -> None:
    """A real pipe cannot seek, so it is never resent."""
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd, "rb") as reader, os.fdopen(write_fd, "wb"):
        assert body_is_replayable(reader) is False


def test_an_unseekable_stream_is_not_replayable() -> None:
    """A stream that says it cannot seek is never resent."""
    assert body_is_replayable(Unseekable()) is False


def test_a_file_whose_seekable_raises_is_not_replayable() -> None:
    """seekable() raising counts as "cannot seek"."""
    assert body_is_replayable(BrokenSeekable()) is False


def test_a_closed_file_is_not_replayable() -> None:
    """A closed file (seekable() raises ValueError) is never resent."""
    closed = io.BytesIO(b"x")
    closed.close()
    assert body_is_replayable(closed) is False


def test_tell_and_seek_without_seekable_is_replayable() -> None:
    """A file-like object with tell() and seek() but no seekable() can be rewound."""
    assert body_is_replayable(TellAndSeek()) is True


def test_read_only_object_is_not_replayable() -> None:
    """A file-like object that can only be read is never resent."""
    assert body_is_replayable(ReadOnly()) is False


@pytest.mark.parametrize("body", [chunks(), iter([b"a", b"b"]), (c for c in [b"a"])])
def test_iterators_are_not_replayable(body: Any) -> None:
    """Generators and iterators are consumed by the first attempt, so they are never resent."""
    assert body_is_replayable(body) is False


# --- join: a new key for a POST or PATCH without one -----------------------------------------


def new_key(method: str = "POST") -> Optional[str]:
    """The key the first hop of a request without one decides."""
    url = "https://api.sume.com/v1/jobs"
    return RequestContext(START).join(SumeAdapter(fleet=None), method, url, None, b"{}")


def test_new_key_is_a_version_4_rfc_4122_uuid() -> None:
    """A new key is the canonical string of a random (version 4, RFC 4122 variant) UUID."""
    for _ in range(200):
        key = new_key()
        assert key is not None
        parsed = uuid.UUID(key)
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert str(parsed) == key
        assert validate_idempotency_key(key) == key


def test_new_keys_are_distinct() -> None:
    """1000 new keys are 1000 different keys."""
    assert len({new_key() for _ in range(1000)}) == 1000




def test_only_post_and_patch_get_a_key_and_a_given_one_is_kept() -> None:
    """GET, PUT and DELETE go without a key; a key the request carries is checked and kept."""
    assert new_key("PATCH") is not None
    assert [new_key(method) for method in ("GET", "PUT", "DELETE")] == [None, None, None]
    context = RequestContext(START)
    assert context.join(SumeAdapter(fleet=None), "POST", "https://x/y", b"order-42", None) == "order-42"
    assert context.key == "order-42"


def test_a_file_body_is_sent_again_from_where_it_started() -> None:
    """join notes where a file body starts, so a resend sends it whole again."""
    body = io.BytesIO(b"headerpayload")
    body.seek(6)
    context = RequestContext(START)
    context.join(SumeAdapter(fleet=None), "PUT", "https://x/y", None, body)
    assert (context.replayable, context.body_pos) == (True, 6)
