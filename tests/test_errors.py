"""One except clause for every give-up: the hierarchy, what each error carries, pickling and JSON."""

from __future__ import annotations

import json
import pickle
import threading
import time
from typing import Any, Callable, Mapping, Optional, Type

import pytest
import requests
from urllib3.exceptions import ReadTimeoutError

from sume_urllib3 import (
    ConfigurationError,
    Outcome,
    Policy,
    SumeError,
    SumeRecord,
    SumeRetryError,
    SumeSession,
    idempotency_key_for,
    sume_record,
)
from sume_urllib3._errors import raisable
from sume_urllib3._idempotency import validate_idempotency_key
from sume_urllib3._record import record_from_summary, summary
from sume_urllib3.exceptions import (
    SumeChunkedEncodingError,
    SumeConnectionError,
    SumeConnectTimeout,
    SumeContentDecodingError,
    SumeProxyError,
    SumeReadTimeout,
    SumeSSLError,
    SumeTimeout,
)
from sume_urllib3.pacing import Grant
from sume_urllib3.testing import FakeSume, Reply

from .conftest import VirtualTime
from .raw_server import (
    QUICK,
    always,
    raw_session,
)

MakeSession = Callable[..., SumeSession]

TRANSPORT = [
    (SumeConnectionError, requests.exceptions.ConnectionError),
    (SumeConnectTimeout, requests.exceptions.ConnectTimeout),
    (SumeProxyError, requests.exceptions.ProxyError),
    (SumeSSLError, requests.exceptions.SSLError),
    (SumeTimeout, requests.exceptions.Timeout),
    (SumeReadTimeout, requests.exceptions.ReadTimeout),
    (SumeChunkedEncodingError, requests.exceptions.ChunkedEncodingError),
    (SumeContentDecodingError, requests.exceptions.ContentDecodingError),
]


def a_record(**changes: Any) -> SumeRecord:
    fields: dict = dict(
        idempotency_key="0b6f3a52-6d9e-4c1e-9f7a-1d2c3b4a5e6f",
        attempts=3,
        outcome=Outcome.GAVE_UP,
        status=None,
        code=None,
        request_id="req_2",
        request_ids=("req_1", "req_2"),
        waits=(0.5, 1.0),
        elapsed=2.25,
        reason="no response: connection failed after sending: attempt cap reached",
        method="POST",
        url="https://user:pw@api.example/v1/avatars?X-Amz-Signature=secret",
        retry_in=1.5,
        error="ProtocolError",
    )
    fields.update(changes)
    return SumeRecord(**fields)


# -- the hierarchy ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("cls", "base"), TRANSPORT, ids=[c.__name__ for c, _ in TRANSPORT])
def test_each_transport_give_up_is_both_kinds(cls: Type[SumeRetryError], base: type) -> None:
    """A SumeRetryError and requests' own class: both except clauses catch it."""
    error = raisable(base("boom"), a_record())

    assert type(error) is cls
    assert isinstance(error, SumeRetryError)
    assert isinstance(error, SumeError)
    assert isinstance(error, base)
    assert isinstance(error, requests.exceptions.RequestException)
    assert isinstance(error, requests.exceptions.RetryError)


def test_connect_timeouts_and_tls_are_connection_errors_too() -> None:
    """requests' parents stay: a SumeConnectTimeout is a ConnectionError and a Timeout."""
    assert issubclass(SumeConnectTimeout, SumeConnectionError)
    assert issubclass(SumeConnectTimeout, requests.exceptions.Timeout)
    assert issubclass(SumeSSLError, requests.exceptions.ConnectionError)


def test_errors_that_are_not_give_ups_keep_their_class() -> None:
    """A bad URL or too many redirects is the caller's to fix: raised as requests raised it."""
    for error in (requests.exceptions.InvalidURL("x"), requests.exceptions.TooManyRedirects("x")):
        assert raisable(error, a_record()) is error

    class Custom(requests.exceptions.ConnectionError):
        pass

    custom = Custom("x")
    assert raisable(custom, a_record()) is custom  # its own except clauses must keep working


def test_a_give_up_says_what_requests_said_after_the_record() -> None:
    """The message names attempts, reason, request ids and retry_in, then requests' own words."""
    error = raisable(requests.exceptions.ReadTimeout("Read timed out. (read timeout=1.5)"), a_record())
    assert isinstance(error, SumeRetryError)

    assert str(error) == (
        "gave up after 3 attempts in 2.25s: no response: connection failed after sending: attempt cap "
        "reached (request ids: req_1, req_2); try again in 1.5s: Read timed out. (read timeout=1.5)"
    )
    assert "sk_" not in repr(error)


# -- real requests: what ends each way ----------------------------------------------------------------


def test_a_read_timeout_at_the_deadline_is_caught_by_either_clause(fake: FakeSume) -> None:
    """A slow answer past the deadline: SumeReadTimeout, with retry_in and the key, from requests' error."""
    fake.script("POST", "/v1/avatars", Reply(201, json={"id": "av_1"}, delay=2.0))
    session = SumeSession("sk_test", base_url=fake.url + "/v1", fleet=None)
    policy = Policy(max_elapsed=0.3, backoff_base=0.05)

    with pytest.raises(SumeRetryError) as caught:
        session.post("/avatars", json={}, policy=policy, timeout=(2.0, 0.2))

    error = caught.value
    assert isinstance(error, requests.exceptions.ReadTimeout)
    assert type(error) is SumeReadTimeout
    assert isinstance(error.__cause__, requests.exceptions.ReadTimeout)  # requests' own, kept
    assert Outcome.GAVE_UP == error.record.outcome
    assert error.retry_in is not None
    assert error.idempotency_key == fake.requests[0].headers["Idempotency-Key"]
    assert error.response is None
    assert error.sume is error.record


def test_a_body_broken_on_the_last_attempt_can_be_retried_later(
    fake: FakeSume, make_session: MakeSession
) -> None:
    """A success whose body breaks when no retry is left: SumeChunkedEncodingError with a retry_in."""
    fake.script("POST", "/v1/avatars", Reply(201, json={"id": "av_1" * 50}, truncate=10))
    session = make_session(policy=Policy(max_retries=0), fleet=None)

    with pytest.raises(requests.exceptions.ChunkedEncodingError) as caught:
        session.post("/avatars", json={})

    assert type(caught.value) is SumeChunkedEncodingError
    assert caught.value.retry_in is not None
    assert caught.value.idempotency_key is not None


class Refusing:
    """A fleet that refuses every turn with the same "next turn in 2 s", as a busy pace does."""

    def acquire(
        self, key_id: str, *, time_left: float, retry: Optional[str] = None, not_before: float = 0.0
    ) -> Grant:
        return Grant(wait=2.0, refused="pace 5/s: next turn in 2.0s, after the deadline", source="pace")

    def release(
        self, key_id: str, grant: Grant, status: Optional[int], headers: Optional[Mapping[str, str]]
    ) -> None:
        pass


@pytest.mark.parametrize(("draw", "expected"), [(0.0, 2.0), (0.25, 2.5), (0.999, 3.998)])
def test_refused_callers_are_told_different_turns(fake: FakeSume, draw: float, expected: float) -> None:
    """retry_in after a refusal is the next turn spread over one more of it, from the injected rng."""
    now = time.monotonic()
    session = SumeSession(
        "sk_test", base_url=fake.url + "/v1", fleet=Refusing(), rng=lambda: draw, clock=lambda: now
    )

    with pytest.raises(SumeRetryError) as caught:
        session.post("/avatars", json={})

    assert type(caught.value) is SumeRetryError
    assert (0, True) == (caught.value.record.attempts, caught.value.record.fleet_refused)
    assert expected == pytest.approx(caught.value.retry_in)
    assert [] == fake.requests


# -- pickling and JSON ---------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [SumeRetryError] + [c for c, _ in TRANSPORT], ids=lambda c: c.__name__)
def test_pickles_with_its_class_record_and_message(cls: Type[SumeRetryError]) -> None:
    """Pickled (Celery's pickle serializer, multiprocessing) it comes back whole, response left out."""
    error = cls(a_record())
    error.message = error.message + ": Read timed out."

    back = pickle.loads(pickle.dumps(error))

    assert type(back) is cls
    assert a_record() == back.record
    assert str(error) == str(back)
    assert back.response is None


@pytest.mark.parametrize(
    "cls", [SumeRetryError, SumeReadTimeout, SumeConnectionError], ids=lambda c: c.__name__
)
def test_rebuilds_from_json_args_as_a_json_result_backend_does(cls: Type[SumeRetryError]) -> None:
    """``cls(*json.loads(json.dumps(error.args)))`` is what Celery's JSON backend does: same record."""
    error = cls(a_record())

    back = cls(*json.loads(json.dumps(error.args)))

    assert type(back) is cls
    assert str(error) == str(back)
    assert 1.5 == back.retry_in
    assert a_record().idempotency_key == back.idempotency_key
    # the query and the credentials are gone
    assert a_record(url="https://api.example/v1/avatars?<redacted>") == back.record


def a_transport_give_up() -> SumeRetryError:
    """What SumeSession raises when a read times out: requests put urllib3's error in args[0]."""
    urllib3_error = ReadTimeoutError(None, "/v1/jobs", "Read timed out. (read timeout=2.0)")  # type: ignore[arg-type]
    give_up = raisable(requests.exceptions.ReadTimeout(urllib3_error), a_record())
    assert isinstance(give_up, SumeRetryError)
    return give_up


def test_a_transport_give_up_keeps_requests_first_argument() -> None:
    """args[0] is urllib3's error, as in requests (its own suite reads ``e.args[0].args[0]``)."""
    error = a_transport_give_up()

    assert isinstance(error.args[0], ReadTimeoutError)
    assert "Read timed out" in error.args[0].args[0]
    assert (str(error), summary(a_record())) == error.args[1:]


def test_a_transport_give_up_rebuilds_from_json_args() -> None:
    """A JSON backend keeps urllib3's error as its repr; the give-up, its record and args come back."""
    error = a_transport_give_up()
    encodable = [repr(arg) if isinstance(arg, BaseException) else arg for arg in error.args]

    back = type(error)(*json.loads(json.dumps(encodable)))

    assert (SumeReadTimeout, str(error), 1.5) == (type(back), str(back), back.retry_in)
    assert a_record(url="https://api.example/v1/avatars?<redacted>") == back.record
    assert "Read timed out" in back.args[0]
    assert back.args == type(back)(*back.args).args  # stored again, read again: the same


def test_a_transport_give_up_round_trips_celerys_json_backend() -> None:
    """Celery's own prepare_exception / exception_to_python with the JSON serializer."""
    celery = pytest.importorskip("celery")
    from celery.backends.base import Backend

    backend = Backend(app=celery.Celery(set_as_current=False), serializer="json")
    error = a_transport_give_up()

    back = backend.exception_to_python(backend.decode(backend.encode(backend.prepare_exception(error))))

    assert (SumeReadTimeout, str(error), error.idempotency_key) == (
        type(back),
        str(back),
        back.idempotency_key,
    )
    assert "Read timed out" in back.args[0]


def test_a_transport_give_up_pickles_with_requests_first_argument() -> None:
    """Pickled it keeps args[0] (urllib3's error, where it pickles with its message: older
    urllib3 pool errors come back as "None: None"); otherwise args[0] becomes its repr."""
    back = pickle.loads(pickle.dumps(a_transport_give_up()))

    assert (SumeReadTimeout, a_record()) == (type(back), back.record)
    first = back.args[0]
    assert "Read timed out" in (first if isinstance(first, str) else first.args[0])

    unpicklable = raisable(requests.exceptions.ConnectionError(threading.Lock()), a_record())
    again = pickle.loads(pickle.dumps(unpicklable))
    assert (SumeConnectionError, a_record()) == (type(again), again.record)
    assert "lock" in again.args[0]


def test_the_summary_leaves_the_urls_secrets_out() -> None:
    """No query string (a presigned signature) and no user:password reach a result store."""
    data = summary(a_record())

    assert "https://api.example/v1/avatars?<redacted>" == data["url"]
    assert "secret" not in json.dumps(data)
    assert "pw" not in json.dumps(data)
    assert "gave_up" == data["outcome"]


def test_a_summary_with_nothing_usable_still_rebuilds() -> None:
    """Old or foreign payloads (only a message) rebuild with the message as the reason."""
    error = SumeRetryError("gave up after 1 attempt")

    assert "gave up after 1 attempt" == str(error)
    assert "gave up after 1 attempt" == error.record.reason
    assert error.retry_in is None
    assert Outcome.GAVE_UP == record_from_summary({"outcome": "nonsense"}).outcome


# -- keys that survive a queue ------------------------------------------------------------------------


def test_a_derived_key_is_stable_valid_and_scoped() -> None:
    """The same id gives the same key everywhere; a scope gives another; every key is valid."""
    key = idempotency_key_for("d1b5c7e0-8f0a-4d4e-9d3b-2b6f1e0c9a11")

    assert "7b369b0e-b8aa-5fb1-92ee-af3974b70676" == key  # pinned: a change would resend every job
    assert key == idempotency_key_for("d1b5c7e0-8f0a-4d4e-9d3b-2b6f1e0c9a11")
    assert key != idempotency_key_for("d1b5c7e0-8f0a-4d4e-9d3b-2b6f1e0c9a11", "video")
    assert idempotency_key_for("a", "b:c") != idempotency_key_for("a:b", "c")
    assert key == validate_idempotency_key(key)
    derived = idempotency_key_for("ü ñ \x00" * 200, 7)  # any text in, a valid key out
    assert derived == validate_idempotency_key(derived)


@pytest.mark.parametrize("bad", [None, "", "   ", True, 1.5, b"id"])
def test_a_key_needs_a_real_id(bad: Any) -> None:
    """None (no task id outside a worker), empty, or a non-id type: a clear error, nothing derived."""
    with pytest.raises(ConfigurationError, match="idempotency_key_for"):
        idempotency_key_for(bad)


def test_retry_in_is_the_server_retry_after_left_and_the_key_is_the_one_sent(raw_server: Any) -> None:
    """Give-up on 503 Retry-After 1 (virtual time): retry_in is 1.0, idempotency_key is the header sent."""
    api = raw_server(always(503, b"", {"Retry-After": "1"}))
    vt = VirtualTime()
    session = raw_session(api, sleep=vt.sleep, clock=vt.clock, policy=QUICK.replace(max_elapsed=1.5))

    with pytest.raises(SumeRetryError) as caught:
        session.post("/jobs", json={})

    error = caught.value
    assert 1.0 == error.retry_in
    assert error.idempotency_key is not None
    assert {error.idempotency_key} == {seen.headers["idempotency-key"] for seen in api.requests}


def test_retry_in_is_the_next_backoff_without_retry_after(raw_server: Any) -> None:
    """A give-up on 503s without Retry-After after 1 retry: retry_in is the next backoff (2 x 0.05 s)."""
    api = raw_server(always(503))
    vt = VirtualTime()
    session = raw_session(api, sleep=vt.sleep, clock=vt.clock, policy=QUICK.replace(max_retries=1))

    with pytest.raises(SumeRetryError) as caught:
        session.get("/jobs")

    assert 0.1 == pytest.approx(caught.value.retry_in)


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, b'{"error":{"code":"bad_request"}}'),
        (409, b'{"error":{"code":"x","next_action":"poll the job"}}'),
    ],
    ids=["fix", "poll"],
)
def test_retry_in_is_none_when_retrying_cannot_help(raw_server: Any, status: int, body: bytes) -> None:
    """fix and poll outcomes: retry_in is None (sending the same request again will not work)."""
    api = raw_server(always(status, body, {"Content-Type": "application/json"}))
    session = raw_session(api)

    response = session.post("/jobs", json={})

    record = sume_record(response)
    assert record is not None
    assert record.outcome in (Outcome.FIX, Outcome.POLL)
    assert record.retry_in is None
