"""The deadline holds inside an attempt: a server that trickles bytes never outlasts ``max_elapsed``.

A read timeout restarts with each piece that arrives, so a server sending one every 0.4 s
keeps ``timeout=(1, 1)`` from firing. With ``Policy(max_elapsed=1)`` every call below ends
within 1.5 s as ``SumeReadTimeout`` (also requests' ``ReadTimeout``) with the record and
``retry_in`` set, never as a late success: the status line and headers, a sized body, a
chunked body, and a ``stream=True`` body read through ``iter_content``; through a
``SumeSession`` and through a ``SumeAdapter`` mounted on a plain ``requests.Session``.
Real time on a real loopback socket: this is about what a socket does.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Iterator

import pytest
import requests

from sume_urllib3 import Outcome, Policy, SumeAdapter, SumeReadTimeout, SumeSession, sume_record

from .raw_server import KEY, Loopback, Seen, Step, trickled_body

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


@pytest.mark.parametrize("kind", sorted(HANDLERS))
def test_a_trickling_server_is_cut_at_the_deadline_through_a_session(
    trickling: Callable[[str], Loopback], kind: str
) -> None:
    """Whatever trickles (headers, sized body, chunked body), the call ends at the deadline."""
    server = trickling(kind)
    with SumeSession(KEY, base_url=server.url + "/v1", policy=POLICY, timeout=(1, 1), fleet=None) as session:
        _ends_as_a_deadline_give_up(lambda: session.get("/slow"))


def test_a_stream_read_through_iter_content_is_cut_at_the_deadline(
    trickling: Callable[[str], Loopback],
) -> None:
    """``stream=True``: the caller's own reading of a trickling body ends at the deadline too."""
    server = trickling("chunked")
    with SumeSession(KEY, base_url=server.url + "/v1", policy=POLICY, timeout=(1, 1), fleet=None) as session:
        response = session.get("/slow", stream=True)
        _ends_as_a_deadline_give_up(lambda: b"".join(response.iter_content(1)))


def test_a_mounted_adapter_cuts_a_trickle_at_the_deadline(trickling: Callable[[str], Loopback]) -> None:
    """A SumeAdapter on a plain requests.Session holds the same deadline."""
    server = trickling("sized")
    with requests.Session() as session:
        session.mount("http://", SumeAdapter(POLICY, timeout=(1, 1), fleet=None))
        _ends_as_a_deadline_give_up(lambda: session.get(server.url + "/slow"))


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
    assert _deadline._watchdog._watches == {}


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
