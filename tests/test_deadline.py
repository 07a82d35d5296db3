"""The deadline (sume_urllib3/_deadline.py): a server that trickles bytes never outlasts ``max_elapsed``,
and every attempt's timeouts, in any form requests accepts, are capped by the time left.

A read timeout restarts with each piece that arrives, so a server sending one every 0.4 s
keeps ``timeout=(1, 1)`` from firing. With ``Policy(max_elapsed=1)`` every call below ends
within 1.5 s as ``SumeReadTimeout`` (also requests' ``ReadTimeout``) with the record and
``retry_in`` set, never as a late success: the status line and headers, a sized body, a
chunked body, and a ``stream=True`` body read through ``iter_content``; through a
``SumeSession`` and through a ``SumeAdapter`` mounted on a plain ``requests.Session``.
Real time on a real loopback socket: this is about what a socket does.
"""

from __future__ import annotations

import contextlib
import decimal
import fractions
import math
import socket
import time
from typing import Any, Callable, Iterable, Iterator

import pytest
import requests
import urllib3
from urllib3.util.timeout import Timeout

from sume_urllib3 import Outcome, Policy, SumeAdapter, SumeRetryError, SumeSession, sume_record
from sume_urllib3._deadline import MIN_ATTEMPT_TIMEOUT, DeadlineTimeout, check_timeout, timeout_limits
from sume_urllib3._request import RequestContext
from sume_urllib3.exceptions import ConfigurationError, SumeReadTimeout
from sume_urllib3.testing import FakeSume, no_sleep

from .conftest import VirtualTime
from .raw_server import KEY, QUICK, Handler, Loopback, Seen, Step, raw_session, reply, trickled_body

DEADLINE = 1.0
TRICKLE = 0.3  # seconds between pieces: well under the 1 s read timeout, so it never fires
POLICY = Policy(max_elapsed=DEADLINE, max_retries=0)


def trickled_head(seen: Seen, n: int) -> Iterator[Step]:
    """The status line, then one header line at a time, forever slower than the deadline."""
    yield b"HTTP/1.1 200 OK\r\n"
    for i in range(30):
        yield TRICKLE
        yield f"X-Slow-{i}: {i}\r\n".encode()
    yield b"Content-Length: 2\r\n\r\nok"


def trickled_chunked_body(seen: Seen, n: int) -> Iterator[Step]:
    """Headers at once, then one small chunk at a time."""
    yield b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    for _ in range(30):
        yield TRICKLE
        yield b"1\r\nx\r\n"
    yield b"0\r\n\r\n"


HANDLERS = {"head": trickled_head, "sized": trickled_body, "chunked": trickled_chunked_body}


@pytest.fixture
def trickling(raw_server: Callable[[Any], Loopback]) -> Callable[[str], Loopback]:
    return lambda kind: raw_server(HANDLERS[kind])


def _ends_as_a_deadline_give_up(call: Callable[[], Any]) -> None:
    started = time.monotonic()
    with pytest.raises(SumeReadTimeout) as caught:
        call()
    took = time.monotonic() - started
    assert took < DEADLINE + 0.5, f"took {took:.2f} s"
    error = caught.value
    assert isinstance(error, requests.exceptions.ReadTimeout)
    record = sume_record(error)
    assert record is not None
    assert record.outcome is not Outcome.OK
    assert error.retry_in is not None
    assert "deadline" in str(error)


@pytest.mark.slow  # real time: runs in CI's slow step
@pytest.mark.parametrize("kind", sorted(HANDLERS))
def test_a_trickling_server_is_cut_at_the_deadline_through_a_session(
    trickling: Callable[[str], Loopback], kind: str
) -> None:
    """Whatever trickles (headers, sized body, chunked body), the call ends at the deadline."""
    server = trickling(kind)
    with SumeSession(KEY, base_url=server.url + "/v1", policy=POLICY, timeout=(1, 1), fleet=None) as session:
        _ends_as_a_deadline_give_up(lambda: session.get("/slow"))


@pytest.mark.slow  # real time: runs in CI's slow step
def test_a_stream_read_through_iter_content_is_cut_at_the_deadline(
    trickling: Callable[[str], Loopback],
) -> None:
    """``stream=True``: the caller's own reading of a trickling body ends at the deadline too."""
    server = trickling("chunked")
    with SumeSession(KEY, base_url=server.url + "/v1", policy=POLICY, timeout=(1, 1), fleet=None) as session:
        response = session.get("/slow", stream=True)
        _ends_as_a_deadline_give_up(lambda: b"".join(response.iter_content(1)))


@pytest.mark.slow  # real time: runs in CI's slow step
def test_a_mounted_adapter_cuts_a_trickle_at_the_deadline(trickling: Callable[[str], Loopback]) -> None:
    """A SumeAdapter on a plain requests.Session holds the same deadline."""
    server = trickling("sized")
    with requests.Session() as session:
        session.mount("http://", SumeAdapter(POLICY, timeout=(1, 1), fleet=None))
        _ends_as_a_deadline_give_up(lambda: session.get(server.url + "/slow"))


@pytest.mark.slow  # real time: runs in CI's slow step
def test_a_fast_answer_after_a_slow_one_reuses_nothing_the_deadline_cut(
    raw_server: Callable[[Any], Loopback],
) -> None:
    """The connection the deadline shut is never handed to the next call; the next call succeeds."""

    def slow_then_fast(seen: Seen, n: int) -> Iterable[Step]:
        if n == 0:
            yield from trickled_body(seen, n)
        else:
            yield b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

    server = raw_server(slow_then_fast)
    with SumeSession(KEY, base_url=server.url + "/v1", policy=POLICY, timeout=(1, 1), fleet=None) as session:
        with pytest.raises(SumeReadTimeout):
            session.get("/a")
        assert session.get("/a").content == b"ok"


def test_calls_that_finish_in_time_leave_nothing_armed(raw_server: Callable[[Any], Loopback]) -> None:
    """After a hundred quick calls (and a stream read to its end) no watch is left armed."""
    from sume_urllib3 import _deadline

    server = raw_server(lambda seen, n: iter([b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"]))
    with SumeSession(KEY, base_url=server.url + "/v1", policy=POLICY, fleet=None) as session:
        for _ in range(100):
            assert session.get("/a").content == b"ok"
        streamed = session.get("/a", stream=True)
        assert b"".join(streamed.iter_content(1)) == b"ok"
    assert _deadline._watchdog.watches == {}


@pytest.mark.slow  # real time: runs in CI's slow step
def test_a_wait_for_a_free_connection_ends_at_the_deadline(raw_server: Callable[[Any], Loopback]) -> None:
    """A blocking pool whose one connection a held stream keeps: the next call waits for it no
    longer than its deadline (requests gives the wait no bound of its own), and ends as the
    deadline's give-up, naming the pool. Once the stream lets go the pool serves again, with no
    connection lost or made twice."""

    def held_then_quick(seen: Seen, n: int) -> Iterable[Step]:
        if seen.path.endswith("/held"):
            yield b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nheld"
        else:
            yield b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

    server = raw_server(held_then_quick)
    with SumeSession(
        KEY, base_url=server.url + "/v1", policy=POLICY, fleet=None, pool_maxsize=1, pool_block=True
    ) as session:
        held = session.get("/held", stream=True)  # the pool's only connection, kept
        _ends_as_a_deadline_give_up(lambda: session.get("/quick"))
        with pytest.raises(SumeReadTimeout, match="waiting for a free connection from the pool"):
            session.get("/quick", policy=POLICY.replace(max_elapsed=0.1))
        held.close()
        assert session.get("/quick").content == b"ok"
        assert session.get("/quick").content == b"ok"
        pool = session.adapter.poolmanager.connection_from_url(server.url)
        assert pool.pool is not None
        assert pool.pool.qsize() == 1  # its one slot, back: none lost to the timeouts, none added


def stalled_body(seen: Seen, n: int) -> Iterator[Step]:
    """Headers and a first byte at once, then nothing for far longer than the deadline."""
    yield b"HTTP/1.1 200 OK\r\nContent-Length: 30\r\n\r\nx"
    yield 30.0


@pytest.mark.slow  # real time: runs in CI's slow step
@pytest.mark.parametrize("run", range(2))
def test_a_stall_with_a_read_timeout_past_the_deadline_ends_as_the_deadline(
    raw_server: Callable[[Any], Loopback], run: int
) -> None:
    """The read timeout (30 s) is capped to the time left, so it fires when the deadline's watch
    does: whichever comes first, the call ends as the deadline's ``SumeReadTimeout``, never as
    the ``ConnectionError`` requests makes of a read timeout mid-body."""
    server = raw_server(stalled_body)
    with SumeSession(KEY, base_url=server.url, policy=POLICY, fleet=None) as session:
        _ends_as_a_deadline_give_up(lambda: session.get("/stall", timeout=(1, 30)))


# --- check_timeout: exactly what requests accepts --------------------------------------------

ACCEPTED = [
    5,
    2.5,
    30,
    (1, 2),
    (2.5, 30.0),
    (None, 3),
    (3, None),
    (None, None),
    Timeout(connect=1, read=2),
    Timeout(total=3),
    Timeout(connect=None, read=None),
]
REFUSED = [
    0,
    -1,
    0.0,
    True,
    False,
    "5",
    b"5",
    float("inf"),  # requests: OverflowError from the socket
    float("nan"),  # requests: ValueError from the socket
    fractions.Fraction(1, 2),
    (),
    (1,),
    (1, 2, 3),
    (0, 1),
    (1, -1),
    ("1", 2),
    (True, 1),
    (float("inf"), 1),
    [1, 2],
    {"connect": 1},
    object(),
]


@pytest.fixture(scope="module")
def server() -> Iterator[FakeSume]:
    """One loopback FakeSume for the module: requests' own verdict on each timeout."""
    with FakeSume() as fake:
        yield fake


def requests_accepts(server: FakeSume, timeout: Any) -> bool:
    """True when a real requests.get to loopback goes through with this timeout."""
    try:
        requests.get(server.url + "/v1/ping", timeout=timeout).close()
    except (ValueError, TypeError, OverflowError):
        return False
    return True


@pytest.mark.parametrize("timeout", ACCEPTED, ids=repr)
def test_accepts_what_requests_accepts(server: FakeSume, timeout: Any) -> None:
    """Seconds, a (connect, read) pair with None for no limit, and a urllib3 Timeout pass unchanged."""
    assert requests_accepts(server, timeout)
    assert check_timeout(timeout) is timeout


def test_a_decimal_timeout_is_refused_whatever_the_socket_makes_of_it() -> None:
    """Decimal("5") works on some Python/urllib3 pairs and raises at the socket on others: refused."""
    with pytest.raises(ConfigurationError, match=r"^timeout must be seconds > 0"):
        check_timeout(decimal.Decimal("5"))


@pytest.mark.parametrize("timeout", REFUSED, ids=lambda t: "object()" if type(t) is object else repr(t))
def test_refuses_what_requests_cannot_send_with(server: FakeSume, timeout: Any) -> None:
    """Everything requests refuses (at once or at the socket) is a ConfigurationError before sending."""
    assert not requests_accepts(server, timeout)
    with pytest.raises(ConfigurationError, match=r"^timeout must be seconds > 0"):
        check_timeout(timeout)


def test_none_means_no_timeout() -> None:
    """None is accepted: requests' "no limit"."""
    assert check_timeout(None) is None


@pytest.mark.parametrize("timeout", [0, (1, 2, 3), "soon"], ids=repr)
def test_the_error_names_the_field(timeout: Any) -> None:
    """The message starts with the field's name and shows the value refused."""
    with pytest.raises(ConfigurationError) as info:
        check_timeout(timeout, name="SUME['TIMEOUT']")
    message = str(info.value)
    assert message.startswith("SUME['TIMEOUT'] must be")
    assert repr(timeout) in message
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("timeout", "limits"),
    [
        (None, (math.inf, math.inf)),
        (7, (7.0, 7.0)),
        ((3.05, None), (3.05, math.inf)),
        (Timeout(connect=2, read=5), (2.0, 5.0)),
        (Timeout(total=3, read=5), (3.0, 3.0)),
        (Timeout(read=5), (math.inf, 5.0)),
        (Timeout(), (math.inf, math.inf)),
    ],
    ids=repr,
)
def test_timeout_limits_reads_every_form_check_timeout_accepts(timeout: Any, limits: Any) -> None:
    """(connect, read) in seconds, inf for no limit (None, urllib3's default); a total caps both."""
    assert check_timeout(timeout) is timeout
    assert limits == timeout_limits(timeout)


# --- DeadlineTimeout.clone -------------------------------------------------------------------


def started(timeout: Timeout) -> Timeout:
    """The timeout as urllib3 uses it for one attempt: connect started, so read_timeout is final."""
    timeout.start_connect()
    return timeout


def test_clone_caps_connect_and_read_by_the_time_left() -> None:
    """With 10 s left, a (5, 60) timeout connects within 5 s and reads within what is left of 10."""
    clock = VirtualTime()
    attempt = started(DeadlineTimeout((5, 60), deadline=1010.0, clock=clock).clone())
    assert type(attempt) is Timeout
    assert attempt.total == 10.0
    assert attempt.connect_timeout == 5
    read = attempt.read_timeout
    assert read is not None
    assert 9.0 < read <= 10.0


def test_clone_follows_the_clock() -> None:
    """Each attempt's cap is what is left when it starts."""
    clock = VirtualTime()
    timeout = DeadlineTimeout((5, 60), deadline=1010.0, clock=clock)
    clock.now = 1008.0
    attempt = started(timeout.clone())
    assert attempt.total == 2.0
    assert attempt.connect_timeout == 2.0
    read = attempt.read_timeout
    assert read is not None
    assert read <= 2.0


@pytest.mark.parametrize("now", [1009.95, 1010.0, 1500.0])
def test_clone_never_below_the_minimum(now: float) -> None:
    """Near or past the deadline an attempt still gets MIN_ATTEMPT_TIMEOUT, never zero or less."""
    clock = VirtualTime(now)
    attempt = started(DeadlineTimeout((5, 60), deadline=1010.0, clock=clock).clone())
    assert MIN_ATTEMPT_TIMEOUT == 0.1
    assert attempt.total == MIN_ATTEMPT_TIMEOUT
    assert attempt.connect_timeout == MIN_ATTEMPT_TIMEOUT
    read = attempt.read_timeout
    assert read is not None
    assert read <= MIN_ATTEMPT_TIMEOUT


def test_clone_keeps_a_shorter_total() -> None:
    """A total shorter than the time left is kept; once less is left, the time left wins."""
    clock = VirtualTime()
    timeout = DeadlineTimeout(Timeout(connect=5, read=60, total=3), deadline=1010.0, clock=clock)
    assert timeout.clone().total == 3
    clock.now = 1008.0
    assert timeout.clone().total == 2.0


def test_clone_caps_no_limit_by_the_time_left() -> None:
    """(None, None), "no limit", still ends at the deadline."""
    attempt = DeadlineTimeout((None, None), deadline=1010.0, clock=VirtualTime()).clone()
    assert attempt.connect_timeout == 10.0
    assert attempt.total == 10.0


def test_clone_of_plain_seconds() -> None:
    """A plain number is both the connect and the read timeout, each capped."""
    attempt = DeadlineTimeout(7, deadline=1010.0, clock=VirtualTime()).clone()
    assert attempt.connect_timeout == 7
    assert attempt.total == 10.0
    assert started(attempt).read_timeout == pytest.approx(7, abs=0.5)


def test_clones_are_independent() -> None:
    """Starting one attempt's timer touches neither the template nor the next attempt."""
    timeout = DeadlineTimeout((5, 60), deadline=1010.0, clock=VirtualTime())
    first = started(timeout.clone())
    second = timeout.clone()
    assert first is not second
    assert second._start_connect is None
    assert timeout._start_connect is None


def test_clone_counts_waits_recorded_under_no_sleep() -> None:
    """Under no_sleep, the waits this thread recorded count as time passed, so deadlines hold:
    a request's clock (``RequestContext.now``) is then the virtual time."""
    clock = VirtualTime()
    with no_sleep() as recorder:
        timeout = DeadlineTimeout((8, 60), deadline=1010.0, clock=RequestContext(clock=clock).now)
        recorder.record(6.0)
        attempt = timeout.clone()
    assert attempt.total == 4.0
    assert attempt.connect_timeout == 4.0


# --- on real time only ------------------------------------------------------------------------


def _answers_after(seconds: float) -> Handler:
    def handler(seen: Seen, n: int) -> Iterable[Step]:
        yield seconds
        yield reply(200, b"{}")

    return handler


@pytest.mark.parametrize("clock", ["injected", "no_sleep"])
def test_a_tests_clock_leaves_the_socket_timeouts_alone(raw_server: Any, clock: str) -> None:
    """An injected clock or no_sleep's time measures time that did not really pass: an answer that
    takes 0.3 s of real time is not cut by max_elapsed=0.1 (on real time it would be)."""
    api = raw_server(_answers_after(0.3))
    policy = Policy(max_elapsed=0.1)
    with no_sleep() if clock == "no_sleep" else contextlib.nullcontext():
        session = raw_session(api, policy=policy, clock=VirtualTime() if clock == "injected" else None)
        assert session.get("/slow").status_code == 200
    with pytest.raises(SumeReadTimeout):
        raw_session(api, policy=policy).get("/slow")


def test_every_attempt_of_a_deadline_timeout_ends_by_the_deadline() -> None:
    """A DeadlineTimeout keeps the timeouts given, and its attempts end by the deadline."""
    deadline = time.monotonic() + 2.0
    result = DeadlineTimeout((5, 60), deadline)
    assert (result._connect, result._read, result.total) == (5, 60, None)
    assert (result.deadline, result.clock) == (deadline, time.monotonic)
    attempt = result.clone()
    assert isinstance(attempt.total, float)
    assert 0 < attempt.total <= 2.0
    assert attempt.connect_timeout == attempt.total


def test_a_deadline_timeout_keeps_a_timeout_objects_total() -> None:
    """A urllib3 Timeout's own total still applies when it is shorter."""
    result = DeadlineTimeout(Timeout(connect=1, read=2, total=0.5), time.monotonic() + 60.0)
    assert result.clone().total == 0.5


def test_a_deadline_timeout_does_not_change_the_callers_timeout() -> None:
    """The caller's Timeout object is copied, never changed."""
    mine = Timeout(connect=1, read=2)
    result = DeadlineTimeout(mine, time.monotonic() + 60.0)
    assert result is not mine
    assert type(mine) is Timeout
    assert not hasattr(mine, "deadline")


def _trickling_503(seen: Seen, n: int) -> Iterable[Step]:
    if n == 0:
        # 30 bytes over 3 s: each read succeeds, the whole body takes far past the deadline.
        yield reply(503, b"", length=30)
        for _ in range(15):
            yield 0.2
            yield b"xx"
    else:
        yield reply(200, b"{}")


@pytest.mark.slow  # real time: runs in CI's slow step
def test_a_503_whose_body_trickles_sends_no_retry_after_the_deadline(raw_server: Any) -> None:
    """max_elapsed=1 and a 503 body that takes 3 s: no retry after 1 s, the call ends by 1.5 s."""
    api = raw_server(_trickling_503)
    session = raw_session(api, policy=QUICK.replace(max_elapsed=1.0))

    started = time.monotonic()
    with contextlib.suppress(requests.RequestException):
        session.get("/slow")
    took = time.monotonic() - started

    late = [seen for seen in api.requests if seen.at > started + 1.0]
    assert [] == late
    assert took <= 1.5


ENVELOPE_503 = b'{"error": {"type": "server_error", "code": "overloaded", "message": "busy"}}'


def _envelope_then_trickle(retry_after: str) -> Handler:
    """A chunked 503 whose envelope comes at once, then a space every 0.1 s for 2 s."""

    def handler(seen: Seen, n: int) -> Iterable[Step]:
        if n:
            yield reply(200, b"{}")
            return
        extra = f"Retry-After: {retry_after}\r\n" if retry_after else ""
        yield f"HTTP/1.1 503 X\r\nTransfer-Encoding: chunked\r\n{extra}\r\n".encode()
        yield b"%x\r\n%s\r\n" % (len(ENVELOPE_503), ENVELOPE_503)
        for _ in range(20):
            yield 0.1
            yield b"1\r\n \r\n"
        yield b"0\r\n\r\n"

    return handler


@pytest.mark.slow  # real time: runs in CI's slow step
@pytest.mark.parametrize("retry_after", ["", "0"], ids=["backoff", "retry-after-0"])
def test_a_retry_decided_in_time_is_not_sent_once_the_old_body_outlasts_the_deadline(
    raw_server: Any, retry_after: str
) -> None:
    """The envelope says "retry" at once, then the rest of the 503's body trickles until the
    deadline cuts it at 1 s: the retry the decision allowed does not start after 1 s."""
    api = raw_server(_envelope_then_trickle(retry_after))
    session = raw_session(api, policy=Policy(max_elapsed=1.0, backoff_base=0.3, jitter=(1.0, 1.0)))

    started = time.monotonic()
    with pytest.raises(requests.RequestException) as caught:
        session.get("/slow")
    took = time.monotonic() - started

    assert [round(seen.at - started, 2) for seen in api.requests if seen.at > started + 1.0] == []
    assert len(api.requests) == 1
    assert took <= 1.5
    record = sume_record(caught.value)
    assert record is not None
    assert (record.attempts, record.status) == (1, 503)
    assert record.outcome in (Outcome.GAVE_UP, Outcome.NO_RETRY)
    assert "deadline" in str(caught.value)


def _redirect_whose_body_trickles(seen: Seen, n: int) -> Iterable[Step]:
    if "/start" not in seen.path:
        yield reply(200, b"landed")
        return
    yield b"HTTP/1.1 302 Found\r\nLocation: /v1/next\r\nContent-Length: 12\r\n\r\n"
    for _ in range(12):
        yield 0.1
        yield b"x"


@pytest.mark.slow  # real time: runs in CI's slow step
def test_a_redirect_is_not_followed_once_the_deadline_has_passed(raw_server: Any) -> None:
    """requests reads a 302's body before it follows it: one that outlasts the deadline leaves
    the next hop unsent, as a retry would be."""
    api = raw_server(_redirect_whose_body_trickles)
    session = raw_session(api, policy=Policy(max_elapsed=1.0))
    with pytest.raises(SumeRetryError) as caught:
        session.get("/start")
    assert api.paths() == ["/v1/start"]
    record = sume_record(caught.value)
    assert record is not None
    assert (record.attempts, record.outcome) == (1, Outcome.GAVE_UP)
    assert "deadline" in record.reason


def _slow_retry(seen: Seen, n: int) -> Iterable[Step]:
    if n == 0:
        yield reply(503, b'{"error":{"code":"busy"}}')
    else:
        yield 5.0
        yield reply(200, b"{}")


@pytest.mark.slow
def test_a_slow_retry_is_cut_at_the_deadline_not_at_its_read_timeout(raw_server: Any) -> None:
    """timeout (1, 4), max_elapsed=2, the retry's answer takes 5 s: the call ends by 2.5 s."""
    api = raw_server(_slow_retry)
    session = raw_session(api, policy=QUICK.replace(max_elapsed=2.0))

    started = time.monotonic()
    with pytest.raises(requests.RequestException):
        session.get("/work", timeout=(1, 4))
    took = time.monotonic() - started

    assert 2 == len(api.requests)  # the retry was sent, and cut short
    assert took <= 2.5


@pytest.fixture
def unanswered_port() -> Iterator[int]:
    """A port on 127.0.0.1 whose accept queue is full: a connect there hangs until its timeout."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port), timeout=1)  # takes the one slot
    probe = socket.socket()
    probe.settimeout(0.2)
    try:
        probe.connect(("127.0.0.1", port))
    except OSError:
        pass
    else:
        pytest.skip("this kernel accepts past a full backlog: no way to make a connect hang here")
    finally:
        probe.close()
    yield port
    filler.close()
    listener.close()


@pytest.mark.slow
def test_connect_timeouts_and_their_retry_end_by_the_deadline(unanswered_port: int) -> None:
    """Connect timeout 1.5 s, max_elapsed=2: the retried connect is cut, the call ends by 2.5 s."""
    session = SumeSession(
        KEY,
        base_url=f"http://127.0.0.1:{unanswered_port}/v1",
        policy=QUICK.replace(max_elapsed=2.0),
        fleet=None,
    )

    started = time.monotonic()
    with pytest.raises(requests.ConnectionError):
        session.get("/jobs", timeout=(1.5, 5))
    took = time.monotonic() - started

    assert took <= 2.5


@pytest.mark.parametrize(
    "timeout",
    [(5, None), (None, 5), urllib3.Timeout(connect=2, read=3), urllib3.Timeout(total=4), 7, 2.5],
    ids=["read-unlimited", "connect-unlimited", "Timeout", "Timeout-total", "int", "float"],
)
def test_every_timeout_form_requests_accepts_works_in_the_constructor_and_per_call(
    raw_server: Any, timeout: Any
) -> None:
    """(5, None), urllib3.Timeout(...) and plain seconds: accepted by SumeSession and by a call."""
    api = raw_server()
    session = raw_session(api, timeout=timeout)

    assert timeout is session.timeout
    assert b"/v1/a" == session.get("/a").content
    assert b"/v1/b" == session.request("GET", "/b", timeout=timeout).content


@pytest.mark.parametrize("bad", [0, -1, (1, 2, 3), "5", (0, 5), float("nan"), True])
def test_a_timeout_requests_would_refuse_is_a_configuration_error(bad: Any) -> None:
    """Zero, negative, three values, text, NaN, bool: ConfigurationError naming timeout."""
    with pytest.raises(ConfigurationError, match="timeout"):
        SumeSession(KEY, timeout=bad)


def _slow(seconds: float) -> Handler:
    def handler(seen: Seen, n: int) -> Iterable[Step]:
        yield seconds
        yield reply(200, b"late")

    return handler


def test_a_urllib3_timeout_in_the_constructor_is_applied(raw_server: Any) -> None:
    """SumeSession(timeout=Timeout(read=0.3)): a 2 s answer times out in well under 2 s."""
    api = raw_server(_slow(2.0))
    session = raw_session(
        api, timeout=urllib3.Timeout(connect=1, read=0.3), policy=QUICK.replace(max_retries=0)
    )

    started = time.monotonic()
    with pytest.raises(requests.Timeout):
        session.get("/slow")
    assert time.monotonic() - started < 1.5


def test_an_explicit_timeout_none_per_call_means_the_session_default(raw_server: Any) -> None:
    """As documented: session.get(url, timeout=None) uses the session's timeout (here a 0.3 s read)."""
    api = raw_server(_slow(2.0))
    session = raw_session(api, timeout=(1, 0.3), policy=QUICK.replace(max_retries=0))

    started = time.monotonic()
    with pytest.raises(requests.Timeout):
        session.get("/slow", timeout=None)
    assert time.monotonic() - started < 1.5


def test_messages_name_the_pool_as_urllib3_does(raw_server: Any) -> None:
    """urllib3 names a pool in its messages by ``str(pool)``: the watched pools read as its own."""
    port = raw_server().port
    adapter = SumeSession(KEY, fleet=None).get_adapter("http://127.0.0.1")
    pool = adapter.poolmanager.connection_from_url(f"http://127.0.0.1:{port}")
    assert str(pool) == f"HTTPConnectionPool(host='127.0.0.1', port={port})"
    https = adapter.poolmanager.connection_from_url(f"https://127.0.0.1:{port}")
    assert str(https) == f"HTTPSConnectionPool(host='127.0.0.1', port={port})"

    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        closed = unused.getsockname()[1]
    base_url = f"http://127.0.0.1:{closed}/v1"
    session = SumeSession(KEY, base_url=base_url, policy=Policy(max_retries=0), fleet=None)
    with pytest.raises(requests.ConnectionError) as caught:
        session.get("/x")
    assert "Watched" not in str(caught.value)
    assert f"HTTPConnectionPool(host='127.0.0.1', port={closed})" in str(caught.value)
