"""The pacing benchmark's quota servers behave as real servers do, on real loopback sockets.

``benchmarks/_quota_servers.py`` is written apart from FakeSume so that the matrix measures the
library against servers it was not tuned with; these tests pin down what each server sends
(headers, their rounding, 429s and 503s) and how its quota refills, with the server's clocks
injected so every schedule is exact and nothing sleeps.
"""

from __future__ import annotations

import json
import pathlib
import socket
import sys
from typing import Dict, Iterator, List, Tuple

import pytest
import requests

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import _quota_servers as qs  # noqa: E402

from sume_urllib3 import Policy, SumeSession  # noqa: E402

RATE_HEADERS = ("ratelimit-limit", "ratelimit-remaining", "ratelimit-reset", "ratelimit-policy")


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def wall() -> Clock:
    return Clock(1000.5)  # inside the 2 s window [1000, 1002)


@pytest.fixture
def http() -> Iterator[requests.Session]:
    with requests.Session() as session:
        yield session


def serve(quota: qs.Quota, clock: Clock, wall: Clock) -> qs.QuotaServer:
    return qs.QuotaServer(quota, clock=clock, wall=wall)


def post(http: requests.Session, server: qs.QuotaServer, key: str = "k") -> Tuple[int, Dict[str, str]]:
    resp = http.post(server.url + "/v1/jobs", json={"prompt": "x"}, headers={"Idempotency-Key": key})
    return resp.status_code, {name.lower(): value for name, value in resp.headers.items()}


def rate_headers(headers: Dict[str, str]) -> Dict[str, str]:
    return {name: value for name, value in headers.items() if "ratelimit" in name or name == "retry-after"}


def test_token_bucket_admits_its_burst_then_429s_with_whole_second_reset(
    http: requests.Session, clock: Clock, wall: Clock
) -> None:
    with serve(qs.TokenBucket(10.0, 10, "ratelimit"), clock, wall) as server:
        answers = [post(http, server) for _ in range(11)]
    for n, (status, headers) in enumerate(answers[:10]):
        assert status == 200
        # Seconds until full (0.1 .. 1.0) rounded up: always "1", never a fraction; no policy.
        assert rate_headers(headers) == {
            "ratelimit-limit": "10", "ratelimit-remaining": str(9 - n), "ratelimit-reset": "1"
        }
    status, headers = answers[10]
    assert status == 429
    assert rate_headers(headers) == {
        "ratelimit-limit": "10", "ratelimit-remaining": "0", "ratelimit-reset": "1", "retry-after": "1"
    }


def test_token_bucket_refills_one_token_per_step(http: requests.Session, clock: Clock, wall: Clock) -> None:
    with serve(qs.TokenBucket(10.0, 10, "ratelimit"), clock, wall) as server:
        assert [post(http, server)[0] for _ in range(11)] == [200] * 10 + [429]
        clock.now += 0.1
        assert [post(http, server)[0] for _ in range(2)] == [200, 429]
        clock.now += 0.05
        assert post(http, server)[0] == 429
        clock.now += 0.05
        assert post(http, server)[0] == 200
        clock.now += 5.0  # long idle: the bucket is full again, never fuller
        statuses = [post(http, server) for _ in range(11)]
    assert [s for s, _ in statuses] == [200] * 10 + [429]
    assert statuses[0][1]["ratelimit-remaining"] == "9"


def test_retry_after_and_reset_round_up_to_whole_seconds(
    http: requests.Session, clock: Clock, wall: Clock
) -> None:
    with serve(qs.TokenBucket(0.5, 1, "ratelimit"), clock, wall) as server:
        assert rate_headers(post(http, server)[1])["ratelimit-reset"] == "2"
        clock.now += 0.5
        status, headers = post(http, server)  # next token in 1.5 s
        assert (status, headers["retry-after"], headers["ratelimit-reset"]) == (429, "2", "2")
        clock.now += 1.0
        status, headers = post(http, server)  # next token in 0.5 s
        assert (status, headers["retry-after"], headers["ratelimit-reset"]) == (429, "1", "1")
        clock.now += 0.5
        assert post(http, server)[0] == 200


def test_policy_style_adds_ratelimit_policy_to_every_answer(
    http: requests.Session, clock: Clock, wall: Clock
) -> None:
    with serve(qs.TokenBucket(10.0, 10, "ratelimit-policy"), clock, wall) as server:
        answers = [post(http, server) for _ in range(11)]
    assert [s for s, _ in answers] == [200] * 10 + [429]
    assert {h["ratelimit-policy"] for _, h in answers} == {"10;w=1"}


def test_retry_after_style_sends_retry_after_on_429_and_nothing_else(
    http: requests.Session, clock: Clock, wall: Clock
) -> None:
    with serve(qs.TokenBucket(10.0, 10, "retry-after"), clock, wall) as server:
        answers = [post(http, server) for _ in range(11)]
    assert [rate_headers(h) for _, h in answers[:10]] == [{}] * 10
    assert answers[10][0] == 429
    assert rate_headers(answers[10][1]) == {"retry-after": "1"}


def test_bare_style_sends_a_429_with_no_hint_at_all(
    http: requests.Session, clock: Clock, wall: Clock
) -> None:
    with serve(qs.TokenBucket(10.0, 10, "bare"), clock, wall) as server:
        answers = [post(http, server) for _ in range(11)]
        clock.now += 0.1
        after = post(http, server)
    assert [s for s, _ in answers] == [200] * 10 + [429]
    assert all(rate_headers(h) == {} for _, h in answers)
    assert after[0] == 200


def test_fixed_window_counts_per_clock_window_with_epoch_reset(
    http: requests.Session, clock: Clock, wall: Clock
) -> None:
    with serve(qs.FixedWindow(20, 2), clock, wall) as server:
        answers = [post(http, server) for _ in range(21)]
        wall.now = 1001.99
        late = post(http, server)
        wall.now = 1002.0
        fresh = post(http, server)
    for n, (status, headers) in enumerate(answers[:20]):
        assert status == 200
        assert rate_headers(headers) == {
            "x-ratelimit-limit": "20",
            "x-ratelimit-remaining": str(19 - n),
            "x-ratelimit-used": str(n + 1),
            "x-ratelimit-reset": "1002",  # epoch seconds of the window's end, as GitHub sends
        }
    assert answers[20][0] == 429
    assert "retry-after" not in answers[20][1]
    assert answers[20][1]["x-ratelimit-remaining"] == "0"
    assert late[0] == 429
    assert fresh[0] == 200
    assert (fresh[1]["x-ratelimit-remaining"], fresh[1]["x-ratelimit-reset"]) == ("19", "1004")


def test_outage_answers_503_for_its_seconds_then_200(
    http: requests.Session, clock: Clock, wall: Clock
) -> None:
    with serve(qs.Outage(3.0), clock, wall) as server:
        first = http.post(server.url + "/v1/jobs", json={})
        clock.now += 2.99
        still = post(http, server)
        clock.now += 0.01
        back = post(http, server)
        server.reset()  # a new outage starts with the next call
        again = post(http, server)
    assert first.status_code == 503
    assert "retry-after" not in {k.lower() for k in first.headers}
    assert first.json()["error"]["code"] == "service_unavailable"
    assert (still[0], back[0], again[0]) == (503, 200, 503)


def test_stats_count_calls_statuses_success_times_and_repeats(
    http: requests.Session, clock: Clock, wall: Clock
) -> None:
    with serve(qs.TokenBucket(10.0, 2, "ratelimit"), clock, wall) as server:
        post(http, server, "a")
        clock.now += 0.01
        post(http, server, "b")
        post(http, server, "c")  # 429
        clock.now += 1.0
        post(http, server, "c")
        post(http, server, "a")  # "a" succeeds a second time: executed twice
        stats = server.stats()
        server.reset()
        cleared = server.stats()
    assert (stats.calls, stats.ok, stats.throttled, stats.unavailable) == (5, 4, 1, 0)
    assert stats.success_times == [100.0, 100.01, 101.01, 101.01]
    assert stats.calls_per_key == {"a": 2, "b": 1, "c": 2}
    assert stats.executed_twice == 1
    assert cleared == qs.Stats()


def test_every_response_leaves_in_one_send(clock: Clock, wall: Clock) -> None:
    """Status line, headers and body arrive together: nothing waits on a delayed ACK."""
    with serve(qs.TokenBucket(10.0, 10, "ratelimit"), clock, wall) as server:
        port = int(server.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0  # the client's side
            sock.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
            data = sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
                 .split(b":")[1])
    assert head.startswith(b"HTTP/1.1 200 ")
    assert len(body) == length
    assert json.loads(body)["status"] == "done"


def test_sume_session_accepts_the_bodies(clock: Clock, wall: Clock) -> None:
    """The library posts through a server and reads its success and error bodies."""
    with serve(qs.TokenBucket(10.0, 1, "bare"), clock, wall) as server:
        session = SumeSession("sk_test_0123456789", base_url=server.url, fleet=None,
                              policy=Policy(max_retries=0), raise_on_give_up=False)
        ok = session.post("/v1/jobs", json={"prompt": "x"})
        refused = session.post("/v1/jobs", json={"prompt": "x"})
    assert ok.status_code == 200
    assert ok.json()["status"] == "done"
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"


def test_a_server_in_its_own_process_serves_stats_and_resets() -> None:
    with qs.QuotaProcess("token-bucket-policy") as server, requests.Session() as http:
        statuses: List[int] = [
            http.post(server.url + "/v1/jobs", json={}, headers={"Idempotency-Key": str(n)}).status_code
            for n in range(12)
        ]
        stats = server.stats()
        server.reset()
        after = server.stats()
        assert server.describe()["rate_per_s"] == 10.0
    assert statuses[:10] == [200] * 10
    assert 429 in statuses[10:]
    assert stats.calls == 12
    assert stats.ok + stats.throttled == 12
    assert len(stats.success_times) == stats.ok
    assert after.calls == 0


def test_unknown_kinds_and_bad_quotas_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown server"):
        qs.make("leaky")
    with pytest.raises(ValueError, match="style"):
        qs.TokenBucket(10.0, 10, "loud")
    with pytest.raises(ValueError, match="whole window"):
        qs.FixedWindow(10, 1.5)  # type: ignore[arg-type]
    assert sorted(qs.KINDS) == sorted(
        ["token-bucket", "token-bucket-policy", "fixed-window", "retry-after", "bare-429", "outage-503"]
    )
