"""FakeSume's quota mode on a real loopback socket: GCRA per API key, RateLimit headers, 429s."""

from __future__ import annotations

from typing import Dict, Iterator, List

import pytest
import requests

from sume_urllib3 import SumeSession
from sume_urllib3.pacing import LocalFleet
from sume_urllib3.testing._quota import Quota
from sume_urllib3.testing._server import FakeSume, Reply

from ..conftest import VirtualTime


@pytest.fixture
def clock() -> VirtualTime:
    return VirtualTime()


@pytest.fixture
def fake(clock: VirtualTime) -> Iterator[FakeSume]:
    with FakeSume() as server:
        server.quota("10/s", burst=3, clock=clock)
        server.script("POST", "/v1/jobs", Reply(201, json={"id": "job_1"}))
        yield server


def post(fake: FakeSume, key: str = "sk_a", header: str = "x-api-key") -> requests.Response:
    value = key if header == "x-api-key" else f"Bearer {key}"
    return requests.post(fake.url + "/v1/jobs", headers={header: value}, timeout=5)


def test_burst_then_429_with_retry_after_and_ratelimit_headers(fake: FakeSume) -> None:
    """A key gets its burst at once; the next request is a 429 rate_limit_exceeded with Retry-After."""
    replies = [post(fake) for _ in range(4)]
    assert [r.status_code for r in replies] == [201, 201, 201, 429]
    assert [r.headers["RateLimit-Remaining"] for r in replies] == ["2", "1", "0", "0"]
    assert {r.headers["RateLimit-Limit"] for r in replies} == {"3"}
    assert {r.headers["RateLimit-Policy"] for r in replies} == {"3;w=0.3"}
    refused = replies[3]
    assert refused.headers["Retry-After"] == "1"  # 0.1 s to the next turn, in whole seconds
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert "Retry-After" not in replies[0].headers


def test_turns_come_back_at_the_rate(fake: FakeSume, clock: VirtualTime) -> None:
    """After 0.1 s one more turn is free (10/s); after 0.3 s the whole burst."""
    for _ in range(3):
        post(fake)
    clock.now += 0.1
    assert [post(fake).status_code for _ in range(2)] == [201, 429]
    clock.now += 0.3
    assert [post(fake).status_code for _ in range(4)] == [201, 201, 201, 429]


def test_each_api_key_has_its_own_quota(fake: FakeSume) -> None:
    """x-api-key and Authorization keys are counted apart, as is a request with neither."""
    for _ in range(3):
        post(fake, "sk_a")
    assert post(fake, "sk_a").status_code == 429
    assert post(fake, "sk_b").status_code == 201
    assert post(fake, "sk_c", header="Authorization").status_code == 201
    assert requests.post(fake.url + "/v1/jobs", timeout=5).status_code == 201
    assert (fake.quota_state.admitted, fake.quota_state.refused) == (6, 1)


def test_a_refused_request_is_recorded_but_does_not_advance_the_script(
    fake: FakeSume, clock: VirtualTime
) -> None:
    """The 429 is recorded in fake.requests; the scripted replies wait for admitted requests."""
    fake.script("GET", "/v1/n", Reply(json={"n": 1}), Reply(json={"n": 2}))
    assert [post(fake).status_code for _ in range(3)] == [201, 201, 201]
    assert requests.get(fake.url + "/v1/n", headers={"x-api-key": "sk_a"}, timeout=5).status_code == 429
    clock.now += 1
    ok = requests.get(fake.url + "/v1/n", headers={"x-api-key": "sk_a"}, timeout=5)
    assert ok.json() == {"n": 1}
    assert len(fake.requests) == 5


def test_script_headers_win_over_the_quota_headers(fake: FakeSume) -> None:
    """A scripted reply's own RateLimit header is sent as scripted."""
    fake.script("GET", "/v1/own", Reply(json={}, headers={"RateLimit-Limit": "999"}))
    reply = requests.get(fake.url + "/v1/own", headers={"x-api-key": "sk_z"}, timeout=5)
    assert reply.headers["RateLimit-Limit"] == "999"
    assert reply.headers["RateLimit-Remaining"] == "2"


def test_quota_mode_off_and_from_the_constructor(clock: VirtualTime) -> None:
    """FakeSume(quota=..., burst=...) turns it on; quota(None) turns it off."""
    with FakeSume(quota="1/min", burst=1) as fake:
        fake.script("POST", "/v1/jobs", 201)
        assert [post(fake).status_code for _ in range(2)] == [201, 429]
        assert post(fake).headers["Retry-After"] == "60"
        fake.quota(None)
        assert fake.quota_state is None
        reply = post(fake)
        assert reply.status_code == 201
        assert "RateLimit-Limit" not in reply.headers


@pytest.mark.parametrize(
    ("rate", "burst"),
    [("fast", 1), (None, 1), ("1/s", 0), ("1/s", True)],
)
def test_bad_quota_is_a_clear_error(rate: object, burst: object) -> None:
    """An unreadable rate or burst raises at once."""
    with pytest.raises(ValueError, match=r"rate|burst"):
        Quota(rate, burst)  # type: ignore[arg-type]


def test_a_paced_session_meets_the_quota_without_a_429(fake: FakeSume, clock: VirtualTime) -> None:
    """A SumeSession with a LocalFleet learns the pace from the headers: ten posts, no 429."""
    session = SumeSession(
        "sk_paced", base_url=fake.url, fleet=LocalFleet(clock=clock), sleep=clock.sleep, clock=clock
    )
    started = clock.now
    statuses: List[int] = [session.post("/v1/jobs", json={}).status_code for _ in range(10)]
    assert statuses == [201] * 10
    assert fake.quota_state.refused == 0
    assert clock.now - started == pytest.approx(0.707)  # 3 at once, then one every 0.1 s (+1% slack)
    by_key: Dict[str, int] = {}
    for request in fake.requests:
        by_key[request.headers["x-api-key"]] = by_key.get(request.headers["x-api-key"], 0) + 1
    assert by_key == {"sk_paced": 10}
