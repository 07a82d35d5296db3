"""no_sleep() and fleets agree on time: every fleet (default or user-built) runs on the virtual
clock the recorded waits advance, so a test sees the waits production would sleep."""

from __future__ import annotations

import threading
from typing import Dict, List

import pytest

from sume_urllib3 import Policy, SumeRetryError, SumeSession
from sume_urllib3.pacing import LocalFleet
from sume_urllib3.testing import FakeSume, Reply, SleepRecorder

KEY = "sk_test_nosleep_fleets_0123456789"


def test_the_readme_quota_waits_six_seconds_per_request_and_refuses_none(
    fake_sume: FakeSume, sume_no_sleep: SleepRecorder
) -> None:
    """LocalFleet(rate="10/min"), 25 sequential requests: 24 waits of 6 s, as in production."""
    fake_sume.script("GET", "/v1/me", 200)
    session = SumeSession(KEY, base_url=fake_sume.url + "/v1", fleet=LocalFleet(rate="10/min", burst=1))

    records = [session.get("/me").sume for _ in range(25)]

    assert [6.0] * 24 == pytest.approx(sume_no_sleep.waits, abs=0.05)
    assert [0.0] + [6.0] * 24 == pytest.approx([r.paced for r in records], abs=0.05)
    assert 25 == len(fake_sume.requests)


def test_threads_under_no_sleep_share_one_timeline(fake_sume: FakeSume, sume_no_sleep: SleepRecorder) -> None:
    """Four threads, one 10/min quota: 20 turns 6 s apart; no thread's turn is pushed further
    than the three others' turns ahead of it (real time would give the same)."""
    fake_sume.script("GET", "/v1/me", 200)
    quota = LocalFleet(rate="10/min")
    paced: Dict[int, List[float]] = {}

    def work(n: int) -> None:
        session = SumeSession(KEY, base_url=fake_sume.url + "/v1", fleet=quota, policy=Policy(max_elapsed=60))
        paced[n] = [session.get("/me").sume.paced for _ in range(5)]

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    waits = [wait for per_thread in paced.values() for wait in per_thread]
    assert 20 == len(waits) == len(fake_sume.requests)
    assert max(waits) <= 4 * 6.0 + 0.1
    assert sum(waits) == pytest.approx(sume_no_sleep.total)
    # 20 turns 6 s apart end 114 s in: the waits recorded add up to no more than each thread's share.
    assert sum(waits) <= 4 * 114.0 + 1.0


def test_a_fake_quota_refills_in_virtual_time(sume_no_sleep: SleepRecorder) -> None:
    """FakeSume(quota="10/min") and no_sleep: the server's clock moves with the recorded waits,
    so a client that waits out its Retry-After is admitted, as it would be in production."""
    with FakeSume(quota="10/min") as fake:
        fake.script("POST", "/v1/runs", 201)
        session = SumeSession(KEY, base_url=fake.url + "/v1")

        statuses = [session.post("/runs", json={}).status_code for _ in range(5)]

    assert [201] * 5 == statuses
    assert 5 == fake.quota_state.admitted
    assert sume_no_sleep.total == pytest.approx(4 * 6.0, abs=2.0)


def test_a_cooldown_under_no_sleep_is_recorded_not_refused(
    fake_sume: FakeSume, sume_no_sleep: SleepRecorder
) -> None:
    """A 429 Retry-After 30 on the default fleet: the next request of the key records the
    rest of the cooldown as its wait (virtual), then goes."""
    fake_sume.script("GET", "/v1/throttled", Reply.error(429, "rate_limit_exceeded", retry_after="30"))
    fake_sume.script("GET", "/v1/me", 200)
    session = SumeSession(KEY, base_url=fake_sume.url + "/v1", policy=Policy(max_elapsed=5))
    with pytest.raises(SumeRetryError):
        session.get("/throttled")

    response = SumeSession(KEY, base_url=fake_sume.url + "/v1", policy=Policy(max_elapsed=120)).get("/me")

    assert 200 == response.status_code
    assert 30.0 <= response.sume.paced <= 61.0
    assert [response.sume.paced] == sume_no_sleep.waits
