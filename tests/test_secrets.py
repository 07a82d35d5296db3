"""No secret leaks: not in logs (ours or urllib3's, at DEBUG), errors, reprs, records or telemetry.

Every fault path of ``test_faults.py`` is replayed with a distinctive key, and everything a
caller or an operator could see afterwards is searched for it: log lines and their structured
extras, exception messages, reprs and tracebacks, records and their pickles, observer events,
and the reprs of the session, adapter and retry. Then a secret in every place a caller can put
one (query, userinfo, key, Authorization, a header, the Idempotency-Key, the body) goes through
every way a request ends, and metrics, Prometheus, OpenTelemetry and a JSON result backend's
payload are searched too (see the section below).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import pickle
import random
import socket
import traceback
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import prometheus_client
import pytest
import requests
import urllib3
from urllib3.exceptions import MaxRetryError, NewConnectionError

from sume_urllib3 import (
    ConfigurationError,
    JobFailed,
    Policy,
    SumeRecord,
    SumeRetry,
    SumeRetryError,
    SumeSession,
)
from sume_urllib3.contrib.prometheus import PrometheusObserver
from sume_urllib3.exceptions import SumeChunkedEncodingError, SumeConnectionError, SumeReadTimeout
from sume_urllib3.observe import RequestStart, RetryEvent, SumeObserver
from sume_urllib3.testing import FakeSume, RecordingObserver, Reply

MakeSession = Callable[..., SumeSession]
API_KEY = "sk_live_Q7zLEAKCHECKx9f3a91c2e5b8d046"
#: Any of these in a text means (part of) the key escaped.
FRAGMENTS = (API_KEY, API_KEY[8:], "LEAKCHECK")


def texts_of(thing: Any) -> Iterator[str]:
    """Every text a person or a log pipeline could get out of ``thing``."""
    yield repr(thing)
    yield str(thing)
    if isinstance(thing, BaseException):
        yield "".join(traceback.format_exception(type(thing), thing, thing.__traceback__))
        yield repr(thing.args)
        for linked in (
            thing.__cause__,
            thing.__context__,
            getattr(thing, "sume", None),
            getattr(thing, "record", None),
        ):
            if linked is not None and linked is not thing:
                yield from texts_of(linked)
    if isinstance(thing, SumeRetryError):
        yield pickle.dumps(thing).decode("latin-1")
    if isinstance(thing, (SumeRecord, RetryEvent)):
        yield str(dataclasses.asdict(thing))
        yield pickle.dumps(thing).decode("latin-1")
    if isinstance(thing, requests.Response):
        yield from texts_of(getattr(thing, "sume", None))


def leaks(things: Iterable[Any], caplog: pytest.LogCaptureFixture) -> List[str]:
    texts = [caplog.text]
    for record in caplog.records:
        texts.append(record.getMessage())
        texts.append(repr(vars(record)))  # structured extras too
    for thing in things:
        texts.extend(texts_of(thing))
    return [text[:300] for text in texts if any(fragment in text for fragment in FRAGMENTS)]


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Every logger (sume_urllib3, urllib3, requests) captured at DEBUG on the root."""
    caplog.set_level(logging.DEBUG)
    return caplog


@pytest.fixture
def session(make_session: MakeSession) -> Callable[..., SumeSession]:
    def make(**kwargs: Any) -> SumeSession:
        kwargs.setdefault("policy", Policy(max_retries=2))
        kwargs.setdefault("timeout", (2, 0.1))
        return make_session(api_key=API_KEY, **kwargs)

    return make


def everything(session: SumeSession, collected: RecordingObserver, *outcomes: Any) -> List[Any]:
    """Outcomes plus the objects every caller can repr."""
    seen = [*collected.retries, *collected.outcomes]
    return [*outcomes, session, session.adapter, session.adapter.retry, session.metrics, *seen]


def run(session: SumeSession, method: str, path: str, **kwargs: Any) -> Any:
    """Send and return the response, or the exception it raised."""
    try:
        response = session.request(method, path, **kwargs)
        _ = response.content
        return response
    except requests.exceptions.RequestException as exc:
        return exc


# -- fault paths ------------------------------------------------------------------------------------

FAULTS = {
    "drop": ("GET", [Reply(drop="before_headers")], requests.exceptions.ConnectionError),
    "read-timeout": ("GET", [Reply(200, delay=1.0)], requests.exceptions.ReadTimeout),
    "503-give-up": ("POST", [Reply.error(503, "queue_full", retry_after="1")], SumeRetryError),
    "cut-body": (
        "GET",
        [Reply(200, json={"a": "x" * 100}, chunked=True, truncate=30)],
        requests.exceptions.ChunkedEncodingError,
    ),
    "401": ("GET", [Reply.error(401, "unauthorized", message="bad key")], requests.Response),
    "503-then-ok": ("POST", [Reply.error(503), Reply(201, json={"id": 1})], requests.Response),
}


@pytest.mark.parametrize("auth_header", ["x-api-key", "bearer"])
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_no_fault_path_leaks_the_key(
    fake: FakeSume, session: MakeSession, debug_logs: pytest.LogCaptureFixture, fault: str, auth_header: str
) -> None:
    """Drop, timeout, give-up, broken body, 401 and retry-then-success: the key shows up nowhere."""
    method, replies, seen = FAULTS[fault]
    fake.script(method, "/v1/x", *replies)
    collected = RecordingObserver()
    sume = session(auth_header=auth_header, observers=[collected])

    outcome = run(sume, method, "/x", json={})

    assert isinstance(outcome, seen)
    assert [] == leaks(everything(sume, collected, outcome), debug_logs)
    assert any(
        r.name.startswith("urllib3") for r in debug_logs.records
    )  # urllib3's DEBUG lines were searched
    sent = fake.requests[0].headers
    assert API_KEY in (sent.get("x-api-key"), (sent.get("Authorization") or "")[len("Bearer ") :])


@pytest.mark.parametrize("auth_header", ["x-api-key", "bearer"])
def test_a_redirect_to_another_host_leaks_the_key_nowhere(
    fake: FakeSume, session: MakeSession, debug_logs: pytest.LogCaptureFixture, auth_header: str
) -> None:
    """Leaving the host strips the key from the request, and nothing logs or records it."""
    other = fake.url.replace("127.0.0.1", "localhost") + "/v1/landing"
    fake.script("GET", "/v1/x", Reply(302, headers={"Location": other}, body=b""))
    fake.script("GET", "/v1/landing", Reply.error(503, "queue_full"))
    collected = RecordingObserver()
    sume = session(auth_header=auth_header, observers=[collected])

    outcome = run(sume, "GET", "/x")

    assert isinstance(outcome, SumeRetryError)
    assert [] == leaks(everything(sume, collected, outcome), debug_logs)
    landed = [r for r in fake.requests if r.path == "/v1/landing"]
    assert 3 == len(landed)
    assert not [r for r in landed if any(f in repr(dict(r.headers)) for f in FRAGMENTS)]


# -- configuration errors ---------------------------------------------------------------------------


def test_both_auth_headers_error_does_not_echo_either_value(
    fake: FakeSume, session: MakeSession, debug_logs: pytest.LogCaptureFixture
) -> None:
    """The "send only one" error names the headers, never their values."""
    sume = session()

    with pytest.raises(ConfigurationError, match="send only one") as info:
        sume.get("/x", headers={"Authorization": "Bearer " + API_KEY})

    assert [] == leaks([info.value, sume], debug_logs)
    assert [] == fake.requests


def test_plain_http_error_does_not_echo_the_key(debug_logs: pytest.LogCaptureFixture) -> None:
    """Refusing to send the key over plain http names the host only."""
    sume = SumeSession(API_KEY, base_url="http://api.example.com/v1")

    with pytest.raises(ConfigurationError, match="plain http") as info:
        sume.get("/me")

    assert [] == leaks([info.value, sume], debug_logs)


@pytest.mark.parametrize(
    "bad_key",
    [
        "sk with space\n",
        API_KEY + " ",
        API_KEY + "\r\nX-Injected: 1",
        "sk_naïve_" + API_KEY,
    ],
    ids=["space-newline", "trailing-space", "header-injection", "non-ascii"],
)
def test_a_malformed_key_is_refused_without_echoing_it(
    bad_key: str, debug_logs: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key that is not visible ASCII is a ConfigurationError that does not repeat the key."""
    with pytest.raises(ConfigurationError, match="api_key") as direct:
        SumeSession(bad_key)
    monkeypatch.setenv("SUME_API_KEY", bad_key)
    errors: List[Any] = [direct.value]
    with pytest.raises(ConfigurationError, match="api_key") as from_env:
        SumeSession()
    errors.append(from_env.value)

    texts = [t for e in errors for t in texts_of(e)]
    assert not [t for t in texts if "sk with space" in t or any(f in t for f in FRAGMENTS)]
    assert [] == leaks([], debug_logs)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("x-api-key", API_KEY + "\n"),
        ("x-api-key", (API_KEY + "\n").encode()),
        ("x-api-key", API_KEY[:12] + "\n" + API_KEY[12:]),
        ("Authorization", "Bearer " + API_KEY + "\r\n"),
    ],
    ids=["newline", "bytes", "inside", "bearer"],
)
def test_a_malformed_key_given_per_call_is_refused_without_echoing_it(
    name: str, value: Any, debug_logs: pytest.LogCaptureFixture
) -> None:
    """A keyless session given a key per call that requests refuses (a newline in it): requests
    names the value by its repr, escaped, and the message shows neither it nor its parts."""
    session = SumeSession(base_url="http://127.0.0.1:9/v1", fleet=None)
    # requests' InvalidHeader (a ValueError), or, where its check lets a trailing newline pass
    # (older releases), http.client's own ValueError: either names the value by its repr.
    with session, pytest.raises(ValueError, match=r"[Hh]eader") as raised:
        session.get("/x", headers={name: value})

    texts = error_texts(raised.value)
    parts = (*FRAGMENTS, API_KEY[:12], API_KEY[12:])  # either side of a newline inside
    assert not [t for t in texts if any(f in t for f in parts)]
    assert [] == leaks([], debug_logs)


def test_an_empty_key_means_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """SumeSession(os.environ.get("SUME_API_KEY", "")) with nothing set sends no key."""
    monkeypatch.delenv("SUME_API_KEY", raising=False)

    assert not SumeSession("").has_api_key


@pytest.mark.parametrize(
    "base_url", [f"ftp://user:{API_KEY}@api.sume.com/v1", f"http://:{API_KEY}@/v1"], ids=["ftp", "no-host"]
)
def test_a_bad_base_url_error_does_not_echo_credentials(base_url: str) -> None:
    """A base URL carrying a secret is refused without repeating the secret."""
    with pytest.raises(ConfigurationError, match="base_url") as info:
        SumeSession("sk_other", base_url=base_url)

    assert not [t for t in texts_of(info.value) if any(f in t for f in FRAGMENTS)]


# -- every place a secret goes, every outcome, everything the library emitted ------------------------
#
# One request carries a secret in every place a caller can put one: the query string (a presigned
# signature), the URL's userinfo, the API key (in x-api-key or in an Authorization value), a
# header of the caller's own, the Idempotency-Key and the body. It then ends each way a request
# can end, on a real loopback server, and everything the library emitted is searched for every secret: log
# records at DEBUG (ours, urllib3's, requests'), the record, retry events and request starts, the
# session's metrics and Prometheus' exposition, OpenTelemetry spans and metrics from the real SDK,
# and the error: str, repr, args, traceback (cause and context included), pickle and the payload
# a JSON result backend stores. Before it, a neighbour request sent another Idempotency-Key
# through the same session: that key must show up nowhere in what the second request left.

SIGNATURE = "SIGvalue0SECRETsignature"
CREDENTIAL = "AKIAcredSECRETcredential"
PASSWORD = "pw0USERINFOsecret"
TENANT_TOKEN = "tok0TENANTsecretHeader"
BODY_SECRET = "card0BODYsecret4242"
OWN_KEY = "idem0OWNsecret0key0123456789"
NEIGHBOUR_KEY = "idem0NEIGHBOURsecret0key01234"
#: Secrets that must show up nowhere: not even in the request's own error or record.
HIDDEN = (SIGNATURE, CREDENTIAL, PASSWORD, TENANT_TOKEN, BODY_SECRET, NEIGHBOUR_KEY, *FRAGMENTS)
#: The request's own key is not hidden from its own record (``error.idempotency_key`` is how a
#: task queue sends the same logical request again), so it is looked for where people read text.
SHOWN_ONLY_TO_ITS_OWNER = (OWN_KEY,)


class Everything:
    """An observer that keeps every start, retry, outcome and job event it is told of."""

    def __init__(self) -> None:
        self.seen: List[Any] = []

    def on_start(self, start: RequestStart) -> None:
        """Keep a request's start."""
        self.seen.append(start)

    def on_retry(self, event: RetryEvent) -> None:
        """Keep a retry."""
        self.seen.append(event)

    def on_outcome(self, record: SumeRecord) -> None:
        """Keep an outcome."""
        self.seen.append(record)

    def on_job(self, event: Any) -> None:
        """Keep a job event."""
        self.seen.append(event)


try:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from sume_urllib3.contrib.opentelemetry import OpenTelemetryObserver
except ImportError:  # the oldest stack (tox py38-legacy) has no OpenTelemetry: nothing emits spans there
    OTEL = False
else:
    OTEL = True


class Emitted:
    """Everything a session reports to: Prometheus, OpenTelemetry (real SDK, in memory), our observer."""

    def __init__(self) -> None:
        self.everything = Everything()
        self.registry = prometheus_client.CollectorRegistry()
        self.observers: List[SumeObserver] = [self.everything, PrometheusObserver(self.registry)]
        self.spans: Any = None
        self.reader: Any = None
        if OTEL:
            self.spans = InMemorySpanExporter()
            tracer_provider = TracerProvider()
            tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
            self.reader = InMemoryMetricReader()
            meter_provider = MeterProvider(metric_readers=[self.reader])
            self.observers.append(OpenTelemetryObserver(tracer_provider, meter_provider))

    def forget(self, caplog: pytest.LogCaptureFixture) -> None:
        """Drop what was emitted so far (the neighbour request's own)."""
        self.everything.seen.clear()
        if self.spans is not None:
            self.spans.clear()
        caplog.clear()

    def texts(self, session: SumeSession) -> List[str]:
        """Every text the observers and the session's metrics hold."""
        texts = [text for thing in self.everything.seen for text in texts_of(thing)]
        texts.append(prometheus_client.generate_latest(self.registry).decode())
        if OTEL:
            data = self.reader.get_metrics_data()
            texts.append(data.to_json() if data is not None else "")
            texts.extend(span.to_json() for span in self.spans.get_finished_spans())
        texts.extend([repr(session.metrics), repr(session.metrics.snapshot())])
        return texts


def result_backend_payload(error: BaseException) -> str:
    """What a JSON result backend stores for a failed task: Celery's own encoding when Celery is
    installed, else the same shape by hand (type, module, each arg JSON-encoded or its repr)."""
    try:
        import celery
        from celery.backends.base import Backend
    except ImportError:
        encoded = []
        for arg in error.args:
            try:
                json.dumps(arg)
                encoded.append(arg)
            except TypeError:
                encoded.append(repr(arg))
        payload = {
            "exc_type": type(error).__name__,
            "exc_module": type(error).__module__,
            "exc_message": encoded,
        }
        return json.dumps(payload)
    backend = Backend(app=celery.Celery(set_as_current=False), serializer="json")
    return str(backend.encode(backend.prepare_exception(error)))


def error_texts(outcome: Any) -> List[str]:
    """Texts of the outcome, the result backend's payload of an error included."""
    texts = list(texts_of(outcome))
    if isinstance(outcome, BaseException):
        texts.append(result_backend_payload(outcome))
        texts.append(pickle.dumps(outcome).decode("latin-1"))
    return texts


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


#: name: (replies for PUT /v1/upload, or None for no server; what the caller gets)
OUTCOMES: Dict[str, Tuple[Optional[List[Reply]], type]] = {
    "success": ([Reply(200, json={"ok": True})], requests.Response),
    "retry-then-success": (
        [Reply.error(503, "queue_full"), Reply(200, json={"ok": True})],
        requests.Response,
    ),
    "give-up": ([Reply.error(503, "queue_full")] * 3, SumeRetryError),
    "fix": ([Reply.error(400, "invalid_request", message="bad upload")], requests.Response),
    "dropped": ([Reply(drop="before_headers")] * 3, SumeConnectionError),
    "refused-connection": (None, SumeConnectionError),
    "read-timeout": ([Reply(200, json={"ok": True}, delay=1.0)], SumeReadTimeout),
    "cut-body": (
        [Reply(200, json={"a": "x" * 100}, chunked=True, truncate=30)] * 3,
        SumeChunkedEncodingError,
    ),
}


@pytest.mark.slow  # real time: runs in CI's slow step
@pytest.mark.parametrize("auth_header", ["x-api-key", "bearer"])
@pytest.mark.parametrize("outcome_name", sorted(OUTCOMES))
def test_no_secret_anywhere_whatever_the_outcome(
    fake: FakeSume, vtime: Any, debug_logs: pytest.LogCaptureFixture, outcome_name: str, auth_header: str
) -> None:
    """A secret in the query, userinfo, key, a header, Idempotency-Key or body shows up in nothing emitted."""
    replies, expected = OUTCOMES[outcome_name]
    emitted = Emitted()
    port = closed_port() if replies is None else int(fake.url.rsplit(":", 1)[1])
    if replies is not None:
        fake.script("PUT", "/v1/upload", *replies)
    fake.script("POST", "/v1/neighbour", Reply(201, json={"id": 1}))
    session = SumeSession(
        API_KEY,
        base_url=f"http://127.0.0.1:{port}/v1",
        auth_header=auth_header,
        policy=Policy(max_retries=2, max_elapsed=10.0),
        timeout=(2, 0.2),
        observers=emitted.observers,
        sleep=vtime.sleep,
        clock=vtime.clock,
        rng=random.Random(7),
    )
    with session:
        if replies is not None:
            session.post("/neighbour", json={}, headers={"Idempotency-Key": NEIGHBOUR_KEY})
        emitted.forget(debug_logs)

        outcome = run(
            session,
            "PUT",
            f"http://uploader:{PASSWORD}@127.0.0.1:{port}/v1/upload"
            f"?X-Amz-Credential={CREDENTIAL}&X-Amz-Signature={SIGNATURE}",
            json={"card": BODY_SECRET},
            headers={"Idempotency-Key": OWN_KEY, "X-Tenant-Token": TENANT_TOKEN},
        )
        texts = [*error_texts(outcome), *emitted.texts(session), *texts_of(session)]

    assert isinstance(outcome, expected)
    assert [] == found(HIDDEN, texts, debug_logs)
    assert [] == found(SHOWN_ONLY_TO_ITS_OWNER, shown_to_people(outcome, emitted, session), debug_logs)
    if replies is not None:  # every secret was sent, so there was something to leak
        sent = fake.requests_for("PUT", "/v1/upload")[0]
        key = sent.headers.get("x-api-key") or sent.headers.get("Authorization", "").replace("Bearer ", "")
        assert (API_KEY, TENANT_TOKEN, OWN_KEY) == (
            key,
            sent.headers.get("X-Tenant-Token"),
            sent.headers.get("Idempotency-Key"),
        )
        assert SIGNATURE in sent.path
        assert BODY_SECRET.encode() in sent.body


def shown_to_people(outcome: Any, emitted: Emitted, session: SumeSession) -> List[str]:
    """Texts people read (messages, reprs, tracebacks, spans, metrics), not the record's data."""
    texts = [str(outcome)]
    if isinstance(outcome, BaseException):
        texts.append("".join(traceback.format_exception(type(outcome), outcome, outcome.__traceback__)))
    texts.append(prometheus_client.generate_latest(emitted.registry).decode())
    if OTEL:
        texts.extend(span.to_json() for span in emitted.spans.get_finished_spans())
    texts.append(repr(session.metrics.snapshot()))
    return texts


def found(secrets: Iterable[str], texts: Iterable[str], caplog: pytest.LogCaptureFixture) -> List[str]:
    """Each (secret, text around it) where a secret shows up in the texts or the log records."""
    everything = [
        caplog.text,
        *(r.getMessage() for r in caplog.records),
        *(repr(vars(r)) for r in caplog.records),
    ]
    everything.extend(texts)
    hits = []
    for text in everything:
        for secret in secrets:
            at = text.find(secret)
            if at >= 0:
                hits.append(f"{secret}: …{text[max(at - 120, 0) : at + 40]}…")
    return hits


def test_no_secret_in_a_refused_turn(
    fake: FakeSume, vtime: Any, debug_logs: pytest.LogCaptureFixture
) -> None:
    """A request the fleet refuses unsent (a cooldown past its deadline) shows its secrets nowhere."""
    fake.script("PUT", "/v1/upload", Reply.error(429, "rate_limit_exceeded", retry_after="30"))
    emitted = Emitted()
    session = SumeSession(
        API_KEY,
        base_url=fake.url + "/v1",
        policy=Policy(max_elapsed=5.0),
        observers=emitted.observers,
        sleep=vtime.sleep,
        clock=vtime.clock,
    )
    url = fake.url.replace("//", f"//uploader:{PASSWORD}@") + f"/v1/upload?X-Amz-Signature={SIGNATURE}"
    with session:
        throttled = run(session, "PUT", url, data=b"x", headers={"Idempotency-Key": NEIGHBOUR_KEY})
        emitted.forget(debug_logs)

        refused = run(
            session,
            "PUT",
            url.replace(SIGNATURE, CREDENTIAL),
            json={"card": BODY_SECRET},
            headers={"Idempotency-Key": OWN_KEY, "X-Tenant-Token": TENANT_TOKEN},
        )
        texts = [*error_texts(refused), *emitted.texts(session)]

    assert isinstance(throttled, SumeRetryError)
    assert isinstance(refused, SumeRetryError)
    assert (True, 0) == (refused.record.fleet_refused, refused.record.attempts)
    assert [] == found(HIDDEN, texts, debug_logs)
    assert [] == found(SHOWN_ONLY_TO_ITS_OWNER, shown_to_people(refused, emitted, session), debug_logs)
    assert 1 == len(fake.requests_for("PUT", "/v1/upload"))


def test_no_secret_in_a_failed_job(fake: FakeSume, vtime: Any, debug_logs: pytest.LogCaptureFixture) -> None:
    """A job that fails while polled with the key and a tenant header shows neither anywhere."""
    fake.job("job_1", ["processing", ("failed", {"error": {"code": "nsfw", "message": "refused"}})])
    emitted = Emitted()
    session = SumeSession(
        API_KEY, base_url=fake.url + "/v1", observers=emitted.observers, sleep=vtime.sleep, clock=vtime.clock
    )
    session.headers["X-Tenant-Token"] = TENANT_TOKEN
    with session:
        try:
            session.jobs.wait("job_1", timeout=60)
            failed: Any = None
        except JobFailed as error:
            failed = error
        texts = [*error_texts(failed), *emitted.texts(session)]

    assert isinstance(failed, JobFailed)
    assert [] == found(HIDDEN, texts, debug_logs)
    assert any(r.name.startswith("urllib3") for r in debug_logs.records)
    assert TENANT_TOKEN == fake.requests[0].headers.get("X-Tenant-Token")


@pytest.mark.parametrize(
    ("scheme", "port", "refused"),
    [("ftp", "", requests.exceptions.InvalidSchema), ("http", ":99999", requests.exceptions.InvalidURL)],
)
def test_an_error_requests_raises_as_is_is_passed_on_redacted(
    debug_logs: pytest.LogCaptureFixture, scheme: str, port: str, refused: type
) -> None:
    """requests' own refusal of a URL (no adapter, a bad port) echoes the URL: without its secrets."""
    session = SumeSession(API_KEY, base_url="http://127.0.0.1:9/v1", fleet=None)
    with session, pytest.raises(refused) as raised:
        session.get(f"{scheme}://uploader:{PASSWORD}@127.0.0.1{port}/x?X-Amz-Signature={SIGNATURE}")

    assert [] == found(HIDDEN, error_texts(raised.value), debug_logs)
    assert f"{scheme}://127.0.0.1{port}/x?<redacted>" in str(raised.value)


def test_the_chained_urllib3_error_is_redacted_in_place(debug_logs: pytest.LogCaptureFixture) -> None:
    """The give-up's args[0] is urllib3's MaxRetryError itself, with its reason, and says ``?<redacted>``."""
    port = closed_port()
    session = SumeSession(
        API_KEY, base_url=f"http://127.0.0.1:{port}/v1", fleet=None, policy=Policy(max_retries=0)
    )
    with session, pytest.raises(SumeConnectionError) as raised:
        session.put(f"/avatar.mp4?X-Amz-Credential={CREDENTIAL}&X-Amz-Signature={SIGNATURE}", data=b"x")

    error = raised.value
    first = error.args[0]
    assert isinstance(first, MaxRetryError)
    assert isinstance(first.reason, NewConnectionError)
    assert "Max retries exceeded with url: /v1/avatar.mp4?<redacted> (Caused by" in str(first)
    assert first.url == "/v1/avatar.mp4?<redacted>"
    assert error.__cause__ is not None
    assert error.__cause__.args[0] is first
    assert [] == found(HIDDEN, error_texts(error), debug_logs)


def test_a_lone_sume_retry_gives_up_without_the_query(debug_logs: pytest.LogCaptureFixture) -> None:
    """SumeRetry on urllib3's own PoolManager raises MaxRetryError naming ``/x?<redacted>``."""
    port = closed_port()
    http = urllib3.PoolManager(retries=SumeRetry(Policy(max_retries=1, backoff_base=0.01)))

    with pytest.raises(MaxRetryError) as raised:
        http.request("GET", f"http://127.0.0.1:{port}/x?X-Amz-Signature={SIGNATURE}")

    assert "/x?<redacted>" == raised.value.url
    assert [] == found(HIDDEN, error_texts(raised.value), debug_logs)


def test_a_lone_sume_retry_refusing_a_redirect_names_no_query(
    fake: FakeSume, debug_logs: pytest.LogCaptureFixture
) -> None:
    """A 307 a lone SumeRetry will not follow (it cannot resend the body) names ``?<redacted>``."""
    fake.script(
        "POST", "/v1/upload", Reply(307, headers={"Location": f"/v1/moved?X-Amz-Credential={CREDENTIAL}"})
    )
    http = urllib3.PoolManager(retries=SumeRetry(Policy(max_retries=1)))

    with pytest.raises(MaxRetryError) as raised:
        http.request("POST", f"{fake.url}/v1/upload?X-Amz-Signature={SIGNATURE}", body=BODY_SECRET.encode())

    assert "/v1/upload?<redacted>" == raised.value.url
    assert "redirect not followed" in str(raised.value)
    assert [] == found(HIDDEN, error_texts(raised.value), debug_logs)
