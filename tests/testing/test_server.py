"""Behaviour of FakeSume, the scriptable loopback fake of the Sume HTTP API."""

from __future__ import annotations

import contextlib
import gzip
import http.client
import json
import re
import socket
import threading
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator
from urllib.parse import urlsplit

import pytest
import requests
import urllib3

from sume_urllib3.testing._server import FakeSume, RecordedRequest, Reply


@pytest.fixture
def fake() -> Iterator[FakeSume]:
    with FakeSume() as server:
        yield server


def address(fake: FakeSume) -> tuple[str, int]:
    parts = urlsplit(fake.url)
    assert parts.hostname is not None
    assert parts.port is not None
    return parts.hostname, parts.port


def raw_exchange(fake: FakeSume, request: bytes) -> tuple[bytes, bytes]:
    """Send raw bytes, read until the server closes, and split the reply into head and body."""
    with socket.create_connection(address(fake), timeout=5) as sock:
        sock.sendall(request)
        received = []
        while True:
            data = sock.recv(65536)
            if not data:
                break
            received.append(data)
    head, _, body = b"".join(received).partition(b"\r\n\r\n")
    return head, body


def wait_for_requests(fake: FakeSume, count: int) -> None:
    deadline = time.monotonic() + 5
    while len(fake.requests) < count:
        assert time.monotonic() < deadline, "server never recorded the request"
        time.sleep(0.005)


# --- Reply kinds -------------------------------------------------------------------------


def test_json_reply(fake: FakeSume) -> None:
    """A json reply is serialised with its status and an application/json content type."""
    fake.script("GET", "/v1/models", Reply(201, json={"data": [1, 2]}))

    response = requests.get(fake.url + "/v1/models", timeout=5)

    assert (response.status_code, response.json()) == (201, {"data": [1, 2]})
    assert response.headers["Content-Type"] == "application/json"
    assert str(len(response.content)) == response.headers["Content-Length"]


def test_raw_body_reply(fake: FakeSume) -> None:
    """A raw body is sent verbatim, with no JSON content type unless the headers add one."""
    fake.script("GET", "/raw", Reply(body=b"<html>oops</html>", headers={"Content-Type": "text/html"}))

    response = requests.get(fake.url + "/raw", timeout=5)

    assert response.content == b"<html>oops</html>"
    assert response.headers["Content-Type"] == "text/html"


def test_custom_headers_and_retry_after(fake: FakeSume) -> None:
    """Scripted headers, such as Retry-After, are sent as given."""
    fake.script("GET", "/h", Reply(429, headers={"Retry-After": "2", "X-Extra": "yes"}))

    response = requests.get(fake.url + "/h", timeout=5)

    assert (response.headers["Retry-After"], response.headers["X-Extra"]) == ("2", "yes")


def test_delay_triggers_client_read_timeout(fake: FakeSume) -> None:
    """A delayed reply trips the client's read timeout while other routes stay responsive."""
    fake.script("GET", "/slow", Reply(delay=5)).script("GET", "/fast", 200)

    with pytest.raises(requests.exceptions.ReadTimeout):
        requests.get(fake.url + "/slow", timeout=(1, 0.2))

    assert requests.get(fake.url + "/fast", timeout=1).status_code == 200


def test_gzip_reply_is_decoded_by_requests_with_correct_content_length(fake: FakeSume) -> None:
    """A gzip reply carries Content-Encoding and the compressed length; requests decodes it."""
    fake.script("GET", "/gz", Reply(json={"hello": "world" * 100}, gzip=True))

    decoded = requests.get(fake.url + "/gz", timeout=5)
    with requests.get(fake.url + "/gz", timeout=5, stream=True) as raw:
        compressed = raw.raw.read(decode_content=False)

    assert decoded.json() == {"hello": "world" * 100}
    assert decoded.headers["Content-Encoding"] == "gzip"
    assert raw.headers["Content-Length"] == str(len(compressed))
    assert json.loads(gzip.decompress(compressed)) == {"hello": "world" * 100}


def test_chunked_reply(fake: FakeSume) -> None:
    """A chunked reply uses Transfer-Encoding: chunked and no Content-Length, even gzipped."""
    fake.script("GET", "/c", Reply(json={"chunked": True}, chunked=True, gzip=True))
    fake.script("GET", "/big", Reply(json={"k": 1}, chunked=True, size=200_000))
    conn = http.client.HTTPConnection(*address(fake), timeout=5)

    conn.request("GET", "/c")
    response = conn.getresponse()
    zipped = response.read()
    big = requests.get(fake.url + "/big", timeout=5)

    assert response.getheader("Transfer-Encoding") == "chunked"
    assert response.getheader("Content-Length") is None
    assert json.loads(gzip.decompress(zipped)) == {"chunked": True}
    assert (len(big.content), big.json()["k"]) == (200_000, 1)
    conn.close()


def test_drop_before_headers_raises_connection_error_and_is_recorded(fake: FakeSume) -> None:
    """drop="before_headers" closes the socket unanswered; the request is still recorded."""
    fake.script("POST", "/drop", Reply(drop="before_headers"))

    with pytest.raises(requests.exceptions.ConnectionError):
        requests.post(fake.url + "/drop", json={"a": 1}, timeout=5)

    assert [r.body for r in fake.requests_for("POST", "/drop")] == [b'{"a": 1}']


def test_drop_after_headers_breaks_the_body(fake: FakeSume) -> None:
    """drop="after_headers" sends a status line promising a body and then closes."""
    fake.script("GET", "/d", Reply(json={"never": "sent"}, drop="after_headers"))
    conn = http.client.HTTPConnection(*address(fake), timeout=5)

    conn.request("GET", "/d")
    response = conn.getresponse()

    assert response.status == 200
    with pytest.raises(http.client.IncompleteRead):
        response.read()
    if urllib3.__version__.startswith("1."):
        # urllib3 1.26 does not enforce Content-Length: the body just comes back empty.
        assert b"" == requests.get(fake.url + "/d", timeout=5).content
    else:
        with pytest.raises((requests.exceptions.ChunkedEncodingError, requests.ConnectionError)):
            requests.get(fake.url + "/d", timeout=5)
    conn.close()


def test_truncate_sends_exactly_that_many_body_bytes(fake: FakeSume) -> None:
    """truncate=N sends N body bytes under a header promising the full length, then closes."""
    fake.script("GET", "/t", Reply(body=b"x" * 1000, truncate=100))

    head, body = raw_exchange(fake, b"GET /t HTTP/1.1\r\nHost: x\r\n\r\n")

    assert b"content-length: 1000" in head.lower()
    assert body == b"x" * 100
    assert len(fake.requests) == 1


@pytest.mark.parametrize("chunked", [False, True])
def test_truncated_reply_raises_in_requests(fake: FakeSume, chunked: bool) -> None:
    """A truncated reply (Content-Length or chunked) surfaces as a requests body error."""
    fake.script("GET", "/t", Reply(json={"k": "v" * 500}, chunked=chunked, truncate=50))

    if urllib3.__version__.startswith("1.") and not chunked:
        # urllib3 1.26 does not enforce Content-Length: the caller gets the 50 bytes sent.
        assert 50 == len(requests.get(fake.url + "/t", timeout=5).content)
        return
    with pytest.raises((requests.exceptions.ChunkedEncodingError, requests.ConnectionError)):
        requests.get(fake.url + "/t", timeout=5)


def test_sized_json_body_is_streamed_exactly_and_stays_valid_json(fake: FakeSume) -> None:
    """size= pads a JSON error body to exactly that many bytes and it still parses."""
    fake.script("GET", "/big", Reply.error(500, size=5_000_000))

    response = requests.get(fake.url + "/big", timeout=5)

    assert len(response.content) == 5_000_000
    assert response.json()["error"]["code"] == "internal_error"
    assert response.headers["x-sume-request-id"] == response.json()["request_id"]


def test_sized_raw_and_gzip_bodies(fake: FakeSume) -> None:
    """size= pads raw bodies with spaces, and gzip keeps Content-Length exact."""
    fake.script("GET", "/raw", Reply(body=b"abc", size=10))
    fake.script("GET", "/gz", Reply(json=[1, 2], size=1_000_000, gzip=True))

    raw = requests.get(fake.url + "/raw", timeout=5)
    with requests.get(fake.url + "/gz", timeout=5, stream=True) as zipped:
        compressed = zipped.raw.read(decode_content=False)

    assert raw.content == b"abc       "
    assert str(len(compressed)) == zipped.headers["Content-Length"]
    assert json.loads(gzip.decompress(compressed)) == [1, 2]
    assert len(gzip.decompress(compressed)) == 1_000_000


def test_sized_body_is_never_held_in_memory(fake: FakeSume) -> None:
    """A 20 MB padded body is streamed in pieces, so the process never allocates it whole."""
    fake.script("GET", "/huge", Reply.error(503, size=20_000_000))
    received = 0
    tracemalloc.start()
    try:
        with requests.get(fake.url + "/huge", timeout=5, stream=True) as response:
            for piece in response.iter_content(65536):
                received += len(piece)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert received == 20_000_000
    assert peak < 5_000_000


# --- Scripts --------------------------------------------------------------------------------


def test_last_reply_repeats_forever(fake: FakeSume) -> None:
    """Replies are served in order and the last one repeats."""
    fake.script("GET", "/seq", 503, 429, 200)

    statuses = [requests.get(fake.url + "/seq", timeout=5).status_code for _ in range(5)]

    assert statuses == [503, 429, 200, 200, 200]


def test_int_shorthand(fake: FakeSume) -> None:
    """Ints expand to a Sume error envelope for >= 400, {"ok": true} for 2xx, no body for 204."""
    fake.script("POST", "/i", 402, 201, 204)

    error, created, empty = (requests.post(fake.url + "/i", timeout=5) for _ in range(3))

    assert (error.status_code, error.json()["error"]["code"]) == (402, "insufficient_credits")
    assert (created.status_code, created.json()) == (201, {"ok": True})
    assert (empty.status_code, empty.content) == (204, b"")


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, "bad_request"),
        (401, "unauthorized"),
        (404, "not_found"),
        (409, "idempotency_key_in_use"),
        (429, "rate_limit_exceeded"),
        (500, "internal_error"),
        (503, "service_unavailable"),
    ],
)
def test_int_shorthand_codes(fake: FakeSume, status: int, code: str) -> None:
    """Each shorthand status maps to its Sume error code."""
    fake.script("GET", "/e", status)

    response = requests.get(fake.url + "/e", timeout=5)

    assert (status, code) == (response.status_code, response.json()["error"]["code"])


def test_error_envelope_shape_and_request_id_agreement(fake: FakeSume) -> None:
    """Reply.error builds the Sume envelope; its request_id matches the response header."""
    fake.script(
        "POST",
        "/e",
        Reply.error(
            429,
            message="slow down",
            retryable=True,
            next_action="retry_after",
            retry_after=2,
        ),
    )

    response = requests.post(fake.url + "/e", timeout=5)
    request_id = response.headers["x-sume-request-id"]

    assert re.fullmatch(r"req_\d+", request_id)
    assert response.headers["Retry-After"] == "2"
    expected = {
        "error": {
            "code": "rate_limit_exceeded",
            "message": "slow down",
            "details": {},
            "retryable": True,
            "next_action": "retry_after",
        },
        "request_id": request_id,
    }
    assert expected == response.json()


def test_error_envelope_optional_fields_and_explicit_ids(fake: FakeSume) -> None:
    """Unset retryable/next_action are omitted; explicit or header-set request ids win."""
    fake.script("GET", "/given", Reply.error(500, "boom", request_id="req_given"))
    fake.script("GET", "/header", Reply.error(503, headers={"X-Sume-Request-Id": "req_hdr"}))

    given = requests.get(fake.url + "/given", timeout=5)
    header = requests.get(fake.url + "/header", timeout=5)

    assert {"code", "message", "details"} == set(given.json()["error"])
    assert (given.json()["error"]["code"], given.json()["request_id"]) == ("boom", "req_given")
    assert (header.headers["x-sume-request-id"], header.json()["request_id"]) == ("req_hdr", "req_hdr")


def test_error_kwargs_pass_through_to_reply() -> None:
    """Reply.error forwards Reply options like gzip, chunked, delay and headers."""
    reply = Reply.error(503, retry_after=1.5, gzip=True, chunked=True, headers={"A": "b"})

    assert (reply.gzip, reply.chunked) == (True, True)
    assert dict(reply.headers) == {"A": "b", "Retry-After": "1.5"}


def test_request_ids_are_unique_per_response(fake: FakeSume) -> None:
    """Every response carries a distinct x-sume-request-id."""
    fake.script("GET", "/ok", 200)

    ids = {requests.get(fake.url + "/ok", timeout=5).headers["x-sume-request-id"] for _ in range(5)}

    assert len(ids) == 5


def test_unscripted_route_is_not_found(fake: FakeSume) -> None:
    """An unscripted route answers 404 with the not_found envelope and is still recorded."""
    response = requests.get(fake.url + "/nowhere?x=1", timeout=5)

    assert (response.status_code, response.json()["error"]["code"]) == (404, "not_found")
    assert fake.requests[0].path == "/nowhere?x=1"


def test_script_matches_path_without_query_and_method_case_insensitively(fake: FakeSume) -> None:
    """Scripts key on the upper-cased method and the path without its query string."""
    fake.script("delete", "/v1/jobs/1", 204)

    response = requests.delete(fake.url + "/v1/jobs/1?force=true", timeout=5)

    assert response.status_code == 204
    assert len(fake.requests_for("DELETE", "/v1/jobs/1")) == 1


def test_head_request_gets_headers_only(fake: FakeSume) -> None:
    """HEAD answers with the scripted headers and Content-Length but no body."""
    fake.script("HEAD", "/h", Reply(json={"a": 1}))
    conn = http.client.HTTPConnection(*address(fake), timeout=5)

    conn.request("HEAD", "/h")
    response = conn.getresponse()

    assert (response.getheader("Content-Length"), response.read()) == ("8", b"")
    conn.close()


def test_routes_argument_and_chainable_script() -> None:
    """Routes can be given to the constructor, and script() returns the fake for chaining."""
    fake = FakeSume({("GET", "/a"): [Reply(json=1)]})
    with fake.script("GET", "/b", 202) as server:
        a = requests.get(server.url + "/a", timeout=5)
        b = requests.get(server.url + "/b", timeout=5)

    assert (a.json(), b.status_code) == (1, 202)


def test_rescripting_while_serving_restarts_the_sequence(fake: FakeSume) -> None:
    """script() replaces a route's replies and its position, even while serving."""
    fake.script("GET", "/r", 500, 200)
    requests.get(fake.url + "/r", timeout=5)

    fake.script("GET", "/r", 503, 201)
    statuses = [requests.get(fake.url + "/r", timeout=5).status_code for _ in range(3)]

    assert statuses == [503, 201, 201]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"json": {}, "body": b""}, "not both"),
        ({"drop": "sometimes"}, "drop"),
        ({"status": 99}, "status"),
        ({"delay": -1}, "delay"),
        ({"delay": float("nan")}, "delay"),
        ({"truncate": -1}, "truncate"),
        ({"size": 3, "json": {"too": "big"}}, "size"),
        ({"status": 204, "json": {}}, "cannot carry a body"),
        ({"drop": "after_headers"}, "needs a body"),
        ({"headers": {"X-Bad": "a\r\nInjected: yes"}}, "invalid header"),
    ],
)
def test_invalid_replies_are_rejected_early(kwargs: dict[str, Any], match: str) -> None:
    """Contradictory or impossible Reply options raise ValueError at construction."""
    with pytest.raises(ValueError, match=match):
        Reply(**kwargs)


def test_reply_is_frozen_and_hashable() -> None:
    """Reply and its headers are immutable and hashable, with case-insensitive lookup."""
    reply = Reply(503, headers={"Retry-After": "2"})

    assert hash(reply) == hash(Reply(503, headers={"retry-after": "2"}))
    assert reply.headers["RETRY-AFTER"] == "2"
    with pytest.raises(TypeError):
        reply.headers["X"] = "y"  # type: ignore[index]


def test_script_rejects_bad_input(fake: FakeSume) -> None:
    """script() needs at least one reply and a query-free absolute path."""
    with pytest.raises(ValueError, match="at least one"):
        fake.script("GET", "/x")
    with pytest.raises(ValueError, match="query string"):
        fake.script("GET", "/x?y=1", 200)
    with pytest.raises(TypeError):
        fake.script("GET", "/x", "200")  # type: ignore[arg-type]


# --- Recording ------------------------------------------------------------------------------


def test_requests_are_recorded_with_method_path_headers_and_body(fake: FakeSume) -> None:
    """Each request is recorded with method, path+query, case-insensitive headers and body."""
    fake.script("POST", "/v1/jobs", 201)
    before = time.monotonic()

    requests.post(fake.url + "/v1/jobs?dry=1", json={"n": 1}, headers={"Idempotency-Key": "k1"}, timeout=5)

    (recorded,) = fake.requests
    assert isinstance(recorded, RecordedRequest)
    assert (recorded.method, recorded.path) == ("POST", "/v1/jobs?dry=1")
    assert "k1" == recorded.headers["Idempotency-Key"] == recorded.headers["idempotency-key"]
    assert (recorded.body, recorded.json()) == (b'{"n": 1}', {"n": 1})
    assert before <= recorded.time <= time.monotonic()
    assert recorded.connection == 1


def test_chunked_request_bodies_are_dechunked(fake: FakeSume) -> None:
    """A chunked (generator) request body is recorded de-chunked and keep-alive stays in sync."""
    fake.script("PUT", "/upload", 200)

    with requests.Session() as session:
        session.put(fake.url + "/upload", data=iter([b"ab", b"cd", b"e" * 70000]), timeout=5)
        session.put(fake.url + "/upload", data=b"second", timeout=5)

    first, second = fake.requests
    assert first.headers["Transfer-Encoding"] == "chunked"
    assert first.body == b"abcd" + b"e" * 70000
    assert (second.body, fake.connections) == (b"second", 1)


def test_chunked_request_with_extensions_and_trailers() -> None:
    """Chunk extensions and trailers in a raw chunked request are handled."""
    with FakeSume() as fake:
        fake.script("POST", "/raw", 200)
        request = (
            b"POST /raw HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n"
            b"\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: t\r\n\r\n"
        )

        head, _ = raw_exchange(fake, request)

        assert head.startswith(b"HTTP/1.1 200")
        assert fake.requests[0].body == b"abcde"


def test_requests_for_filters_by_route(fake: FakeSume) -> None:
    """requests_for returns only the requests of one METHOD path, in arrival order."""
    for target in ("/a?page=1", "/b", "/a?page=2"):
        requests.get(fake.url + target, timeout=5)
    requests.post(fake.url + "/a", timeout=5)

    assert [r.path for r in fake.requests_for("get", "/a")] == ["/a?page=1", "/a?page=2"]


def test_keep_alive_reuses_one_connection(fake: FakeSume) -> None:
    """Three sequential requests on one Session share a single TCP connection."""
    fake.script("GET", "/k", 200)

    with requests.Session() as session:
        for _ in range(3):
            session.get(fake.url + "/k", timeout=5)

    assert fake.connections == 1
    assert [r.connection for r in fake.requests] == [1, 1, 1]


def test_separate_connections_are_counted(fake: FakeSume) -> None:
    """Requests without a shared session arrive on distinct, numbered connections."""
    fake.script("GET", "/k", 200)

    for _ in range(3):
        requests.get(fake.url + "/k", timeout=5, headers={"Connection": "close"})

    assert fake.connections == 3
    assert [r.connection for r in fake.requests] == [1, 2, 3]


@pytest.mark.slow
def test_concurrent_clients_consume_the_script_exactly_once(fake: FakeSume) -> None:
    """With 32 threads x 20 requests, each scripted reply is served once and all are recorded."""
    fake.script("GET", "/busy", 503, 503, 200)
    start = threading.Barrier(32)

    def client(_: int) -> list[int]:
        start.wait()
        with requests.Session() as session:
            return [session.get(fake.url + "/busy", timeout=10).status_code for _ in range(20)]

    with ThreadPoolExecutor(32) as pool:
        statuses = [status for result in pool.map(client, range(32)) for status in result]

    assert (len(statuses), statuses.count(503), statuses.count(200)) == (640, 2, 638)
    assert len(fake.requests_for("GET", "/busy")) == 640
    assert fake.connections == 32


# --- Lifecycle ------------------------------------------------------------------------------


def test_stop_is_prompt_with_open_keep_alive_and_pending_delay() -> None:
    """stop() returns within 2 s despite an idle keep-alive connection and a long delay."""
    fake = FakeSume().script("GET", "/idle", 200).script("GET", "/slow", Reply(delay=30)).start()
    idle = http.client.HTTPConnection(*address(fake), timeout=10)
    idle.request("GET", "/idle")
    idle.getresponse().read()
    outcome: list[BaseException] = []

    def slow_client() -> None:
        try:
            requests.get(fake.url + "/slow", timeout=10)
        except requests.RequestException as exc:
            outcome.append(exc)

    waiter = threading.Thread(target=slow_client)
    waiter.start()
    wait_for_requests(fake, 2)

    started = time.monotonic()
    fake.stop()
    elapsed = time.monotonic() - started
    waiter.join(5)

    assert elapsed < 2
    assert [requests.ConnectionError] == [type(exc) for exc in outcome]
    idle.close()


def test_stop_is_idempotent_and_refuses_new_connections() -> None:
    """After stop() (called twice) the port no longer accepts connections."""
    fake = FakeSume().start()
    host, port = address(fake)

    fake.stop()
    fake.stop()

    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, port), timeout=1).close()


def test_context_manager_starts_and_stops() -> None:
    """The with-block yields a started fake and stops it on exit."""
    with FakeSume() as fake:
        assert fake.url.startswith("http://127.0.0.1:")
        assert requests.get(fake.url + "/", timeout=5).status_code == 404
        assert "running" in repr(fake)

    assert "stopped" in repr(fake)
    with pytest.raises(requests.ConnectionError):
        requests.get(fake.url + "/", timeout=1)


def test_url_requires_start() -> None:
    """url raises a helpful RuntimeError before start()."""
    with pytest.raises(RuntimeError, match="start"):
        _ = FakeSume().url


def test_reset_forgets_scripts_requests_connections_and_positions(fake: FakeSume) -> None:
    """reset() clears scripts, recorded requests, the connection count and positions."""
    fake.script("GET", "/r", 500, 200)
    requests.get(fake.url + "/r", timeout=5)

    fake.reset()
    after_reset = requests.get(fake.url + "/r", timeout=5)
    fake.script("GET", "/r", 500, 200)
    rescripted = requests.get(fake.url + "/r", timeout=5)

    assert after_reset.status_code == 404
    assert rescripted.status_code == 500
    assert (len(fake.requests), fake.connections) == (2, 2)


def test_client_disconnects_are_silent(fake: FakeSume, capfd: pytest.CaptureFixture[str]) -> None:
    """Clients vanishing mid-reply, drops and truncations never print to stderr."""
    fake.script("GET", "/huge", Reply(size=50_000_000))
    fake.script("GET", "/drop", Reply(json={}, drop="after_headers"))
    with socket.create_connection(address(fake), timeout=5) as sock:
        sock.sendall(b"GET /huge HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.recv(1024)
    with socket.create_connection(address(fake), timeout=5) as sock:
        sock.sendall(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nshort")
    with socket.create_connection(address(fake), timeout=5) as sock:
        sock.sendall(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n")
        sock.recv(1024)
    with contextlib.suppress(requests.RequestException):  # urllib3 1.26 returns an empty body
        requests.get(fake.url + "/drop", timeout=5)
    wait_for_requests(fake, 2)

    fake.stop()

    assert capfd.readouterr().err == ""


def test_an_absurd_content_length_is_refused_without_allocating(fake: FakeSume) -> None:
    """A claimed 100 TB body gets a 400 at once, not a MemoryError on the server thread."""
    with socket.create_connection(address(fake), timeout=5) as sock:
        sock.sendall(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000000000\r\n\r\n")
        assert sock.recv(1024).startswith(b"HTTP/1.1 400")


def test_head_answers_from_the_get_script_without_a_body(fake: FakeSume) -> None:
    """A HEAD on a route scripted only for GET gets the GET reply's status and headers."""
    fake.script("GET", "/jobs/1", Reply.error(503, "queue_full", retry_after="2"), 200)

    first = requests.head(fake.url + "/jobs/1", timeout=5)
    second = requests.get(fake.url + "/jobs/1", timeout=5)

    assert (503, "2", b"") == (first.status_code, first.headers["Retry-After"], first.content)
    assert 200 == second.status_code  # HEAD took the script's first reply
    assert ["HEAD", "GET"] == [r.method for r in fake.requests]


def test_trace_is_served_and_recorded(fake: FakeSume) -> None:
    """TRACE (retryable per the policy) is scripted and recorded like any method."""
    fake.script("TRACE", "/t", 200)

    assert 200 == requests.request("TRACE", fake.url + "/t", timeout=5).status_code
    assert ["TRACE"] == [r.method for r in fake.requests]
