"""The attempt engine: what every way in does between two attempts, as one set of rules."""

from __future__ import annotations

import io
import math
import random
from typing import Any, List, Optional

import pytest
import requests
import urllib3
from requests.adapters import HTTPAdapter

from sume_urllib3 import LocalFleet, RetryBudget, SumeRetry, SumeSession
from sume_urllib3._body import PrefixedFP
from sume_urllib3._policy import Policy
from sume_urllib3._request import RequestContext
from sume_urllib3._retry import (
    DRAIN_LIMIT,
    RetryTurn,
    body_refusal,
    end_turn,
    let_go,
    redirect_refusal,
    redirect_wait,
    retry_turn,
    tunnel_status,
)

from .conftest import VirtualTime


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
    body._fp = PrefixedFP(b"x" * 10, body._fp)
    body._fp.read()
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


def test_a_redirects_retry_after_is_waited_only_when_it_fits() -> None:
    """Retry-After on a redirect: waited when it fits in the time left, else not waited at all."""
    assert redirect_wait(2.0, 5.0) == 2.0
    assert redirect_wait(4.0, 1.0) == 0.0
    assert redirect_wait(None, 1.0) == 0.0
    assert redirect_wait(-1.0, 1.0) == 0.0


def _context(*, adapter: bool, replayable: bool = True, method: str = "PUT") -> RequestContext:
    context = RequestContext(0.0, method=method)
    context.adapter = object() if adapter else None
    context.replayable = replayable
    return context


def test_a_lone_retry_never_resends_a_body_it_cannot_see() -> None:
    """Without an adapter the body is unseen: PUT, POST and PATCH are refused, GET and DELETE are not."""
    for method in ("PUT", "POST", "PATCH"):
        assert "cannot see the request body" in (body_refusal(_context(adapter=False), method) or "")
    for method in ("GET", "DELETE", "HEAD"):
        assert body_refusal(_context(adapter=False), method) is None


def test_through_an_adapter_only_an_unreplayable_body_is_refused() -> None:
    """With an adapter, the body seen before the first send decides."""
    assert body_refusal(_context(adapter=True), "PUT") is None
    assert "cannot be replayed" in (body_refusal(_context(adapter=True, replayable=False), "PUT") or "")


def test_a_redirect_that_resends_a_spent_body_is_refused_but_a_303() -> None:
    """A 303 always becomes a GET without a body; urllib3 sends the body again on 301/302/307/308."""
    spent = _context(adapter=True, replayable=False)
    assert redirect_refusal(spent, "PUT", 303) is None
    for status in (301, 302, 307, 308):
        assert (redirect_refusal(spent, "PUT", status) or "").startswith(f"{status} redirect not followed")
    assert redirect_refusal(_context(adapter=True), "PUT", 308) is None


def test_a_throttled_retry_waits_without_spending_the_budget() -> None:
    """A retry the server paced never spends the budget; an error retry spends one unit of it."""
    vt = VirtualTime()
    budget = RetryBudget(ratio=0.0, min_per_second=0.1, window=10.0, clock=vt.clock)  # one unit
    context = RequestContext(vt.now)
    common: Any = {"budget": budget, "rng": random.Random(1), "now": vt.now}
    assert retry_turn(context, Policy(), 1.0, throttled=True, **common) == RetryTurn(1.0)
    assert retry_turn(context, Policy(), 1.0, throttled=False, **common) == RetryTurn(1.0)


def test_a_spent_budget_delays_an_error_retry_and_refuses_it_only_past_the_deadline() -> None:
    """A spent budget holds an error retry until a unit is free, as fleets do; refused past the deadline."""
    vt = VirtualTime()
    budget = RetryBudget(ratio=0.0, min_per_second=2.0, window=1.0, clock=vt.clock)  # two units
    context = RequestContext(vt.now)
    common: Any = {"budget": budget, "rng": random.Random(1), "now": vt.now}
    assert retry_turn(context, Policy(), 0.1, throttled=False, **common) == RetryTurn(0.1)
    assert retry_turn(context, Policy(), 0.1, throttled=False, **common) == RetryTurn(0.1)
    delayed = retry_turn(context, Policy(), 0.1, throttled=False, **common)
    assert delayed.refused is None
    assert delayed.wait == pytest.approx(math.log(2), abs=1e-3)  # two spent decay to one free by e a window
    late = retry_turn(context, Policy(max_elapsed=0.01), 0.0, throttled=False, **common)
    assert late.refused == "retry budget exhausted"


def test_the_fleets_turn_lengthens_the_wait_and_is_told_the_answer_once() -> None:
    """Under a cooldown the wait becomes the fleet's; end_turn releases the grant exactly once."""
    vt = VirtualTime()
    fleet = LocalFleet(clock=vt.clock, rng=random.Random(3))
    context = RequestContext(vt.now)
    context.fleet, context.key_id = fleet, "k1"
    first = fleet.acquire("k1", time_left=60.0)
    fleet.release("k1", first, 429, {"Retry-After": "5"})
    turn = retry_turn(context, Policy(), 1.0, throttled=True, budget=None, rng=random.Random(1), now=vt.now)
    assert turn.refused is None
    assert turn.wait >= 5.0
    assert context.paced > 0
    assert context.grant is not None
    released: List[Any] = []
    real_release = fleet.release
    fleet.release = lambda *args: released.append(args) or real_release(*args)  # type: ignore[method-assign]
    end_turn(context, 200, {})
    end_turn(context, 200, {})
    assert len(released) == 1
    assert context.grant is None


def test_a_turn_past_the_deadline_is_refused_with_a_spread_retry_in() -> None:
    """A cooldown longer than the time left refuses the retry and says when to come back, spread."""
    vt = VirtualTime()
    fleet = LocalFleet(clock=vt.clock, rng=random.Random(3))
    context = RequestContext(vt.now)
    context.fleet, context.key_id = fleet, "k1"
    first = fleet.acquire("k1", time_left=60.0)
    fleet.release("k1", first, 429, {"Retry-After": "30"})
    turn = retry_turn(
        context, Policy(max_elapsed=5), 1.0, throttled=True, budget=None, rng=random.Random(1), now=vt.now
    )
    assert turn.refused is not None
    assert context.fleet_refused
    assert turn.retry_in is not None
    assert 29.0 <= turn.retry_in <= 60.0


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
