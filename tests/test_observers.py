"""Observer dispatch: every observer is called, a broken one never breaks a request."""

from __future__ import annotations

import contextvars
import gc
import logging
import threading
import weakref
from typing import Any, Callable, List, Optional, Tuple

import pytest
import requests

from sume_urllib3 import (
    ConfigurationError,
    RequestStart,
    SumeAdapter,
    SumeSession,
)
from sume_urllib3._record import Outcome, RetryEvent, SumeRecord
from sume_urllib3.observe import Observers
from sume_urllib3.testing import FakeSume

from .raw_server import (
    KEY,
)


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
    Observers([a, b]).retry(event)
    Observers([a, b]).outcome(record)
    assert a.seen == [event, record]
    assert b.seen == [event, record]


def test_observer_with_one_hook_only_is_fine() -> None:
    """An observer without on_retry or on_outcome is skipped for that hook."""
    r, o = RetryOnly(), OutcomeOnly()
    event, record = make_event(), make_record()
    Observers([r, o]).retry(event)
    Observers([r, o]).outcome(record)
    assert r.seen == [event]
    assert o.seen == [record]


def test_no_observers_is_a_no_op() -> None:
    """Dispatching to nobody does nothing."""
    Observers([]).retry(make_event())
    Observers(()).outcome(make_record())


def test_broken_observer_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    """An observer that raises is skipped; the ones after it are still called."""
    good = Both()
    Observers([Broken(), good]).outcome(make_record())
    Observers([Broken(), good]).retry(make_event())
    assert len(good.seen) == 2


def test_broken_observer_is_logged_once_with_traceback(caplog: pytest.LogCaptureFixture) -> None:
    """The first failure of an observer object logs one WARNING with its type name and traceback."""
    broken = Broken()
    caplog.set_level(logging.WARNING, logger="sume_urllib3")
    for _ in range(5):
        Observers([broken]).retry(make_event())
        Observers([broken]).outcome(make_record())
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
        Observers([first, second]).outcome(make_record())
    assert len(warnings_from(caplog)) == 2


def test_unweakrefable_observer_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    """An observer that cannot be weakly referenced is still logged only once."""
    slotted = Slotted()
    caplog.set_level(logging.WARNING, logger="sume_urllib3")
    for _ in range(3):
        Observers([slotted]).outcome(make_record())
    found = warnings_from(caplog)
    assert len(found) == 1
    assert "Slotted" in found[0].getMessage()


def test_non_callable_hook_is_swallowed(caplog: pytest.LogCaptureFixture) -> None:
    """A hook attribute that is not callable is treated like a raising observer."""

    class Weird:
        on_outcome = 42

    caplog.set_level(logging.WARNING, logger="sume_urllib3")
    Observers([Weird()]).outcome(make_record())
    assert len(warnings_from(caplog)) == 1


def test_keyboard_interrupt_is_not_swallowed() -> None:
    """Only Exception subclasses are swallowed: Ctrl-C still stops the program."""

    class Interrupting:
        def on_retry(self, event: RetryEvent) -> None:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Observers([Interrupting()]).retry(make_event())


def test_logged_once_under_many_threads(caplog: pytest.LogCaptureFixture) -> None:
    """Sixteen threads hitting one broken observer produce exactly one warning."""
    broken = Broken()
    caplog.set_level(logging.WARNING, logger="sume_urllib3")
    start = threading.Barrier(16)

    def work() -> None:
        start.wait()
        for _ in range(200):
            Observers([broken]).outcome(make_record())

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
