"""Export sume_urllib3 counters to Prometheus (needs the ``prometheus`` extra).

``SumeSession(observers=[PrometheusObserver()])`` feeds, under ``namespace`` (default ``sume``):

- ``sume_requests_total{outcome}``: logical requests by final outcome (every outcome from 0);
- ``sume_retries_total{reason}``: retries by error code, else status, else transport error class
  (at most 50 reasons, then ``other``);
- ``sume_attempts``: a histogram of requests sent per logical request;
- ``sume_paced_requests_total`` and ``sume_paced_seconds_total``: requests the fleet held for
  their turn, and the seconds they waited (beyond the policy's own waits);
- ``sume_fleet_refused_total``: requests not sent because their turn came after the deadline;
- ``sume_fleet_fallbacks_total``: turns granted by local pacing because the shared store failed;
- ``sume_job_events_total{event}``: job status polls (``poll``) and how waits ended
  (``completed``, ``failed``, ``timed_out``, ``error``), every event from 0.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Dict, List, NamedTuple, Optional, Set, Tuple

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
    from prometheus_client.registry import Collector
except ImportError as exc:  # pragma: no cover - exercised by a test that hides the module
    raise ImportError(
        "sume_urllib3.contrib.prometheus needs prometheus_client: pip install 'sume-urllib3[prometheus]'"
    ) from exc

from .. import Outcome, SumeRecord
from ..observe import JOB_EVENT_KINDS, RetryEvent, retry_reason

#: Histogram buckets for attempts per logical request (the default policy sends at most 7).
ATTEMPT_BUCKETS = (1, 2, 3, 4, 5, 6, 7, 10)
#: The ``event`` label values of ``{namespace}_job_events_total`` (a JobEvent's ``kind``).
JOB_EVENTS = JOB_EVENT_KINDS


class _Collectors(NamedTuple):
    requests: Counter
    retries: Counter
    attempts: Histogram
    paced_requests: Counter
    paced_seconds: Counter
    fleet_refused: Counter
    fleet_fallbacks: Counter
    job_events: Counter
    reasons: Set[str]  # retry reasons labelled so far (bounded, see MAX_REASONS)


_lock = threading.Lock()
# A registry refuses a second metric with the same name, so every observer on one
# registry and namespace (one per session, say) shares the same collectors.
_collectors: weakref.WeakKeyDictionary[CollectorRegistry, Dict[str, _Collectors]] = (
    weakref.WeakKeyDictionary()
)


class PrometheusObserver:
    """An observer that feeds the request, retry, attempt, pacing and job metrics listed above.

    Every observer on one registry and namespace adds to the same series (one per session is fine).
    """

    def __init__(self, registry: Optional[CollectorRegistry] = None, namespace: str = "sume") -> None:
        self.registry = REGISTRY if registry is None else registry
        self.namespace = namespace
        self._metrics = _get_collectors(self.registry, namespace)

    def __reduce__(self) -> Tuple[Any, ...]:
        # A registry holds a lock: a pickled observer (a session sent to a spawn-started worker)
        # counts into the global registry of the process that loads it, as the original did.
        if self.registry is not REGISTRY:
            raise TypeError(
                "a PrometheusObserver on its own registry cannot be pickled; use the global "
                "registry (no registry argument) in sessions that are pickled"
            )
        return (PrometheusObserver, (None, self.namespace))

    def __deepcopy__(self, memo: Dict[int, Any]) -> PrometheusObserver:
        # One process, so the same registry: the copy adds to the same series.
        return PrometheusObserver(self.registry, self.namespace)

    def on_retry(self, event: RetryEvent) -> None:
        """Count one retry under its reason (error code, else status, else error class)."""
        metrics = self._metrics
        with _lock:
            reason = retry_reason(event, metrics.reasons)
            metrics.reasons.add(reason)
        metrics.retries.labels(reason=reason).inc()

    def on_outcome(self, record: SumeRecord) -> None:
        """Count one logical request by outcome, observe its attempts, and count its pacing."""
        metrics = self._metrics
        metrics.requests.labels(outcome=Outcome(record.outcome).value).inc()
        metrics.attempts.observe(record.attempts)
        if record.paced > 0:
            metrics.paced_requests.inc()
            metrics.paced_seconds.inc(record.paced)
        if record.fleet_refused:
            metrics.fleet_refused.inc()
        if record.fleet_fallbacks > 0:
            metrics.fleet_fallbacks.inc(record.fleet_fallbacks)

    def on_job(self, event: Any) -> None:
        """Count one job event (a ``JobEvent``) under its kind; an unknown kind is skipped."""
        kind = getattr(event, "kind", None)
        if kind in JOB_EVENTS:
            self._metrics.job_events.labels(event=kind).inc()


def _get_collectors(registry: CollectorRegistry, namespace: str) -> _Collectors:
    with _lock:
        per_namespace = _collectors.setdefault(registry, {})
        found = per_namespace.get(namespace)
        if found is None:
            found = per_namespace[namespace] = _create(registry, namespace)
        return found


def _create(registry: CollectorRegistry, namespace: str) -> _Collectors:
    def counter(name: str, documentation: str, *labels: str) -> Counter:
        return Counter(name, documentation, labels, namespace=namespace, registry=None)

    requests = counter("requests", "Logical Sume API requests by final outcome.", "outcome")
    # Every outcome and job event is exported from the start, so rate() and alerts see a 0
    # rather than a missing series.
    for outcome in Outcome:
        requests.labels(outcome=outcome.value)
    collectors = (
        requests,
        counter(
            "retries",
            "Retries by reason: error code, else HTTP status, else transport error class.",
            "reason",
        ),
        Histogram(
            "attempts",
            "Requests sent per logical Sume API request.",
            namespace=namespace,
            registry=None,
            buckets=ATTEMPT_BUCKETS,
        ),
        counter("paced_requests", "Requests the fleet held for their turn before sending."),
        counter(
            "paced_seconds", "Seconds requests waited for the fleet's turn, beyond the policy's own waits."
        ),
        counter("fleet_refused", "Requests not sent: the fleet's turn would have come after the deadline."),
        counter("fleet_fallbacks", "Turns granted by local pacing because the shared fleet store failed."),
        counter(
            "job_events",
            "Job status polls (poll) and job waits ended (completed, failed, timed_out, error).",
            "event",
        ),
    )
    for kind in JOB_EVENTS:
        collectors[-1].labels(event=kind)
    # Register all or none: a name clash half-way must not leave the first ones behind.
    registered: List[Collector] = []
    try:
        for collector in collectors:
            registry.register(collector)
            registered.append(collector)
    except ValueError:
        for done in registered:
            registry.unregister(done)
        raise
    return _Collectors(*collectors, set())
