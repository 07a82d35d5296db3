"""SumeRetry is urllib3's Retry wherever the Sume policy does not decide (issue 24).

One test per incompatibility that urllib3's own suite found with ``Retry`` swapped for
``SumeRetry``, and per regression requests' own suite found with ``SumeSession``. The
differences the policy makes on purpose are listed in docs/compatibility.md ("Differences
from urllib3's Retry") and in ``benchmarks/peers-expected.txt``; ``benchmarks/peers.py`` runs
both suites.
"""

from __future__ import annotations

import ssl
import threading
from typing import Any, Callable, Dict, List

import pytest
import requests
import urllib3
from urllib3.exceptions import (
    ConnectTimeoutError,
    MaxRetryError,
    ReadTimeoutError,
    ResponseError,
    SSLError,
)
from urllib3.util.retry import Retry

from sume_urllib3 import (
    ConfigurationError,
    Outcome,
    Policy,
    SumeAdapter,
    SumeRetry,
    SumeSession,
    sume_record,
)
from sume_urllib3.testing import FakeSume, Reply

from .conftest import VirtualTime
from .raw_server import (
    QUICK,
    status_503_once_on_warm,
    status_then_ok,
)

#: A backoff without jitter: 0.25 s, 0.5 s, 1 s ...
EXACT = Policy(backoff_base=0.25, jitter=(1.0, 1.0))


def lone(vtime: VirtualTime, *args: Any, **kwargs: Any) -> SumeRetry:
    """A SumeRetry used alone (no adapter), on virtual time."""
    return SumeRetry(*args, sleep=vtime.sleep, clock=vtime.clock, **kwargs)


# -- 1. Retry(3) ----------------------------------------------------------------------------


def test_1_total_is_the_first_positional_argument_as_in_urllib3() -> None:
    """SumeRetry(3) is total=3, SumeRetry(0, read=False) as urllib3 writes it; a Policy may come first."""
    assert 3 == SumeRetry(3).total
    assert (0, False) == (SumeRetry(0, read=False).total, SumeRetry(0, read=False).read)
    both = SumeRetry(Policy(max_retries=2), 5, 1)
    assert (2, 5, 1) == (both.policy.max_retries, both.total, both.connect)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("fast",), {}, "policy must be a Policy"),
        ((3,), {"total": 4}, "total by position and by name"),
        ((Policy(),), {"policy": Policy()}, "policy once"),
    ],
)
def test_1_positional_arguments_that_do_not_fit_are_refused(args: Any, kwargs: Any, message: str) -> None:
    """Something that is neither a Policy nor a total, or an argument given twice, is a ConfigurationError."""
    with pytest.raises(ConfigurationError, match=message):
        SumeRetry(*args, **kwargs)


# -- 2. read retries that run out ------------------------------------------------------------


def test_2_read_retries_that_run_out_raise_max_retry_error(vtime: VirtualTime) -> None:
    """Retry(read=0) and a read timeout: MaxRetryError whose reason is the timeout, as urllib3."""
    error = ReadTimeoutError(None, "/", "read timed out")  # type: ignore[arg-type]

    with pytest.raises(MaxRetryError) as raised:
        lone(vtime, read=0).increment(method="GET", error=error)

    assert raised.value.reason is error


def test_2_a_keyless_post_read_failure_is_the_error_itself(vtime: VirtualTime) -> None:
    """Not resent (urllib3's method gate does the same): the timeout itself, not MaxRetryError."""
    error = ReadTimeoutError(None, "/", "read timed out")  # type: ignore[arg-type]

    with pytest.raises(ReadTimeoutError):
        lone(vtime).increment(method="POST", error=error)


def test_2_read_timeouts_on_a_pool_manager_end_in_max_retry_error(fake: FakeSume, vtime: VirtualTime) -> None:
    """On a real socket: read=1, two slow answers, MaxRetryError(ReadTimeoutError) after two sends."""
    fake.script("GET", "/slow", Reply(delay=0.5), Reply(delay=0.5))
    http = urllib3.PoolManager(retries=lone(vtime, EXACT, read=1), timeout=0.1)

    with pytest.raises(MaxRetryError) as raised:
        http.request("GET", fake.url + "/slow")

    assert isinstance(raised.value.reason, ReadTimeoutError)
    assert 2 == len(fake.requests)
    http.clear()


# -- 3. TLS errors ---------------------------------------------------------------------------


def test_3_a_tls_error_is_counted_as_urllib3_counts_it(vtime: VirtualTime) -> None:
    """Retry(connect=1) and an SSLError: a retry on the ``other`` counter, which can run out."""
    error = SSLError()

    twice = lone(vtime, connect=1).increment(error=error).increment(error=error)
    assert 2 == len(twice.history)
    assert not twice.is_exhausted()

    once = lone(vtime, other=1).increment(error=error)
    with pytest.raises(MaxRetryError) as raised:
        once.increment(error=error)
    assert raised.value.reason is error


def test_3_a_certificate_that_failed_verification_is_not_retried(vtime: VirtualTime) -> None:
    """It would fail the same way again: raised at once (a listed difference from urllib3)."""
    error = SSLError(ssl.SSLCertVerificationError(1, "certificate verify failed"))

    with pytest.raises(SSLError):
        lone(vtime, connect=1).increment(method="GET", error=error)


def test_3_a_tls_error_on_a_keyless_post_is_not_resent(vtime: VirtualTime) -> None:
    """A TLS error may come after the request was sent: only a replay-safe request is resent."""
    with pytest.raises(SSLError):
        lone(vtime).increment(method="POST", url="/", error=SSLError())


# -- 4. a bare increment ---------------------------------------------------------------------


def test_4_an_increment_with_no_response_and_no_error_counts_like_urllib3(vtime: VirtualTime) -> None:
    """increment(method="GET") moves total; the next one past it raises urllib3's generic cause."""
    retry = lone(vtime, total=1).increment(method="GET")
    assert 0 == retry.total

    with pytest.raises(MaxRetryError, match=ResponseError.GENERIC_ERROR):
        retry.increment(method="GET")


# -- 5. is_retry -------------------------------------------------------------------------------


def test_5_is_retry_follows_status_forcelist() -> None:
    """With a status_forcelist only its statuses (and the policy's retry rows) go on to increment."""
    five_hundreds = SumeRetry(status_forcelist=range(500, 600))
    teapot = SumeRetry(total=1, status_forcelist=[418])

    assert [False, False, True] == [five_hundreds.is_retry("GET", s) for s in (200, 400, 500)]
    assert [False, True, True] == [teapot.is_retry("GET", s) for s in (400, 418, 503)]


def test_5_without_a_forcelist_every_error_status_may_be_decided_by_its_body() -> None:
    """Policy.trust_body: a 500 whose body says retryable goes on to increment; a success never."""
    assert [False, True, True] == [SumeRetry().is_retry("GET", s) for s in (200, 400, 500)]
    assert [False, True] == [SumeRetry(Policy(trust_body=False)).is_retry("GET", s) for s in (500, 503)]


def test_5_is_retry_is_false_for_a_method_that_may_not_be_resent() -> None:
    """A keyless POST, or a method outside allowed_methods, is never shown to increment."""
    assert not SumeRetry(status_forcelist=[500]).is_retry("POST", 500)
    assert not SumeRetry(allowed_methods=["GET"]).is_retry("PUT", 503)


def test_5_a_string_status_in_the_forcelist_is_refused() -> None:
    """urllib3 would never match "418" (it compares ints): a ConfigurationError says so."""
    with pytest.raises(ConfigurationError, match="'418'"):
        SumeRetry(status_forcelist=["418"])


# -- 6. a Retry-After status out of retries ----------------------------------------------------


def test_6_a_429_with_retry_after_out_of_retries_is_returned(fake: FakeSume, vtime: VirtualTime) -> None:
    """Retry(total=1) and two 429s with Retry-After: the second 429 comes back, as urllib3 returns it."""
    fake.script("GET", "/busy", Reply.error(429, retry_after="1"), Reply.error(429, retry_after="1"))
    http = urllib3.PoolManager(retries=lone(vtime, total=1))

    response = http.request("GET", fake.url + "/busy")

    assert (429, 2, [1.0]) == (response.status, len(fake.requests), vtime.sleeps)
    assert response.data  # returned with its body, not drained
    http.clear()


def test_6_a_forced_status_out_of_retries_raises_as_urllib3_raises(
    fake: FakeSume, vtime: VirtualTime
) -> None:
    """The same with status_forcelist=[429]: raise_on_status applies, MaxRetryError."""
    fake.script("GET", "/busy", Reply.error(429, retry_after="1"), Reply.error(429, retry_after="1"))
    http = urllib3.PoolManager(retries=lone(vtime, total=1, status_forcelist=[429]))

    with pytest.raises(MaxRetryError):
        http.request("GET", fake.url + "/busy")
    http.clear()


# -- 7. allowed_methods=False -------------------------------------------------------------------


@pytest.mark.parametrize("allowed", [None, False, [], frozenset()], ids=repr)
def test_7_every_spelling_of_every_method_is_refused_by_name(allowed: Any) -> None:
    """None, False and an empty collection mean "resend every method" to urllib3: a ConfigurationError."""
    with pytest.raises(ConfigurationError, match=r"allowed_methods=.* would resend every method"):
        SumeRetry(allowed_methods=allowed)


def test_7_allowed_methods_must_be_a_collection() -> None:
    """A bare string is not a list of methods (urllib3 would test membership letter by letter)."""
    with pytest.raises(ConfigurationError, match="collection of method names"):
        SumeRetry(allowed_methods="GET")


# -- 8. repr -----------------------------------------------------------------------------------


def test_8_repr_reads_like_urllib3s_then_adds_the_policy() -> None:
    """urllib3's five counters in its order, then ``other`` and the policy's caps."""
    ours = repr(SumeRetry(total=10, redirect=3))
    theirs = repr(Retry(total=10, redirect=3))

    assert ours.replace("SumeRetry(", "Retry(", 1).startswith(theirs[:-1] + ", other=None")
    assert ours.endswith("max_retries=6, max_elapsed=120.0)")


# -- raise_on_status and get_backoff_time --------------------------------------------------------


def test_raise_on_status_reads_as_set() -> None:
    """True on a fresh SumeRetry (urllib3's default), False when asked, whatever else ran on the thread."""
    assert SumeRetry().raise_on_status is True
    assert SumeRetry(raise_on_status=False).raise_on_status is False
    assert SumeRetry().new(total=2).raise_on_status is True


def test_raise_on_status_of_one_give_up_does_not_leak_to_another_retry(
    fake: FakeSume, vtime: VirtualTime
) -> None:
    """A refusal answered False on its own object; a fresh SumeRetry on the same thread still says True."""
    fake.script("GET", "/fix", Reply.error(400, "bad_request"))
    http = urllib3.PoolManager(retries=lone(vtime))

    assert 400 == http.request("GET", fake.url + "/fix").status
    assert SumeRetry().raise_on_status is True
    http.clear()


def test_get_backoff_time_answers_from_the_object(vtime: VirtualTime) -> None:
    """The retry increment made knows its wait; the original, a copy and another SumeRetry say 0."""
    original = lone(vtime, EXACT)
    after = original.increment("GET", "/", error=ConnectTimeoutError("refused"))
    seen: List[float] = []
    reader = threading.Thread(target=lambda: seen.append(after.get_backoff_time()))
    reader.start()
    reader.join()

    assert 0.25 == after.get_backoff_time() == seen[0]
    assert [0.0, 0.0, 0.0] == [r.get_backoff_time() for r in (original, after.new(), SumeRetry())]


def test_sleep_waits_the_objects_own_decision(vtime: VirtualTime) -> None:
    """urllib3 calls sleep() on the object increment returned: it waits that object's wait, once."""
    after = lone(vtime, EXACT).increment("GET", "/", error=ConnectTimeoutError("refused"))

    after.sleep()
    after.sleep()

    assert [0.25] == vtime.sleeps


# -- requests' own suite, with SumeSession -------------------------------------------------------


def test_a_redirect_with_a_body_that_fails_to_decode_is_followed(
    make_session: Callable[..., SumeSession], fake: FakeSume
) -> None:
    """requests reads a redirect's body forgivingly and follows it; so does SumeSession."""
    fake.script(
        "GET",
        "/v1/moved",
        Reply(302, body=b"not gzip", headers={"Location": "/v1/here", "Content-Encoding": "gzip"}),
    )
    fake.script("GET", "/v1/here", Reply(200, json={"ok": True}))

    response = make_session().get("/moved")

    assert (200, [302]) == (response.status_code, [r.status_code for r in response.history])


def test_a_broken_body_whose_resend_fails_raises_chunked_encoding_error(
    make_session: Callable[..., SumeSession], fake: FakeSume
) -> None:
    """The body broke, the resends could not even be answered: the caller hears of the body."""
    broken = Reply(200, json={"id": "x" * 200}, chunked=True, truncate=40)
    fake.script("GET", "/v1/jobs", broken, *[Reply(drop="before_headers")] * 8)

    with pytest.raises(requests.exceptions.ChunkedEncodingError) as raised:
        make_session(policy=Policy(max_retries=2)).get("/jobs")

    record = raised.value.sume  # type: ignore[attr-defined]
    # The first send, its resend after the broken body, and one retry of that resend (max_retries=2).
    assert (3, "ChunkedEncodingError") == (record.attempts, record.error)
    assert 3 == len(fake.requests)


def test_an_invalid_timeout_keeps_requests_wording(make_session: Callable[..., SumeSession]) -> None:
    """requests says "must be an int, float or None"; callers match on it."""
    with pytest.raises(ValueError, match="must be an int, float or None"):
        make_session().get("/jobs", timeout="foo")


def test_urllib3_counters_also_cap_the_resend_of_a_broken_body(fake: FakeSume, vtime: VirtualTime) -> None:
    """SumeRetry(total=0) on the adapter: a 200 cut mid-body is not sent again."""
    cut = Reply(200, json={"a": "x" * 500}, chunked=True, truncate=40)
    fake.script("GET", "/doc", cut, Reply(200, json={"a": "b"}))
    plain = requests.Session()
    plain.mount("http://", SumeAdapter(max_retries=SumeRetry(total=0, sleep=vtime.sleep, clock=vtime.clock)))

    with pytest.raises(requests.exceptions.ChunkedEncodingError) as info:
        plain.get(fake.url + "/doc")

    assert 1 == len(fake.requests)
    record = sume_record(info.value)
    assert record is not None
    assert (Outcome.NO_RETRY, 1) == (record.outcome, record.attempts)


def test_status_forcelist_retries_a_status_the_policy_has_no_row_for(raw_server: Any) -> None:
    """SumeRetry(status_forcelist=[502]): a 502 is retried, then the 200 is returned."""
    api = raw_server(status_then_ok(502))
    waits: List[float] = []
    http = urllib3.PoolManager(retries=SumeRetry(QUICK, status_forcelist=[502], sleep=waits.append))

    response = http.request("GET", api.url + "/v1/jobs")

    assert 200 == response.status
    assert 2 == len(api.requests)
    assert [0.05] == waits


def test_without_status_forcelist_a_502_is_not_retried(raw_server: Any) -> None:
    """The contrast: the default policy returns a 502 as it came."""
    api = raw_server(status_then_ok(502))
    http = urllib3.PoolManager(retries=SumeRetry(QUICK, sleep=lambda s: None))

    assert 502 == http.request("GET", api.url + "/v1/jobs").status
    assert 1 == len(api.requests)


def test_allowed_methods_none_is_refused() -> None:
    """allowed_methods=None would resend a POST without a key: ConfigurationError."""
    with pytest.raises(ConfigurationError, match="allowed_methods"):
        SumeRetry(allowed_methods=None)


def test_allowed_methods_narrows_what_is_resent(raw_server: Any) -> None:
    """allowed_methods=["GET"]: a PUT answered 503 is not resent."""
    api = raw_server(status_then_ok(503))
    http = urllib3.PoolManager(retries=SumeRetry(QUICK, allowed_methods=["GET"], sleep=lambda s: None))

    assert 503 == http.request("PUT", api.url + "/v1/jobs/1", body=b"{}").status
    assert 1 == len(api.requests)


def test_respect_retry_after_header_false_waits_the_backoff_instead(raw_server: Any) -> None:
    """respect_retry_after_header=False: a 503 with Retry-After: 30 waits the 0.05 s backoff."""
    api = raw_server(status_then_ok(503, {"Retry-After": "30"}))
    waits: List[float] = []
    http = urllib3.PoolManager(
        retries=SumeRetry(QUICK, respect_retry_after_header=False, sleep=waits.append), timeout=2
    )

    response = http.request("GET", api.url + "/v1/jobs")

    assert 200 == response.status
    assert [0.05] == waits


@pytest.mark.parametrize(
    ("argument", "field"),
    [("backoff_factor", "backoff_base"), ("backoff_max", "backoff_max"), ("backoff_jitter", "jitter")],
)
def test_backoff_arguments_are_refused_naming_the_policy_field(argument: str, field: str) -> None:
    """SumeRetry(backoff_factor=0.5) raises ConfigurationError naming Policy.backoff_base."""
    kwargs: Dict[str, Any] = {argument: 7.5}
    with pytest.raises(ConfigurationError, match=f"Policy\\({field}="):
        SumeRetry(**kwargs)


def test_a_lone_sume_retry_leaves_no_request_state_behind_on_its_thread(raw_server: Any) -> None:
    """After a PoolManager retry, a SumeAdapter POST on the same thread is its own request (key, attempts)."""
    api = raw_server(status_503_once_on_warm)  # /v1/warm: 503 then 200; everything else 200
    http = urllib3.PoolManager(retries=SumeRetry(QUICK, sleep=lambda s: None))
    assert 200 == http.request("GET", api.url + "/v1/warm").status
    session = requests.Session()
    session.mount("http://", SumeAdapter(QUICK, fleet=None))

    response = session.post(api.url + "/v1/jobs", json={})

    record = sume_record(response)
    assert record is not None
    assert "idempotency-key" in api.requests[-1].headers
    assert Outcome.OK is record.outcome
    assert 1 == record.attempts
    assert "POST" == record.method
