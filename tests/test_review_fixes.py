"""Regressions found by reviewing this round's change, each on a real loopback FakeSume."""

from __future__ import annotations

import io
import random
from typing import Iterator

import pytest
import requests

from sume_urllib3 import (
    Job,
    JobTimeout,
    LocalFleet,
    Outcome,
    Policy,
    RetryBudget,
    SumeAdapter,
    SumeRetry,
    SumeSession,
    sume_record,
)
from sume_urllib3._fleet import MAX_COOLDOWN
from sume_urllib3.testing import FakeSume, Reply

from .conftest import API_KEY, VirtualTime

CUT = Reply(200, json={"a": "x" * 500}, chunked=True, truncate=40)


@pytest.fixture
def storage() -> Iterator[FakeSume]:
    """A second host, as the storage behind a presigned upload URL."""
    with FakeSume() as server:
        yield server


def session_on(fake: FakeSume, vtime: VirtualTime, **kwargs: object) -> SumeSession:
    kwargs.setdefault("sleep", vtime.sleep)
    kwargs.setdefault("clock", vtime.clock)
    kwargs.setdefault("rng", random.Random(3))
    return SumeSession(API_KEY, base_url=fake.url + "/v1", **kwargs)  # type: ignore[arg-type]


def test_another_hosts_retry_after_does_not_hold_the_api_key(
    fake: FakeSume, storage: FakeSume, vtime: VirtualTime
) -> None:
    """A storage upload answered 503 Retry-After: 60 starts no cooldown for the API's key."""
    storage.script("PUT", "/bucket/obj", Reply.error(503, retry_after="60"))
    fake.script("GET", "/v1/jobs/1", Reply(200, json={"id": "job_1"}))
    session = session_on(fake, vtime, raise_on_give_up=False, policy=Policy(max_elapsed=30))

    session.put(storage.url + "/bucket/obj", data=b"x")
    response = session.get("/jobs/1")

    assert (200, 0.0) == (response.status_code, response.sume.paced)
    assert 1 == len(fake.requests)


def test_an_absurd_retry_after_holds_the_key_no_longer_than_max_cooldown() -> None:
    """Retry-After: 99999999999 starts a cooldown of MAX_COOLDOWN, not of three thousand years."""
    now = [1000.0]
    fleet = LocalFleet(clock=lambda: now[0])
    grant = fleet.acquire("k1", time_left=60.0)
    fleet.release("k1", grant, 503, {"Retry-After": "99999999999"})

    later = fleet.acquire("k1", time_left=10 * MAX_COOLDOWN)

    assert later.refused is None
    assert MAX_COOLDOWN <= later.wait <= 2 * MAX_COOLDOWN


def test_a_file_body_is_sent_whole_again_after_its_answer_broke(fake: FakeSume, vtime: VirtualTime) -> None:
    """A PUT of a seekable file whose 200 broke mid-read is resent from the file's start."""
    fake.script("PUT", "/v1/files/x", CUT, Reply(200, json={"ok": True}))
    session = session_on(fake, vtime)

    response = session.put("/files/x", data=io.BytesIO(b"A" * 100))

    assert (Outcome.RETRIED_OK, [b"A" * 100, b"A" * 100]) == (
        response.sume.outcome,
        [r.body for r in fake.requests],
    )


def test_a_retry_refused_by_the_budget_takes_no_turn_from_the_pace(
    fake: FakeSume, vtime: VirtualTime
) -> None:
    """A 503 the spent budget will not retry leaves the next request one pace step away, not two."""
    fake.script("POST", "/v1/runs", Reply.error(503), Reply(201, json={"id": 1}))
    fleet = LocalFleet(rate="1/s", clock=vtime.clock)
    spent = RetryBudget(ratio=0.0, min_per_second=0.0, clock=vtime.clock)
    session = session_on(fake, vtime, fleet=fleet, retry_budget=spent, raise_on_give_up=False)

    first = session.post("/runs", json={})
    second = session.post("/runs", json={})

    assert "retry budget exhausted" in first.sume.reason
    assert second.sume.paced <= 1.0


def test_an_adapter_with_an_injected_clock_paces_on_that_clock() -> None:
    """SumeAdapter(clock=...) gets a fleet of its own, as SumeSession does, not the real-time one."""
    assert SumeAdapter(clock=lambda: 0.0).fleet is not LocalFleet.default()
    assert SumeAdapter().fleet is LocalFleet.default()


def test_a_redirect_loop_is_not_counted_ok(fake: FakeSume, vtime: VirtualTime) -> None:
    """TooManyRedirects after 302 hops carries a record that is not ok, and metrics agree."""
    fake.script("GET", "/v1/loop", Reply(302, headers={"Location": "/v1/loop"}, body=b""))
    session = session_on(fake, vtime)
    session.max_redirects = 3

    with pytest.raises(requests.exceptions.TooManyRedirects) as info:
        session.get("/loop")

    record = sume_record(info.value)
    assert record is not None
    assert record.outcome is not Outcome.OK
    assert "TooManyRedirects" in record.reason
    assert 0 == session.metrics.snapshot()["outcomes"]["ok"]


def test_urllib3_counters_also_cap_the_resend_of_a_broken_body(fake: FakeSume, vtime: VirtualTime) -> None:
    """SumeRetry(total=0) on the adapter: a 200 cut mid-body is not sent again."""
    fake.script("GET", "/doc", CUT, Reply(200, json={"a": "b"}))
    plain = requests.Session()
    plain.mount("http://", SumeAdapter(max_retries=SumeRetry(total=0, sleep=vtime.sleep, clock=vtime.clock)))

    with pytest.raises(requests.exceptions.ChunkedEncodingError) as info:
        plain.get(fake.url + "/doc")

    assert 1 == len(fake.requests)
    record = sume_record(info.value)
    assert record is not None
    assert (Outcome.NO_RETRY, 1) == (record.outcome, record.attempts)


def test_a_session_header_authorization_never_goes_to_another_origin(
    fake: FakeSume, storage: FakeSume, vtime: VirtualTime
) -> None:
    """session.headers["Authorization"] is the key given another way: stripped for other hosts."""
    storage.script("PUT", "/bucket/obj", Reply(200, json={}))
    session = SumeSession(base_url=fake.url + "/v1", sleep=vtime.sleep, clock=vtime.clock)
    session.headers["Authorization"] = "Bearer " + API_KEY

    session.put(storage.url + "/bucket/obj", data=b"x")

    assert storage.requests[0].headers.get("Authorization") is None


def test_an_authorization_of_the_call_itself_still_goes_to_another_origin(
    fake: FakeSume, storage: FakeSume, vtime: VirtualTime
) -> None:
    """A header the call sets for that other host (its own credentials) is kept."""
    storage.script("PUT", "/bucket/obj", Reply(200, json={}))
    session = session_on(fake, vtime)

    session.put(storage.url + "/bucket/obj", data=b"x", headers={"Authorization": "Basic c3RvcmFnZQ=="})

    assert "Basic c3RvcmFnZQ==" == storage.requests[0].headers.get("Authorization")


def test_a_job_wait_the_fleet_cannot_serve_in_time_is_a_job_timeout(
    fake: FakeSume, vtime: VirtualTime
) -> None:
    """A cooldown past the wait's deadline ends the wait with JobTimeout and the last job seen."""
    fake.script("GET", "/v1/other", Reply.error(429, retry_after="120"))
    session = session_on(fake, vtime, raise_on_give_up=False, policy=Policy(max_elapsed=30))
    session.get("/other")

    with pytest.raises(JobTimeout) as info:
        session.jobs.wait(Job("job_1", "processing"), timeout=30)

    assert ("job_1", "processing") == (info.value.job.id, info.value.job.status)
    assert [] == fake.requests_for("GET", "/v1/jobs/job_1/status")


def test_an_open_key_throttled_once_is_not_held_to_a_stale_pace() -> None:
    """One 429 after an hour of open traffic does not turn 10/s into one request a minute."""
    now = [0.0]
    fleet = LocalFleet(clock=lambda: now[0])
    for _ in range(80):  # slow start opens the key
        grant = fleet.acquire("k1", time_left=60.0)
        now[0] += 0.01
        fleet.release("k1", grant, 200, {})
    for _ in range(36_000):  # an hour at 10/s on the lock-free path
        now[0] += 0.1
        fleet.release("k1", fleet.acquire("k1", time_left=60.0), 200, {})

    fleet.release("k1", fleet.acquire("k1", time_left=60.0), 429, {})

    assert fleet.pace("k1") is None or fleet.pace("k1") > 1.0  # type: ignore[operator]
    assert fleet.acquire("k1", time_left=30.0).refused is None


def test_a_redis_fleet_repr_never_shows_a_password_in_the_query() -> None:
    """redis://host/0?password=... is shown without its query."""
    redis_mod = pytest.importorskip("sume_urllib3.contrib.redis")

    shown = repr(redis_mod.RedisFleet("redis://127.0.0.1:6399/0?password=s3cr3t-pw"))

    assert "s3cr3t" not in shown
