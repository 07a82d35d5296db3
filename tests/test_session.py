"""SumeSession and SumeAdapter: keys, records, give-up errors, auth and redirects."""

from __future__ import annotations

import copy
import io
import logging
import os
import pickle
import threading
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List

import pytest
import requests
import urllib3

from sume_urllib3 import (
    ConfigurationError,
    Outcome,
    Policy,
    SumeAdapter,
    SumeRecord,
    SumeRetry,
    SumeRetryError,
    SumeSession,
    sume_record,
)
from sume_urllib3.pacing import LocalFleet, RetryBudget
from sume_urllib3.testing import FakeSume, RecordingObserver, Reply

from .conftest import API_KEY, VirtualTime
from .raw_server import (
    BEARER,
    KEY,
    QUICK,
    Loopback,
    Seen,
    Step,
    always,
    auth_headers,
    raw_session,
    redirect_to,
    reply,
    status_then_ok,
)

MakeSession = Callable[..., SumeSession]


# -- idempotency keys ------------------------------------------------------------------


def test_same_key_on_every_attempt_and_a_new_one_per_request(
    fake: FakeSume, make_session: MakeSession
) -> None:
    """Retries of one POST reuse its key; the next POST gets a fresh one."""
    fake.script("POST", "/v1/avatars", 503, 429, 201, 201)
    session = make_session()

    first = session.post("/avatars", json={"name": "a"})
    second = session.post("/avatars", json={"name": "b"})

    keys = [r.headers["Idempotency-Key"] for r in fake.requests]
    assert (201, 201) == (first.status_code, second.status_code)
    assert 3 == keys.count(keys[0])
    assert keys[3] != keys[0]
    assert first.sume.idempotency_key == keys[0]


def test_a_callers_key_is_kept(fake: FakeSume, make_session: MakeSession) -> None:
    """A key the caller set is sent as is on every attempt."""
    fake.script("POST", "/v1/avatars", 503, 201)

    make_session().post("/avatars", json={}, headers={"Idempotency-Key": "order-42"})

    assert ["order-42", "order-42"] == [r.headers["Idempotency-Key"] for r in fake.requests]


@pytest.mark.parametrize("key", ["", "x" * 256, "has space", "naïve", "tab\tkey"])
def test_an_invalid_key_is_refused_before_sending(
    fake: FakeSume, make_session: MakeSession, key: str
) -> None:
    """Empty, too long or non-visible-ASCII keys raise ConfigurationError and send nothing."""
    with pytest.raises(ConfigurationError, match="Idempotency-Key"):
        make_session().post("/avatars", json={}, headers={"Idempotency-Key": key.encode("utf-8")})
    assert [] == fake.requests


def test_get_gets_no_key(fake: FakeSume, make_session: MakeSession) -> None:
    """Only POST and PATCH are given a key."""
    fake.script("GET", "/v1/me", 200)

    make_session().get("/me")

    assert "Idempotency-Key" not in fake.requests[0].headers


def test_threads_never_share_keys_or_deadlines(fake: FakeSume, make_session: MakeSession) -> None:
    """8 threads x 25 POSTs on one session: one key per logical request, never reused."""
    fake.script("POST", "/v1/jobs", 503, 201, 503, 201)
    session = make_session()
    records: List[SumeRecord] = []
    lock = threading.Lock()

    def work() -> None:
        for _ in range(25):
            r = session.post("/jobs", json={})
            with lock:
                records.append(r.sume)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    by_key: Dict[str, int] = {}
    for r in fake.requests:
        by_key[r.headers["Idempotency-Key"]] = by_key.get(r.headers["Idempotency-Key"], 0) + 1
    assert 200 == len(records) == len(by_key)
    assert sum(rec.attempts for rec in records) == len(fake.requests)
    assert all(by_key[rec.idempotency_key or ""] == rec.attempts for rec in records)
    assert 200 == session.metrics.total


# -- records and outcomes --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "outcome", "attempts"),
    [
        ([200], Outcome.OK, 1),
        ([503, 200], Outcome.RETRIED_OK, 2),
        ([Reply.error(402, "insufficient_credits")], Outcome.FIX, 1),
        ([503, Reply.error(400, "bad_request")], Outcome.FIX, 2),
        ([Reply.error(409, "job_not_completed", next_action="poll_status")], Outcome.POLL, 1),
        ([Reply.error(500, "internal_error")], Outcome.NO_RETRY, 1),
        ([Reply.error(503, retryable=False)], Outcome.NO_RETRY, 1),
    ],
)
def test_every_returned_outcome_is_recorded(
    fake: FakeSume, make_session: MakeSession, script: List[Any], outcome: Outcome, attempts: int
) -> None:
    """response.sume says how the logical request ended, and the metrics count it."""
    fake.script("POST", "/v1/runs", *script)
    session = make_session()

    record = session.post("/runs", json={}).sume

    assert (outcome, attempts) == (record.outcome, record.attempts)
    assert 1 == session.metrics.snapshot()["outcomes"][outcome.value]


def test_the_record_names_codes_ids_and_waits(fake: FakeSume, make_session: MakeSession) -> None:
    """Codes, request ids of every attempt, waits and the final reason are all there."""
    fake.script(
        "POST",
        "/v1/runs",
        Reply.error(429, "queue_full", retry_after="2", request_id="req_a"),
        Reply.error(402, "insufficient_credits", request_id="req_b"),
    )

    record = make_session().post("/runs", json={}).sume

    assert ("insufficient_credits", "req_b", ("req_a", "req_b"), (2.0,)) == (
        record.code,
        record.request_id,
        record.request_ids,
        record.waits,
    )
    assert "must fix" in record.reason


def test_giving_up_raises_with_the_last_response(
    fake: FakeSume, make_session: MakeSession, vtime: VirtualTime
) -> None:
    """After the attempt cap, SumeRetryError names status, code, ids, attempts and why."""
    fake.script("POST", "/v1/runs", Reply.error(503, "worker_timeout"))
    session = make_session(policy=Policy(max_retries=2))

    with pytest.raises(SumeRetryError) as info:
        session.post("/runs", json={})

    error = info.value
    message = str(error)
    assert isinstance(error, requests.exceptions.RetryError)
    assert error.response is not None
    assert "worker_timeout" == error.response.json()["error"]["code"]
    assert error.record.outcome is Outcome.GAVE_UP
    for part in ("503 worker_timeout", "req_1", "req_3", "3 attempts", "attempt cap"):
        assert part in message
    assert 1 == session.metrics.snapshot()["outcomes"]["gave_up"]


def test_retry_after_past_the_deadline_gives_up_at_once(fake: FakeSume, make_session: MakeSession) -> None:
    """A Retry-After longer than the budget left is not waited for: gave up, saying why."""
    fake.script("GET", "/v1/me", Reply.error(429, "rate_limit_exceeded", retry_after="600"))

    with pytest.raises(SumeRetryError, match=r"server asked to wait 600\.0s"):
        make_session().get("/me")


def test_deadline_counts_from_the_start_of_the_request(
    fake: FakeSume, make_session: MakeSession, vtime: VirtualTime
) -> None:
    """Waits add up against max_elapsed; the wait that would cross it is never started."""
    fake.script("GET", "/v1/me", Reply.error(429, retry_after="4"))
    session = make_session(policy=Policy(max_elapsed=10.0), raise_on_give_up=False)

    response = session.get("/me")

    assert ([4.0, 4.0], 3) == (vtime.sleeps, response.sume.attempts)
    assert "only 2.0s of the 10.0s budget is left" in response.sume.reason


def test_raise_on_give_up_false_returns_the_last_response(fake: FakeSume, make_session: MakeSession) -> None:
    """raise_on_give_up=False hands back the last response with its record."""
    fake.script("GET", "/v1/me", 503)
    session = make_session(policy=Policy(max_retries=1), raise_on_give_up=False)

    response = session.get("/me")

    assert (503, Outcome.GAVE_UP, 2) == (response.status_code, response.sume.outcome, response.sume.attempts)


def test_a_spent_retry_budget_gives_up(fake: FakeSume, make_session: MakeSession) -> None:
    """Once the shared budget is spent, a retryable failure ends as gave_up, saying why."""
    fake.script("GET", "/v1/me", 503)
    budget = RetryBudget(ratio=0.0, window=10.0, min_per_second=0.1)  # one retry per 10 s
    session = make_session(retry_budget=budget, raise_on_give_up=False)

    first = session.get("/me")

    assert (Outcome.GAVE_UP, 2) == (first.sume.outcome, first.sume.attempts)
    assert "retry budget exhausted" in first.sume.reason


def test_transport_failures_keep_requests_exception_types(make_session: MakeSession) -> None:
    """Refused connections end in requests' ConnectionError, with the record attached."""
    session = make_session(base_url="http://127.0.0.1:9/v1", policy=Policy(max_retries=2))

    with pytest.raises(requests.exceptions.ConnectionError) as info:
        session.get("/me")

    assert (Outcome.GAVE_UP, 3) == (info.value.sume.outcome, info.value.sume.attempts)  # type: ignore[attr-defined]
    assert 1 == session.metrics.snapshot()["outcomes"]["gave_up"]


def test_exhausted_read_timeouts_raise_read_timeout(fake: FakeSume, make_session: MakeSession) -> None:
    """Every attempt timing out ends in ReadTimeout (not requests' ConnectionError quirk)."""
    fake.script("GET", "/v1/slow", Reply(200, delay=1.0))
    session = make_session(policy=Policy(max_retries=1), timeout=(2, 0.1))

    with pytest.raises(requests.exceptions.ReadTimeout):
        session.get("/slow")
    assert 2 == len(fake.requests)


def test_keyed_post_read_timeout_is_resent_with_the_same_key(
    fake: FakeSume, make_session: MakeSession
) -> None:
    """A POST with a key is safe to resend after a read timeout: same key."""
    fake.script("POST", "/v1/runs", Reply(201, delay=1.0), Reply(201, json={"id": 1}))
    session = make_session(timeout=(2, 0.1))

    response = session.post("/runs", json={})

    keys = {r.headers["Idempotency-Key"] for r in fake.requests}
    assert (201, 1, 2) == (response.status_code, len(keys), len(fake.requests))


def test_unreplayable_body_is_never_resent(fake: FakeSume, make_session: MakeSession) -> None:
    """A generator body cannot be sent twice: the 503 is returned as no_retry."""
    fake.script("PUT", "/v1/assets/1", 503, 200)

    def body() -> Iterator[bytes]:
        yield b"chunk"

    response = make_session().put("/assets/1", data=body())

    assert (503, Outcome.NO_RETRY, 1) == (response.status_code, response.sume.outcome, len(fake.requests))
    assert "cannot be replayed" in response.sume.reason


def test_seekable_body_is_rewound_and_resent(fake: FakeSume, make_session: MakeSession) -> None:
    """A file-like body is resent intact."""
    fake.script("PUT", "/v1/assets/1", 503, 200)

    make_session().put("/assets/1", data=io.BytesIO(b"payload"))

    assert [b"payload", b"payload"] == [r.body for r in fake.requests]


# -- session configuration ------------------------------------------------------------------


def test_relative_urls_join_the_base_url(fake: FakeSume, make_session: MakeSession) -> None:
    """'/jobs' and 'jobs' go under the base path; absolute URLs pass through."""
    fake.script("GET", "/v1/jobs", 200)
    fake.script("GET", "/other", 200)
    session = make_session()

    session.get("/jobs")
    session.get("jobs")
    session.get(fake.url + "/other")

    assert ["/v1/jobs", "/v1/jobs", "/other"] == [r.path for r in fake.requests]


def test_default_base_url_and_join() -> None:
    """Without configuration the base is https://api.sume.com/v1."""
    assert "https://api.sume.com/v1/jobs" == SumeSession().url_for("/jobs")


def test_environment_configures_key_and_base(fake: FakeSume, monkeypatch: pytest.MonkeyPatch) -> None:
    """SUME_API_KEY and SUME_API_BASE_URL are used when not given."""
    monkeypatch.setenv("SUME_API_KEY", "sk_env_key")
    monkeypatch.setenv("SUME_API_BASE_URL", fake.url + "/v2")
    fake.script("GET", "/v2/me", 200)

    with SumeSession() as session:
        session.get("/me")

    assert "sk_env_key" == fake.requests[0].headers["x-api-key"]


def test_default_timeout_applies(fake: FakeSume, make_session: MakeSession) -> None:
    """A call without a timeout uses the session's (requests has none)."""
    fake.script("GET", "/v1/slow", Reply(200, delay=1.0))
    session = make_session(timeout=(2, 0.1), policy=Policy(max_retries=0))

    with pytest.raises(requests.exceptions.ReadTimeout):
        session.get("/slow")


def test_default_timeout_applies_with_positional_arguments(fake: FakeSume, make_session: MakeSession) -> None:
    """request(method, url, params, data, ...) positionally still gets the default timeout."""
    fake.script("GET", "/v1/slow", Reply(200, delay=1.0))
    session = make_session(timeout=(2, 0.1), policy=Policy(max_retries=0))

    with pytest.raises(requests.exceptions.ReadTimeout):
        session.request("GET", "/slow", {"q": "1"}, None, None, None, None, None, None)


def test_default_timeout_applies_to_send(fake: FakeSume, make_session: MakeSession) -> None:
    """session.send(prepared) without a timeout uses the session's too."""
    fake.script("GET", "/v1/slow", Reply(200, delay=1.0))
    session = make_session(timeout=(2, 0.1), policy=Policy(max_retries=0))
    prepared = session.prepare_request(requests.Request("GET", session.url_for("/slow")))

    with pytest.raises(requests.exceptions.ReadTimeout):
        session.send(prepared)


def test_a_query_holding_a_url_is_still_relative(fake: FakeSume, make_session: MakeSession) -> None:
    """'/jobs?callback=https://x' joins the base URL: only a leading scheme makes a URL absolute."""
    fake.script("GET", "/v1/jobs", 200)

    make_session().get("/jobs?callback=https://example.com/x")

    assert "/v1/jobs?callback=https://example.com/x" == fake.requests[0].path


def test_a_bytes_idempotency_key_is_kept_as_text(fake: FakeSume, make_session: MakeSession) -> None:
    """A key given as bytes is validated, sent on every attempt and recorded as str."""
    fake.script("POST", "/v1/runs", 503, 201)

    response = make_session().post("/runs", json={}, headers={"Idempotency-Key": b"order-000000042"})

    assert ["order-000000042"] * 2 == [r.headers["Idempotency-Key"] for r in fake.requests]
    assert "order-000000042" == response.sume.idempotency_key


def test_user_agent_names_the_library(fake: FakeSume, make_session: MakeSession) -> None:
    """The User-Agent says sume-urllib3 and its version."""
    fake.script("GET", "/v1/me", 200)

    make_session().get("/me")

    assert fake.requests[0].headers["User-Agent"].startswith("sume-urllib3/")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"auth_header": "basic"}, "auth_header"),
        ({"base_url": "ftp://x"}, "base_url"),
        ({"base_url": "https://u:p@x"}, "base_url"),
        ({"timeout": -1}, "timeout"),
        ({"timeout": (1, 2, 3)}, "timeout"),
        ({"policy": "fast"}, "policy"),
        ({"retry_budget": 5}, "retry_budget"),
    ],
)
def test_bad_configuration_is_refused(kwargs: Dict[str, Any], field: str) -> None:
    """Each bad setting raises ConfigurationError naming it."""
    with pytest.raises(ConfigurationError, match=field):
        SumeSession("k", **kwargs)


def test_a_custom_budget_survives_pickling() -> None:
    """A session's own RetryBudget (or the shared one) comes back, not a default."""
    own = SumeSession("sk_x", retry_budget=RetryBudget(ratio=0.5, window=30.0, min_per_second=0.0))
    shared = SumeSession("sk_x", retry_budget=RetryBudget.shared())

    own_clone, shared_clone = pickle.loads(pickle.dumps(own)), pickle.loads(pickle.dumps(shared))

    assert own_clone.retry_budget is not None
    assert (0.5, 30.0) == (own_clone.retry_budget.ratio, own_clone.retry_budget.window)
    assert RetryBudget.shared() is shared_clone.retry_budget


def test_session_pickles(make_session: MakeSession) -> None:
    """A session round-trips through pickle with its configuration."""
    session = SumeSession("sk_x", base_url="https://example.test/v1", policy=Policy(max_retries=2))

    clone = pickle.loads(pickle.dumps(session))

    assert ("https://example.test/v1", 2, True) == (
        clone.base_url,
        clone.policy.max_retries,
        clone.has_api_key,
    )


# -- auth ----------------------------------------------------------------------------------


def test_x_api_key_by_default_and_bearer_on_request(fake: FakeSume, make_session: MakeSession) -> None:
    """Exactly one auth header: x-api-key, or Authorization: Bearer."""
    fake.script("GET", "/v1/me", 200)

    make_session().get("/me")
    make_session(auth_header="bearer").get("/me")

    first, second = fake.requests
    assert (API_KEY, None) == (first.headers["x-api-key"], first.headers.get("Authorization"))
    assert ("Bearer " + API_KEY, None) == (second.headers["Authorization"], second.headers.get("x-api-key"))


@pytest.mark.parametrize(
    "extra",
    [
        {"headers": {"Authorization": "Bearer other"}},
        {"auth": ("user", "pass")},
    ],
)
def test_both_auth_headers_are_refused_before_sending(
    fake: FakeSume, make_session: MakeSession, extra: Dict[str, Any]
) -> None:
    """A second auth header (per request or auth=) is a ConfigurationError; nothing is sent."""
    with pytest.raises(ConfigurationError, match="send only one"):
        make_session().get("/me", **extra)
    assert [] == fake.requests


def test_plain_http_to_a_remote_host_is_refused() -> None:
    """The key never travels over plain http except to loopback."""
    session = SumeSession("sk_x", base_url="http://api.example.com/v1")

    with pytest.raises(ConfigurationError, match="plain http"):
        session.get("/me")


def test_401_with_both_headers_says_send_only_one(fake: FakeSume, vtime: VirtualTime) -> None:
    """SumeAdapter on a plain session adds the hint when a 401 carried both headers."""
    fake.script("GET", "/me", Reply.error(401, "unauthorized"))
    session = requests.Session()
    session.mount("http://", SumeAdapter(sleep=vtime.sleep, clock=vtime.clock))

    response = session.get(fake.url + "/me", headers={"x-api-key": "a", "Authorization": "Bearer b"})

    assert "send only one" in response.sume.reason


# -- redirects ---------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [307, 308])
def test_redirect_on_the_same_host_keeps_key_and_auth(
    fake: FakeSume, make_session: MakeSession, status: int
) -> None:
    """Same-host redirects that keep the POST keep the API key and the idempotency key."""
    fake.script("POST", "/v1/old", Reply(status, headers={"Location": "/v1/new"}, body=b""))
    fake.script("POST", "/v1/new", 201)

    response = make_session().post("/old", json={})

    first, second = fake.requests
    assert (201, "POST") == (response.status_code, second.method)
    assert API_KEY == second.headers["x-api-key"]
    assert first.headers["Idempotency-Key"] == second.headers["Idempotency-Key"]


@pytest.mark.parametrize("status", [302, 303])
def test_a_redirect_that_turns_the_post_into_a_get_drops_the_idempotency_key(
    fake: FakeSume, make_session: MakeSession, status: int
) -> None:
    """After a 302/303 the GET that follows keeps the API key but carries no Idempotency-Key."""
    fake.script("POST", "/v1/old", Reply(status, headers={"Location": "/v1/new"}, body=b""))
    fake.script("GET", "/v1/new", 200)

    response = make_session().post("/old", json={})

    first, second = fake.requests
    assert (200, "GET") == (response.status_code, second.method)
    assert API_KEY == second.headers["x-api-key"]
    assert "Idempotency-Key" in first.headers
    assert "Idempotency-Key" not in second.headers
    assert first.headers["Idempotency-Key"] == response.sume.idempotency_key


@pytest.mark.parametrize("auth_header", ["x-api-key", "bearer"])
def test_redirect_to_another_host_strips_the_key(
    fake: FakeSume, make_session: MakeSession, auth_header: str
) -> None:
    """127.0.0.1 -> localhost is another host: neither key header follows."""
    other = fake.url.replace("127.0.0.1", "localhost") + "/v1/new"
    fake.script("GET", "/v1/old", Reply(302, headers={"Location": other}, body=b""))
    fake.script("GET", "/v1/new", 200)

    make_session(auth_header=auth_header).get("/old")

    second = fake.requests[1]
    assert (None, None) == (second.headers.get("x-api-key"), second.headers.get("Authorization"))


def test_the_attempt_cap_spans_redirects(fake: FakeSume, make_session: MakeSession) -> None:
    """Retries before and after a redirect share one cap; the record counts every request."""
    fake.script("POST", "/v1/a", 503, Reply(307, headers={"Location": "/v1/b"}, body=b""))
    fake.script("POST", "/v1/b", 503)
    session = make_session(policy=Policy(max_retries=2), raise_on_give_up=False)

    record = session.post("/a", json={}).sume

    assert (4, 4, Outcome.GAVE_UP) == (len(fake.requests), record.attempts, record.outcome)
    assert 1 == session.metrics.total


def test_an_adapter_used_inside_a_session_request_keeps_its_own_accounting(
    fake: FakeSume, make_session: MakeSession
) -> None:
    """A plain session with a SumeAdapter called from a hook reports to its own observers."""
    fake.script("GET", "/v1/a", Reply.error(400, "bad_request"))
    fake.script("GET", "/b", 200)
    recorder = RecordingObserver()
    inner = requests.Session()
    inner.mount("http://", SumeAdapter(observers=[recorder]))
    session = make_session()
    session.hooks["response"].append(lambda r, *a, **k: inner.get(fake.url + "/b"))

    session.get("/a")

    assert [Outcome.OK] == [r.outcome for r in recorder.outcomes]
    assert 1 == session.metrics.snapshot()["outcomes"]["fix"]


def test_an_adapter_with_its_own_retry_still_raises_sume_retry_error(
    fake: FakeSume, vtime: VirtualTime
) -> None:
    """SumeAdapter(max_retries=SumeRetry(...)) gives up with SumeRetryError and the response."""
    fake.script("GET", "/me", Reply.error(503, "queue_full"))
    session = requests.Session()
    retry = SumeRetry(Policy(max_retries=1), sleep=vtime.sleep, clock=vtime.clock)
    session.mount("http://", SumeAdapter(max_retries=retry))

    with pytest.raises(SumeRetryError) as info:
        session.get(fake.url + "/me")

    assert info.value.response is not None
    assert "queue_full" == info.value.response.json()["error"]["code"]


def test_an_adapter_refuses_settings_given_twice() -> None:
    """Policy or budget both on the adapter and on its SumeRetry is a ConfigurationError."""
    with pytest.raises(ConfigurationError, match="max_retries"):
        SumeAdapter(Policy(), max_retries=SumeRetry())


def test_redirects_count_as_one_outcome(fake: FakeSume, make_session: MakeSession) -> None:
    """A redirected request is one logical request in the metrics."""
    fake.script("GET", "/v1/old", Reply(302, headers={"Location": "/v1/new"}, body=b""))
    fake.script("GET", "/v1/new", 200)
    session = make_session()

    session.get("/old")

    assert 1 == session.metrics.total


# -- secrets -------------------------------------------------------------------------------------


def test_the_key_never_leaks(
    fake: FakeSume, make_session: MakeSession, caplog: pytest.LogCaptureFixture
) -> None:
    """Logs at DEBUG, reprs, records, errors and pickles never contain the API key."""
    fake.script("POST", "/v1/runs", 503)
    session = make_session(policy=Policy(max_retries=2))
    caplog.set_level(logging.DEBUG)

    with pytest.raises(SumeRetryError) as info:
        session.post("/runs", json={})

    texts = [
        caplog.text,
        repr(session),
        repr(session.adapter),
        repr(session.adapter.retry),
        repr(info.value.record),
        str(info.value),
        repr(info.value),
        pickle.dumps(info.value.record).decode("latin-1"),
        pickle.dumps(info.value).decode("latin-1"),
    ]
    assert not [t for t in texts if API_KEY in t]


def test_a_key_given_as_auth_header_is_not_echoed() -> None:
    """auth_header="Bearer sk_..." is a common slip: the error names the mistake, not the key."""
    with pytest.raises(ConfigurationError) as info:
        SumeSession("k", auth_header="Bearer " + API_KEY)

    assert API_KEY not in str(info.value)


# -- other origins: no key, no pacing, the caller's own Authorization -------------------


@pytest.fixture
def storage() -> Iterator[FakeSume]:
    """A second host, as the storage behind a presigned upload URL."""
    with FakeSume() as server:
        yield server


def test_another_hosts_retry_after_does_not_hold_the_api_key(
    fake: FakeSume, storage: FakeSume, make_session: MakeSession
) -> None:
    """A storage upload answered 503 Retry-After: 60 starts no cooldown for the API's key."""
    storage.script("PUT", "/bucket/obj", Reply.error(503, retry_after="60"))
    fake.script("GET", "/v1/jobs/1", Reply(200, json={"id": "job_1"}))
    session = make_session(raise_on_give_up=False, policy=Policy(max_elapsed=30))

    session.put(storage.url + "/bucket/obj", data=b"x")
    response = session.get("/jobs/1")

    assert (200, 0.0) == (response.status_code, response.sume.paced)
    assert 1 == len(fake.requests)


def test_a_session_header_authorization_never_goes_to_another_origin(
    fake: FakeSume, storage: FakeSume, vtime: VirtualTime
) -> None:
    """session.headers["Authorization"] is the key given another way: stripped for other hosts."""
    storage.script("PUT", "/bucket/obj", Reply(200, json={}))
    session = SumeSession(base_url=fake.url + "/v1", sleep=vtime.sleep, clock=vtime.clock)
    session.headers["Authorization"] = "Bearer " + API_KEY

    session.put(storage.url + "/bucket/obj", data=b"x")

    assert storage.requests[0].headers.get("Authorization") is None


def test_an_authorization_of_the_call_itself_still_goes_to_another_origin(
    storage: FakeSume, make_session: MakeSession
) -> None:
    """A header the call sets for that other host (its own credentials) is kept."""
    storage.script("PUT", "/bucket/obj", Reply(200, json={}))
    session = make_session()

    session.put(storage.url + "/bucket/obj", data=b"x", headers={"Authorization": "Basic c3RvcmFnZQ=="})

    assert "Basic c3RvcmFnZQ==" == storage.requests[0].headers.get("Authorization")


def test_a_redirect_loop_is_not_counted_ok(fake: FakeSume, make_session: MakeSession) -> None:
    """TooManyRedirects after 302 hops carries a record that is not ok, and metrics agree."""
    fake.script("GET", "/v1/loop", Reply(302, headers={"Location": "/v1/loop"}, body=b""))
    session = make_session()
    session.max_redirects = 3

    with pytest.raises(requests.exceptions.TooManyRedirects) as info:
        session.get("/loop")

    record = sume_record(info.value)
    assert record is not None
    assert record.outcome is not Outcome.OK
    assert "TooManyRedirects" in record.reason
    assert 0 == session.metrics.snapshot()["outcomes"]["ok"]


def test_a_file_body_is_sent_whole_again_after_its_answer_broke(
    fake: FakeSume, make_session: MakeSession
) -> None:
    """A PUT of a seekable file whose 200 broke mid-read is resent from the file's start."""
    cut = Reply(200, json={"a": "x" * 500}, chunked=True, truncate=40)
    fake.script("PUT", "/v1/files/x", cut, Reply(200, json={"ok": True}))
    session = make_session()

    response = session.put("/files/x", data=io.BytesIO(b"A" * 100))

    assert (Outcome.RETRIED_OK, [b"A" * 100, b"A" * 100]) == (
        response.sume.outcome,
        [r.body for r in fake.requests],
    )


def test_a_retry_refused_by_the_budget_takes_no_turn_from_the_pace(
    fake: FakeSume, vtime: VirtualTime, make_session: MakeSession
) -> None:
    """A 503 the spent budget will not retry leaves the next request one pace step away, not two."""
    fake.script("POST", "/v1/runs", Reply.error(503), Reply(201, json={"id": 1}))
    fleet = LocalFleet(rate="1/s", clock=vtime.clock)
    spent = RetryBudget(ratio=0.0, min_per_second=0.0, clock=vtime.clock)
    session = make_session(fleet=fleet, retry_budget=spent, raise_on_give_up=False)

    first = session.post("/runs", json={})
    second = session.post("/runs", json={})

    assert "retry budget exhausted" in first.sume.reason
    assert second.sume.paced <= 1.0


@pytest.mark.parametrize("mode", ["x-api-key", "bearer"])
def test_key_goes_to_the_base_origin_and_never_to_an_absolute_url_elsewhere(
    raw_server: Any, mode: str
) -> None:
    """A PUT to another port (a presigned upload) carries no auth header; the API still gets the key."""
    api, storage = raw_server(), raw_server()
    session = raw_session(api, auth_header=mode)

    session.put(storage.url + "/bucket/upload?sig=abc", data=b"file bytes")
    session.get("/jobs")

    assert {} == auth_headers(storage.requests[0])
    assert b"file bytes" == storage.requests[0].body
    expected = {"x-api-key": KEY} if mode == "x-api-key" else {"authorization": BEARER}
    assert expected == auth_headers(api.requests[0])


def test_key_goes_to_an_absolute_url_on_the_base_origin(raw_server: Any) -> None:
    """An absolute URL on the base URL's own scheme, host and port is the API: it gets the key."""
    api = raw_server()
    session = raw_session(api)

    session.get(api.url + "/v1/jobs")

    assert {"x-api-key": KEY} == auth_headers(api.requests[0])


def test_a_session_header_key_set_by_the_user_is_stripped_for_another_origin(raw_server: Any) -> None:
    """``session.headers["x-api-key"] = key`` still reaches the API, and never another origin."""
    api, storage = raw_server(), raw_server()
    session = raw_session(api, api_key=None)
    session.headers["x-api-key"] = KEY

    session.get("/jobs")
    session.put(storage.url + "/upload", data=b"x")

    assert {"x-api-key": KEY} == auth_headers(api.requests[0])
    assert {} == auth_headers(storage.requests[0])


def test_a_redirect_from_the_api_to_another_origin_carries_no_key(raw_server: Any) -> None:
    """The API answers 302 to another port: the hop there has neither auth header."""
    storage = raw_server()
    api = raw_server(redirect_to(storage.url + "/landing"))
    session = raw_session(api, auth_header="bearer")

    session.get("/start")

    assert {"authorization": BEARER} == auth_headers(api.requests[0])
    assert {} == auth_headers(storage.requests[0])


def test_the_callers_own_authorization_for_another_origin_is_kept(raw_server: Any) -> None:
    """A presigned upload with its own Authorization keeps it; only the session's key is removed."""
    api, storage = raw_server(), raw_server()
    session = raw_session(api, auth_header="bearer")

    session.put(storage.url + "/upload", data=b"x", headers={"Authorization": "AWS4-HMAC-SHA256 sig"})

    assert {"authorization": "AWS4-HMAC-SHA256 sig"} == auth_headers(storage.requests[0])


@pytest.mark.parametrize(
    "clone",
    [lambda s: pickle.loads(pickle.dumps(s)), copy.copy, copy.deepcopy],
    ids=["pickle", "copy", "deepcopy"],
)
def test_pickle_and_copy_keep_a_custom_mount(raw_server: Any, clone: Callable[[Any], Any]) -> None:
    """A SumeAdapter mounted on a prefix is still mounted there, and still used, on the copy."""
    api, other = raw_server(), raw_server()
    session = raw_session(api)
    session.mount(other.url + "/special/", SumeAdapter(QUICK, fleet=None, pool_maxsize=3))

    copied = clone(session)

    mounted = copied.adapters.get(other.url + "/special/")
    assert isinstance(mounted, SumeAdapter)
    assert copied.adapters["http://"] is copied.adapter
    assert b"/special/x" == copied.get(other.url + "/special/x").content
    assert b"/v1/jobs" == copied.get("/jobs").content


def test_a_second_sume_adapter_on_a_prefix_counts_in_session_metrics(raw_server: Any) -> None:
    """Requests through an extra SumeAdapter are counted once in session.metrics, outcome by outcome."""
    api, other = raw_server(), raw_server(status_then_ok(503))
    session = raw_session(api)
    session.mount(other.url + "/", SumeAdapter(QUICK, fleet=None))

    session.get(other.url + "/v1/x")
    session.get("/jobs")

    outcomes = session.metrics.snapshot()["outcomes"]
    assert 1 == outcomes["retried_ok"]
    assert 1 == outcomes["ok"]
    assert 2 == session.metrics.total


class CountingProxyManager(urllib3.ProxyManager):
    """A real ProxyManager that counts clear() calls (requests' test_session_close_proxy_clear)."""

    cleared = 0

    def clear(self) -> None:
        self.cleared += 1
        super().clear()


def test_session_close_clears_each_proxy_manager_once(raw_server: Any) -> None:
    """The default adapter is mounted on two prefixes; close() still clears its proxy managers once."""
    session = raw_session(raw_server())
    one, two = CountingProxyManager("http://127.0.0.1:1"), CountingProxyManager("http://127.0.0.1:2")
    session.adapters["http://"].proxy_manager.update({"one": one, "two": two})  # type: ignore[attr-defined]

    session.close()

    assert (1, 1) == (one.cleared, two.cleared)


def test_session_close_closes_every_mounted_adapter(raw_server: Any) -> None:
    """An extra mounted adapter is closed too (its pools emptied)."""
    api = raw_server()
    session = raw_session(api)
    extra = SumeAdapter(QUICK, fleet=None)
    session.mount(api.url + "/extra/", extra)
    session.get(api.url + "/extra/x")
    assert extra.poolmanager.pools

    session.close()

    assert not extra.poolmanager.pools
    assert not session.adapter.poolmanager.pools


def test_a_per_call_policy_gives_that_call_a_shorter_deadline(raw_server: Any) -> None:
    """A per-call policy with max_elapsed=2.5: 503s with Retry-After 1 stop at 3 attempts."""
    api = raw_server(always(503, b"", {"Retry-After": "1"}))
    vt = VirtualTime()
    session = raw_session(api, sleep=vt.sleep, clock=vt.clock)

    with pytest.raises(SumeRetryError) as caught:
        session.post("/jobs", json={}, policy=session.policy.replace(max_elapsed=2.5))

    assert 3 == caught.value.record.attempts
    assert 3 == len(api.requests)
    assert 120.0 == session.policy.max_elapsed  # the session's own policy is untouched


def test_a_per_call_policy_must_be_a_policy(raw_server: Any) -> None:
    """policy={"max_elapsed": 10} is a ConfigurationError before anything is sent."""
    api = raw_server()
    session = raw_session(api)

    with pytest.raises(ConfigurationError, match="policy"):
        session.request("GET", "/jobs", policy={"max_elapsed": 10})  # type: ignore[arg-type]
    assert [] == api.requests


def test_a_netrc_entry_for_the_api_host_is_ignored(raw_server: Any, tmp_path: Any, monkeypatch: Any) -> None:
    """~/.netrc with the API host: the call sends the key alone, no Authorization, no error."""
    netrc = tmp_path / ".netrc"
    netrc.write_text("machine 127.0.0.1 login someone password hunter2\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    api, other = raw_server(), raw_server()
    session = raw_session(api)

    session.get("/jobs")
    requests_alone = requests.get(other.url + "/x", timeout=2)  # the netrc file really is read

    assert {"x-api-key": KEY} == auth_headers(api.requests[0])
    assert 200 == requests_alone.status_code
    assert other.requests[0].headers.get("authorization", "").startswith("Basic ")


def test_prepare_request_resolves_a_relative_url_against_the_base(raw_server: Any) -> None:
    """session.prepare_request(Request("POST", "/jobs")) targets base_url + /jobs, with the key."""
    api = raw_server()
    session = raw_session(api)

    prepared = session.prepare_request(requests.Request("POST", "/jobs", json={"a": 1}))
    response = session.send(prepared)

    assert api.url + "/v1/jobs" == prepared.url
    assert b"/v1/jobs" == response.content
    assert KEY == api.requests[0].headers["x-api-key"]


def _see_other(seen: Seen, n: int) -> Iterable[Step]:
    if seen.method == "POST":
        yield reply(303, b"", {"Location": "/v1/jobs/1"})
    else:
        yield reply(200, b"{}")


def test_a_303_that_turns_a_post_into_a_get_drops_the_idempotency_key(raw_server: Any) -> None:
    """POST (with a key) -> 303 -> GET: the GET carries no Idempotency-Key but still the API key."""
    api = raw_server(_see_other)
    session = raw_session(api)

    session.post("/jobs", json={})

    post, get = api.requests
    assert ("POST", "GET") == (post.method, get.method)
    assert "idempotency-key" in post.headers
    assert "idempotency-key" not in get.headers
    assert KEY == get.headers["x-api-key"]


def test_a_303_through_a_plain_session_with_sume_adapter_drops_the_idempotency_key(raw_server: Any) -> None:
    """requests.Session + SumeAdapter: POST -> 303 -> GET, and the GET carries no Idempotency-Key."""
    api = raw_server(_see_other)
    session = requests.Session()
    session.mount("http://", SumeAdapter(QUICK, fleet=None))

    session.post(api.url + "/v1/jobs", json={})

    post, get = api.requests
    assert "idempotency-key" in post.headers
    assert "idempotency-key" not in get.headers


# -- a proxy for plain http ---------------------------------------------------------------------


@pytest.mark.parametrize("how", ["proxies=", "HTTP_PROXY"])
def test_the_key_goes_through_no_plain_http_proxy_off_loopback(
    fake: FakeSume, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """A loopback base URL over plain http is allowed; a proxy for http:// elsewhere would read the
    key in clear: refused before anything is sent, naming the proxy and the way out."""
    session = SumeSession(API_KEY, base_url=fake.url + "/v1", fleet=None)
    kwargs: Dict[str, Any] = {}
    if how == "proxies=":
        kwargs["proxies"] = {"http": "http://corp-proxy.example.test:3128"}
    else:
        monkeypatch.setenv("HTTP_PROXY", "corp-proxy.example.test:3128")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
    with pytest.raises(ConfigurationError, match=r"through the proxy corp-proxy\.example\.test: use https"):
        session.get("/me", **kwargs)
    assert fake.requests == []


def test_a_loopback_proxy_or_no_proxy_lets_a_plain_http_request_go(
    fake: FakeSume, raw_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A proxy on this machine reads nothing another host can; NO_PROXY bypasses a remote one."""
    fake.script("GET", "/v1/me", 200)
    proxy = raw_server()  # answers 200 with the request's target: a forward proxy's absolute form
    session = SumeSession(API_KEY, base_url=fake.url + "/v1", fleet=None)
    through = session.get("/me", proxies={"http": proxy.url})
    assert (through.status_code, through.content) == (200, (fake.url + "/v1/me").encode())
    monkeypatch.setenv("HTTP_PROXY", "http://corp-proxy.example.test:3128")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert session.get("/me").status_code == 200
    assert len(fake.requests) == 1


# --- the environment: proxies and CA bundles read as requests reads them ---------------------

_PROXY_VARIABLES = [name for name in os.environ if name.lower().endswith("_proxy")] + [
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
]


@pytest.fixture
def no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """An environment with no proxy or CA-bundle variable."""
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("no_proxy_settings")
def test_a_proxy_set_between_two_requests_carries_the_next_one(
    raw_server: Callable[..., Loopback], monkeypatch: pytest.MonkeyPatch
) -> None:
    api, proxy = raw_server(), raw_server()
    with SumeSession(KEY, base_url=api.url + "/v1", timeout=5) as session:
        assert session.get("/first").text == "/v1/first"
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        assert session.get("/second").text == api.url + "/v1/second"  # the absolute form: a proxy
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        assert session.get("/third").text == "/v1/third"
        monkeypatch.delenv("NO_PROXY")
        assert session.get("/fourth").text == api.url + "/v1/fourth"
        monkeypatch.delenv("HTTP_PROXY")
        assert session.get("/fifth").text == "/v1/fifth"
    assert api.paths() == ["/v1/first", "/v1/third", "/v1/fifth"]
    assert len(proxy.paths()) == 2


#: Environments requests reads differently: no proxies, upper and lower case, a bypass list,
#: a CA bundle either way.
ENVIRONMENTS: List[Dict[str, str]] = [
    {},
    {"HTTPS_PROXY": "http://proxy.test:3128", "HTTP_PROXY": "http://proxy.test:3129"},
    {"https_proxy": "http://lower.test:3128", "HTTPS_PROXY": "http://upper.test:3128"},
    {"HTTPS_PROXY": "http://proxy.test:3128", "NO_PROXY": "api.sume.test,.internal"},
    {"ALL_PROXY": "socks5://proxy.test:1080", "no_proxy": "*"},
    {"REQUESTS_CA_BUNDLE": "/etc/ssl/requests.pem"},
    {"CURL_CA_BUNDLE": "/etc/ssl/curl.pem", "HTTPS_PROXY": "http://proxy.test:3128"},
]

#: What a call passes: the call's proxies, stream, verify and cert.
CALLS: List[Dict[str, Any]] = [
    {"proxies": {}, "stream": None, "verify": None, "cert": None},
    {"proxies": {}, "stream": True, "verify": True, "cert": None},
    {"proxies": {}, "stream": False, "verify": False, "cert": "/tmp/client.pem"},
    {"proxies": {"https": "http://mine.test:8080"}, "stream": None, "verify": "/tmp/ca.pem", "cert": None},
    {"proxies": {"no_proxy": "api.sume.test"}, "stream": None, "verify": None, "cert": ("/c", "/k")},
]

URLS = ["https://api.sume.test/v1/jobs", "https://other.internal/upload", "http://127.0.0.1:9/v1/x"]


@pytest.mark.usefixtures("no_proxy_settings")
@pytest.mark.parametrize("environment", ENVIRONMENTS, ids=lambda e: ",".join(e) or "none")
def test_settings_are_what_requests_merges(
    environment: Dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    ours, theirs = SumeSession(KEY, base_url="https://api.sume.test/v1"), requests.Session()
    for session in (ours, theirs):
        session.verify = "/etc/ssl/session.pem"  # a session-wide setting requests merges in
    for url in URLS:
        for call in CALLS:
            mine, its = (
                dict(call, proxies=dict(call["proxies"])),
                dict(call, proxies=dict(call["proxies"])),
            )
            assert ours.merge_environment_settings(url, **mine) == theirs.merge_environment_settings(
                url, **its
            )
            assert mine["proxies"] == its["proxies"]  # requests fills the caller's dict in


@pytest.mark.usefixtures("no_proxy_settings")
def test_a_session_setting_changed_between_calls_is_merged_in() -> None:
    session = SumeSession(KEY, base_url="https://api.sume.test/v1")
    first = session.merge_environment_settings(URLS[0], {}, None, None, None)
    session.proxies = {"https": "http://session.test:3128"}
    second = session.merge_environment_settings(URLS[0], {}, None, None, None)
    assert first["proxies"] == {}
    assert second["proxies"] == {"https": "http://session.test:3128"}


@pytest.mark.usefixtures("no_proxy_settings")
def test_a_session_that_does_not_trust_the_environment_reads_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.test:3128")
    session = SumeSession(KEY, base_url="https://api.sume.test/v1")
    session.trust_env = False
    assert session.merge_environment_settings(URLS[0], {}, None, None, None)["proxies"] == {}


# -- legacy requests code: hooks, subclasses, copies, other adapters, typed verbs -------------


def _missing_or_echo(seen: Seen, n: int) -> Iterable[Step]:
    yield reply(404, b"{}") if seen.path.endswith("/missing") else reply(200, seen.path.encode())


def test_a_response_hook_that_raises_leaves_the_record_as_it_happened(
    raw_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """requests' ``raise_for_status`` hook on a 404: the record, metrics and log say fix 404;
    the hook's HTTPError reaches the caller as it would through requests."""
    caplog.set_level(logging.DEBUG, logger="sume_urllib3")
    recorder = RecordingObserver()
    session = raw_session(raw_server(_missing_or_echo), observers=[recorder])
    hooks = {"response": lambda r, *a, **k: r.raise_for_status()}

    with pytest.raises(requests.HTTPError) as caught:
        session.get("/missing", hooks=hooks)
    assert b"/v1/ok" == session.get("/ok", hooks=hooks).content

    assert 404 == caught.value.response.status_code
    missing = recorder.outcomes[0]
    assert (Outcome.FIX, 404) == (missing.outcome, missing.status)
    assert {"fix": 1, "ok": 1} == {k: n for k, n in session.metrics.snapshot()["outcomes"].items() if n}
    assert "not retried, the caller must fix it: GET /v1/missing: 404" in caplog.text
    assert "no_retry" not in caplog.text


class _RequestsSignature(SumeSession):
    """Legacy code's override of request(), with requests' own signature and no **kwargs."""

    def request(  # type: ignore[override]
        self,
        method: Any,
        url: Any,
        params: Any = None,
        data: Any = None,
        headers: Any = None,
        cookies: Any = None,
        files: Any = None,
        auth: Any = None,
        timeout: Any = None,
        allow_redirects: bool = True,
        proxies: Any = None,
        hooks: Any = None,
        stream: Any = None,
        verify: Any = None,
        cert: Any = None,
        json: Any = None,
    ) -> requests.Response:
        headers = dict(headers or {}, **{"X-Legacy": "1"})
        return super().request(
            method, url, params, data, headers, cookies, files, auth, timeout,
            allow_redirects, proxies, hooks, stream, verify, cert, json,
        )  # fmt: skip


def test_a_subclass_overriding_request_with_requests_signature_keeps_every_verb(raw_server: Any) -> None:
    api = raw_server()
    session = _RequestsSignature(KEY, base_url=api.url + "/v1", policy=QUICK, fleet=None)

    for verb in ("get", "options", "head", "post", "put", "patch", "delete"):
        assert 200 == getattr(session, verb)("/jobs").status_code, verb

    assert 7 * ["1"] == [seen.headers.get("x-legacy") for seen in api.requests]


class _Tenant(SumeSession):
    """A subclass with an __init__ of its own, as legacy code writes them."""

    def __init__(self, tenant: str, base_url: str) -> None:
        super().__init__(KEY, base_url=base_url, policy=QUICK, fleet=None)
        self.headers["X-Tenant"] = tenant


@pytest.mark.parametrize(
    "clone",
    [lambda s: pickle.loads(pickle.dumps(s)), copy.copy, copy.deepcopy],
    ids=["pickle", "copy", "deepcopy"],
)
def test_a_subclass_with_its_own_init_copies_and_pickles(
    raw_server: Any, clone: Callable[[Any], Any]
) -> None:
    api = raw_server()

    copied = clone(_Tenant("acme", api.url + "/v1"))

    assert type(copied) is _Tenant
    assert b"/v1/jobs" == copied.get("/jobs").content
    assert ("acme", KEY) == (api.requests[0].headers["x-tenant"], api.requests[0].headers["x-api-key"])


def _stall(seen: Seen, n: int) -> Iterable[Step]:
    yield 6.0
    yield reply(200, b"late")


@pytest.mark.slow  # real time: runs in CI's slow step
def test_a_plain_adapter_mounted_to_size_the_pool_keeps_the_session_timeout(raw_server: Any) -> None:
    """HTTPAdapter(pool_maxsize=32) over the API: a call without timeout= still gives up on the
    session's 1 s read timeout, not after the server's 6 s stall."""
    session = raw_session(raw_server(_stall), timeout=(1, 1))
    with pytest.warns(UserWarning, match="not a SumeAdapter"):
        session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=32))

    started = time.monotonic()
    with pytest.raises(requests.ReadTimeout):
        session.get("/jobs")
    assert time.monotonic() - started < 3


_MISTYPED = """
from sume_urllib3 import SumeSession
session = SumeSession()
session.get("/jobs", header={"a": "b"})
session.post("/jobs", jsn={})
session.get("/jobs", timeout="5")
session.get("/jobs", headers={"a": "b"}, timeout=(5, None), policy=session.policy)
session.post("/jobs", {"a": 1}, json={}, params={"q": 1}, policy=None)
"""


@pytest.mark.slow
def test_mypy_reports_misspelt_and_mistyped_arguments_of_the_verbs(tmp_path: Any) -> None:
    """mypy --strict finds the three misuses that requests' own types find, and no other error."""
    api = pytest.importorskip("mypy.api")
    (tmp_path / "misuse.py").write_text(_MISTYPED)

    out, _, _ = api.run(["--strict", "--no-error-summary", str(tmp_path / "misuse.py")])

    errors = [line.split(": error: ")[0] for line in out.splitlines() if ": error: " in line]
    assert ["4", "5", "6"] == [where.rsplit(":", 1)[-1] for where in errors if "misuse.py" in where], out


def test_a_request_that_was_never_prepared_is_refused_as_requests_refuses_it() -> None:
    """``send(requests.Request(...))`` raises requests' own ValueError, whatever adapter is mounted."""
    session = SumeSession("sk_test_unprepared", base_url="https://api.sume.test/v1")
    with pytest.raises(ValueError, match="PreparedRequest"):
        session.send(requests.Request("GET", "https://api.sume.test/v1/me"))  # type: ignore[arg-type]
