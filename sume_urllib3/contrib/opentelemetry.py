"""OpenTelemetry traces and metrics for Sume calls (needs the ``opentelemetry`` extra).

``SumeSession(observers=[OpenTelemetryObserver()])`` gives every logical request one CLIENT
span, covering every attempt, wait and redirect, with one ``retry`` event per retry, and feeds
the ``sume.*`` metrics (instrumentation scope ``sume_urllib3``). The spans, their attributes
and the metrics are listed in the observability guide (docs/guide/observability.md); the
query string, credentials, headers, the API key and the full idempotency key never reach them.

The span starts when the session announces the request (``on_start``) and is current while
the call runs, so spans made meanwhile nest under it; the session runs an announced request in
a copy of the caller's context, so the caller's span is current again once the call returns.
An observer used where nothing calls ``on_start`` (a ``SumeRetry`` used alone, an older
adapter) makes the same span when the request ends, back-dated to its start.

``opentelemetry-instrumentation-requests`` and ``-urllib3`` each make one span per call, not
per attempt: retries happen inside urllib3, below the one and inside the other. Ours adds the
attempts, waits and Sume ids; the requests instrumentation's span wraps ``Session.send`` and
so is our span's parent, and the urllib3 one's nests under ours.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import time
from collections import deque
from typing import Any, Deque, Dict, Iterable, Iterator, Optional, Sequence, Set, Tuple
from urllib.parse import urlsplit

try:
    from opentelemetry import context as otel_context
    from opentelemetry import metrics, trace
    from opentelemetry.trace import Span, SpanKind, StatusCode
except ImportError as exc:  # pragma: no cover - exercised by a test that hides the module
    raise ImportError(
        "sume_urllib3.contrib.opentelemetry needs opentelemetry-api: "
        "pip install 'sume-urllib3[opentelemetry]'"
    ) from exc

from .. import Outcome, SumeRecord, __version__
from ..observe import JOB_EVENT_KINDS, RequestStart, RetryEvent, key_prefix, retry_reason
from ._metrics import ATTEMPT_BUCKETS, otel

#: The instrumentation scope of the tracer and the meter.
SCOPE = "sume_urllib3"
#: Histogram boundaries for pacing waits, in seconds.
PACED_BUCKETS: Sequence[float] = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 120)
# Retry events kept per thread while waiting for their request's outcome: a request that
# never reports one (an observer attached to a SumeRetry used alone) must not leak memory.
_MAX_PENDING = 64
# Values that come from the server are cut to this length.
_MAX_FIELD = 200
_KNOWN_METHODS = frozenset({"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE"})
_FAILED_OUTCOMES = frozenset({Outcome.GAVE_UP, Outcome.NO_RETRY, Outcome.FIX})
_DEFAULT_PORTS = {"http": 80, "https": 443}

logger = logging.getLogger("sume_urllib3")

_Pending = Tuple[int, Dict[str, Any]]  # (timestamp ns, event attributes)
_Identity = Tuple[str, str, Optional[str]]  # (method, url, idempotency key) of one request
# (span or None when the tracer failed, the request it belongs to)
_Started = Tuple[Optional[Span], _Identity]
#: The announced request of each observer (by id) in this context. The session runs an
#: announced request in a copy of the caller's context, and reports a streamed one's outcome
#: in a copy of it, so on_retry and on_outcome find the span on_start made from any thread,
#: and a nested request (its own copy) never sees the outer one's entry replaced.
_ANNOUNCED: contextvars.ContextVar[Optional[Dict[int, _Started]]] = contextvars.ContextVar(
    "sume_urllib3_otel_announced", default=None
)


class OpenTelemetryObserver:
    """An observer that makes one CLIENT span per logical request and feeds ``sume.*`` metrics.

    ``tracer_provider`` and ``meter_provider`` default to the global ones (set with
    ``opentelemetry.trace.set_tracer_provider``), looked up when the observer is made; spans and
    metrics go nowhere until an SDK is configured. One observer may serve every session and
    thread of a process.
    """

    def __init__(self, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        self._providers = (tracer_provider, meter_provider)
        self._tracer = trace.get_tracer(SCOPE, __version__, tracer_provider)
        meter = metrics.get_meter(SCOPE, __version__, meter_provider)
        self._requests, self._retries, self._jobs, self._refused, self._fallbacks = (
            meter.create_counter(*otel(name))
            for name in ("requests", "retries", "job_events", "fleet_refused", "fleet_fallbacks")
        )
        self._attempts = _histogram(meter, "attempts", ATTEMPT_BUCKETS)
        self._paced = _histogram(meter, "paced", PACED_BUCKETS)
        self._lock = threading.Lock()
        self._reasons: Set[str] = set()
        self._local = threading.local()
        #: Failures of the tracer or the meter so far (each one logged only the first time).
        self.failures = 0

    def __repr__(self) -> str:
        return f"<OpenTelemetryObserver failures={self.failures}>"

    def __reduce__(self) -> Tuple[Any, ...]:
        # Providers hold locks and exporters: a copy can only point at the global ones again.
        if self._providers != (None, None):
            raise TypeError(
                "an OpenTelemetryObserver with its own providers cannot be pickled; "
                "use the global providers (no arguments) in sessions that are pickled"
            )
        return (OpenTelemetryObserver, ())

    def on_start(self, start: RequestStart) -> None:
        """Open the request's span now and make it current for the rest of the call.

        Called inside the call's own context, dropped when the call returns; exactly one
        ``on_outcome`` follows.
        """
        identity = (start.method, start.url, start.idempotency_key)
        span: Optional[Span] = None
        with self._guard("on_start"):
            attributes = {"http.request.method": _method(start.method), **url_attributes(start.url)}
            name = _method(start.method, "HTTP")
            span = self._tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attributes)
            otel_context.attach(trace.set_span_in_context(span))  # undone with the call's context
        # Noted even when the tracer failed: the outcome then makes the span, back-dated.
        _ANNOUNCED.set({**(_ANNOUNCED.get() or {}), id(self): (span, identity)})

    def on_retry(self, event: RetryEvent) -> None:
        """Note one retry as a span event, and count it under its reason."""
        stamp = time.time_ns()
        attributes = _retry_attributes(event)
        span = (_ANNOUNCED.get() or {}).get(id(self), (None, None))[0]
        with self._guard("on_retry"):
            if span is not None:
                span.add_event("retry", attributes, timestamp=stamp)
            else:
                self._pending().append((stamp, attributes))
        with self._guard("on_retry"):
            with self._lock:
                reason = _clean(retry_reason(event, self._reasons))
                self._reasons.add(reason)
            self._retries.add(1, {"sume.retry.reason": reason})

    def on_outcome(self, record: SumeRecord) -> None:
        """End the request's span (or make it, start to end) and record the request's metrics."""
        end = time.time_ns()
        span = self._announced(record)
        start = end - int(max(record.elapsed, 0.0) * 1e9)
        pending = self._pending()
        # Events stamped before this request started belong to one that never reported.
        events = [(stamp, attributes) for stamp, attributes in pending if stamp >= start]
        pending.clear()
        with self._guard("on_outcome"):
            self._end_span(record, span, start, end, events)
        with self._guard("on_outcome"):
            self._count(record)

    def on_job(self, event: Any) -> None:
        """Count one job event (a ``JobEvent``) under its kind: a poll, or how a wait ended."""
        kind = getattr(event, "kind", None)
        if kind in JOB_EVENT_KINDS:  # else a kind this version does not know
            with self._guard("on_job"):
                self._jobs.add(1, {"sume.job.event": kind})

    def _announced(self, record: SumeRecord) -> Optional[Span]:
        """The span ``on_start`` made for this record's request, its entry taken out; else None.

        A request refused before it started (an invalid Idempotency-Key) inside an announced
        one sees the outer entry: the identity tells them apart.
        """
        announced = _ANNOUNCED.get() or {}
        started = announced.get(id(self))
        if started is None or started[1] != (record.method, record.url, record.idempotency_key):
            return None
        _ANNOUNCED.set({k: v for k, v in announced.items() if k != id(self)})
        return started[0]

    def _end_span(
        self, record: SumeRecord, span: Optional[Span], start: int, end: int, events: Iterable[_Pending]
    ) -> None:
        attributes = span_attributes(record)
        if span is not None:
            span.update_name(_method(record.method, "HTTP"))
            span.set_attributes(attributes)
        else:
            # The caller's span is still current on the requesting thread: it becomes the parent.
            # A child never starts before its parent, even when an injected clock (or no_sleep's
            # virtual waits) made the request's elapsed time longer than the real one.
            parent_start = getattr(trace.get_current_span(), "start_time", None)
            if isinstance(parent_start, int):
                start = min(max(start, parent_start), end)
            span = self._tracer.start_span(
                _method(record.method, "HTTP"), kind=SpanKind.CLIENT, attributes=attributes, start_time=start
            )
        for stamp, event_attributes in events:
            span.add_event("retry", event_attributes, timestamp=stamp)
        if "error.type" in attributes:
            span.set_status(StatusCode.ERROR, _clean(record.reason))
        span.end(end_time=end)

    def _count(self, record: SumeRecord) -> None:
        labels = {"sume.outcome": Outcome(record.outcome).value}
        self._requests.add(1, labels)
        self._attempts.record(record.attempts, labels)
        if record.paced > 0:
            self._paced.record(float(record.paced))
        if record.fleet_refused:
            self._refused.add(1)
        if record.fleet_fallbacks > 0:
            self._fallbacks.add(int(record.fleet_fallbacks))

    def _pending(self) -> Deque[_Pending]:
        pending: Deque[_Pending] = self._local.__dict__.setdefault("pending", deque(maxlen=_MAX_PENDING))
        return pending

    @contextlib.contextmanager
    def _guard(self, hook: str) -> Iterator[None]:
        """Run the block; a failure of the tracer or meter is counted, logged once, never raised."""
        try:
            yield
        except Exception:
            with self._lock:
                self.failures += 1
                first = self.failures == 1
            if first:
                logger.warning(
                    "OpenTelemetryObserver: the tracer or meter raised in %s; requests go on, and "
                    "further failures are only counted (observer.failures)",
                    hook,
                    exc_info=True,
                )


def span_attributes(record: SumeRecord) -> Dict[str, Any]:
    """The span attributes of one logical request (semantic conventions plus ``sume.*``)."""
    method = (record.method or "").upper()
    optional = {
        "http.request.method_original": None if method in _KNOWN_METHODS else _clean(record.method),
        "http.response.status_code": record.status,
        # Every request sent after the first, retries and redirects alike, as the convention counts.
        "http.request.resend_count": max(record.attempts - 1, 0),
        "error.type": _error_type(record),
        "sume.request_id": _clean(record.request_id),
        "sume.code": _clean(record.code),
        "sume.idempotency_key_prefix": key_prefix(record.idempotency_key),
        "sume.paced": max(float(record.paced), 0.0),
        "sume.fleet.refused": record.fleet_refused,
    }
    return {
        "http.request.method": _method(method),
        "sume.outcome": Outcome(record.outcome).value,
        "sume.attempts": record.attempts,
        **url_attributes(record.url),
        **_present(optional),
    }


def url_attributes(url: str) -> Dict[str, Any]:
    """``url.full`` without userinfo, query or fragment, plus ``server.address`` and ``server.port``."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return {}
    if not parts.scheme or not host:
        return {}
    scheme = parts.scheme.lower()
    netloc = (f"[{host}]" if ":" in host else host) + ("" if port is None else f":{port}")
    attributes: Dict[str, Any] = {
        "url.full": f"{scheme}://{netloc}{parts.path or '/'}",
        "server.address": host,
    }
    port = port if port is not None else _DEFAULT_PORTS.get(scheme)
    if port is not None:
        attributes["server.port"] = port
    return attributes


def _error_type(record: SumeRecord) -> Optional[str]:
    """The status as a string for HTTP failures, else the error class or the outcome."""
    if record.status is not None and record.status >= 400:
        return str(record.status)
    if record.status is None or Outcome(record.outcome) in _FAILED_OUTCOMES:
        return _clean(record.error) or Outcome(record.outcome).value
    return None


def _retry_attributes(event: RetryEvent) -> Dict[str, Any]:
    optional = {
        "http.response.status_code": event.status,
        "sume.retry.code": _clean(event.code),
        "sume.request_id": _clean(event.request_id),
        "error.type": _clean(event.error),
    }
    return {
        "sume.retry.attempt": event.attempt,
        "sume.retry.wait": float(event.wait),
        "sume.retry.source": _clean(event.wait_source),
        "sume.retry.reason": _clean(event.reason),
        **_present(optional),
    }


def _present(optional: Dict[str, Any]) -> Dict[str, Any]:
    """The attributes that have a value: the conventions leave out what does not apply."""
    return {name: value for name, value in optional.items() if value}


def _method(method: str, other: str = "_OTHER") -> str:
    """A known method upper-cased, else ``other`` (the conventions' span name is "HTTP")."""
    return method.upper() if method.upper() in _KNOWN_METHODS else other


def _clean(value: Optional[str]) -> str:
    """Printable characters only, bounded length: values may come from the server."""
    text = "".join(ch if ch.isprintable() else "?" for ch in str(value or ""))
    return text[:_MAX_FIELD] + "…" if len(text) > _MAX_FIELD else text


def _histogram(meter: Any, name: str, buckets: Sequence[float]) -> Any:
    try:
        return meter.create_histogram(*otel(name), explicit_bucket_boundaries_advisory=list(buckets))
    except TypeError:  # opentelemetry-api < 1.23 has no bucket advice
        return meter.create_histogram(*otel(name))
