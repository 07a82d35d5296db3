"""SumeRetry carried out by urllib3 itself, on a real loopback server."""

from __future__ import annotations

import copy
import gzip
import inspect
import io
import itertools
import json
import pickle
import random
import socket
import threading
from typing import Any, Iterator, Optional

import pytest
import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from sume_urllib3 import (
    ConfigurationError,
    Policy,
    SumeAdapter,
    SumeRetry,
    SumeSession,
)
from sume_urllib3._idempotency import KEYED_METHODS, SAFE_METHODS
from sume_urllib3._request import RequestContext, body_refusal
from sume_urllib3._retry import tunnel_status
from sume_urllib3.testing import FakeSume, RecordingObserver, Reply

from .conftest import VirtualTime
from .raw_server import (
    BEARER,
    KEY,
    QUICK,
    always,
    auth_headers,
    redirect_to,
)


def plain_session(retry: SumeRetry) -> requests.Session:
    session = requests.Session()
    adapter = HTTPAdapter(max_retries=retry)
    session.mount("http://", adapter)
    return session


@pytest.fixture
def retry(vtime: VirtualTime) -> SumeRetry:
    """A standalone SumeRetry on virtual time with seeded jitter."""
    return SumeRetry(sleep=vtime.sleep, clock=vtime.clock, rng=random.Random(5))


# -- construction -------------------------------------------------------------------


def test_defaults_leave_the_cap_to_the_policy() -> None:
    """Without arguments urllib3's counters do not cap; the default policy does."""
    retry = SumeRetry()

    assert (None, 6) == (retry.total, retry.policy.max_retries)


def test_policy_must_be_a_policy() -> None:
    """Passing something else as policy is a ConfigurationError (a ValueError)."""
    with pytest.raises(ValueError, match="policy must be a Policy"):
        SumeRetry(policy={"max_retries": 3})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argument", "field"),
    [("backoff_factor", "backoff_base"), ("backoff_max", "backoff_max"), ("backoff_jitter", "jitter")],
)
def test_urllib3_backoff_arguments_name_the_policy_field_instead(argument: str, field: str) -> None:
    """urllib3's backoff arguments would be ignored, so they are refused with the Policy field to use."""
    with pytest.raises(ConfigurationError, match=rf"Policy\({field}="):
        SumeRetry(**{argument: 7})


def test_from_int_keeps_urllib3_meaning() -> None:
    """from_int(n) is SumeRetry(total=n); from_int(None) is urllib3's plain default."""
    three = SumeRetry.from_int(3)

    assert isinstance(three, SumeRetry)
    assert 3 == three.total
    assert type(SumeRetry.from_int(None)) is Retry
    assert SumeRetry.from_int(three) is three


def test_custom_state_survives_new_and_increment(retry: SumeRetry) -> None:
    """Policy, injected parts and counters are carried by every copy."""
    policy = Policy(max_retries=2)
    original = SumeRetry(policy, sleep=retry.sleep_function, clock=retry.clock, total=5)

    copied = original.new()
    after = original.increment("GET", "/x", error=urllib3.exceptions.ConnectTimeoutError("boom"))

    assert policy is copied.policy is after.policy
    assert original.clock is after.clock
    assert 4 == after.total
    assert 1 == len(after.history)


def test_the_copy_for_urllib3s_increment_is_what_init_would_build() -> None:
    """new() with counters and history only (urllib3's increment) copies without __init__, to the
    same state __init__ builds; a subclass with an __init__ of its own is built through it."""
    original = SumeRetry(Policy(max_retries=4), total=5, status_forcelist=[503], allowed_methods=["GET"])
    original._sume_wait = 1.5  # the decision's, not the copy's
    for counters in ({"total": 4, "history": ("h",)}, {"total": False}, {"redirect": False, "history": None}):
        built = original.new(**counters, observers=original.observers)  # not counters only: __init__
        assert vars(built) == vars(original.new(**counters))
        expected = (0, False) if False in counters.values() else (10, True)
        assert expected == (built.redirect, built.raise_on_redirect)

    class Counted(SumeRetry):
        built = 0

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            type(self).built += 1
            super().__init__(*args, **kwargs)

    counted = Counted(total=3)
    made = counted.new(total=2, history=())
    assert (2, 2) == (Counted.built, made.total)
    assert made.policy is counted.policy


def test_pickle_copy_and_repr_work(retry: SumeRetry) -> None:
    """A SumeRetry pickles, copies and has an informative repr."""
    clone = pickle.loads(pickle.dumps(SumeRetry(Policy(max_retries=3))))

    assert 3 == clone.policy.max_retries
    assert copy.deepcopy(clone).policy == clone.policy
    assert "max_retries=3" in repr(clone)


def test_is_retry_sends_every_error_status_a_get_may_resend_to_increment(retry: SumeRetry) -> None:
    """urllib3 only sees the status; the body decides in increment, for a method that may be resent."""
    get = {status: retry.is_retry("GET", status) for status in (200, 302, 400, 402, 500, 503)}
    post = {status: retry.is_retry("POST", status) for status in (400, 503)}

    assert {200: False, 302: False, 400: True, 402: True, 500: True, 503: True} == get
    assert {400: False, 503: False} == post  # no key here: never resent, so never shown


def canned(status: int) -> urllib3.HTTPResponse:
    """A response as urllib3 hands it to ``increment``: the Sume envelope, body unread."""
    body = json.dumps({"error": {"code": "overloaded"}, "request_id": "req_1"}).encode()
    return urllib3.HTTPResponse(
        body=io.BytesIO(body),
        headers={"Content-Length": str(len(body))},
        status=status,
        preload_content=False,
    )


@pytest.mark.parametrize("total", [None, 0, 1, 3, False])
@pytest.mark.parametrize("status", [None, 0, 1, 2])
@pytest.mark.parametrize("code", [429, 503])
def test_a_retried_response_is_counted_as_urllib3_counts_it(
    retry: SumeRetry, total: Any, status: Any, code: int
) -> None:
    """Counters and history after a retried response are urllib3's own, and so is running out."""
    stock = Retry(total=total, status=status, redirect=10, status_forcelist=[code])  # SumeRetry: 10
    ours = SumeRetry(sleep=retry.sleep_function, clock=retry.clock, total=total, status=status)
    counted = []
    for each in (stock, ours):
        try:
            new = each.increment("GET", "/jobs", response=canned(code))
        except urllib3.exceptions.MaxRetryError:
            counted.append("ran out")
        else:
            counters = (new.total, new.connect, new.read, new.redirect, new.status, new.other)
            counted.append((counters, new.history))

    assert counted[0] == counted[1]


def test_lone_requests_interleaved_on_one_thread_each_keep_their_own_count(retry: SumeRetry) -> None:
    """A lone retry's request goes on with the object urllib3 carries, not with the thread.

    Request A's second 503 meets the policy's cap of one retry although request B began on the
    same thread in between (a streamed body read while another request goes out).
    """
    template = SumeRetry(Policy(max_retries=1), sleep=retry.sleep_function, clock=retry.clock)

    a = template.increment("GET", "/a", response=canned(503))
    b = template.increment("GET", "/b", response=canned(503))
    with pytest.raises(urllib3.exceptions.MaxRetryError, match=r"attempt cap reached \(1 retry\)"):
        a.increment("GET", "/a", response=canned(503))
    with pytest.raises(urllib3.exceptions.MaxRetryError, match=r"attempt cap reached \(1 retry\)"):
        b.increment("GET", "/b", response=canned(503))
    assert 1 == len(a.history) == len(b.history)


# -- through requests' HTTPAdapter ----------------------------------------------------


def test_a_refusal_answers_for_its_own_request_only(fake: FakeSume, retry: SumeRetry) -> None:
    """A 400 handed back as the answer leaves nothing that makes a later refusal on the thread
    hand its response back too: a PUT whose 307 would resend its body still raises."""
    fake.script("GET", "/jobs", Reply.error(400, "invalid_request"))
    fake.script("PUT", "/upload", Reply(307, headers={"Location": "/regional"}))
    session = plain_session(retry)

    assert 400 == session.get(fake.url + "/jobs").status_code
    with pytest.raises(requests.exceptions.RetryError, match="307 redirect not followed"):
        session.put(fake.url + "/upload", data=b"z" * 100)


def test_retries_503_until_success_with_the_policy_schedule(
    fake: FakeSume, retry: SumeRetry, vtime: VirtualTime
) -> None:
    """503, 503, 200 gives the 200 after two backoff waits inside the jitter bounds."""
    fake.script("GET", "/jobs", 503, 503, Reply(200, json={"ok": True}))

    response = plain_session(retry).get(fake.url + "/jobs")

    assert 200 == response.status_code
    assert 2 == len(vtime.sleeps)
    assert 0.5 <= vtime.sleeps[0] <= 1.0
    assert 1.0 <= vtime.sleeps[1] <= 2.0
    assert 2 == len(response.raw.retries.history)


def test_retry_after_is_honoured_exactly(fake: FakeSume, retry: SumeRetry, vtime: VirtualTime) -> None:
    """A 429 with Retry-After: 3 waits exactly 3 seconds."""
    fake.script("GET", "/me", Reply.error(429, "rate_limit_exceeded", retry_after="3"), 200)

    assert 200 == plain_session(retry).get(fake.url + "/me").status_code
    assert [3.0] == vtime.sleeps


@pytest.mark.parametrize(
    "value", ["soon", "", "1.5", "-5", "1m0s", "99999999999", "Mon, 01 Jan 1990 00:00:00 GMT"]
)
def test_garbage_retry_after_never_raises(
    fake: FakeSume, retry: SumeRetry, vtime: VirtualTime, value: str
) -> None:
    """Retry-After values urllib3 chokes on are parsed, clamped or ignored, never raised."""
    fake.script("GET", "/me", Reply.error(503, headers={"Retry-After": value}), 200)

    response = plain_session(retry).get(fake.url + "/me")

    if value == "99999999999":
        assert 503 == response.status_code  # the server asked past the deadline: stop now
        assert [] == vtime.sleeps
    else:
        assert 200 == response.status_code
        assert all(0 <= s <= 60 for s in vtime.sleeps)


def test_fix_response_is_returned_with_its_body(fake: FakeSume, retry: SumeRetry) -> None:
    """402 is not retried and the caller reads the whole error body."""
    fake.script("POST", "/avatars", Reply.error(402, "insufficient_credits", message="top up"))

    response = plain_session(retry).post(fake.url + "/avatars", json={})

    assert 402 == response.status_code
    assert "insufficient_credits" == response.json()["error"]["code"]
    assert 1 == len(fake.requests)


def test_body_can_turn_a_no_retry_row_into_a_retry(fake: FakeSume, retry: SumeRetry) -> None:
    """A 500 whose body says retryable: true is retried (the body beats the table)."""
    fake.script("GET", "/jobs/1", Reply.error(500, "internal_error", retryable=True), 200)

    assert 200 == plain_session(retry).get(fake.url + "/jobs/1").status_code
    assert 2 == len(fake.requests)


def test_body_retryable_false_stops_a_retry_row(fake: FakeSume, retry: SumeRetry) -> None:
    """A 503 whose body says retryable: false is returned at once."""
    fake.script("GET", "/jobs/1", Reply.error(503, "maintenance", retryable=False))

    response = plain_session(retry).get(fake.url + "/jobs/1")

    assert (503, 1) == (response.status_code, len(fake.requests))
    assert "maintenance" == response.json()["error"]["code"]


def test_standalone_post_is_never_resent(fake: FakeSume, retry: SumeRetry) -> None:
    """Without SumeAdapter there is no key, so a POST 503 comes back untouched."""
    fake.script("POST", "/avatars", 503, 200)

    response = plain_session(retry).post(fake.url + "/avatars", json={})

    assert (503, 1) == (response.status_code, len(fake.requests))


def test_standalone_give_up_raises_retry_error_by_default(fake: FakeSume, vtime: VirtualTime) -> None:
    """Giving up after retries follows raise_on_status: requests raises RetryError."""
    fake.script("GET", "/jobs", 503)
    retry = SumeRetry(Policy(max_retries=2), sleep=vtime.sleep, clock=vtime.clock)

    with pytest.raises(requests.exceptions.RetryError):
        plain_session(retry).get(fake.url + "/jobs")
    assert 3 == len(fake.requests)


def test_standalone_give_up_returns_the_body_without_raise_on_status(
    fake: FakeSume, vtime: VirtualTime
) -> None:
    """With raise_on_status=False the last response comes back, body intact."""
    fake.script("GET", "/jobs", Reply.error(503, "queue_full"))
    retry = SumeRetry(Policy(max_retries=2), sleep=vtime.sleep, clock=vtime.clock, raise_on_status=False)

    response = plain_session(retry).get(fake.url + "/jobs")

    assert (503, "queue_full") == (response.status_code, response.json()["error"]["code"])


def test_urllib3_total_still_caps(fake: FakeSume, vtime: VirtualTime) -> None:
    """total=1 stops after one retry even though the policy allows six."""
    fake.script("GET", "/jobs", 503)
    retry = SumeRetry(total=1, sleep=vtime.sleep, clock=vtime.clock, raise_on_status=False)

    assert 503 == plain_session(retry).get(fake.url + "/jobs").status_code
    assert 2 == len(fake.requests)


def test_deadline_stops_before_a_wait_that_would_cross_it(fake: FakeSume, vtime: VirtualTime) -> None:
    """With 10 s of budget, a Retry-After of 30 is not started: the 429 is returned."""
    fake.script("GET", "/jobs", Reply.error(429, retry_after="30"), 200)
    retry = SumeRetry(Policy(max_elapsed=10.0), sleep=vtime.sleep, clock=vtime.clock)

    response = plain_session(retry).get(fake.url + "/jobs")

    assert (429, []) == (response.status_code, vtime.sleeps)


def test_the_template_is_never_mutated(fake: FakeSume, retry: SumeRetry) -> None:
    """Many threads through one adapter leave the shared template exactly as it was."""
    fake.script("GET", "/jobs", 503, 200)
    session = plain_session(retry)
    before = dict(retry.__dict__)

    def work() -> None:
        for _ in range(5):
            session.get(fake.url + "/jobs")

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert before == retry.__dict__


# -- bodies stay readable ---------------------------------------------------------------


def body_reply(status: int, size: int, *, gz: bool, chunked: bool) -> Reply:
    return Reply.error(status, "insufficient_credits", size=size, gzip=gz, chunked=chunked)


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("chunked", [False, True], ids=["length", "chunked"])
@pytest.mark.parametrize("read", ["content", "json", "iter_content", "raw"])
@pytest.mark.parametrize("size", [300, 2_000_000], ids=["small", "2MB"])
def test_error_body_is_intact_for_the_caller(
    fake: FakeSume, retry: SumeRetry, gz: bool, chunked: bool, read: str, size: int
) -> None:
    """After the peek, every way of reading gives the caller the whole body."""
    fake.script("GET", "/pay", body_reply(402, size, gz=gz, chunked=chunked))
    session = plain_session(retry)

    response = session.get(fake.url + "/pay", stream=read == "raw")
    if read == "content":
        body = response.content
    elif read == "json":
        body = json.dumps(response.json()).encode()
    elif read == "iter_content":
        body = b"".join(response.iter_content(8192))
    else:
        raw = response.raw.read()
        body = gzip.decompress(raw) if gz else raw

    assert 402 == response.status_code
    if read == "json":
        assert "insufficient_credits" == json.loads(body)["error"]["code"]
    else:
        assert size == len(body)
        assert "insufficient_credits" == json.loads(body)["error"]["code"]


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_exhausted_body_is_intact(fake: FakeSume, vtime: VirtualTime, gz: bool) -> None:
    """The last 503 after giving up keeps its body (raise_on_status=False)."""
    fake.script("GET", "/q", Reply.error(503, "queue_full", gzip=gz, chunked=True))
    retry = SumeRetry(Policy(max_retries=1), sleep=vtime.sleep, clock=vtime.clock, raise_on_status=False)

    response = plain_session(retry).get(fake.url + "/q")

    assert "queue_full" == response.json()["error"]["code"]


def test_connections_are_released_and_reused(fake: FakeSume, retry: SumeRetry) -> None:
    """Retries and returned error bodies still hand the connection back to the pool."""
    fake.script("GET", "/a", 503, 503, 200)
    fake.script("GET", "/b", Reply.error(402, size=100_000))
    session = plain_session(retry)

    for _ in range(3):
        session.get(fake.url + "/b")
    session.get(fake.url + "/a")

    assert 1 == fake.connections
    assert 6 == len(fake.requests)


# -- through a PoolManager --------------------------------------------------------------


def test_pool_manager_retries_and_peeks_the_preloaded_body(fake: FakeSume, retry: SumeRetry) -> None:
    """PoolManager.request preloads bodies; the decision reads that and the body stays."""
    fake.script(
        "GET", "/x", Reply.error(409, "idempotency_key_in_use"), Reply.error(409, "idempotency_conflict")
    )
    http = urllib3.PoolManager(retries=retry)

    response = http.request("GET", fake.url + "/x")

    assert 409 == response.status
    assert "idempotency_conflict" == json.loads(response.data)["error"]["code"]
    assert 2 == len(fake.requests)


def test_pool_manager_redirects_follow_urllib3_rules(fake: FakeSume, retry: SumeRetry) -> None:
    """A 302 reaching the retry is followed as urllib3 would."""
    fake.script("GET", "/old", Reply(302, headers={"Location": "/new"}, body=b""))
    fake.script("GET", "/new", Reply(200, json={"here": True}))
    http = urllib3.PoolManager(retries=retry)

    response = http.request("GET", fake.url + "/old")

    assert (200, True) == (response.status, json.loads(response.data)["here"])


# -- transport errors ------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_connection_refused_is_retried_even_for_post(retry: SumeRetry, vtime: VirtualTime) -> None:
    """A connection never made is safe to retry for any method, then ConnectionError."""
    url = f"http://127.0.0.1:{free_port()}/avatars"

    with pytest.raises(requests.exceptions.ConnectionError):
        plain_session(retry).post(url, data=b"{}")
    assert 6 == len(vtime.sleeps)


def test_read_timeout_is_retried_for_get(fake: FakeSume, retry: SumeRetry) -> None:
    """A GET whose answer is too slow is sent again."""
    fake.script("GET", "/slow", Reply(200, delay=1.0), Reply(200, json={"ok": 1}))

    response = plain_session(retry).get(fake.url + "/slow", timeout=(2, 0.2))

    assert (200, 2) == (response.status_code, len(fake.requests))


def test_read_timeout_on_keyless_post_is_not_resent(fake: FakeSume, retry: SumeRetry) -> None:
    """A POST that may have reached the server is never sent twice without a key."""
    fake.script("POST", "/slow", Reply(200, delay=1.0))

    with pytest.raises(requests.exceptions.ReadTimeout):
        plain_session(retry).post(fake.url + "/slow", data=b"{}", timeout=(2, 0.2))
    assert 1 == len(fake.requests)


def test_dropped_connection_on_get_is_retried(fake: FakeSume, retry: SumeRetry) -> None:
    """A connection closed before the answer is a read error: retried for GET."""
    fake.script("GET", "/drop", Reply(drop="before_headers"), 200)

    assert 200 == plain_session(retry).get(fake.url + "/drop").status_code


def test_a_bug_in_an_observer_or_peek_never_escapes(fake: FakeSume, vtime: VirtualTime) -> None:
    """An observer that raises does not break the retry."""

    class Broken:
        def on_retry(self, event: Any) -> None:
            raise RuntimeError("observer bug")

    fake.script("GET", "/x", 503, 200)
    retry = SumeRetry(sleep=vtime.sleep, clock=vtime.clock, observers=[Broken()])

    assert 200 == plain_session(retry).get(fake.url + "/x").status_code


def iter_body() -> Iterator[bytes]:
    yield b'{"a":'
    yield b"1}"


def test_waits_are_recorded_by_observers(fake: FakeSume, vtime: VirtualTime) -> None:
    """Each retry reaches the observers with its attempt number, wait and source."""
    recorder = RecordingObserver()
    fake.script("GET", "/x", Reply.error(429, "rate_limit_exceeded", retry_after="2"), 200)
    retry = SumeRetry(sleep=vtime.sleep, clock=vtime.clock, observers=[recorder])

    plain_session(retry).get(fake.url + "/x")

    assert [(1, 2.0, "retry_after", 429, "rate_limit_exceeded")] == [
        (e.attempt, e.wait, e.wait_source, e.status, e.code) for e in recorder.retries
    ]


@pytest.mark.skipif(
    "response.retries" not in inspect.getsource(urllib3.PoolManager.urlopen),
    reason="this urllib3's PoolManager follows redirects with Retry.DEFAULT, not its own retries= "
    "(pass retries=SumeRetry() per call there; the per-call test covers it)",
)
def test_pool_manager_with_sume_retry_strips_the_key_on_a_cross_host_redirect(raw_server: Any) -> None:
    """PoolManager(retries=SumeRetry()): a redirect to another port arrives without x-api-key."""
    other = raw_server()
    api = raw_server(redirect_to(other.url + "/landing"))
    http = urllib3.PoolManager(retries=SumeRetry(QUICK))

    response = http.request("GET", api.url + "/start", headers={"x-api-key": KEY, "Authorization": BEARER})

    assert 200 == response.status
    assert {"x-api-key": KEY, "authorization": BEARER} == auth_headers(api.requests[0])
    assert {} == auth_headers(other.requests[0])


def test_a_per_call_sume_retry_strips_the_key_on_a_cross_host_redirect(raw_server: Any) -> None:
    """http.request(..., retries=SumeRetry()): the redirect to another port arrives without x-api-key."""
    other = raw_server()
    api = raw_server(redirect_to(other.url + "/landing"))
    http = urllib3.PoolManager()

    response = http.request("GET", api.url + "/start", headers={"x-api-key": KEY}, retries=SumeRetry(QUICK))

    assert 200 == response.status
    assert {} == auth_headers(other.requests[0])


@pytest.mark.parametrize("next_hop", ["a plain HTTPAdapter", "another SumeAdapter"])
def test_sume_adapter_takes_the_key_off_before_another_adapter_sends_the_next_hop(
    raw_server: Any, next_hop: str
) -> None:
    """SumeAdapter mounted on the API only (https:// in the guide's example): the redirect's next hop
    is sent by whatever serves the other origin, and requests strips only Authorization, so the
    adapter that got the redirect takes both auth headers off before requests copies the request."""
    other = raw_server()
    api = raw_server(redirect_to(other.url + "/landing"))
    session = requests.Session()
    session.mount(api.url + "/", SumeAdapter(QUICK, fleet=None))
    if next_hop == "another SumeAdapter":
        session.mount(other.url + "/", SumeAdapter(QUICK, fleet=None))

    response = session.get(api.url + "/start", headers={"x-api-key": KEY, "Authorization": BEARER})

    assert b"/landing" == response.content
    assert {"x-api-key": KEY, "authorization": BEARER} == auth_headers(api.requests[0])
    assert {} == auth_headers(other.requests[0])
    sent = response.history[0].request.headers  # the first hop still shows what it sent, as in requests
    assert (sent["x-api-key"], sent["Authorization"]) == (KEY, BEARER)


@pytest.mark.parametrize(
    ("status", "next_method", "keeps_key"),
    [(303, "GET", False), (302, "GET", False), (301, "GET", False), (307, "POST", True)],
)
def test_the_next_hop_another_adapter_sends_carries_the_key_only_while_it_is_the_same_post(
    raw_server: Any, status: int, next_method: str, keeps_key: bool
) -> None:
    """SumeAdapter on the API only: requests makes the next hop of a POST redirected by a 303 (or
    302, 301) a GET, which no longer means the keyed request: the copy requests sends with the
    other origin's adapter carries no Idempotency-Key, as the SumeAdapter's own hops do. A 307
    resends the same POST, key and all; the auth headers never follow."""
    other = raw_server(always(200, b"landed"))
    api = raw_server(always(status, b"", {"Location": other.url + "/landing"}))
    session = requests.Session()
    session.mount(api.url + "/", SumeAdapter(QUICK, fleet=None))

    response = session.post(api.url + "/start", json={"n": 1}, headers={"x-api-key": KEY})

    assert response.status_code == 200
    key = api.requests[0].headers["idempotency-key"]
    landed = other.requests[0]
    assert landed.method == next_method
    assert landed.headers.get("idempotency-key") == (key if keeps_key else None)
    assert {} == auth_headers(landed)
    assert response.history[0].request.headers["Idempotency-Key"] == key  # what the POST sent


def test_pool_manager_keeps_the_key_on_a_same_host_redirect(raw_server: Any) -> None:
    """A redirect that stays on the same host and port keeps x-api-key."""
    api = raw_server(redirect_to("/landing"))
    http = urllib3.PoolManager(retries=SumeRetry(QUICK))

    http.request("GET", api.url + "/start", headers={"x-api-key": KEY})

    assert ["/start", "/landing"] == api.paths()
    assert {"x-api-key": KEY} == auth_headers(api.requests[1])


def test_plain_requests_session_with_sume_adapter_strips_the_key_on_a_cross_host_redirect(
    raw_server: Any,
) -> None:
    """A requests.Session with SumeAdapter mounted: the redirect to another port gets neither auth header."""
    other = raw_server()
    api = raw_server(redirect_to(other.url + "/landing"))
    session = requests.Session()
    session.mount("http://", SumeAdapter(QUICK, fleet=None))

    response = session.get(api.url + "/start", headers={"x-api-key": KEY, "Authorization": BEARER})

    assert b"/landing" == response.content
    assert {} == auth_headers(other.requests[0])


# -- a proxy that refuses the tunnel ------------------------------------------------------------


def refuse_tunnels(status: int) -> Any:
    """A raw-server handler: a forward proxy answering every CONNECT with ``status``."""
    from .raw_server import CLOSE, reply

    def handler(seen: Any, n: int) -> Any:
        yield reply(status, b"proxy says no")
        yield CLOSE

    return handler


def test_tunnel_status_reads_http_clients_refusal_through_urllib3s_wrapping() -> None:
    """http.client's text is where the status lives; anything else is not a tunnel refusal."""
    refused = OSError("Tunnel connection failed: 407 Proxy Authentication Required")
    assert tunnel_status(urllib3.exceptions.ProxyError("Unable to connect to proxy", refused)) == 407
    assert tunnel_status(refused) == 407
    down = ConnectionRefusedError(111, "refused")
    assert tunnel_status(urllib3.exceptions.ProxyError("down", down)) is None
    assert tunnel_status(OSError("Tunnel connection failed: soon")) is None
    assert tunnel_status(ValueError("Tunnel connection failed: 407 x")) is None


@pytest.mark.parametrize("way", ["session", "http_adapter"])
@pytest.mark.parametrize(("status", "sent", "outcome"), [(407, 1, "no_retry"), (503, 3, "gave_up")])
def test_a_proxy_refusing_the_tunnel_is_decided_by_its_statuss_row(
    raw_server: Any, way: str, status: int, sent: int, outcome: str
) -> None:
    """An https request through a proxy that refuses the CONNECT: the proxy's status decides, as
    its response would through a plain-http origin. A 407 is not retried (it was resent seven
    times, as a read failure); a proxy's 503 is, for a POST too, since nothing reached the API."""
    from .raw_server import QUICK

    proxy = raw_server(refuse_tunnels(status))
    policy = QUICK.replace(max_retries=2)
    if way == "session":
        session: requests.Session = SumeSession(
            "sk_test_tunnel", base_url=API, policy=policy, fleet=None, sleep=lambda s: None
        )
    else:
        session = requests.Session()
        session.mount("https://", HTTPAdapter(max_retries=SumeRetry(policy, sleep=lambda s: None)))
    session.trust_env = False
    with pytest.raises(requests.exceptions.ProxyError) as raised:
        session.post(API + "/jobs", json={"n": 1}, proxies={"https": proxy.url})
    assert [seen.method for seen in proxy.requests] == ["CONNECT"] * sent
    if way == "session":
        record = raised.value.sume  # type: ignore[attr-defined]
        assert record.reason.startswith(f"the proxy refused the tunnel: {status}")
        assert (record.outcome, record.retry_in is None) == (outcome, status == 407)


API = "https://api.sume.test/v1"


def test_a_resend_after_a_body_broke_is_a_retry_the_observers_hear_of(fake: Any) -> None:
    """A 200 whose body breaks mid-read is resent: one retry event (its error named) and one
    retry in the metrics, as for a retry urllib3 makes, before the resend's wait."""
    from sume_urllib3.testing import RecordingObserver, Reply

    fake.script("GET", "/v1/report", Reply(200, size=30_000, truncate=5_000), Reply(200, size=30_000))
    recorder = RecordingObserver()
    session = SumeSession(
        "sk_test_x", base_url=fake.url + "/v1", observers=[recorder], fleet=None, sleep=lambda s: None
    )
    response = session.get("/report")
    assert (response.status_code, len(response.content), response.sume.attempts) == (200, 30_000, 2)
    assert [(event.attempt, event.status, event.error) for event in recorder.retries] == [
        (1, None, "ChunkedEncodingError")
    ]
    assert sum(session.metrics.snapshot()["retries"].values()) == 1


# --- refusal: may this request be sent again -------------------------------------------------

OTHER_METHODS = ("CONNECT", "PROPFIND", "FOO", "")
METHODS = (*sorted(SAFE_METHODS), *sorted(KEYED_METHODS), *OTHER_METHODS, None, "get", "post", "Patch")
KEYS = (None, "", "order-42")
BODY_REFUSAL = "the request body cannot be replayed (a generator or a stream without seek)"


def refusal_for(
    method: Optional[str], key: Optional[str], replayable: bool = True, lone: bool = False
) -> Optional[str]:
    """SumeRetry.refusal for a request with ``key`` and a body that is ``replayable`` or not."""
    context = RequestContext(0.0)
    context.key, context.replayable = key, replayable
    context.adapter = None if lone else SumeAdapter(fleet=None)
    return SumeRetry().refusal(context, method)


@pytest.mark.parametrize(
    ("method", "key", "replayable"), list(itertools.product(METHODS, KEYS, (True, False)))
)
def test_refusal_for_every_method_key_and_body(
    method: Optional[str], key: Optional[str], replayable: bool
) -> None:
    """Safe methods may be resent, POST/PATCH only with a key, others never; an unreplayable body never."""
    refusal = refusal_for(method, key, replayable)
    verb = (method or "").upper()
    if verb in KEYED_METHODS and not key:
        assert refusal == f"{verb} without an Idempotency-Key is never resent"
    elif verb not in SAFE_METHODS and verb not in KEYED_METHODS:
        assert refusal == f"{verb or 'unknown method'} is not replay-safe"
    elif not replayable:
        assert refusal == BODY_REFUSAL
    else:
        assert refusal is None


def test_refusal_for_examples() -> None:
    """The rules spelled out on the usual requests."""
    assert refusal_for("GET", None) is None
    assert refusal_for("post", "k") is None
    assert refusal_for("POST", None) == "POST without an Idempotency-Key is never resent"
    assert refusal_for("PUT", None, replayable=False) == BODY_REFUSAL
    assert refusal_for("CONNECT", "k") == "CONNECT is not replay-safe"
    assert refusal_for(None, None) == "unknown method is not replay-safe"


def test_a_lone_retry_never_resends_a_body_it_cannot_see() -> None:
    """Without an adapter the body is unseen: PUT, POST and PATCH are refused, GET and DELETE are not."""
    for method in ("PUT", "POST", "PATCH"):
        assert "cannot see the request body" in (refusal_for(method, "k", lone=True) or "")
        assert "cannot see the request body" in (body_refusal(method, True, lone=True) or "")
    for method in ("GET", "DELETE", "HEAD"):
        assert refusal_for(method, None, lone=True) is None


def test_through_an_adapter_only_an_unreplayable_body_is_refused() -> None:
    """With an adapter, the body seen before the first send decides."""
    assert body_refusal("PUT", True) is None
    assert "cannot be replayed" in (body_refusal("PUT", False) or "")
