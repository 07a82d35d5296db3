"""OpenTelemetryObserver on the real OpenTelemetry SDK: span shape, parenting, events, metrics."""

from __future__ import annotations

import importlib
import logging
import pickle
import random
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest
import requests

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from sume_urllib3 import JobFailed, Outcome, Policy, SumeRecord, SumeRetryError, SumeSession
from sume_urllib3.contrib.opentelemetry import OpenTelemetryObserver, url_attributes
from sume_urllib3.observe import RetryEvent
from sume_urllib3.pacing import LocalFleet
from sume_urllib3.testing import FakeSume, Reply, no_sleep

from ..conftest import VirtualTime

KEY = "sk_test_otel_SECRET_0123456789"


class Telemetry:
    """A tracer provider and a meter provider of the real SDK, read back in memory."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.observer = OpenTelemetryObserver(self.tracer_provider, self.meter_provider)
        self.tracer = self.tracer_provider.get_tracer("tests")

    def finished(self, name: Optional[str] = None) -> List[ReadableSpan]:
        """Finished spans, optionally only those with this name."""
        return [span for span in self.spans.get_finished_spans() if name is None or span.name == name]

    def only(self, name: str) -> ReadableSpan:
        """The one finished span with this name."""
        spans = self.finished(name)
        assert 1 == len(spans), spans
        return spans[0]

    def points(self, metric: str) -> Dict[Tuple[Tuple[str, Any], ...], Any]:
        """The data points of one metric, by their sorted attributes."""
        data = self.reader.get_metrics_data()
        found: Dict[Tuple[Tuple[str, Any], ...], Any] = {}
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for item in scope.metrics:
                    if item.name == metric:
                        for point in item.data.data_points:
                            found[tuple(sorted((point.attributes or {}).items()))] = point
        return found

    def shutdown(self) -> None:
        """Stop both providers."""
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


@pytest.fixture
def otel() -> Iterator[Telemetry]:
    """Fresh SDK providers with in-memory exporters, shut down after the test."""
    telemetry = Telemetry()
    yield telemetry
    telemetry.shutdown()


def session(fake: FakeSume, otel: Telemetry, **kwargs: Any) -> SumeSession:
    """A session against the fake with the observer attached."""
    return SumeSession(KEY, base_url=fake.url + "/v1", observers=[otel.observer], **kwargs)


def event(code: Optional[str] = None, status: Optional[int] = 503, error: Optional[str] = None) -> RetryEvent:
    """A retry event with the given code, status and transport error."""
    return RetryEvent(
        method="GET", url="https://api.sume.com/v1/jobs", attempt=1, max_retries=6, wait=1.0,
        wait_source="backoff", status=status, code=code, request_id=None, key_prefix=None,
        reason="retry", error=error,
    )


def paced_session(
    fake: FakeSume, otel: Telemetry, vtime: VirtualTime, rate: str, **kwargs: Any
) -> SumeSession:
    """A session on virtual time whose fleet allows one request per ``rate`` period, burst 1."""
    return session(
        fake, otel, fleet=LocalFleet(rate=rate, burst=1, clock=vtime.clock), sleep=vtime.sleep,
        clock=vtime.clock, rng=random.Random(1), **kwargs,
    )


def test_a_retried_post_is_one_client_span_with_the_semantic_attributes(
    fake: FakeSume, otel: Telemetry
) -> None:
    """Two retries and a success make one CLIENT span named POST, query stripped, ids and counts set."""
    fake.script("POST", "/v1/avatars", 503, Reply.error(429, "rate_limit_exceeded", retry_after="1"), 201)

    with no_sleep():
        response = session(fake, otel).post("/avatars?api_key=QUERYSECRET&x=1", json={"name": "Ada"})

    span = otel.only("POST")
    key = fake.requests[0].headers["Idempotency-Key"]
    assert SpanKind.CLIENT == span.kind
    assert StatusCode.UNSET == span.status.status_code
    assert {
        "http.request.method": "POST",
        "url.full": f"{fake.url}/v1/avatars",
        "server.address": "127.0.0.1",
        "server.port": int(fake.url.rsplit(":", 1)[1]),
        "http.response.status_code": 201,
        "http.request.resend_count": 2,
        "sume.outcome": "retried_ok",
        "sume.attempts": 3,
        "sume.request_id": response.sume.request_id,  # type: ignore[attr-defined]
        "sume.idempotency_key_prefix": key[:8] + "…",
    } == dict(span.attributes or {})


def test_nothing_secret_reaches_a_span(fake: FakeSume, otel: Telemetry) -> None:
    """Neither the API key, the query string nor the whole idempotency key is in any span value."""
    fake.script("POST", "/v1/avatars", 503, 201)

    with no_sleep():
        session(fake, otel).post("/avatars?token=QUERYSECRET", json={})

    key = fake.requests[0].headers["Idempotency-Key"]
    values = [str(v) for span in otel.finished() for v in (span.attributes or {}).values()]
    values += [str(v) for span in otel.finished() for e in span.events for v in (e.attributes or {}).values()]
    assert values
    assert not [v for v in values if KEY in v or "QUERYSECRET" in v or key in v]


def test_url_full_drops_userinfo_query_and_fragment() -> None:
    """url.full keeps scheme, host, port and path; the default port still fills server.port."""
    assert {
        "url.full": "https://api.sume.com/v1/jobs",
        "server.address": "api.sume.com",
        "server.port": 443,
    } == url_attributes("https://user:pw@api.sume.com/v1/jobs?key=1#frag")
    assert {
        "url.full": "http://[::1]:8080/",
        "server.address": "::1",
        "server.port": 8080,
    } == url_attributes("http://[::1]:8080")
    assert {} == url_attributes("http://host:notaport/x")
    assert {} == url_attributes("/relative")


def test_the_span_is_a_child_of_the_callers_span(fake: FakeSume, otel: Telemetry) -> None:
    """The span is parented to the span current when the call is made, in the same trace."""
    fake.script("GET", "/v1/me", 200)

    with otel.tracer.start_as_current_span("view") as parent:
        session(fake, otel).get("/me")

    span = otel.only("GET")
    assert span.parent is not None
    assert parent.get_span_context().span_id == span.parent.span_id
    assert parent.get_span_context().trace_id == span.context.trace_id
    view = otel.only("view")
    assert view.start_time is not None
    assert span.start_time is not None
    assert view.start_time <= span.start_time <= span.end_time <= view.end_time  # type: ignore[operator]


def test_without_a_current_span_the_span_is_a_root(fake: FakeSume, otel: Telemetry) -> None:
    """A call made outside any span starts its own trace."""
    fake.script("GET", "/v1/me", 200)

    session(fake, otel).get("/me")

    assert otel.only("GET").parent is None


def test_one_retry_event_per_retry_inside_the_span(fake: FakeSume, otel: Telemetry) -> None:
    """Each retry adds a `retry` event with attempt, wait, source, status, code and reason, in time order."""
    fake.script("GET", "/v1/jobs", Reply.error(503, "queue_full", retry_after="2"), 429, 200)

    with no_sleep() as waits:
        session(fake, otel).get("/jobs")

    span = otel.only("GET")
    events = [dict(e.attributes or {}) for e in span.events]
    assert ["retry", "retry"] == [e.name for e in span.events]
    assert [1, 2] == [e["sume.retry.attempt"] for e in events]
    assert waits.waits == [e["sume.retry.wait"] for e in events]
    assert ["retry_after", "backoff"] == [e["sume.retry.source"] for e in events]
    assert [503, 429] == [e["http.response.status_code"] for e in events]
    assert "queue_full" == events[0]["sume.retry.code"]
    assert str(events[0]["sume.retry.reason"]).startswith("503 queue_full")
    stamps = [e.timestamp for e in span.events]
    assert span.start_time is not None
    assert span.end_time is not None
    assert span.start_time <= stamps[0] <= stamps[1] <= span.end_time


def test_a_give_up_is_an_error_span_with_the_status_as_error_type(fake: FakeSume, otel: Telemetry) -> None:
    """When the policy gives up the span has status ERROR, error.type "503" and the resend count."""
    fake.script("GET", "/v1/jobs", 503)

    with no_sleep(), pytest.raises(SumeRetryError):
        session(fake, otel, policy=Policy(max_retries=2)).get("/jobs")

    span = otel.only("GET")
    attributes = dict(span.attributes or {})
    assert StatusCode.ERROR == span.status.status_code
    assert span.status.description
    assert "503" in span.status.description
    assert "503" == attributes["error.type"]
    assert "gave_up" == attributes["sume.outcome"]
    assert 2 == attributes["http.request.resend_count"]
    assert 2 == len(span.events)


def test_a_caller_error_is_not_retried_and_has_no_resend_count(fake: FakeSume, otel: Telemetry) -> None:
    """A 400 ends at once: outcome fix, error.type "400", no resend count, no events."""
    fake.script("POST", "/v1/avatars", Reply.error(400, "invalid_request"))

    session(fake, otel, raise_on_give_up=False).post("/avatars", json={})

    attributes = dict(otel.only("POST").attributes or {})
    assert "400" == attributes["error.type"]
    assert "fix" == attributes["sume.outcome"]
    assert "invalid_request" == attributes["sume.code"]
    assert "http.request.resend_count" not in attributes
    assert () == otel.only("POST").events


def test_resend_count_counts_redirects_as_the_convention_does(fake: FakeSume, otel: Telemetry) -> None:
    """A 302 then a 503 retried: three requests sent, two of them resends (for any reason)."""
    fake.script("GET", "/v1/old", Reply(302, headers={"Location": "/v1/new"}, body=b""))
    fake.script("GET", "/v1/new", 503, 200)

    with no_sleep():
        session(fake, otel).get("/old")

    attributes = dict(otel.only("GET").attributes or {})
    assert (3, 2) == (attributes["sume.attempts"], attributes["http.request.resend_count"])


def test_a_transport_error_has_no_status_and_names_the_error(fake: FakeSume, otel: Telemetry) -> None:
    """Dropped connections: no status code, error.type set, each retry event names the error class."""
    fake.script("GET", "/v1/jobs", Reply(drop="before_headers"))

    with no_sleep(), pytest.raises(requests.exceptions.ConnectionError) as raised:
        session(fake, otel, policy=Policy(max_retries=2)).get("/jobs")

    span = otel.only("GET")
    attributes = dict(span.attributes or {})
    assert "http.response.status_code" not in attributes
    assert StatusCode.ERROR == span.status.status_code
    record = raised.value.sume  # type: ignore[attr-defined]
    assert "ProtocolError" == record.error
    assert record.error == attributes["error.type"]
    assert record.reason in str(span.status.description)
    errors = [dict(e.attributes or {}).get("error.type") for e in span.events]
    assert ["ProtocolError", "ProtocolError"] == errors


def test_metrics_count_outcomes_retries_by_reason_and_attempts(fake: FakeSume, otel: Telemetry) -> None:
    """sume.requests by outcome, sume.retries by reason and the sume.attempts histogram add up."""
    fake.script("GET", "/v1/a", Reply.error(503, "queue_full"), 200)
    fake.script("GET", "/v1/b", 200)
    fake.script("GET", "/v1/c", 429)
    client = session(fake, otel, policy=Policy(max_retries=1), raise_on_give_up=False)

    with no_sleep():
        for path in ("/a", "/b", "/b", "/c"):
            client.get(path)

    requests = {key: point.value for key, point in otel.points("sume.requests").items()}
    assert {
        (("sume.outcome", "retried_ok"),): 1,
        (("sume.outcome", "ok"),): 2,
        (("sume.outcome", "gave_up"),): 1,
    } == requests
    retries = {key: point.value for key, point in otel.points("sume.retries").items()}
    assert {
        (("sume.retry.reason", "queue_full"),): 1,
        (("sume.retry.reason", "rate_limit_exceeded"),): 1,
    } == retries
    attempts = otel.points("sume.attempts")
    ok = attempts[(("sume.outcome", "ok"),)]
    assert (2, 2) == (ok.count, ok.sum)
    gave_up = attempts[(("sume.outcome", "gave_up"),)]
    assert (1, 2) == (gave_up.count, gave_up.sum)
    assert (1, 2, 3, 4, 5, 6, 7, 10) == tuple(ok.explicit_bounds)


def test_retry_reason_labels_are_bounded(otel: Telemetry) -> None:
    """After 50 distinct reasons, new ones are counted under "other"."""
    for n in range(60):
        otel.observer.on_retry(event(code=f"code_{n}"))
    otel.observer.on_retry(event(code="code_3"))

    points = otel.points("sume.retries").items()
    retries = {dict(key)["sume.retry.reason"]: point.value for key, point in points}
    assert 51 == len(retries)
    assert 10 == retries["other"]
    assert 2 == retries["code_3"]


def test_a_request_the_fleet_held_is_paced_in_its_span_and_in_sume_paced(
    fake: FakeSume, otel: Telemetry, vtime: VirtualTime
) -> None:
    """At 1/min the second call waits 60 s for its turn: the span says so and sume.paced counts only it."""
    fake.script("GET", "/v1/me", 200)
    client = paced_session(fake, otel, vtime, "1/min")

    client.get("/me")
    client.get("/me")

    first, second = (dict(span.attributes or {}) for span in otel.finished("GET"))
    assert "sume.paced" not in first
    assert 60.0 == second["sume.paced"]
    assert [60.0] == vtime.sleeps
    paced = list(otel.points("sume.paced").values())
    assert [(1, 60.0)] == [(p.count, p.sum) for p in paced]
    assert {} == otel.points("sume.fleet.refused")


def test_a_request_the_fleet_refused_is_an_error_span_and_counted(
    fake: FakeSume, otel: Telemetry, vtime: VirtualTime
) -> None:
    """A turn after the deadline sends nothing: an error span marked sume.fleet.refused, counted once."""
    fake.script("GET", "/v1/me", 200)
    client = paced_session(fake, otel, vtime, "1/min", policy=Policy(max_elapsed=10))
    client.get("/me")

    with pytest.raises(SumeRetryError) as raised:
        client.get("/me")

    assert raised.value.record.fleet_refused
    assert 1 == len(fake.requests)
    attributes = dict(otel.finished("GET")[1].attributes or {})
    assert True is attributes["sume.fleet.refused"]
    assert 0 == attributes["sume.attempts"]
    assert "gave_up" == attributes["error.type"]
    assert [1] == [p.value for p in otel.points("sume.fleet.refused").values()]
    assert {} == otel.points("sume.paced")


def test_fleet_fallbacks_are_counted(otel: Telemetry) -> None:
    """Turns granted by local pacing because the shared store failed feed sume.fleet.fallbacks."""
    record = SumeRecord(
        idempotency_key=None, attempts=1, outcome=Outcome.OK, status=200, code=None, request_id=None,
        request_ids=(), waits=(), elapsed=0.0, reason="", method="GET",
        url="https://api.sume.com/v1/me", paced=2.5, fleet_fallbacks=2,
    )

    otel.observer.on_outcome(record)

    assert [2] == [p.value for p in otel.points("sume.fleet.fallbacks").values()]
    assert [(1, 2.5)] == [(p.count, p.sum) for p in otel.points("sume.paced").values()]


def test_job_polls_and_endings_are_counted_by_kind(
    fake: FakeSume, otel: Telemetry, vtime: VirtualTime
) -> None:
    """session.jobs.wait feeds sume.job.events: one poll per status read, then completed or failed."""
    fake.job("job_1", ["queued", "processing", "completed"])
    fake.job("job_2", ["processing", ("failed", {"error": {"code": "bad_input"}})])
    client = session(fake, otel, sleep=vtime.sleep, clock=vtime.clock, rng=random.Random(1))

    client.jobs.wait("job_1")
    with pytest.raises(JobFailed):
        client.jobs.wait("job_2")

    points = otel.points("sume.job.events").items()
    events = {dict(key)["sume.job.event"]: point.value for key, point in points}
    assert {"poll": 5, "completed": 1, "failed": 1} == events


class _BrokenTracer:
    """A tracer whose every span fails to start."""

    def start_span(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("exporter exploded")


class BrokenTracerProvider(TracerProvider):
    """An SDK tracer provider that hands out broken tracers."""

    def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
        return _BrokenTracer()


class BrokenMeterProvider(MeterProvider):
    """An SDK meter provider whose instruments raise when used."""

    def get_meter(self, *args: Any, **kwargs: Any) -> Any:
        meter = super().get_meter(*args, **kwargs)

        class Broken:
            def __getattr__(self, name: str) -> Any:
                if name.startswith("create_"):
                    def create(*a: Any, **k: Any) -> Any:
                        instrument = getattr(meter, name)(*a, **k)

                        class Fails:
                            def add(self, *a: Any, **k: Any) -> None:
                                raise RuntimeError("meter exploded")

                            record = add

                        return Fails() if instrument is not None else None

                    return create
                return getattr(meter, name)

        return Broken()


def test_a_failing_tracer_or_meter_never_breaks_a_request(
    fake: FakeSume, caplog: pytest.LogCaptureFixture
) -> None:
    """Requests succeed, the failure is logged once and every later one is counted."""
    fake.script("GET", "/v1/jobs", 503, 200)
    observer = OpenTelemetryObserver(BrokenTracerProvider(), BrokenMeterProvider())
    client = SumeSession(KEY, base_url=fake.url + "/v1", observers=[observer])

    with no_sleep(), caplog.at_level(logging.WARNING, logger="sume_urllib3"):
        statuses = [client.get("/jobs").status_code for _ in range(3)]

    assert [200, 200, 200] == statuses
    warnings = [r for r in caplog.records if "OpenTelemetryObserver" in r.getMessage()]
    assert 1 == len(warnings)
    # The retry's counter fails (its event waits for the outcome); each of the 3 requests fails
    # three times: its span at the start, its span again at the end, its counters.
    assert 1 + 3 * 3 == observer.failures


class FlakyTracerProvider(TracerProvider):
    """An SDK tracer provider whose tracers fail to start their first span only."""

    def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
        real = super().get_tracer(*args, **kwargs)
        failures = [RuntimeError("exporter hiccup")]

        class Flaky:
            def start_span(self, *a: Any, **k: Any) -> Any:
                if failures:
                    raise failures.pop()
                return real.start_span(*a, **k)

        return Flaky()


def test_a_failed_start_keeps_nested_requests_apart(fake: FakeSume, otel: Telemetry) -> None:
    """When the outer span cannot start, the inner call still gets its own span, the outer one at the end."""
    fake.script("GET", "/v1/outer", 200)
    fake.script("GET", "/v1/inner", 200)
    provider = FlakyTracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(otel.spans))
    observer = OpenTelemetryObserver(provider, otel.meter_provider)
    client = SumeSession(KEY, base_url=fake.url + "/v1", observers=[observer])

    client.get("/outer", hooks={"response": lambda response, **kwargs: client.get("/inner")})

    by_path = {str(dict(s.attributes or {})["url.full"]).rsplit("/", 1)[1]: s for s in otel.finished("GET")}
    assert {"outer", "inner"} == set(by_path)
    assert by_path["inner"].parent is None  # the outer span did not exist yet
    assert by_path["outer"].parent is None
    assert by_path["inner"].end_time <= by_path["outer"].end_time  # type: ignore[operator]
    assert 1 == observer.failures
    assert trace.INVALID_SPAN is trace.get_current_span()
    provider.shutdown()


class SpanOnRetry:
    """Another observer that makes a span of its own for every retry."""

    def __init__(self, otel: Telemetry) -> None:
        self.tracer = otel.tracer

    def on_retry(self, event: RetryEvent) -> None:
        with self.tracer.start_as_current_span("on_retry"):
            pass


def test_the_span_is_current_while_the_request_runs(fake: FakeSume, otel: Telemetry) -> None:
    """The session announces the request: spans made during its attempts and in its hooks nest under ours."""
    fake.script("GET", "/v1/me", 503, 200)

    def hook(response: Any, *args: Any, **kwargs: Any) -> None:
        with otel.tracer.start_as_current_span("hook"):
            pass

    observers: List[Any] = [otel.observer, SpanOnRetry(otel)]
    client = SumeSession(KEY, base_url=fake.url + "/v1", observers=observers)
    with no_sleep(), otel.tracer.start_as_current_span("view") as view:
        client.get("/me", hooks={"response": hook})
        current = trace.get_current_span()

    span, on_retry, hook_span = otel.only("GET"), otel.only("on_retry"), otel.only("hook")
    assert span.parent is not None
    assert view.get_span_context().span_id == span.parent.span_id
    assert [span.context.span_id] * 2 == [s.parent.span_id for s in (on_retry, hook_span) if s.parent]
    assert span.start_time is not None
    assert span.end_time is not None
    assert span.start_time <= on_retry.start_time <= hook_span.end_time <= span.end_time  # type: ignore[operator]
    assert 1 == len(span.events)
    assert 1 == dict(span.attributes or {})["http.request.resend_count"]
    assert view is current  # the caller's span is current again after the request


def test_a_request_made_during_another_is_its_child(fake: FakeSume, otel: Telemetry) -> None:
    """A call made from a response hook of another call is a span under the outer call's span."""
    fake.script("GET", "/v1/outer", 200)
    fake.script("GET", "/v1/inner", 503, 200)
    client = session(fake, otel)

    with no_sleep():
        client.get("/outer", hooks={"response": lambda response, **kwargs: client.get("/inner")})

    by_path = {str(dict(s.attributes or {})["url.full"]).rsplit("/", 1)[1]: s for s in otel.finished("GET")}
    outer, inner = by_path["outer"], by_path["inner"]
    assert inner.parent is not None
    assert outer.context.span_id == inner.parent.span_id
    assert (0, 1) == (len(outer.events), len(inner.events))
    assert trace.INVALID_SPAN is trace.get_current_span()


def test_a_streamed_requests_span_is_current_only_during_the_call_and_ends_with_its_body(
    fake: FakeSume, otel: Telemetry
) -> None:
    """stream=True: the call returns before the body is read. The caller's span is current again
    at once (what the caller does next is not nested under ours), and ours ends when the body ends."""
    fake.script("GET", "/v1/export", 200)
    fake.script("GET", "/v1/me", 200)
    client = session(fake, otel)

    with otel.tracer.start_as_current_span("view") as view:
        response = client.get("/export", stream=True)
        current = trace.get_current_span()
        with otel.tracer.start_as_current_span("parse"):
            client.get("/me")
        response.content  # noqa: B018 - reading the body ends the request
        response.close()

    assert view is current
    by_path = {str(dict(s.attributes or {})["url.full"]).rsplit("/", 1)[1]: s for s in otel.finished("GET")}
    export, me, parse = by_path["export"], by_path["me"], otel.only("parse")
    assert [view.get_span_context().span_id] * 2 == [s.parent.span_id for s in (export, parse) if s.parent]
    assert me.parent is not None
    assert parse.context.span_id == me.parent.span_id
    assert parse.end_time <= export.end_time  # type: ignore[operator]
    assert trace.INVALID_SPAN is trace.get_current_span()


def test_a_streamed_body_read_on_another_thread_ends_its_span_there(fake: FakeSume, otel: Telemetry) -> None:
    """A worker reads each streamed body: every span ends, under the span of the call that made it,
    and nothing is left open or current on either thread."""
    fake.script("GET", "/v1/export", 200)
    client = session(fake, otel)
    handlers = []

    with ThreadPoolExecutor(1) as worker:
        for n in range(20):
            with otel.tracer.start_as_current_span(f"handler{n}") as handler:
                response = client.get("/export", stream=True)
                worker.submit(lambda r=response: (r.content, r.close())).result()
                assert handler is trace.get_current_span()
            handlers.append(handler.get_span_context().span_id)

    gets = otel.finished("GET")
    assert handlers == [s.parent.span_id for s in gets if s.parent]
    assert trace.INVALID_SPAN is trace.get_current_span()


def test_without_the_start_hook_the_span_is_made_at_the_end(otel: Telemetry) -> None:
    """Where nothing announces requests (an older adapter), retry and outcome make one back-dated span."""
    record = SumeRecord(
        idempotency_key=None, attempts=2, outcome=Outcome.RETRIED_OK, status=200, code=None,
        request_id="req_1", request_ids=("req_1",), waits=(1.0,), elapsed=1.5,
        reason="succeeded after 1 retry", method="GET", url="https://api.sume.com/v1/jobs",
    )

    with otel.tracer.start_as_current_span("view") as view:
        otel.observer.on_retry(event())
        otel.observer.on_outcome(record)

    span = otel.only("GET")
    assert span.parent is not None
    assert view.get_span_context().span_id == span.parent.span_id
    assert ["retry"] == [e.name for e in span.events]
    assert 1 == dict(span.attributes or {})["http.request.resend_count"]
    assert span.start_time is not None
    assert span.end_time is not None
    assert span.start_time <= span.events[0].timestamp <= span.end_time


def test_requests_instrumentation_wraps_our_span_once_per_call(fake: FakeSume, otel: Telemetry) -> None:
    """RequestsInstrumentor's span (around Session.send) is our parent: one per call, not per attempt."""
    instrumentation = pytest.importorskip("opentelemetry.instrumentation.requests")
    instrumentor = instrumentation.RequestsInstrumentor()
    fake.script("GET", "/v1/a", 503, Reply(302, headers={"Location": "/v1/b"}))
    fake.script("GET", "/v1/b", 503, 200)
    instrumentor.instrument(tracer_provider=otel.tracer_provider)
    try:
        with no_sleep(), otel.tracer.start_as_current_span("view") as view:
            session(fake, otel).get("/a")
            current = trace.get_current_span()
    finally:
        instrumentor.uninstrument()

    spans = otel.finished("GET")
    assert 2 == len(spans)
    (ours,) = [s for s in spans if "sume.outcome" in (s.attributes or {})]
    (theirs,) = [s for s in spans if "sume.outcome" not in (s.attributes or {})]
    assert {SpanKind.CLIENT} == {s.kind for s in spans}
    assert theirs.parent is not None
    assert ours.parent is not None
    assert view.get_span_context().span_id == theirs.parent.span_id
    assert theirs.context.span_id == ours.parent.span_id
    assert 4 == dict(ours.attributes or {})["sume.attempts"]
    # Every attempt and hop carries the same traceparent: the instrumentation's span.
    parents = {r.headers.get("traceparent") for r in fake.requests}
    assert 1 == len(parents)
    assert f"{theirs.context.span_id:016x}" in str(parents.pop())
    assert view is current


def test_with_requests_instrumentation_the_callers_context_comes_back_whole(
    fake: FakeSume, otel: Telemetry
) -> None:
    """The instrumentation restores its context before ours ends: ours must not bring its ended span back."""
    instrumentation = pytest.importorskip("opentelemetry.instrumentation.requests")
    utils = pytest.importorskip("opentelemetry.instrumentation.utils")
    instrumentor = instrumentation.RequestsInstrumentor()
    fake.script("GET", "/v1/me", 200)
    instrumentor.instrument(tracer_provider=otel.tracer_provider)
    try:
        with otel.tracer.start_as_current_span("view") as view:
            client = session(fake, otel)
            client.get("/me")
            after_first = (trace.get_current_span(), utils.is_http_instrumentation_enabled())
            client.get("/me")
    finally:
        instrumentor.uninstrument()

    assert (view, True) == after_first
    theirs = [s for s in otel.finished("GET") if "sume.outcome" not in (s.attributes or {})]
    assert [view.get_span_context().span_id] * 2 == [s.parent.span_id for s in theirs if s.parent]


def test_threads_get_their_own_spans_and_events(fake: FakeSume, otel: Telemetry) -> None:
    """One observer shared by threads: each thread's span has its parent and only its own retries."""
    fake.script("GET", "/v1/flaky", 503, 503, 200)
    fake.script("GET", "/v1/steady", 200)
    errors: List[BaseException] = []

    def work(name: str, path: str) -> None:
        try:
            client = session(fake, otel)
            with otel.tracer.start_as_current_span(name):
                for _ in range(3):
                    client.get(path)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    with no_sleep():
        paths = ["/flaky", "/steady", "/steady", "/steady"]
        threads = [threading.Thread(target=work, args=(f"t{n}", path)) for n, path in enumerate(paths)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert [] == errors
    by_id = {s.context.span_id: s.name for s in otel.finished()}
    gets = otel.finished("GET")
    assert 12 == len(gets)
    for span in gets:
        assert span.parent is not None
        parent = by_id[span.parent.span_id]
        expected = 2 if parent == "t0" and dict(span.attributes or {})["sume.attempts"] == 3 else 0
        assert expected == len(span.events)


def test_retry_events_from_before_the_request_are_dropped(fake: FakeSume, otel: Telemetry) -> None:
    """A retry seen without any outcome (a SumeRetry used alone) never lands on a later request's span."""
    otel.observer.on_retry(event(code="orphan"))
    fake.script("GET", "/v1/me", 200)

    session(fake, otel).get("/me")

    assert () == otel.only("GET").events


def test_an_observer_on_global_providers_pickles(fake: FakeSume) -> None:
    """Sessions are pickled with their observers: one on the global providers comes back working."""
    fake.script("GET", "/v1/me", 200)
    client = SumeSession(KEY, base_url=fake.url + "/v1", observers=[OpenTelemetryObserver()])

    copy = pickle.loads(pickle.dumps(client))

    assert 1 == len([o for o in copy.observers if isinstance(o, OpenTelemetryObserver)])
    assert 200 == copy.get("/me").status_code


def test_an_observer_with_its_own_providers_refuses_to_pickle(otel: Telemetry) -> None:
    """Its providers cannot travel: pickling says so instead of silently exporting elsewhere."""
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(otel.observer)


def test_missing_opentelemetry_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without opentelemetry-api the import fails with the pip command for the extra."""
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    monkeypatch.delitem(sys.modules, "sume_urllib3.contrib.opentelemetry")
    with pytest.raises(ImportError, match=r"pip install 'sume-urllib3\[opentelemetry\]'"):
        importlib.import_module("sume_urllib3.contrib.opentelemetry")
