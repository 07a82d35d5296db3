"""PrefixedFP: a peeked prefix served first, then the stream, as if nothing was read."""

from __future__ import annotations

import gzip
import http.client
import io
import time
from typing import Any, Optional

import pytest
import requests
import urllib3

from sume_urllib3 import SumeAdapter, SumeRetry, SumeSession, sume_record
from sume_urllib3._body import DRAIN_LIMIT, PrefixedFP, WholeBody, let_go, peek_body

from .raw_server import CLOSE, KEY


class Stream(io.BytesIO):
    """A BytesIO that, like http.client's response, closes itself once fully read."""

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        if self.tell() == len(self.getbuffer()):
            self.close()
        return data

    def isclosed(self) -> bool:
        return self.closed


def wrapped(prefix: bytes = b"abc", rest: bytes = b"defgh", error: Any = None) -> PrefixedFP:
    return PrefixedFP(prefix, Stream(rest), error)


def test_reads_cross_from_prefix_into_the_stream() -> None:
    """read(n) fills n bytes from the prefix and then the stream, like http.client."""
    fp = wrapped()

    assert [b"ab", b"cde", b"fgh", b""] == [fp.read(2), fp.read(3), fp.read(10), fp.read(10)]


def test_read_all_and_read1() -> None:
    """read() returns everything; read1 serves the prefix first, then one stream read."""
    assert b"abcdefgh" == wrapped().read()
    fp = wrapped()
    assert [b"abc", b"de"] == [fp.read1(), fp.read1(2)]


def test_readinto_fills_a_buffer() -> None:
    """readinto copies across the boundary and says how much."""
    fp = wrapped()
    buffer = bytearray(5)

    assert (5, b"abcde") == (fp.readinto(buffer), bytes(buffer))


def test_closed_only_when_the_prefix_is_served_and_the_stream_closed() -> None:
    """A closed stream with prefix bytes left is not closed yet; close() drops everything."""
    fp = PrefixedFP(b"abc", Stream(b""))
    fp.inner.close()

    assert (False, False) == (fp.isclosed(), fp.closed)
    assert b"abc" == fp.read()
    assert (True, True) == (fp.isclosed(), fp.closed)


def test_a_failed_peek_is_raised_after_the_prefix() -> None:
    """The error the peek hit reaches the caller once the bytes that did arrive are read."""
    error = http.client.IncompleteRead(b"ab", 10)
    fp = wrapped(b"ab", b"", error)

    assert (False, b"ab") == (fp.isclosed(), fp.read(5))
    with pytest.raises(http.client.IncompleteRead):
        fp.read(5)


def test_reading_all_of_a_body_whose_peek_failed_raises_the_error() -> None:
    """read() of the whole body raises what the peek hit, as http.client's read() of a body cut
    short does: the prefix alone would pass for the whole body."""
    error = http.client.IncompleteRead(b"ab", 10)
    fp = wrapped(b"ab", b"", error)

    with pytest.raises(http.client.IncompleteRead):
        fp.read()


def test_a_length_urllib3_does_not_enforce_is_raised_only_by_a_whole_read() -> None:
    """urllib3 1.26 does not enforce Content-Length: as with http.client, a body cut short comes back
    short from read(amt) and raises only from a read() of all of it."""
    error = http.client.IncompleteRead(b"ab", 10)
    pieces = PrefixedFP(b"ab", Stream(b""), error, whole_reads_only=True)
    whole = PrefixedFP(b"ab", Stream(b""), error, whole_reads_only=True)

    assert (b"ab", b"") == (pieces.read(5), pieces.read(5))
    with pytest.raises(http.client.IncompleteRead):
        whole.read()


def test_flush_and_fileno_delegate() -> None:
    """flush() and fileno() go to the wrapped stream."""
    fp = wrapped()
    fp.flush()

    with pytest.raises(io.UnsupportedOperation):
        fp.fileno()


class FakeResponse:
    """Just what peek_body touches on a urllib3 response."""

    def __init__(self, body: bytes) -> None:
        self._fp: Any = Stream(body)
        self._body = None
        self.released = 0

    def release_conn(self) -> None:
        self.released += 1


@pytest.mark.parametrize(("encoding", "decoded"), [("gzip", True), ("x-unheard-of", False), (None, False)])
def test_a_preloaded_body_counts_as_decoded_only_if_urllib3_decoded_it(
    encoding: Optional[str], decoded: bool
) -> None:
    """urllib3 decodes a preloaded body only when it has a decoder for its encoding (zstd needs a
    library): one it kept as it came is decoded by the envelope, not parsed as it is."""
    data = gzip.compress(b'{"error": {}}') if encoding == "gzip" else b'{"error": {}}'
    response = urllib3.HTTPResponse(
        body=io.BytesIO(data),
        headers={"Content-Encoding": encoding} if encoding else {},
        preload_content=True,
        decode_content=True,
    )

    assert (b'{"error": {}}', decoded) == peek_body(response, 100)


def test_peek_puts_the_bytes_back_and_never_peeks_twice() -> None:
    """peek_body returns the first bytes and the stream still yields them."""
    response = FakeResponse(b'{"error": {}}' + b" " * 100)

    first, _ = peek_body(response, 5)
    second, _ = peek_body(response, 5)

    assert (b'{"err', b'{"err') == (first, second)
    assert b'{"error": {}}' == response._fp.read().rstrip()


def test_a_body_read_whole_by_the_peek_gives_its_connection_back() -> None:
    """When the peek reached the end, the connection is released at once."""
    response = FakeResponse(b"{}")

    peek_body(response, 100)

    assert 1 == response.released


class NoReadPastTheEnd(io.BytesIO):
    """A body on a kept-alive connection: asking for a byte past its end would wait for the
    server (here it fails the test instead)."""

    def read1(self, size: int = -1) -> bytes:
        if self.tell() == len(self.getbuffer()):
            raise AssertionError("read past Content-Length")
        return super().read1(size)


def test_a_body_whose_content_length_is_met_is_not_read_again() -> None:
    """Once urllib3's Content-Length is met the peek stops: no read past it, and no deadline
    asked about a read that will not happen; the caller still reads the whole body."""
    body = b'{"error": {"code": "queue_full"}}'
    response = urllib3.HTTPResponse(
        body=NoReadPastTheEnd(body),
        headers={"Content-Length": str(len(body))},
        status=503,
        preload_content=False,
    )
    asked = []

    prefix, _ = peek_body(response, 65536, lambda: bool(asked.append(1)))

    assert (body, [], True) == (prefix, asked, isinstance(response._fp, WholeBody))
    assert body == response.read()


class BreaksAfter(io.BytesIO):
    """A body whose connection is reset once what it holds has been read."""

    def read1(self, size: int = -1) -> bytes:
        if self.tell() == len(self.getbuffer()):
            raise ConnectionResetError("peer reset the connection")
        return super().read1(size)


def test_what_arrived_before_a_body_broke_is_returned_for_the_decision() -> None:
    """A whole envelope that arrived before the connection broke still says what it says: the
    peek returns it, and the break is raised to whoever reads on, as without the peek."""
    body = b'{"error": {"code": "service_unavailable", "retryable": false}}'
    response = urllib3.HTTPResponse(
        body=BreaksAfter(body),
        headers={"Content-Length": str(len(body) + 100)},
        status=503,
        preload_content=False,
    )

    prefix, _ = peek_body(response, 65536, lambda: False)

    assert prefix == body
    with pytest.raises(ConnectionResetError):
        response._fp.read()


# -- a body of unknown length whose end comes late, on a real socket --------------------------

LATE_ENDING = b'{"error": {"code": "bad_request", "message": "no such avatar"}, "request_id": "req_late"}'


def _ends_late(seen: Any, n: int) -> Any:
    """A 400 ended by the connection's close (no length, no chunks), the close a second late."""
    yield b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
    yield LATE_ENDING
    yield 1.0
    yield CLOSE


@pytest.mark.slow  # real time: runs in CI's slow step
@pytest.mark.parametrize("way", ["session", "mounted", "pool_manager"])
def test_an_error_body_of_unknown_length_is_handed_over_once_its_json_is_whole(
    raw_server: Any, way: str
) -> None:
    """The peek reads on until the end of a body it cannot measure, but stops at a whole JSON
    document: a streamed 400 whose close comes a second late is decided (its code read) and handed
    over at once, as without the peek, and the caller still reads all of it."""
    server = raw_server(_ends_late)
    started = time.monotonic()
    if way == "pool_manager":
        http = urllib3.PoolManager(retries=SumeRetry())
        raw = http.request("GET", server.url + "/v1/avatars/x", preload_content=False)
        handed_over = time.monotonic() - started
        status, body = raw.status, raw.read()
    else:
        session = requests.Session()
        if way == "session":
            session = SumeSession(KEY, base_url=server.url + "/v1", fleet=None)
        else:
            session.mount("http://", SumeAdapter(fleet=None))
        response = session.get(server.url + "/v1/avatars/x", stream=True)
        handed_over = time.monotonic() - started
        record = sume_record(response)
        assert record is not None
        assert (record.code, record.request_id) == ("bad_request", "req_late")
        status, body = response.status_code, response.content
    assert handed_over < 0.5, f"handed over after {handed_over:.2f} s"
    assert (status, body) == (400, LATE_ENDING)


# --- let_go: the connection of a response nobody will read ------------------------------------


class Body:
    """A urllib3 response as let_go reads it: ``read(amt, decode_content=)``, close, release."""

    def __init__(self, size: int, *, breaks_after: Optional[int] = None) -> None:
        self._fp: Any = io.BytesIO(b"x" * size)
        self.breaks_after = breaks_after
        self.read_bytes = 0
        self.closed = False
        self.released = 0

    def read(self, amt: int, decode_content: bool = True) -> bytes:
        assert decode_content is False  # draining never decompresses
        if self.breaks_after is not None and self.read_bytes >= self.breaks_after:
            raise ConnectionResetError("peer went away")
        piece: bytes = self._fp.read(amt)
        self.read_bytes += len(piece)
        if not piece:
            self._fp.close()
        return piece

    def close(self) -> None:
        self.closed = True

    def release_conn(self) -> None:
        self.released += 1


def test_a_short_body_is_drained_and_its_connection_released() -> None:
    """A 100 KB error page is read to its end through urllib3's read, and the connection goes back."""
    body = Body(100_000)
    let_go(body)
    assert (body.read_bytes, body.closed, body.released) == (100_000, False, 1)


def test_a_body_past_the_drain_limit_closes_its_connection_and_frees_the_slot() -> None:
    """A body longer than the limit is not worth its connection: closed, and the pool slot freed."""
    body = Body(DRAIN_LIMIT * 3)
    let_go(body)
    assert body.closed
    assert body.released == 1
    assert body.read_bytes <= DRAIN_LIMIT + 65536


def test_a_body_that_breaks_while_drained_is_closed_and_released() -> None:
    """A drain that meets a broken body never raises; the connection is closed and released."""
    body = Body(200_000, breaks_after=65536)
    let_go(body)
    assert body.closed
    assert body.released == 1


def test_a_body_already_read_whole_by_the_peek_is_only_released() -> None:
    """When the peek reached the end, nothing is read again."""
    body = Body(10)
    body._fp.read()
    body._fp.close()
    body._fp = WholeBody(b"x" * 10)
    let_go(body)
    assert (body.read_bytes, body.released) == (0, 1)


def test_a_body_the_peek_read_whole_leaves_urllib3_nothing_to_drain() -> None:
    """urllib3 drains every retried response after ``increment``: a body the peek read whole
    (around urllib3's own count) reads back as empty, never as a body cut short."""
    body = b'{"error": {"code": "service_unavailable"}}'
    raw = urllib3.HTTPResponse(
        body=io.BytesIO(body),
        headers={"Content-Length": str(len(body))},
        status=503,
        preload_content=False,
        enforce_content_length=True,
    )
    SumeRetry(sleep=lambda seconds: None).increment("GET", "/v1/x", response=raw)
    assert raw.length_remaining == 0
    assert raw.read(1024) == b""  # was urllib3's ProtocolError (IncompleteRead) on both lines
    raw.drain_conn()
