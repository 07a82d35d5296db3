"""Export sume_urllib3 counters to Prometheus (needs the ``prometheus`` extra).

``SumeSession(observers=[PrometheusObserver()])`` feeds, under ``namespace`` (default ``sume``),
the series the observability guide lists (docs/guide/observability.md): requests by outcome,
retries by reason (at most 50 reasons, then ``other``), attempts, pacing, fleet refusals and
fallbacks, and job events; each series' HELP text says what it counts.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Dict, List, Optional, Set, Tuple

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import Collector
except ImportError as exc:  # pragma: no cover - exercised by a test that hides the module
    raise ImportError(
        "sume_urllib3.contrib.prometheus needs prometheus_client: pip install 'sume-urllib3[prometheus]'"
    ) from exc

from .. import Outcome, SumeRecord
from ..observe import JOB_EVENT_KINDS, RetryEvent, retry_reason
from ._metrics import ATTEMPT_BUCKETS, SERIES

#: The ``event`` label values of ``{namespace}_job_events_total`` (a JobEvent's ``kind``).
JOB_EVENTS = JOB_EVENT_KINDS


class _Collectors(Collector):
    """The series of one registry and namespace, registered as one collector: all or none."""

    def __init__(self, registry: CollectorRegistry, namespace: str) -> None:
        def counter(name: str, *labels: str) -> Counter:
            return Counter(name, SERIES[name][0], labels, namespace=namespace, registry=None)

        self.requests = counter("requests", "outcome")
        self.retries = counter("retries", "reason")
        self.attempts = Histogram(
            "attempts", SERIES["attempts"][0], namespace=namespace, registry=None, buckets=ATTEMPT_BUCKETS
        )
        self.paced_requests = counter("paced_requests")
        self.paced_seconds = counter("paced_seconds")
        self.fleet_refused = counter("fleet_refused")
        self.fleet_fallbacks = counter("fleet_fallbacks")
        self.job_events = counter("job_events", "event")
        # Every outcome and job event is exported from the start, so rate() and alerts see a 0
        # rather than a missing series.
        for outcome in Outcome:
            self.requests.labels(outcome=outcome.value)
        for kind in JOB_EVENTS:
            self.job_events.labels(event=kind)
        self._metrics: List[Any] = list(vars(self).values())
        #: Retry reasons labelled so far (bounded, see ``observe.MAX_REASONS``).
        self.reasons: Set[str] = set()
        registry.register(self)  # refused whole when any name is taken

    def describe(self) -> List[Metric]:
        return [family for metric in self._metrics for family in metric.describe()]

    def collect(self) -> List[Metric]:
        return [family for metric in self._metrics for family in metric.collect()]


_lock = threading.Lock()
# A registry refuses a second metric with the same name, so every observer on one
# registry and namespace (one per session, say) shares the same collectors.
_collectors: weakref.WeakKeyDictionary[CollectorRegistry, Dict[str, _Collectors]] = (
    weakref.WeakKeyDictionary()
)


class PrometheusObserver:
    """An observer that feeds the request, retry, attempt, pacing and job series (each label from 0).

    Every observer on one registry and namespace adds to the same series (one per session is fine).
    """

    def __init__(self, registry: Optional[CollectorRegistry] = None, namespace: str = "sume") -> None:
        self.registry = REGISTRY if registry is None else registry
        self.namespace = namespace
        with _lock:
            per_namespace = _collectors.setdefault(self.registry, {})
            if namespace not in per_namespace:
                per_namespace[namespace] = _Collectors(self.registry, namespace)
            self._metrics = per_namespace[namespace]

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
