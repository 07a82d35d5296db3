"""sume_urllib3.observe: the fan-out (every observer called, a broken one never breaks a
request), SumeMetrics' exact thread-safe counters, and LoggingObserver's lines on a real logger."""

from __future__ import annotations

import contextvars
import gc
import logging
import pickle
import threading
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest
import requests

from sume_urllib3 import ConfigurationError, Policy, SumeAdapter, SumeRetryError, SumeSession
from sume_urllib3._record import Outcome, SumeRecord
from sume_urllib3.observe import (
    MAX_REASONS,
    LoggingObserver,
    Observers,
    RequestStart,
    RetryEvent,
    SumeMetrics,
    key_prefix,
    retry_reason,
)
from sume_urllib3.testing import FakeSume

from .raw_server import KEY

# -- Observers: the fan-out ---------------------------------------------------------------------

def make_event() -> RetryEvent:
    """A 503 retry event."""
    return RetryEvent(
        method="GET",
        url="https://api.sume.com/v1/jobs",
        attempt=1,
        max_retries=6,
        wait=0.7,
        wait_source="backoff",
        status=503,
        code=None,
        request_id="req_1",
        key_prefix=None,
        reason="503: retry in 0.7s (backoff)",
    )


def make_record() -> SumeRecord:
    """An ok record."""
    return SumeRecord(
        idempotency_key=None,
        attempts=1,
        outcome=Outcome.OK,
        status=200,
        code=None,
        request_id="req_1",
        request_ids=("req_1",),
        waits=(),
        elapsed=0.1,
        reason="",
    )


class Both:
    """Records both hooks."""

    def __init__(self) -> None:
        self.seen: List[object] = []

    def on_retry(self, event: RetryEvent) -> None:
        self.seen.append(event)

    def on_outcome(self, record: SumeRecord) -> None:
        self.seen.append(record)


class RetryOnly:
    """Implements on_retry only."""

    def __init__(self) -> None:
        self.seen: List[object] = []

    def on_retry(self, event: RetryEvent) -> None:
        self.seen.append(event)


class OutcomeOnly:
    """Implements on_outcome only."""

    def __init__(self) -> None:
        self.seen: List[object] = []

    def on_outcome(self, record: SumeRecord) -> None:
        self.seen.append(record)


class Broken:
    """Raises from both hooks."""

    def on_retry(self, event: RetryEvent) -> None:
        raise RuntimeError("boom")

    def on_outcome(self, record: SumeRecord) -> None:
        raise RuntimeError("boom")


class Slotted:
    """Cannot be weakly referenced, and raises."""

    __slots__ = ()

    def on_outcome(self, record: SumeRecord) -> None:
        raise ValueError("slotted boom")


def warnings_from(caplog: pytest.LogCaptureFixture) -> List[logging.LogRecord]:
    """The WARNING records on the sume_urllib3 logger."""
    return [r for r in caplog.records if r.name == "sume_urllib3" and r.levelno == logging.WARNING]


def test_every_observer_gets_the_event_and_the_record() -> None:
    """Each observer's hooks are called with the event and the record, in order."""
    a, b = Both(), Both()
    event, record = make_event(), make_record()
    Observers([a, b]).on_retry(event)
    Observers([a, b]).on_outcome(record)
    assert a.seen == [event, record]
    assert b.seen == [event, record]


def test_observer_with_one_hook_only_is_fine() -> None:
    """An observer without on_retry or on_outcome is skipped for that hook."""
    r, o = RetryOnly(), OutcomeOnly()
    event, record = make_event(), make_record()
    Observers([r, o]).on_retry(event)
    Observers([r, o]).on_outcome(record)
    assert r.seen == [event]
    assert o.seen == [record]


def test_observers_are_an_observer_and_tell_jobs_too() -> None:
    """An Observers among observers is unpacked (it is an observer too, and told directly);
    ``starts`` says whether any wants on_start; a job event reaches every on_job."""

    class Jobs:
        def __init__(self) -> None:
            self.seen: List[object] = []

        def on_job(self, event: object) -> None:
            self.seen.append(event)

    both, jobs = Both(), Jobs()
    nested = Observers([Observers([both]), jobs])
    nested.on_retry(make_event())
    nested.on_job("a job event")
    assert ([make_event()], ["a job event"]) == (both.seen, jobs.seen)
    assert (both, jobs) == tuple(nested)
    assert (False, True) == (nested.starts, Observers([Observers([Scoped()])]).starts)


def test_no_observers_is_a_no_op() -> None:
    """Dispatching to nobody does nothing."""
    Observers([]).on_retry(make_event())
    Observers(()).on_outcome(make_record())


def test_broken_observer_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    """An observer that raises is skipped; the ones after it are still called."""
    good = Both()
    Observers([Broken(), good]).on_outcome(make_record())
    Observers([Broken(), good]).on_retry(make_event())
    assert len(good.seen) == 2


def test_broken_observer_is_logged_once_with_traceback(caplog: pytest.LogCaptureFixture) -> None:
    """The first failure of an observer object logs one WARNING with its type name and traceback."""
    broken = Broken()
    caplog.set_level(logging.WARNING, logger="sume_urllib3")
    for _ in range(5):
        Observers([broken]).on_retry(make_event())
        Observers([broken]).on_outcome(make_record())
    found = warnings_from(caplog)
    assert len(found) == 1
    assert "Broken" in found[0].getMessage()
    assert found[0].exc_info is not None
    assert found[0].exc_info[0] is RuntimeError


def test_each_broken_observer_object_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    """Two broken observers (even of one type) give two warnings, not ten."""
    first, second = Broken(), Broken()
    caplog.set_level(logging.WARNING, logger="sume_urllib3")
    for _ in range(5):
        Observers([first, second]).on_outcome(make_record())
    assert len(warnings_from(caplog)) == 2


def test_unweakrefable_observer_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    """An observer that cannot be weakly referenced is still logged only once."""
    slotted = Slotted()
    caplog.set_level(logging.WARNING, logger="sume_urllib3")
    for _ in range(3):
        Observers([slotted]).on_outcome(make_record())
    found = warnings_from(caplog)
    assert len(found) == 1
    assert "Slotted" in found[0].getMessage()


def test_non_callable_hook_is_swallowed(caplog: pytest.LogCaptureFixture) -> None:
    """A hook attribute that is not callable is treated like a raising observer."""

    class Weird:
        on_outcome = 42

    caplog.set_level(logging.WARNING, logger="sume_urllib3")
    Observers([Weird()]).on_outcome(make_record())
    assert len(warnings_from(caplog)) == 1


def test_keyboard_interrupt_is_not_swallowed() -> None:
    """Only Exception subclasses are swallowed: Ctrl-C still stops the program."""

    class Interrupting:
        def on_retry(self, event: RetryEvent) -> None:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Observers([Interrupting()]).on_retry(make_event())


def test_logged_once_under_many_threads(caplog: pytest.LogCaptureFixture) -> None:
    """Sixteen threads hitting one broken observer produce exactly one warning."""
    broken = Broken()
    caplog.set_level(logging.WARNING, logger="sume_urllib3")
    start = threading.Barrier(16)

    def work() -> None:
        start.wait()
        for _ in range(200):
            Observers([broken]).on_outcome(make_record())

    threads = [threading.Thread(target=work) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(warnings_from(caplog)) == 1


def test_an_observer_with_no_hook_is_refused() -> None:
    """observers=[object()] is a ConfigurationError naming the hooks."""
    with pytest.raises(ConfigurationError, match="on_outcome"):
        SumeSession(KEY, observers=[object()])  # type: ignore[list-item]


# -- the context an announced request runs in --------------------------------------------

#: What a context-keeping observer (a tracer) makes current in on_start.
OPEN: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar("test_observers_open", default=None)


class Scoped:
    """Sets a context variable in on_start, as a tracer makes its span current, and never
    resets it; notes what each hook sees and on which thread."""

    def __init__(self) -> None:
        self.outcomes: List[Tuple[Optional[str], str]] = []

    def on_start(self, start: RequestStart) -> None:
        OPEN.set(start.url)

    def on_outcome(self, record: SumeRecord) -> None:
        self.outcomes.append((OPEN.get(), threading.current_thread().name))


def plain_with_adapter(observer: Scoped) -> requests.Session:
    """A requests.Session with a SumeAdapter mounted: the adapter is the request's owner."""
    plain = requests.Session()
    plain.mount("http://", SumeAdapter(observers=[observer]))
    return plain


SESSIONS: List[Tuple[str, Callable[[FakeSume, Scoped], Any]]] = [
    ("SumeSession", lambda fake, observer: SumeSession(KEY, base_url=fake.url + "/v1", observers=[observer])),
    ("requests.Session + SumeAdapter", lambda fake, observer: plain_with_adapter(observer)),
]


@pytest.mark.parametrize("make", [m for _, m in SESSIONS], ids=[n for n, _ in SESSIONS])
def test_what_on_start_makes_current_is_gone_when_the_call_returns(
    fake: FakeSume, make: Callable[[FakeSume, Scoped], Any]
) -> None:
    """An announced request runs in a copy of the caller's context: on_start's change lasts the call."""
    fake.script("GET", "/v1/me", 200)
    observer = Scoped()
    client = make(fake, observer)

    client.get(fake.url + "/v1/me")

    assert None is OPEN.get()
    assert [(fake.url + "/v1/me", threading.current_thread().name)] == observer.outcomes


#: What a response hook sets (a logger's bound fields), as the caller would read it after the call.
HOOKED: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar("test_observers_hooked", default=None)


@pytest.mark.parametrize("starts", [False, True], ids=["no on_start", "on_start"])
@pytest.mark.parametrize("make", [m for _, m in SESSIONS], ids=[n for n, _ in SESSIONS])
def test_what_a_response_hook_sets_reaches_the_caller_whatever_the_observers(
    fake: FakeSume, make: Callable[[FakeSume, Any], Any], starts: bool
) -> None:
    """Only what on_start sets stays within the call: a hook's context variables reach the caller
    as they do with plain requests, with or without an observer that has on_start."""
    fake.script("GET", "/v1/me", 200)
    observer = Scoped() if starts else RecordsOutcomes()
    client = make(fake, observer)

    def bind(response: requests.Response, **kwargs: Any) -> None:
        HOOKED.set(response.headers["x-sume-request-id"])

    client.hooks["response"].append(bind)

    context = contextvars.copy_context()
    context.run(client.get, fake.url + "/v1/me")

    assert ("req_1", None) == (context.get(HOOKED), context.get(OPEN))


class RecordsOutcomes:
    """An observer without on_start."""

    def on_outcome(self, record: SumeRecord) -> None:
        pass


@pytest.mark.parametrize("make", [m for _, m in SESSIONS], ids=[n for n, _ in SESSIONS])
def test_a_streamed_outcome_comes_in_the_calls_context_on_the_thread_that_ends_the_body(
    fake: FakeSume, make: Callable[[FakeSume, Scoped], Any]
) -> None:
    """stream=True: the call returns first (the caller's context back as it was); the outcome comes
    when another thread reads the body, and sees what on_start set, without setting it there."""
    fake.script("GET", "/v1/export", 200)
    observer = Scoped()
    client = make(fake, observer)
    seen_by_reader: List[Optional[str]] = []

    response = client.get(fake.url + "/v1/export", stream=True)
    after_call = OPEN.get()

    def read() -> None:
        response.content  # noqa: B018 - reading the body ends the request
        response.close()
        seen_by_reader.append(OPEN.get())

    reader = threading.Thread(target=read, name="reader")
    reader.start()
    reader.join()

    assert None is after_call
    assert [(fake.url + "/v1/export", "reader")] == observer.outcomes
    assert [None] == seen_by_reader  # the reader's own context is left as it was


@pytest.mark.parametrize("read", [False, True], ids=["dropped unread", "read to the end"])
@pytest.mark.parametrize("make", [m for _, m in SESSIONS], ids=[n for n, _ in SESSIONS])
def test_a_streamed_response_let_go_is_collected_and_its_outcome_told(
    fake: FakeSume, make: Callable[[FakeSume, Scoped], Any], read: bool
) -> None:
    """Nothing the library keeps holds a streamed response: once the caller lets it go it is
    collected (its body and socket with it), and one dropped unread tells its outcome then."""
    fake.script("GET", "/v1/export", 200)
    observer = Scoped()
    client = make(fake, observer)

    response = client.get(fake.url + "/v1/export", stream=True)
    if read:
        response.content  # noqa: B018 - reading the body ends the request
    alive = weakref.ref(response)
    del response
    gc.collect()

    assert alive() is None
    assert [(fake.url + "/v1/export", threading.current_thread().name)] == observer.outcomes


# -- SumeMetrics ------------------------------------------------------------------------------

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
    metrics = SumeMetrics()
    for n in range(MAX_REASONS + 10):
        metrics.on_retry(event(code=f"code_{n}"))

    retries = metrics.snapshot()["retries"]
    assert (MAX_REASONS + 1, 10) == (len(retries), retries["other"])



def test_metrics_pickle_without_their_lock() -> None:
    """A copy has the same counts and a fresh, unlocked lock of its own; the state has no lock."""
    metrics = SumeMetrics()
    metrics.on_outcome(record(Outcome.OK, 2))
    copy = pickle.loads(pickle.dumps(metrics))
    assert copy.snapshot() == metrics.snapshot()
    assert copy._lock is not metrics._lock
    assert copy._lock.acquire(blocking=False)
    copy._lock.release()
    assert "_lock" in vars(metrics)
    assert "_lock" not in metrics.__getstate__()


# -- LoggingObserver --------------------------------------------------------------------------

IDEM_KEY = "3f2a9c1e-7d4b-4f7e-9a55-0c1d2e3f4a5b"
URL = "https://api.sume.com/v1/avatars?api_key=SECRET&x=1#frag"
FIELDS = (
    "sume_method", "sume_path", "sume_status", "sume_code", "sume_request_id", "sume_attempt",
    "sume_wait", "sume_wait_source", "sume_outcome", "sume_key_prefix",
)


def log_event(
    status: Optional[int] = 503,
    code: Optional[str] = "service_unavailable",
    error: Optional[str] = None,
    request_id: Optional[str] = "req_12",
) -> RetryEvent:
    """A retry event for POST /v1/avatars with a secret in the query string."""
    return RetryEvent(
        method="POST", url=URL, attempt=2, max_retries=6, wait=1.74, wait_source="backoff",
        status=status, code=code, request_id=request_id, key_prefix=key_prefix(IDEM_KEY),
        reason="503 service_unavailable: retry in 1.7s (backoff)", error=error,
    )


def log_record(
    outcome: Outcome,
    status: Optional[int] = 503,
    code: Optional[str] = "service_unavailable",
    reason: str = "503 service_unavailable: attempt cap reached (6 retries)",
    attempts: int = 7,
) -> SumeRecord:
    """A record for POST /v1/avatars with a secret in the query string and a full key."""
    return SumeRecord(
        idempotency_key=IDEM_KEY, attempts=attempts, outcome=outcome, status=status, code=code,
        request_id="req_77", request_ids=("req_71", "req_77"), waits=(1.0, 2.0),
        elapsed=61.23, reason=reason, method="POST", url=URL,
    )


@pytest.fixture
def observer() -> LoggingObserver:
    """A LoggingObserver on the default logger."""
    return LoggingObserver()


def sume_records(caplog: pytest.LogCaptureFixture) -> List[logging.LogRecord]:
    """Records on the sume_urllib3 logger."""
    return [r for r in caplog.records if r.name == "sume_urllib3"]


def extras(rec: logging.LogRecord) -> Dict[str, Any]:
    """The sume_* attributes of a log record."""
    return {k: v for k, v in vars(rec).items() if k.startswith("sume_")}


def assert_no_secret(rec: logging.LogRecord) -> None:
    """Neither the query secret nor the full key is in the message or any extra."""
    texts: List[str] = [rec.getMessage()] + [repr(v) for v in extras(rec).values()]
    for text in texts:
        assert "SECRET" not in text
        assert "api_key" not in text
        assert IDEM_KEY not in text
        assert IDEM_KEY[:9] not in text  # not even one character past the prefix


def test_default_logger_is_sume_urllib3() -> None:
    """Without an argument the observer logs to the "sume_urllib3" logger."""
    assert LoggingObserver().logger is logging.getLogger("sume_urllib3")


def test_retry_line_says_what_why_and_how_long(
    observer: LoggingObserver, caplog: pytest.LogCaptureFixture
) -> None:
    """One INFO line: method, path, status, code, request id, attempt i/n, wait, source, key prefix."""
    caplog.set_level(logging.INFO, logger="sume_urllib3")
    observer.on_retry(log_event())
    (rec,) = sume_records(caplog)
    assert rec.levelno == logging.INFO
    assert rec.getMessage() == (
        "retrying POST /v1/avatars after 503 service_unavailable (request id req_12), "
        "attempt 2/6, waiting 1.7s (backoff), idempotency key 3f2a9c1e…"
    )
    assert_no_secret(rec)


def test_retry_extras_are_structured(
    observer: LoggingObserver, caplog: pytest.LogCaptureFixture
) -> None:
    """The retry record carries every sume_* field with the raw values."""
    caplog.set_level(logging.INFO, logger="sume_urllib3")
    observer.on_retry(log_event())
    (rec,) = sume_records(caplog)
    fields = extras(rec)
    assert set(FIELDS) <= set(fields)
    assert fields["sume_method"] == "POST"
    assert fields["sume_path"] == "/v1/avatars"
    assert fields["sume_status"] == 503
    assert fields["sume_code"] == "service_unavailable"
    assert fields["sume_request_id"] == "req_12"
    assert fields["sume_attempt"] == 2
    assert fields["sume_wait"] == 1.74
    assert fields["sume_wait_source"] == "backoff"
    assert fields["sume_outcome"] is None
    assert fields["sume_key_prefix"] == "3f2a9c1e…"
    assert_no_secret(rec)


def test_transport_error_retry_names_the_error_class(
    observer: LoggingObserver, caplog: pytest.LogCaptureFixture
) -> None:
    """With no response, the line names the exception class instead of a status."""
    caplog.set_level(logging.INFO, logger="sume_urllib3")
    observer.on_retry(log_event(status=None, code=None, error="ConnectTimeoutError", request_id=None))
    (rec,) = sume_records(caplog)
    message = rec.getMessage()
    assert message.startswith("retrying POST /v1/avatars after ConnectTimeoutError, attempt 2/6")
    assert "request id" not in message
    assert rec.sume_status is None  # type: ignore[attr-defined]
    assert_no_secret(rec)


def test_give_up_line(observer: LoggingObserver, caplog: pytest.LogCaptureFixture) -> None:
    """A give-up is one WARNING line with attempts, elapsed, reason, request id and key prefix."""
    caplog.set_level(logging.INFO, logger="sume_urllib3")
    observer.on_outcome(log_record(Outcome.GAVE_UP))
    (rec,) = sume_records(caplog)
    assert rec.levelno == logging.WARNING
    message = rec.getMessage()
    assert message.startswith(
        "gave up on POST /v1/avatars after 7 attempts in 61.2s: "
        "503 service_unavailable: attempt cap reached (6 retries)"
    )
    assert "request id req_77" in message
    assert "idempotency key 3f2a9c1e…" in message
    assert rec.sume_outcome == "gave_up"  # type: ignore[attr-defined]
    assert rec.sume_attempt == 7  # type: ignore[attr-defined]
    assert_no_secret(rec)


def test_fix_line(observer: LoggingObserver, caplog: pytest.LogCaptureFixture) -> None:
    """A caller error is one INFO line that says the caller must fix it."""
    caplog.set_level(logging.INFO, logger="sume_urllib3")
    observer.on_outcome(
        log_record(
            Outcome.FIX, 402, "insufficient_credits",
            "402 insufficient_credits: the caller must fix the request; not retried", 1,
        )
    )
    (rec,) = sume_records(caplog)
    assert rec.levelno == logging.INFO
    message = rec.getMessage()
    assert message.startswith("not retried, the caller must fix it: POST /v1/avatars")
    assert "402 insufficient_credits" in message
    assert "request id req_77" in message
    assert rec.sume_outcome == "fix"  # type: ignore[attr-defined]
    assert_no_secret(rec)


@pytest.mark.parametrize(
    "outcome", [Outcome.OK, Outcome.RETRIED_OK, Outcome.NO_RETRY, Outcome.POLL]
)
def test_other_outcomes_are_debug(
    observer: LoggingObserver, caplog: pytest.LogCaptureFixture, outcome: Outcome
) -> None:
    """ok, retried_ok, no_retry and poll log at DEBUG only."""
    caplog.set_level(logging.INFO, logger="sume_urllib3")
    observer.on_outcome(log_record(outcome, 200, None, "", 1))
    assert sume_records(caplog) == []
    caplog.set_level(logging.DEBUG, logger="sume_urllib3")
    observer.on_outcome(log_record(outcome, 200, None, "", 1))
    (rec,) = sume_records(caplog)
    assert rec.levelno == logging.DEBUG
    assert outcome.value in rec.getMessage()
    assert rec.sume_outcome == outcome.value  # type: ignore[attr-defined]
    assert_no_secret(rec)


def test_nothing_is_logged_when_disabled(
    observer: LoggingObserver, caplog: pytest.LogCaptureFixture
) -> None:
    """At WARNING only the give-up is logged; above it nothing is."""
    caplog.set_level(logging.WARNING, logger="sume_urllib3")
    observer.on_retry(log_event())
    observer.on_outcome(log_record(Outcome.FIX, 402, "insufficient_credits", "402 insufficient_credits", 1))
    observer.on_outcome(log_record(Outcome.GAVE_UP))
    assert ["gave_up"] == [r.sume_outcome for r in sume_records(caplog)]  # type: ignore[attr-defined]
    caplog.clear()
    caplog.set_level(logging.ERROR, logger="sume_urllib3")
    observer.on_outcome(log_record(Outcome.GAVE_UP))
    assert sume_records(caplog) == []


def test_custom_logger_is_used(caplog: pytest.LogCaptureFixture) -> None:
    """A logger passed in receives the lines."""
    logger = logging.getLogger("myapp.sume")
    caplog.set_level(logging.INFO, logger="myapp.sume")
    LoggingObserver(logger).on_retry(log_event())
    assert [r.name for r in caplog.records] == ["myapp.sume"]


def test_control_characters_from_the_server_cannot_forge_lines(
    observer: LoggingObserver, caplog: pytest.LogCaptureFixture
) -> None:
    """A request id or code with newlines is logged on one line."""
    caplog.set_level(logging.INFO, logger="sume_urllib3")
    observer.on_retry(log_event(code="bad\ncode", request_id="req\r\nINFO fake line"))
    (rec,) = sume_records(caplog)
    assert "\n" not in rec.getMessage()
    assert "\r" not in rec.getMessage()


def test_url_credentials_and_host_are_not_logged(
    observer: LoggingObserver, caplog: pytest.LogCaptureFixture
) -> None:
    """Only the path of the URL is logged: no userinfo, host or query."""
    caplog.set_level(logging.INFO, logger="sume_urllib3")
    event = log_event()
    leaky = RetryEvent(**{**vars(event), "url": "https://user:PASSWORD@api.sume.com/v1/x?token=SECRET"})
    observer.on_retry(leaky)
    (rec,) = sume_records(caplog)
    for text in [rec.getMessage()] + [repr(v) for v in extras(rec).values()]:
        assert "PASSWORD" not in text
        assert "SECRET" not in text
        assert "api.sume.com" not in text
    assert rec.sume_path == "/v1/x"  # type: ignore[attr-defined]


def test_full_key_in_event_prefix_is_still_cut(
    observer: LoggingObserver, caplog: pytest.LogCaptureFixture
) -> None:
    """Even if an event carried a whole key as its prefix, only 8 characters are logged."""
    caplog.set_level(logging.INFO, logger="sume_urllib3")
    event = log_event()
    observer.on_retry(RetryEvent(**{**vars(event), "key_prefix": IDEM_KEY}))
    (rec,) = sume_records(caplog)
    assert_no_secret(rec)


def test_works_with_a_formatter_using_the_extras(
    observer: LoggingObserver, caplog: pytest.LogCaptureFixture
) -> None:
    """Retry and outcome records both carry every field, so one format string fits both."""
    caplog.set_level(logging.DEBUG, logger="sume_urllib3")
    observer.on_retry(log_event())
    observer.on_outcome(log_record(Outcome.OK, 200, None, "", 1))
    fmt = logging.Formatter(" ".join(f"%({name})s" for name in FIELDS))
    lines: List[Tuple[str, ...]] = [tuple(fmt.format(r).split(" ")) for r in sume_records(caplog)]
    assert len(lines) == 2


class Lines(logging.Handler):
    """A real handler on a real logger, formatting as an application's config would."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s: %(levelname)s: %(message)s"))
        self.lines: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def sume_lines() -> Any:
    """The lines the "sume_urllib3" logger writes at INFO and above, formatted."""
    logger = logging.getLogger("sume_urllib3")
    handler, level = Lines(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_a_status_give_up_is_a_warning_on_the_real_logger(fake: FakeSume, sume_lines: List[str]) -> None:
    """A session that gives up on 503s writes its retries at INFO and the give-up at WARNING,
    each line naming the logger once and the Idempotency-Key as such."""
    fake.script("POST", "/v1/avatars", *[503] * 3)
    session = SumeSession(KEY, base_url=fake.url + "/v1", policy=Policy(max_retries=2, backoff_base=0.0))
    with session, pytest.raises(SumeRetryError):
        session.post("/avatars", json={"a": 1}, headers={"Idempotency-Key": "3f2a9c1e-7d4b-4f7e"})

    retries = [line for line in sume_lines if line.startswith("sume_urllib3: INFO: retrying POST /v1/")]
    gave_up = [line for line in sume_lines if line.startswith("sume_urllib3: WARNING: gave up on POST")]
    assert (2, 1) == (len(retries), len(gave_up)), sume_lines
    assert all(line.endswith("idempotency key 3f2a9c1e…") for line in retries), retries
    assert "idempotency key 3f2a9c1e…)" in gave_up[0]
    assert not any("sume_urllib3: sume_urllib3" in line or ", key " in line for line in sume_lines)



def test_no_message_repeats_the_logger_name(
    fake: FakeSume, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every record the package logs, DEBUG included, through a retried request, a shared fleet
    falling back to local pacing and a failure to decide on a response, says its message without
    the logger's name: the handler's format names it once ("sume_urllib3: sume_urllib3: ...")."""
    from sume_urllib3._retry import SumeRetry
    from sume_urllib3.pacing import HostFleet

    fake.script("POST", "/v1/avatars", 503, 201, 503)
    fleet = HostFleet("/proc/no-such-dir/app.fleet")
    session = SumeSession(KEY, base_url=fake.url + "/v1", fleet=fleet, policy=Policy(backoff_base=0.0))
    with session, caplog.at_level(logging.DEBUG, logger="sume_urllib3"):
        assert 2 == session.post("/avatars", json={"a": 1}).sume.attempts  # type: ignore[attr-defined]

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("a bug")

        monkeypatch.setattr(SumeRetry, "decide_response", broken)
        session.post("/avatars", json={"a": 1})

    ours = [r for r in caplog.records if r.name.startswith("sume_urllib3")]
    messages = [r.getMessage() for r in ours]
    assert any("unavailable" in m for m in messages), messages  # the fleet's fallback
    assert any("retry in" in m for m in messages), messages  # the retry's decision (DEBUG)
    assert any("failed to decide" in m for m in messages), messages
    assert [] == [m for m in messages if m.startswith("sume_urllib3")]
