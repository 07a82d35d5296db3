"""Every way in keeps every promise: the same behaviours through each way users mount the policy.

Ways in: ``SumeSession``; a plain ``requests.Session`` with ``SumeAdapter`` mounted; a plain
``HTTPAdapter(max_retries=SumeRetry())``; ``urllib3.PoolManager(retries=SumeRetry())``; a bare
``HTTPConnectionPool.urlopen(..., retries=SumeRetry())``. Each cell runs on a real loopback
server with virtual time; CI runs this module on urllib3 2.x and 1.26. A cell that cannot
apply to a way in says why in ``NOT_APPLICABLE``.
"""

from __future__ import annotations

import dataclasses
import gzip
import inspect
import io
import json
import os
import random
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest
import requests
import urllib3
from requests.adapters import HTTPAdapter

from sume_urllib3 import (
    ConfigurationError,
    Policy,
    SumeAdapter,
    SumeRecord,
    SumeRetry,
    SumeRetryError,
    SumeSession,
)
from sume_urllib3._body import DRAIN_LIMIT
from sume_urllib3.testing import FakeSume, Reply, no_sleep

from .conftest import API_KEY, VirtualTime

WAYS = ("session", "mounted", "http_adapter", "pool_manager", "connection_pool")
#: requests before 2.29 sends chunked bodies (generators) without urllib3's urlopen.
OLD_REQUESTS = tuple(int(part) for part in requests.__version__.split(".")[:2]) < (2, 29)
LONE = ("http_adapter", "pool_manager", "connection_pool")
#: urllib3 1.26 and the older 2.x releases: PoolManager follows redirects with Retry.DEFAULT,
#: not its own retries=, unless the retry comes with the request.
REDIRECTS_WITH_DEFAULT = "response.retries" not in inspect.getsource(urllib3.PoolManager.urlopen)

NOT_APPLICABLE: Dict[Tuple[str, str], str] = {
    **{
        ("keyed_post", way): "a lone SumeRetry sees no headers, so it cannot know a key: it never "
        "resends a POST (the keyless-POST cell)"
        for way in LONE
    },
    **{
        ("keyless_post", way): "the adapter gives every POST an Idempotency-Key"
        for way in ("session", "mounted")
    },
    **{
        ("broken_stream", way): "a lone SumeRetry is not called while the caller reads a body "
        "urllib3 has handed back; mount SumeAdapter to have a broken stream recorded"
        for way in LONE
    },
}


@dataclass
class Result:
    """What the caller got: a status and the whole body, the record, or the error raised."""

    status: Optional[int]
    body: bytes
    record: Optional[SumeRecord]
    error: Optional[BaseException]


class Way:
    """One way in, built on a fake server with virtual time; ``call`` sends one logical request."""

    def __init__(self, name: str, fake: FakeSume, vtime: VirtualTime, policy: Policy, **pool: Any) -> None:
        self.name = name
        self.fake = fake
        self.base = fake.url + "/v1"
        injected: Dict[str, Any] = {"sleep": vtime.sleep, "clock": vtime.clock, "rng": random.Random(7)}
        self.closers: List[Callable[[], None]] = []
        self.session: Optional[requests.Session] = None
        self.pool: Any = None
        if name == "session":
            session = SumeSession(API_KEY, base_url=self.base, policy=policy, **injected, **pool)
            self.session = session
        elif name in ("mounted", "http_adapter"):
            session = requests.Session()
            adapter = (
                SumeAdapter(policy, **injected, **pool)
                if name == "mounted"
                else HTTPAdapter(max_retries=SumeRetry(policy, **injected), **pool)
            )
            session.mount("http://", adapter)
            self.session = session
        elif name == "pool_manager":
            self.retry = SumeRetry(policy, **injected)
            self.pool = urllib3.PoolManager(retries=self.retry, **_urllib3_pool(pool))
        else:
            host, port = fake.url.split("//")[1].split(":")
            self.pool = urllib3.HTTPConnectionPool(
                host, int(port), retries=SumeRetry(policy, **injected), **_urllib3_pool(pool)
            )
        if self.session is not None:
            self.closers.append(self.session.close)
        if self.pool is not None:
            self.closers.append(getattr(self.pool, "clear", None) or self.pool.close)

    def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        headers: Optional[Dict[str, str]] = None,
        stream: bool = False,
    ) -> Result:
        if self.session is not None:
            return self._call_requests(method, path, body, headers, stream)
        return self._call_urllib3(method, path, body, headers, stream)

    def _call_requests(
        self, method: str, path: str, body: Any, headers: Optional[Dict[str, str]], stream: bool
    ) -> Result:
        assert self.session is not None
        url = path if self.name == "session" else self.base + path
        try:
            response = self.session.request(method, url, data=body, headers=headers, stream=stream)
            content = b"".join(response.iter_content(8192)) if stream else response.content
            return Result(response.status_code, content, getattr(response, "sume", None), None)
        except requests.RequestException as exc:
            answer = exc.response
            content = answer.content if answer is not None else b""
            status = answer.status_code if answer is not None else None
            return Result(status, content, getattr(exc, "sume", None), exc)

    def _call_urllib3(
        self, method: str, path: str, body: Any, headers: Optional[Dict[str, str]], stream: bool
    ) -> Result:
        target = self.base + path if self.name == "pool_manager" else "/v1" + path
        per_request = {}
        if self.name == "pool_manager" and REDIRECTS_WITH_DEFAULT:
            per_request["retries"] = self.retry  # as the urllib3 guide says to do there
        try:
            response = self.pool.urlopen(
                method, target, body=body, headers=headers, preload_content=not stream, redirect=True,
                **per_request,
            )
            content = b"".join(response.stream(8192)) if stream else response.data
            response.release_conn()
            return Result(response.status, content, None, None)
        except urllib3.exceptions.HTTPError as exc:
            return Result(None, b"", None, exc)

    def close(self) -> None:
        for close in self.closers:
            close()


def _urllib3_pool(pool: Dict[str, Any]) -> Dict[str, Any]:
    """requests' pool arguments as urllib3 names them."""
    renamed = {"pool_maxsize": "maxsize", "pool_block": "block"}
    return {renamed[name]: value for name, value in pool.items() if name in renamed}


@pytest.fixture
def way_in(fake: FakeSume, vtime: VirtualTime) -> Iterator[Callable[..., Way]]:
    """Build a way in (by name) on the fake server; closed after the test."""
    built: List[Way] = []

    def build(name: str, policy: Optional[Policy] = None, **pool: Any) -> Way:
        way = Way(name, fake, vtime, policy or Policy(), **pool)
        built.append(way)
        return way

    yield build
    for way in built:
        way.close()


def applies(cell: str, way: str) -> None:
    """Skip a cell that cannot apply to a way in, saying why."""
    reason = NOT_APPLICABLE.get((cell, way))
    if reason is not None:
        pytest.skip(reason)


def chunks(total: int = 30_000) -> Iterator[bytes]:
    """A generator body: sent once, empty if sent again."""
    for _ in range(total // 1000):
        yield b"x" * 1000


def unreplayable(kind: str) -> Tuple[Any, int]:
    """A body that can be sent once, and how many bytes it sends: a generator, a reader without
    seek, or requests-toolbelt's real ``MultipartEncoder`` (a streamed upload users send)."""
    if kind == "generator":
        return chunks(), 30_000
    if kind == "reader":
        return ReaderWithoutSeek(b"y" * 30_000), 30_000
    toolbelt = pytest.importorskip("requests_toolbelt")
    encoder = toolbelt.MultipartEncoder(fields={"file": ("y.bin", b"y" * 30_000, "application/octet-stream")})
    return encoder, encoder.len


class ReaderWithoutSeek:
    """A file-like body with a length and no way back (as requests-toolbelt's MultipartEncoder)."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)
        self.len = len(data)

    def __len__(self) -> int:
        return self.len

    def read(self, size: int = -1) -> bytes:
        return self._data.read(size)


@pytest.mark.parametrize("name", WAYS)
def test_a_503_is_retried_then_succeeds(fake: FakeSume, way_in: Callable[..., Way], name: str) -> None:
    """A 503 is retried and the caller gets the 200 that followed."""
    fake.script("GET", "/v1/things", 503, 200)
    result = way_in(name).call("GET", "/things")
    assert (result.status, result.error) == (200, None)
    assert len(fake.requests) == 2


@pytest.mark.parametrize("name", WAYS)
def test_a_fix_status_is_not_retried_and_keeps_its_whole_body(
    fake: FakeSume, way_in: Callable[..., Way], name: str
) -> None:
    """A 400 bigger than the peek is answered once, its whole body readable by the caller."""
    fake.script("GET", "/v1/things", dataclasses.replace(Reply.error(400, "invalid_request"), size=100_000))
    result = way_in(name).call("GET", "/things")
    assert result.status == 400
    assert len(result.body) == 100_000
    assert b"invalid_request" in result.body
    assert len(fake.requests) == 1


@pytest.mark.parametrize("encoding", ["gzip", "br", "zstd", "gzip, gzip", "gzip, br"])
@pytest.mark.parametrize("name", WAYS)
def test_a_compressed_envelope_is_trusted(
    fake: FakeSume, way_in: Callable[..., Way], name: str, encoding: str
) -> None:
    """A 503 whose gzip, br or zstd body says ``retryable: false`` is not retried: the body is read
    whatever the encoding requests asked for (br with brotli installed, zstd with zstandard), and
    under stacked codings, as urllib3 decodes them for the caller."""
    doc = {"error": {"code": "service_unavailable", "retryable": False}}
    if encoding == "gzip":
        reply = Reply(503, json=doc, gzip=True)
    elif encoding.startswith("gzip, "):
        packed = gzip.compress(json.dumps(doc).encode())
        if encoding.endswith("br"):
            packed = pytest.importorskip("brotli").compress(packed)
        else:
            packed = gzip.compress(packed)
        headers = {"Content-Type": "application/json", "Content-Encoding": encoding}
        reply = Reply(503, body=packed, headers=headers)
    else:
        library = pytest.importorskip("brotli" if encoding == "br" else "zstandard")
        plain = json.dumps(doc).encode()
        packed = library.compress(plain) if encoding == "br" else library.ZstdCompressor().compress(plain)
        headers = {"Content-Type": "application/json", "Content-Encoding": encoding}
        reply = Reply(503, body=packed, headers=headers)
    fake.script("GET", "/v1/things", reply, 200)
    result = way_in(name).call("GET", "/things")
    assert result.status == 503
    assert len(fake.requests) == 1


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("truncate", [100, 9_000])
@pytest.mark.parametrize("name", WAYS)
def test_an_error_body_cut_short_raises_when_read_whole(
    fake: FakeSume, way_in: Callable[..., Way], name: str, truncate: int, chunked: bool
) -> None:
    """A 400 whose body stops early (the connection closed), handed back unread and then read in
    one ``read()``: it raises, as without the policy, rather than pass the bytes that came off as
    the whole body. Cut within the peek and past it."""
    error = Reply.error(400, "invalid_request")
    cut = dataclasses.replace(error, size=20_000, truncate=truncate, chunked=chunked)
    fake.script("GET", "/v1/things", cut)
    way = way_in(name)
    if way.session is not None:
        response = way.session.get("/things" if name == "session" else way.base + "/things", stream=True)
        status, read = response.status_code, response.raw.read
    else:
        target = way.base + "/things" if name == "pool_manager" else "/v1/things"
        raw = way.pool.urlopen("GET", target, preload_content=False)
        status, read = raw.status, raw.read
    assert status == 400
    with pytest.raises(urllib3.exceptions.ProtocolError):
        read()
    assert len(fake.requests) == 1


@pytest.mark.parametrize("gzip", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("status", [400, 404, 422])
@pytest.mark.parametrize("name", ["session", "mounted"])
def test_an_error_body_cut_short_is_never_handed_over_as_whole(
    fake: FakeSume, way_in: Callable[..., Way], name: str, status: int, gzip: bool
) -> None:
    """A non-retried error whose body stops before its Content-Length, read by the adapter (no
    ``stream=True``): the body's error is raised, on urllib3 1.26 too (which does not enforce the
    length unless told to), rather than the bytes that came passed off as the whole body."""
    # Random bytes: gzip keeps them as long, so the cut falls inside the compressed body.
    cut = Reply(status, body=os.urandom(200_000), truncate=3_000, gzip=gzip)
    fake.script("GET", "/v1/things", cut)
    result = way_in(name).call("GET", "/things")
    assert isinstance(result.error, requests.exceptions.ChunkedEncodingError)
    assert "the body failed mid-read" in str(result.error)
    assert len(fake.requests) == 1


@pytest.mark.parametrize("gzip", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("name", ["session", "mounted"])
def test_a_success_body_cut_short_is_resent_whole(
    fake: FakeSume, way_in: Callable[..., Way], name: str, gzip: bool
) -> None:
    """A 200 cut short (gzip included, where the length counts the compressed bytes) is a read
    failure after sending: a GET is resent, and the caller gets the whole body, never the part."""
    body = os.urandom(30_000)  # gzip keeps random bytes as long: the cut falls inside
    cut, whole = Reply(200, body=body, truncate=5_000, gzip=gzip), Reply(200, body=body, gzip=gzip)
    fake.script("GET", "/v1/things", cut, whole)
    result = way_in(name).call("GET", "/things")
    assert (result.status, result.body, len(fake.requests)) == (200, body, 2)


@pytest.mark.parametrize("name", ["session", "mounted"])
def test_a_success_body_that_cannot_be_decoded_is_recorded_not_resent(
    fake: FakeSume, way_in: Callable[..., Way], name: str
) -> None:
    """A 200 saying gzip whose body is not: it would come the same way again, so it is not resent,
    and the failure carries its record (``SumeContentDecodingError``), not requests' bare error."""
    not_gzip = Reply(200, body=b"not gzip at all", headers={"Content-Encoding": "gzip"})
    fake.script("GET", "/v1/things", not_gzip)
    result = way_in(name).call("GET", "/things")
    assert isinstance(result.error, requests.exceptions.ContentDecodingError)
    assert getattr(result.error, "sume", None) is not None
    assert len(fake.requests) == 1


@pytest.mark.parametrize("name", ["session", "mounted"])
def test_a_give_up_whose_last_body_broke_hands_over_no_body(
    fake: FakeSume, way_in: Callable[..., Way], name: str
) -> None:
    """Retries run out on a 503 whose body is cut short: the give-up stands, with no response to
    read (none came whole) and the body's error as its cause, on both urllib3 lines."""
    cut = dataclasses.replace(Reply.error(503, "service_unavailable"), size=200_000, truncate=3_000)
    fake.script("GET", "/v1/things", *[cut] * 8)
    result = way_in(name, policy=Policy(max_retries=1)).call("GET", "/things")
    assert isinstance(result.error, SumeRetryError)
    assert result.error.response is None
    assert isinstance(result.error.__cause__, requests.exceptions.ChunkedEncodingError)
    assert (result.error.record.outcome, result.error.record.attempts) == ("gave_up", 2)


@pytest.mark.parametrize("name", WAYS)
def test_a_keyed_post_is_resent_with_the_same_key_and_body(
    fake: FakeSume, way_in: Callable[..., Way], name: str
) -> None:
    """A POST retried after a 503 carries the same Idempotency-Key and the identical body."""
    applies("keyed_post", name)
    fake.script("POST", "/v1/jobs", 503, 201)
    result = way_in(name).call("POST", "/jobs", body=b'{"input": "a"}')
    assert result.status == 201
    sent = fake.requests
    assert len(sent) == 2
    assert sent[0].headers["Idempotency-Key"] == sent[1].headers["Idempotency-Key"]
    assert sent[0].body == sent[1].body == b'{"input": "a"}'


@pytest.mark.parametrize("name", WAYS)
def test_a_post_without_a_key_is_never_resent(fake: FakeSume, way_in: Callable[..., Way], name: str) -> None:
    """A POST that carries no key is answered by its first response, never sent twice."""
    applies("keyless_post", name)
    fake.script("POST", "/v1/jobs", 503, 201)
    result = way_in(name).call("POST", "/jobs", body=b'{"input": "a"}')
    assert result.status == 503
    assert len(fake.requests) == 1


@pytest.mark.parametrize("body", ["generator", "reader", "multipart"])
@pytest.mark.parametrize("name", WAYS)
def test_an_unreplayable_body_is_not_resent_after_a_503(
    fake: FakeSume, way_in: Callable[..., Way], name: str, body: str
) -> None:
    """A generator, a reader without seek or a multipart encoder is sent once, whole; the caller
    gets the 503."""
    fake.script("PUT", "/v1/upload", 503, 200)
    payload, size = unreplayable(body)
    result = way_in(name).call("PUT", "/upload", body=payload)
    assert len(fake.requests) == 1
    assert len(fake.requests[0].body) == size
    assert result.status == 503 or isinstance(result.error, Exception)
    assert result.status != 200


@pytest.mark.parametrize("body", ["generator", "reader", "multipart"])
@pytest.mark.parametrize("status", [307, 308])
@pytest.mark.parametrize("name", WAYS)
def test_an_unreplayable_body_is_not_resent_after_a_redirect(
    fake: FakeSume, way_in: Callable[..., Way], name: str, status: int, body: str
) -> None:
    """A 307/308 that would resend a consumed body is not followed: nothing goes out empty."""
    if name == "http_adapter" and body == "generator" and OLD_REQUESTS:
        pytest.skip(
            "requests < 2.29 sends a chunked body on its own low-level path, around urllib3: no Retry "
            "is asked, and requests follows the redirect itself; mount SumeAdapter (the mounted cell)"
        )
    fake.script("PUT", "/v1/upload", Reply(status, headers={"Location": "/v1/regional"}))
    fake.script("PUT", "/v1/regional", 200)
    payload, size = unreplayable(body)
    result = way_in(name).call("PUT", "/upload", body=payload)
    assert [r.path for r in fake.requests] == ["/v1/upload"]
    assert len(fake.requests[0].body) == size
    assert result.status != 200
    if result.error is not None:
        assert "redirect" in str(result.error)
        assert "body" in str(result.error)


@pytest.mark.parametrize("name", ["session", "mounted"])
def test_a_dropped_connection_names_the_body_that_keeps_the_request_from_going_again(
    fake: FakeSume, way_in: Callable[..., Way], name: str
) -> None:
    """The connection drops after a body without seek went out: not resent, and the reason names
    the body (as a 503's does), not only "not replay-safe". (A reader with a length: requests
    before 2.29 sends a generator around urllib3, where no retry is asked.)"""
    fake.script("PUT", "/v1/upload", Reply(drop="before_headers"), 200)
    payload, size = unreplayable("reader")
    result = way_in(name).call("PUT", "/upload", body=payload)
    assert isinstance(result.error, requests.exceptions.ConnectionError)
    assert "the request body cannot be replayed" in str(result.error)
    assert [len(r.body) for r in fake.requests] == [size]


#: A 401 challenge requests' HTTPDigestAuth answers by sending the request again from a hook.
DIGEST_CHALLENGE = Reply.error(
    401, headers={"WWW-Authenticate": 'Digest realm="sume", nonce="n0", qop="auth"'}
)


def digest() -> requests.auth.HTTPDigestAuth:
    """A new handler each time: one keeps the nonce it was challenged with, and answers before asked."""
    return requests.auth.HTTPDigestAuth("u", "p")


@pytest.mark.parametrize("body", ["generator", "reader", "multipart"])
def test_an_auth_handlers_resend_never_sends_a_spent_body(fake: FakeSume, body: str) -> None:
    """requests' ``HTTPDigestAuth`` answers a 401 challenge by sending the request again, with the
    same Idempotency-Key. Outside a SumeSession that send is a new request to the adapter: a body
    the first send took is refused, not sent empty under the key."""
    fake.script("POST", "/v1/avatars", DIGEST_CHALLENGE, 201)
    session = requests.Session()
    session.mount("http://", SumeAdapter(fleet=None))
    payload, size = unreplayable(body)
    with pytest.raises(SumeRetryError, match="an earlier send took its body") as raised:
        session.post(fake.url + "/v1/avatars", data=payload, auth=digest())
    assert [len(r.body) for r in fake.requests] == [size]
    assert raised.value.record.attempts == 0  # the refused send went nowhere


def test_an_auth_handlers_resend_of_a_replayable_body_goes_whole_under_one_key(fake: FakeSume) -> None:
    """Bytes (and a file the handler rewinds) are sent whole again, under the same key."""
    fake.script("POST", "/v1/avatars", DIGEST_CHALLENGE, 201)
    session = requests.Session()
    session.mount("http://", SumeAdapter(fleet=None))
    response = session.post(fake.url + "/v1/avatars", data=b"z" * 5000, auth=digest())
    assert response.status_code == 201
    assert [len(r.body) for r in fake.requests] == [5000, 5000]
    assert len({r.headers["Idempotency-Key"] for r in fake.requests}) == 1
    assert "Authorization" in fake.requests[1].headers


def test_a_generator_is_not_sent_twice_by_a_caller_either(fake: FakeSume) -> None:
    """The same spent generator given to a second call is refused, whichever way in took it."""
    fake.script("POST", "/v1/avatars", 201, 201)
    session = SumeSession(API_KEY, base_url=fake.url + "/v1", fleet=None)
    body = chunks()
    assert session.post("/avatars", data=body).status_code == 201
    with pytest.raises(SumeRetryError, match="an earlier send took its body"):
        session.post("/avatars", data=body)
    assert [len(r.body) for r in fake.requests] == [30_000]


def test_a_session_resend_after_a_challenge_names_the_401_and_keeps_its_response(fake: FakeSume) -> None:
    """Through a SumeSession the handler's resend continues the logical request: a spent body is
    refused naming the 401 (not a redirect), and the 401 is the response the caller gets."""
    fake.script("POST", "/v1/avatars", DIGEST_CHALLENGE)
    # The key as a Bearer token: the handler's Authorization replaces it, one auth header still.
    session = SumeSession(API_KEY, base_url=fake.url + "/v1", fleet=None, auth_header="bearer")
    with pytest.raises(SumeRetryError, match="not sent again after the 401: the request body") as raised:
        session.post("/avatars", data=chunks(), auth=digest())
    assert [len(r.body) for r in fake.requests] == [30_000]
    error = raised.value
    assert error.response is not None
    assert error.response.status_code == 401
    assert (error.record.status, error.record.attempts) == (401, 1)


def test_a_session_refuses_an_auth_handler_adding_authorization_beside_its_key(fake: FakeSume) -> None:
    """SumeSession refuses x-api-key and Authorization together before the first send; a handler
    that adds Authorization to a resend (a digest answer) is refused there, before it goes out."""
    fake.script("GET", "/v1/jobs", DIGEST_CHALLENGE)
    session = SumeSession(API_KEY, base_url=fake.url + "/v1", fleet=None)
    with pytest.raises(ConfigurationError, match="an auth handler added Authorization to a resend"):
        session.get("/jobs", auth=digest())
    assert len(fake.requests) == 1
    assert "Authorization" not in fake.requests[0].headers


@pytest.mark.parametrize("body", ["bytes", "generator"])
@pytest.mark.parametrize("status", [301, 302])
@pytest.mark.parametrize("name", WAYS)
def test_a_post_is_not_sent_again_on_a_301_or_302(
    fake: FakeSume, way_in: Callable[..., Way], name: str, status: int, body: str
) -> None:
    """urllib3 follows a 301/302 with the same method and body (only a 303 becomes a GET): a lone
    SumeRetry, which cannot see the body nor know a key, does not follow it. Through requests the
    POST becomes a GET without a body (requests' rule), so it is not sent again either."""
    fake.script("POST", "/v1/start", Reply(status, headers={"Location": "/v1/landing"}))
    fake.script("POST", "/v1/landing", 200)
    fake.script("GET", "/v1/landing", 200)
    result = way_in(name).call("POST", "/start", body=b"p" * 10_000 if body == "bytes" else chunks())
    assert [r.path for r in fake.requests if r.method == "POST"] == ["/v1/start"]
    assert len(fake.requests[0].body) == (10_000 if body == "bytes" else 30_000)
    if name in ("pool_manager", "connection_pool"):
        assert result.error is not None
        assert f"{status} redirect not followed" in str(result.error)
    else:
        assert (result.status, [r.method for r in fake.requests]) == (200, ["POST", "GET"])


@pytest.mark.parametrize("name", WAYS)
def test_a_replayable_body_follows_a_307_whole(fake: FakeSume, way_in: Callable[..., Way], name: str) -> None:
    """A body in memory follows a 307 byte-identical (a lone retry cannot know, and does not follow)."""
    fake.script("PUT", "/v1/upload", Reply(307, headers={"Location": "/v1/regional"}))
    fake.script("PUT", "/v1/regional", 200)
    result = way_in(name).call("PUT", "/upload", body=b"z" * 10_000)
    if name in LONE:
        assert [r.path for r in fake.requests] == ["/v1/upload"]
        assert result.status != 200
        return
    assert result.status == 200
    assert [r.body for r in fake.requests] == [b"z" * 10_000] * 2


@pytest.mark.parametrize("name", WAYS)
def test_a_retry_after_past_the_deadline_is_not_waited_on_a_503(
    fake: FakeSume, vtime: VirtualTime, way_in: Callable[..., Way], name: str
) -> None:
    """A 503 asking for 4 s with 1 s left ends the call now: no wait, no resend."""
    fake.script("GET", "/v1/things", Reply(503, headers={"Retry-After": "4"}), 200)
    result = way_in(name, Policy(max_elapsed=1)).call("GET", "/things")
    assert result.status != 200
    assert len(fake.requests) == 1
    assert sum(vtime.sleeps) <= 1.0


@pytest.mark.parametrize("status", [302, 307])
@pytest.mark.parametrize("name", WAYS)
def test_a_redirects_retry_after_never_outlasts_the_deadline(
    fake: FakeSume, vtime: VirtualTime, way_in: Callable[..., Way], name: str, status: int
) -> None:
    """A redirect with Retry-After: 4 under a 1 s deadline does not wait 4 s."""
    fake.script("GET", "/v1/a", Reply(status, headers={"Location": "/v1/b", "Retry-After": "4"}))
    fake.script("GET", "/v1/b", 200)
    way_in(name, Policy(max_elapsed=1)).call("GET", "/a")
    assert sum(vtime.sleeps) <= 1.0


@pytest.mark.parametrize("name", WAYS)
def test_give_ups_on_a_large_error_body_return_their_connection(
    fake: FakeSume, way_in: Callable[..., Way], name: str
) -> None:
    """Ten caught give-ups on a 100 KB 503 page reuse one connection; a one-connection pool never hangs."""
    fake.script("GET", "/v1/things", Reply(503, body=b"<html>maintenance</html>", size=100_000))
    way = way_in(name, Policy(max_retries=1), pool_maxsize=1, pool_block=True)
    results = _within(10.0, lambda: [way.call("GET", "/things") for _ in range(10)])
    assert len(fake.requests) == 20
    assert all(r.status in (503, None) for r in results)
    assert fake.connections == 1


@pytest.mark.parametrize("name", ["session", "mounted"])
def test_give_ups_the_caller_never_reads_still_return_their_connection(
    fake: FakeSume, way_in: Callable[..., Way], name: str
) -> None:
    """A caught give-up whose body nobody reads gives its connection back, as requests would."""
    fake.script("GET", "/v1/things", Reply(503, body=b"<html>maintenance</html>", size=100_000))
    way = way_in(name, Policy(max_retries=0), pool_maxsize=1, pool_block=True)
    assert way.session is not None
    session = way.session

    def give_up_ten_times() -> None:
        for _ in range(10):
            with pytest.raises(SumeRetryError):
                session.get(way.base + "/things" if name == "mounted" else "/things")

    _within(10.0, give_up_ten_times)
    assert fake.connections == 1


@pytest.mark.parametrize("name", ["session", "mounted"])
def test_streamed_give_ups_the_caller_drops_still_return_their_connection(
    fake: FakeSume, way_in: Callable[..., Way], name: str
) -> None:
    """``stream=True``: a give-up hands its response over on the exception, where ``with`` cannot
    close it. A 100 KB page (past the peek) is held whole, so the connection goes back even when
    the caller drops it unread, and the one who reads it gets all of it."""
    fake.script("GET", "/v1/things", Reply(503, body=b"<html>maintenance</html>", size=100_000))
    way = way_in(name, Policy(max_retries=0), pool_maxsize=1, pool_block=True)
    assert way.session is not None
    session, path = way.session, way.base + "/things" if name == "mounted" else "/things"

    def give_up_ten_times() -> bytes:
        for _ in range(9):
            with pytest.raises(SumeRetryError), session.get(path, stream=True):
                pass  # never reached: the give-up raises
        with pytest.raises(SumeRetryError) as raised:
            session.get(path, stream=True)
        assert raised.value.response is not None
        return raised.value.response.content

    body = _within(10.0, give_up_ten_times)
    assert len(body) == 100_000
    assert body.startswith(b"<html>maintenance</html>")
    assert fake.connections == 1


@pytest.mark.parametrize("name", ["session", "mounted"])
def test_a_streamed_give_up_past_the_drain_limit_stays_streamed_and_whole(
    fake: FakeSume, way_in: Callable[..., Way], name: str
) -> None:
    """A give-up's body longer than the drain's limit is not taken into memory: the caller streams
    all of it from ``error.response`` (and closing it is theirs, as for any streamed response)."""
    size = DRAIN_LIMIT * 2
    fake.script("GET", "/v1/things", Reply(503, body=b"x", size=size))
    way = way_in(name, Policy(max_retries=0))
    assert way.session is not None
    with pytest.raises(SumeRetryError) as raised:
        way.session.get(way.base + "/things" if name == "mounted" else "/things", stream=True)
    response = raised.value.response
    assert response is not None
    assert not response._content_consumed
    with response:
        assert sum(len(piece) for piece in response.iter_content(65536)) == size


@pytest.mark.parametrize("name", ["session", "mounted"])
def test_a_stream_read_to_its_end_is_counted_once_when_it_ends(
    fake: FakeSume, way_in: Callable[..., Way], name: str
) -> None:
    """``stream=True``: the outcome is told when the body ends, once, as ``ok``."""
    fake.script("GET", "/v1/big", Reply(200, body=b"a", size=100_000))
    outcomes: List[str] = []

    class Outcomes:
        def on_outcome(self, record: SumeRecord) -> None:
            outcomes.append(record.outcome.value)

    way = way_in(name)
    assert way.session is not None
    adapter = way.session.get_adapter(way.base)
    assert isinstance(adapter, SumeAdapter)
    adapter.observers = (*adapter.observers, Outcomes())
    response = way.session.get(way.base + "/big", stream=True)
    assert outcomes == []  # the body is not read yet: the request is not over
    assert len(b"".join(response.iter_content(8192))) == 100_000
    assert outcomes == ["ok"]
    response.close()
    assert outcomes == ["ok"]


@pytest.mark.parametrize("name", WAYS)
def test_retrying_a_large_error_body_keeps_the_connection(
    fake: FakeSume, way_in: Callable[..., Way], name: str
) -> None:
    """A 100 KB 503 then a 200, ten times over: the retries drain the page and keep one connection."""
    fake.script("GET", "/v1/things", Reply(503, body=b"<html>busy</html>", size=100_000), 200)
    way = way_in(name)
    for _ in range(10):
        fake.script("GET", "/v1/things", Reply(503, body=b"<html>busy</html>", size=100_000), 200)
        assert way.call("GET", "/things").status == 200
    assert fake.connections == 1


@pytest.mark.parametrize("name", WAYS)
def test_a_stream_cut_short_is_a_failure_with_its_record(
    fake: FakeSume, way_in: Callable[..., Way], name: str
) -> None:
    """``stream=True`` and a body cut at 5,000 of 100,000 bytes: a give-up with the record, not ``ok``."""
    applies("broken_stream", name)
    fake.script("GET", "/v1/big", Reply(200, body=b"a", size=100_000, truncate=5_000))
    way = way_in(name)
    result = way.call("GET", "/big", stream=True)
    assert isinstance(result.error, requests.exceptions.ChunkedEncodingError)
    assert isinstance(result.error, SumeRetryError)
    record = result.error.sume  # type: ignore[attr-defined]
    assert record.outcome.value != "ok"
    if name == "session":
        assert isinstance(way.session, SumeSession)
        assert way.session.metrics.snapshot()["outcomes"].get("ok", 0) == 0


@pytest.mark.parametrize("value", [3, urllib3.Retry(3)], ids=["int", "Retry"])
def test_a_plain_retry_set_on_a_mounted_adapter_is_refused_by_name(fake: FakeSume, value: Any) -> None:
    """requests-futures' ``adapter_kwargs={"max_retries": 3}`` sets a urllib3 ``Retry`` on the session's
    mounted adapters: refused at once, by name, and the adapter keeps its SumeRetry and works."""
    fake.script("GET", "/v1/things", 503, 200)
    session = SumeSession(API_KEY, base_url=fake.url + "/v1")
    adapter = session.get_adapter(fake.url)

    with pytest.raises(ConfigurationError, match=r"max_retries must be a SumeRetry.*Policy\(max_retries"):
        adapter.max_retries = urllib3.Retry.from_int(value)

    assert isinstance(adapter.max_retries, SumeRetry)
    with no_sleep():
        assert session.get("/things").status_code == 200


def test_a_mounted_adapter_serves_with_the_sessions_settings(fake: FakeSume, vtime: VirtualTime) -> None:
    """A SumeAdapter mounted on a SumeSession (to size its pool) keeps the session's policy and timeout."""
    fake.script("GET", "/v1/things", 503, 503, 503, 200)
    session = SumeSession(
        API_KEY,
        base_url=fake.url + "/v1",
        policy=Policy(max_retries=1),
        timeout=(1, 1),
        sleep=vtime.sleep,
        clock=vtime.clock,
    )
    with session:
        session.mount("http://", SumeAdapter(pool_maxsize=32))
        with pytest.raises(SumeRetryError) as caught:
            session.get("/things")
        assert len(fake.requests) == 2  # the session's one retry, not the adapter's default
        assert caught.value.sume.attempts == 2
        assert session.metrics.snapshot()["outcomes"].get("gave_up") == 1


def test_a_mounted_adapter_given_its_own_policy_keeps_it(fake: FakeSume, vtime: VirtualTime) -> None:
    """``SumeAdapter(Policy(...))`` mounted for some endpoints keeps its policy; the rest is the session's."""
    fake.script("GET", "/v1/files/a", 503, 503, 503, 200)
    session = SumeSession(
        API_KEY,
        base_url=fake.url + "/v1",
        policy=Policy(max_retries=0),
        timeout=(1, 1),
        sleep=vtime.sleep,
        clock=vtime.clock,
    )
    with session:
        uploads = SumeAdapter(Policy(max_retries=3), sleep=vtime.sleep, clock=vtime.clock)
        session.mount(session.base_url + "/files/", uploads)
        assert session.get("/files/a").status_code == 200
        assert len(fake.requests) == 4
        assert uploads.timeout == (1, 1)  # given none of its own: the session's


@pytest.mark.slow  # real time: runs in CI's slow step
def test_a_mounted_adapter_uses_the_sessions_timeout(fake: FakeSume) -> None:
    """A call without ``timeout=`` through a mounted SumeAdapter times out at the session's (1, 1)."""
    fake.script("GET", "/v1/slow", Reply(200, delay=3.0))
    session = SumeSession(API_KEY, base_url=fake.url + "/v1", policy=Policy(max_retries=0), timeout=(1, 0.5))
    with session:
        session.mount("http://", SumeAdapter(pool_maxsize=32))
        with pytest.raises(requests.exceptions.ReadTimeout):
            _within(2.5, lambda: session.get("/slow"))


def test_sessions_take_the_pool_arguments(fake: FakeSume, vtime: VirtualTime) -> None:
    """``SumeSession(pool_maxsize=1, pool_block=True)`` sizes the pool its own adapter uses."""
    session = SumeSession(
        API_KEY,
        base_url=fake.url + "/v1",
        pool_connections=2,
        pool_maxsize=1,
        pool_block=True,
        sleep=vtime.sleep,
        clock=vtime.clock,
    )
    with session:
        assert session.adapter._pool_maxsize == 1
        assert session.adapter._pool_block is True
        fake.script("GET", "/v1/things", 200)
        assert session.get("/things").status_code == 200


@pytest.mark.parametrize("prefix", ["http://", "{base}", "{base}/", "{base}/files/"])
def test_mounting_a_non_sume_adapter_where_the_api_goes_warns(fake: FakeSume, prefix: str) -> None:
    """Mounting a plain HTTPAdapter over the base URL, or below it, says what stops working."""
    session = SumeSession(API_KEY, base_url=fake.url + "/v1")
    with session, pytest.warns(UserWarning, match="not a SumeAdapter"):
        session.mount(prefix.format(base=session.base_url), HTTPAdapter())


@pytest.mark.parametrize("prefix", ["https://", "{base}0/", "http://storage.example/"])
def test_mounting_an_adapter_where_the_api_does_not_go_is_quiet(fake: FakeSume, prefix: str) -> None:
    """Another scheme, a sibling path (``/v10`` beside ``/v1``) or another host: nothing to warn."""
    session = SumeSession(API_KEY, base_url=fake.url + "/v1")
    with session, warnings.catch_warnings():
        warnings.simplefilter("error")
        session.mount(prefix.format(base=session.base_url), HTTPAdapter())


def _within(seconds: float, call: Callable[[], Any]) -> Any:
    """Run ``call`` in a thread and fail (instead of hanging the suite) if it takes longer."""
    box: List[Any] = []
    failure: List[BaseException] = []

    def run() -> None:
        try:
            box.append(call())
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s (a pool that never gave back?)"
    if failure:
        raise failure[0]
    return box[0]
