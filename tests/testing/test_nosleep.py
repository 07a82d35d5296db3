"""no_sleep() and the pytest fixtures: waits recorded, time still passes, nothing sleeps."""

from __future__ import annotations

import threading
import time
from typing import List

import pytest

from sume_urllib3 import Policy, SumeRecord, SumeRetryError, SumeSession, _sleeping
from sume_urllib3.testing import FakeSume, Reply, SleepRecorder, no_sleep


def test_waits_are_recorded_instead_of_slept(fake_sume: FakeSume) -> None:
    """Retry-After 30 then a fixed 1 s in-use wait: recorded exactly, the test takes no time."""
    fake_sume.script(
        "POST",
        "/v1/runs",
        Reply.error(429, "rate_limit_exceeded", retry_after="30"),
        Reply.error(409, "idempotency_key_in_use"),
        201,
    )
    session = SumeSession("sk_test", base_url=fake_sume.url + "/v1")
    started = time.monotonic()

    with no_sleep() as recorder:
        response = session.post("/runs", json={})

    assert (201, [30.0, 1.0]) == (response.status_code, recorder.waits)
    assert time.monotonic() - started < 5


def test_deadlines_still_hold_because_time_appears_to_pass(fake_sume: FakeSume) -> None:
    """With 10 s of budget, two recorded 4 s waits use it up: the third is not started."""
    fake_sume.script("GET", "/v1/me", Reply.error(503, retry_after="4"))
    session = SumeSession("sk_test", base_url=fake_sume.url + "/v1", policy=Policy(max_elapsed=10.0))

    with no_sleep() as recorder, pytest.raises(SumeRetryError, match="budget is left"):
        session.get("/me")

    assert [4.0, 4.0] == recorder.waits


def test_the_previous_mode_is_restored() -> None:
    """Leaving the block switches real sleeping back on, even when nested."""
    with no_sleep() as outer:
        with no_sleep() as inner:
            assert _sleeping._virtual is inner
        assert _sleeping._virtual is outer
    assert _sleeping._virtual is None


def test_the_fixtures_come_from_the_plugin(fake_sume: FakeSume, sume_no_sleep: SleepRecorder) -> None:
    """fake_sume is a started server; sume_no_sleep is the active recorder."""
    fake_sume.script("GET", "/v1/me", 503, 200)

    SumeSession("sk_test", base_url=fake_sume.url + "/v1").get("/me")

    assert _sleeping._virtual is sume_no_sleep
    assert 1 == len(sume_no_sleep.waits)


def test_recorded_time_passes_per_thread(fake_sume: FakeSume) -> None:
    """A request's elapsed time holds only its own recorded waits, never other threads'."""
    fake_sume.script("POST", "/v1/runs", *([Reply.error(503, retry_after="4"), 201] * 200))
    # fleet=None: a shared fleet's cooldown holds every thread on one timeline, while here
    # each thread's own recorded time is what is checked.
    session = SumeSession("sk_test", base_url=fake_sume.url + "/v1", raise_on_give_up=False, fleet=None)
    records: List[SumeRecord] = []

    def work() -> None:
        for _ in range(10):
            records.append(session.post("/runs", json={}).sume)

    with no_sleep():
        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    assert 80 == len(records)
    assert [] == [r for r in records if not sum(r.waits) <= r.elapsed < sum(r.waits) + 1.0]
