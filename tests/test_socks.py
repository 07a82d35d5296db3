"""Through a SOCKS proxy (``proxies={"https": "socks5h://..."}``, PySocks): the same promises.

urllib3 sends such requests through pools of its own (``urllib3.contrib.socks``), whose
connections are PySocks sockets: the adapter keeps those classes and watches them as it watches
its own, so a retry keeps its Idempotency-Key and a response that trickles in ends at the
deadline, on real sockets through a real SOCKS5 relay on loopback.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Iterator

import pytest
import requests

from sume_urllib3 import Policy, SumeAdapter, SumeSession
from sume_urllib3._deadline import _Watched
from sume_urllib3.exceptions import SumeReadTimeout

from .raw_server import KEY, QUICK, Loopback, Seen, Socks5Relay, Step, reply, trickled_body

pytest.importorskip("socks")  # PySocks: requests[socks]

ENVELOPE = json.dumps({"error": {"code": "service_unavailable"}}).encode()


@pytest.fixture
def relay() -> Iterator[Socks5Relay]:
    proxy = Socks5Relay()
    yield proxy
    proxy.stop()


def _session(name: str, server: Loopback, relay: Socks5Relay, policy: Policy) -> requests.Session:
    if name == "session":
        session: requests.Session = SumeSession(
            KEY, base_url=server.url + "/v1", policy=policy, fleet=None, sleep=lambda s: None
        )
    else:
        session = requests.Session()
        session.headers["x-api-key"] = KEY
        session.mount("http://", SumeAdapter(policy, fleet=None, sleep=lambda s: None))
    session.proxies = {"http": relay.url, "https": relay.url}
    return session


@pytest.mark.parametrize("name", ["session", "mounted"])
def test_a_post_is_retried_through_the_proxy_with_its_key(
    raw_server: Callable[..., Loopback], relay: Socks5Relay, name: str
) -> None:
    """A 503 then a 201 through the relay: one tunnel, both attempts with the same key."""

    def handler(seen: Seen, n: int) -> Iterator[Step]:
        yield reply(503, ENVELOPE) if n == 0 else reply(201, b'{"id": "job_1"}')

    server = raw_server(handler)
    with _session(name, server, relay, QUICK) as session:
        response = session.post(server.url + "/v1/jobs", json={"n": 1}, timeout=5)
    assert response.status_code == 201
    keys = {seen.headers["idempotency-key"] for seen in server.requests}
    assert len(server.requests) == 2
    assert len(keys) == 1
    assert relay.targets == [("127.0.0.1", server.port)]  # one tunnel, to the API only


@pytest.mark.slow  # real time: runs in CI's slow step
@pytest.mark.parametrize("name", ["session", "mounted"])
def test_a_trickle_through_the_proxy_ends_at_the_deadline(
    raw_server: Callable[..., Loopback], relay: Socks5Relay, name: str
) -> None:
    """A body sent a byte every 0.3 s keeps a 1 s read timeout from firing; the deadline (1 s)
    still ends the call, through the proxy's own pools as through the adapter's."""

    server = raw_server(trickled_body)
    policy = Policy(max_elapsed=1.0, max_retries=0)
    started = time.monotonic()
    with _session(name, server, relay, policy) as session, pytest.raises(SumeReadTimeout) as raised:
        session.get(server.url + "/v1/slow", timeout=(1, 1))
    took = time.monotonic() - started
    assert took < 1.5, f"took {took:.2f} s"
    assert "deadline" in str(raised.value)


def test_the_proxys_pools_are_watched_and_keep_their_connections(relay: Socks5Relay) -> None:
    """The SOCKS manager's pool classes become watched ones of the same classes: PySocks
    connections, under the deadline's watch."""
    from urllib3.contrib.socks import SOCKSHTTPConnectionPool, SOCKSHTTPSConnectionPool

    manager: Any = SumeAdapter().proxy_manager_for(relay.url)
    classes = manager.pool_classes_by_scheme
    assert issubclass(classes["http"], SOCKSHTTPConnectionPool)
    assert issubclass(classes["https"], SOCKSHTTPSConnectionPool)
    assert all(issubclass(cls, _Watched) for cls in classes.values())
    assert SumeAdapter().proxy_manager_for(relay.url).pool_classes_by_scheme == classes  # made once
