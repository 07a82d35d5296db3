"""RecordingObserver keeps every retry and outcome a session reports, in order."""

from __future__ import annotations

import threading

from sume_urllib3 import Outcome, SumeSession
from sume_urllib3.testing import FakeSume, RecordingObserver, Reply, no_sleep


def test_it_sees_each_retry_and_the_outcome(fake_sume: FakeSume) -> None:
    """A 429 then 201: one retry event (Retry-After 2), then one retried_ok record."""
    fake_sume.script("POST", "/v1/runs", Reply.error(429, "rate_limit_exceeded", retry_after="2"), 201)
    recorder = RecordingObserver()
    session = SumeSession("sk_test", base_url=fake_sume.url + "/v1", observers=[recorder])

    with no_sleep():
        session.post("/runs", json={})

    assert [(2.0, "retry_after", "rate_limit_exceeded")] == [
        (e.wait, e.wait_source, e.code) for e in recorder.retries
    ]
    assert [Outcome.RETRIED_OK] == [r.outcome for r in recorder.outcomes]


def test_it_counts_exactly_under_threads() -> None:
    """8 threads x 1000 records: none lost; the lists it returns are copies."""
    recorder = RecordingObserver()
    record = object()

    def work() -> None:
        for _ in range(1000):
            recorder.on_outcome(record)  # type: ignore[arg-type]

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    recorder.outcomes.clear()

    assert 8000 == len(recorder.outcomes)
