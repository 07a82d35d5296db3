"""Over real TLS, as every call to the Sume API goes: the promises hold on an SSL socket.

A raw loopback server (tests/raw_server.py) wraps each connection in TLS with certificates from
``trustme``: the error body is peeked off an SSL socket and handed over whole, the connection of
a retried response goes back to the pool (one handshake for the whole logical request), a body
cut short is resent whole, and a certificate that fails verification is never retried, on every
way in. CI runs this module on urllib3 2.x and 1.26.
"""

from __future__ import annotations

import json
import ssl
import time
import warnings
from typing import Any, Callable, Iterable, Iterator

import pytest
import requests
import urllib3
from requests.adapters import HTTPAdapter

from sume_urllib3 import Policy, SumeAdapter, SumeRetry, SumeSession
from sume_urllib3.exceptions import SumeReadTimeout

from .raw_server import CLOSE, QUICK, Loopback, Seen, reply, trickled_body

trustme = pytest.importorskip("trustme")

KEY = "sk_test_tls_0123456789"
ENVELOPE = json.dumps(
    {"error": {"code": "service_unavailable", "message": "x" * 900, "request_id": "req_tls"}}
)
BIG_400 = json.dumps({"error": {"code": "invalid_request", "message": "y" * 200_000}}).encode()
POLICY = QUICK.replace(max_retries=2)


@pytest.fixture(scope="module")
def ca() -> Any:
    return trustme.CA()


@pytest.fixture
def ca_file(ca: Any, tmp_path: Any) -> str:
    path = str(tmp_path / "ca.pem")
    ca.cert_pem.write_to_path(path)
    return path


@pytest.fixture
def tls_server(ca: Any, raw_server: Callable[..., Loopback]) -> Callable[..., Loopback]:
    """Start a raw server speaking TLS, its certificate for 127.0.0.1 issued by ``ca``."""

    def start(handler: Callable[[Seen, int], Iterable[Any]]) -> Loopback:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(context)
        return raw_server(handler, tls=context)

    return start


def scripted(*replies: Any) -> Callable[[Seen, int], Iterator[Any]]:
    """The nth request to a path gets the nth reply (the last one after that): bytes, or the
    steps of one (see ``cut``)."""

    def handler(seen: Seen, n: int) -> Iterator[Any]:
        steps = replies[min(n, len(replies) - 1)]
        yield from steps if isinstance(steps, tuple) else (steps,)

    return handler


def cut(status: int, body: bytes, sent: int) -> Any:
    """A response promising ``body`` whose connection closes after ``sent`` bytes of it."""
    return (reply(status, body[:sent], length=len(body)), CLOSE)


class Ways:
    """The ways in that go through requests, each verifying the server with ``ca_file``."""

    def __init__(self, ca_file: str) -> None:
        self.ca_file = ca_file

    def get(self, name: str, url: str, **kwargs: Any) -> requests.Response:
        origin = url.split("/v1")[0]
        if name == "session":
            session: requests.Session = SumeSession(
                KEY, base_url=origin + "/v1", policy=POLICY, fleet=None, sleep=lambda s: None
            )
        else:
            session = requests.Session()
            session.headers["x-api-key"] = KEY
            adapter = (
                SumeAdapter(POLICY, fleet=None, sleep=lambda s: None)
                if name == "mounted"
                else HTTPAdapter(max_retries=SumeRetry(POLICY, sleep=lambda s: None))
            )
            session.mount("https://", adapter)
        with session:
            # verify= per call: an environment's REQUESTS_CA_BUNDLE wins over session.verify.
            response = session.get(url, verify=self.ca_file, timeout=10, **kwargs)
            response.content  # noqa: B018 - read while the session is open
            return response


WAYS = ("session", "mounted", "http_adapter")


@pytest.mark.parametrize("name", WAYS)
def test_a_503_is_retried_over_one_tls_connection(
    tls_server: Callable[..., Loopback], ca_file: str, name: str
) -> None:
    """The 503's body is peeked off the SSL socket and drained: the retry reuses the connection."""
    server = tls_server(scripted(reply(503, ENVELOPE.encode()), reply(200, b"ok")))
    response = Ways(ca_file).get(name, server.url + "/v1/jobs")
    assert (response.status_code, response.content) == (200, b"ok")
    assert [seen.conn for seen in server.requests] == [1, 1]


@pytest.mark.parametrize("name", WAYS)
def test_a_large_error_body_arrives_whole_over_tls(
    tls_server: Callable[..., Loopback], ca_file: str, name: str
) -> None:
    """A 400 with a 200 KB body (past the peek's 64 KiB): not retried, every byte handed over."""
    server = tls_server(scripted(reply(400, BIG_400)))
    response = Ways(ca_file).get(name, server.url + "/v1/jobs")
    assert (response.status_code, response.content) == (400, BIG_400)
    assert len(server.requests) == 1


@pytest.mark.parametrize("name", ["session", "mounted"])
def test_a_body_cut_short_over_tls_is_resent_whole(
    tls_server: Callable[..., Loopback], ca_file: str, name: str
) -> None:
    """A 200 whose connection closes mid-body: a read failure after sending, so the GET goes again."""
    whole = b"z" * 50_000
    server = tls_server(scripted(cut(200, whole, 7_000), reply(200, whole)))
    response = Ways(ca_file).get(name, server.url + "/v1/jobs")
    assert (response.status_code, response.content) == (200, whole)
    assert len(server.requests) == 2


@pytest.mark.parametrize("hosts", [("127.0.0.1",), ("api.example.test",)], ids=["unknown CA", "wrong host"])
@pytest.mark.parametrize("name", WAYS)
def test_a_certificate_that_fails_verification_is_never_retried(
    ca: Any, raw_server: Callable[..., Loopback], tmp_path: Any, name: str, hosts: Any
) -> None:
    """An unknown CA or a certificate for another host fails the same way every time: one
    handshake, a clear SSLError, no retry, no backoff."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    issuer = ca if hosts != ("127.0.0.1",) else trustme.CA()  # the client trusts only ``ca``
    issuer.issue_cert(*hosts).configure_cert(context)
    server = raw_server(scripted(reply(200, b"ok")), tls=context)
    connects = []
    original = ssl.SSLContext.wrap_socket

    def counted(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("server_side"):
            connects.append(1)
        return original(self, *args, **kwargs)

    trusted = str(tmp_path / "trusted.pem")
    ca.cert_pem.write_to_path(trusted)
    ssl.SSLContext.wrap_socket = counted  # type: ignore[method-assign]
    try:
        # urllib3 1.26 checks the host name itself: "hostname '127.0.0.1' doesn't match ...".
        with pytest.raises(requests.exceptions.SSLError, match=r"CERTIFICATE_VERIFY_FAILED|doesn't match"):
            Ways(trusted).get(name, server.url + "/v1/jobs")
    finally:
        ssl.SSLContext.wrap_socket = original  # type: ignore[method-assign]
    assert len(connects) == 1
    assert server.requests == []


def test_pool_manager_and_a_lone_retry_over_tls(tls_server: Callable[..., Loopback], ca_file: str) -> None:
    """``urllib3.PoolManager(retries=SumeRetry())`` over TLS: a 503 then 200 on one connection,
    and a cut error body raises when read whole rather than passing for the whole body."""
    big = b"e" * 100_000
    server = tls_server(scripted(reply(503, ENVELOPE.encode()), reply(200, b"ok")))
    other = tls_server(scripted(cut(400, big, 3_000)))
    retry = SumeRetry(Policy(backoff_base=0.0), sleep=lambda s: None)
    http = urllib3.PoolManager(retries=retry, ca_certs=ca_file, timeout=10.0)
    try:
        response = http.request("GET", server.url + "/v1/jobs")
        assert (response.status, response.data) == (200, b"ok")
        assert [seen.conn for seen in server.requests] == [1, 1]
        raw = http.request("GET", other.url + "/v1/jobs", preload_content=False)
        assert raw.status == 400
        with pytest.raises(urllib3.exceptions.ProtocolError):
            raw.read()
        assert len(other.requests) == 1
    finally:
        http.clear()


# -- pyOpenSSL injected into urllib3, as legacy code does -------------------------------------


@pytest.fixture
def pyopenssl() -> Iterator[None]:
    """urllib3's TLS through pyOpenSSL (``inject_into_urllib3()``), undone after the test."""
    pytest.importorskip("OpenSSL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # urllib3 2.x deprecates the module
        from urllib3.contrib import pyopenssl as contrib
    contrib.inject_into_urllib3()
    yield
    contrib.extract_from_urllib3()


@pytest.mark.parametrize("name", WAYS)
def test_under_pyopenssl_a_certificate_that_fails_verification_is_never_retried(
    pyopenssl: None, raw_server: Callable[..., Loopback], ca_file: str, name: str
) -> None:
    """pyOpenSSL reports a failed verification as a plain SSLError("bad handshake: ... certificate
    verify failed"), not the ssl module's SSLCertVerificationError: still one handshake, no retry."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    trustme.CA().issue_cert("127.0.0.1").configure_cert(context)  # a CA the client does not trust
    server = raw_server(scripted(reply(200, b"ok")), tls=context)
    with pytest.raises(requests.exceptions.SSLError, match="certificate verify failed"):
        Ways(ca_file).get(name, server.url + "/v1/jobs")
    assert len(server._conns) == 1  # one connection: never tried again
    assert server.requests == []


@pytest.mark.slow  # real time: runs in CI's slow step
@pytest.mark.parametrize("name", ["session", "mounted"])
def test_under_pyopenssl_a_trickle_ends_at_the_deadline(
    pyopenssl: None, tls_server: Callable[..., Loopback], ca_file: str, name: str
) -> None:
    """pyOpenSSL's WrappedSocket is not a socket: the deadline cuts the OS socket beneath it, so a
    body sent a byte every 0.3 s (under the 1 s read timeout) still ends at the 1 s deadline."""

    server = tls_server(trickled_body)
    policy = Policy(max_elapsed=1.0, max_retries=0)
    if name == "session":
        session: requests.Session = SumeSession(KEY, base_url=server.url + "/v1", policy=policy, fleet=None)
    else:
        session = requests.Session()
        session.mount("https://", SumeAdapter(policy, fleet=None))
    started = time.monotonic()
    with session, pytest.raises(SumeReadTimeout) as raised:
        session.get(server.url + "/v1/slow", verify=ca_file, timeout=(1, 1))
    took = time.monotonic() - started
    assert took < 1.5, f"took {took:.2f} s"
    assert "deadline" in str(raised.value)
