"""SumeMetrics: exact, thread-safe counters with string keys."""

from __future__ import annotations

import threading
from typing import Optional

from sume_urllib3._record import Outcome, RetryEvent, SumeRecord
from sume_urllib3.observe import SumeMetrics, retry_reason

ALL_OUTCOMES = {"ok", "retried_ok", "gave_up", "fix", "no_retry", "poll"}


def record(outcome: Outcome, attempts: int = 1) -> SumeRecord:
    """A record with the given outcome and attempts."""
    return SumeRecord(
        idempotency_key=None, attempts=attempts, outcome=outcome, status=200, code=None,
        request_id=None, request_ids=(), waits=(), elapsed=0.0, reason="",
    )


def event(
    status: Optional[int] = 503, code: Optional[str] = None, error: Optional[str] = None
) -> RetryEvent:
    """A retry event with the given status, code and transport error."""
    return RetryEvent(
        method="GET", url="/v1/jobs", attempt=1, max_retries=6, wait=1.0, wait_source="backoff",
        status=status, code=code, request_id=None, key_prefix=None, reason="", error=error,
    )


FRESH = {
    "outcomes": {k: 0 for k in ALL_OUTCOMES},
    "retries": {},
    "attempts": {},
    "pacing": {"held": 0, "wait_seconds": 0.0, "refused": 0, "fleet_fallbacks": 0},
    "jobs": {"polls": 0, "completed": 0, "failed": 0, "timed_out": 0, "error": 0},
}


def test_new_metrics_snapshot_has_all_outcomes_at_zero() -> None:
    """A fresh snapshot lists all six outcomes at 0, empty retries and attempts, zero pacing and jobs."""
    snap = SumeMetrics().snapshot()
    assert snap == FRESH
    assert SumeMetrics().total == 0


def test_outcomes_and_attempts_are_counted_with_string_keys() -> None:
    """Outcomes count by value and attempts by count, every key a string."""
    m = SumeMetrics()
    m.on_outcome(record(Outcome.OK, 1))
    m.on_outcome(record(Outcome.RETRIED_OK, 3))
    m.on_outcome(record(Outcome.GAVE_UP, 7))
    m.on_outcome(record(Outcome.RETRIED_OK, 3))
    snap = m.snapshot()
    assert snap["outcomes"] == {
        "ok": 1, "retried_ok": 2, "gave_up": 1, "fix": 0, "no_retry": 0, "poll": 0,
    }
    assert snap["attempts"] == {"1": 1, "3": 2, "7": 1}
    assert list(snap["attempts"]) == ["1", "3", "7"]
    assert m.total == 4
    assert all(isinstance(k, str) for part in snap.values() for k in part)


def test_retry_reason_prefers_code_then_status_then_error() -> None:
    """The reason label is the code, else the status, else the error class, else unknown."""
    assert retry_reason(event(429, "queue_full")) == "queue_full"
    assert retry_reason(event(503)) == "503"
    assert retry_reason(event(None, None, "ConnectTimeoutError")) == "ConnectTimeoutError"
    assert retry_reason(event(None)) == "unknown"


def test_retries_are_counted_by_reason() -> None:
    """Retries are grouped by their reason label."""
    m = SumeMetrics()
    m.on_retry(event(429, "rate_limit_exceeded"))
    m.on_retry(event(503))
    m.on_retry(event(503))
    m.on_retry(event(None, None, "ReadTimeoutError"))
    assert m.snapshot()["retries"] == {"503": 2, "ReadTimeoutError": 1, "rate_limit_exceeded": 1}
    assert m.total == 0  # retries are not logical requests


def test_snapshot_is_a_copy() -> None:
    """Changing a snapshot does not change the counters."""
    m = SumeMetrics()
    m.on_outcome(record(Outcome.OK))
    snap = m.snapshot()
    snap["outcomes"]["ok"] = 99
    assert m.snapshot()["outcomes"]["ok"] == 1


def test_reset_zeroes_everything() -> None:
    """reset() returns to the fresh state, all outcome keys still present."""
    m = SumeMetrics()
    m.on_outcome(record(Outcome.FIX, 1))
    m.on_retry(event(503))
    m.reset()
    assert m.snapshot() == FRESH
    assert m.total == 0


def test_repr_shows_total() -> None:
    """repr names the class and the total."""
    m = SumeMetrics()
    m.on_outcome(record(Outcome.POLL))
    assert "SumeMetrics(total=1" in repr(m)


def test_counts_are_exact_under_16_threads() -> None:
    """16 threads x 500 records: outcomes add up to the requests, attempts and retries exact."""
    m = SumeMetrics()
    outcomes = list(Outcome)
    start = threading.Barrier(16)

    def work(n: int) -> None:
        start.wait()
        for i in range(500):
            m.on_retry(event(503 if i % 2 else 429, None))
            m.on_outcome(record(outcomes[(n + i) % len(outcomes)], attempts=1 + i % 7))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    snap = m.snapshot()
    assert m.total == 8000
    assert sum(snap["outcomes"].values()) == 8000
    assert sum(snap["attempts"].values()) == 8000
    assert snap["retries"] == {"429": 4000, "503": 4000}
    expected = {o.value: 0 for o in Outcome}
    for n in range(16):
        for i in range(500):
            expected[outcomes[(n + i) % len(outcomes)].value] += 1
    assert snap["outcomes"] == expected


def test_totals_stay_consistent_while_threads_write() -> None:
    """A snapshot taken mid-run never shows more attempts than outcomes or vice versa."""
    m = SumeMetrics()
    stop = threading.Event()

    def write() -> None:
        while not stop.is_set():
            m.on_outcome(record(Outcome.OK, 2))

    writers = [threading.Thread(target=write) for _ in range(4)]
    for t in writers:
        t.start()
    try:
        for _ in range(200):
            snap = m.snapshot()
            assert sum(snap["outcomes"].values()) == sum(snap["attempts"].values())
    finally:
        stop.set()
        for t in writers:
            t.join()


def test_retry_reasons_are_bounded() -> None:
    """Codes come from the server: after MAX_REASONS distinct ones the rest count as "other"."""
    from sume_urllib3.observe import MAX_REASONS

    metrics = SumeMetrics()
    for n in range(MAX_REASONS + 10):
        metrics.on_retry(event(code=f"code_{n}"))

    retries = metrics.snapshot()["retries"]
    assert (MAX_REASONS + 1, 10) == (len(retries), retries["other"])
