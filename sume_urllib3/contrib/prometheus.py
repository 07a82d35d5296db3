"""Export sume_urllib3 counters to Prometheus (needs the ``prometheus`` extra)."""

from __future__ import annotations

import threading
import weakref
from typing import Dict, List, NamedTuple, Optional, Set

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
    from prometheus_client.registry import Collector
except ImportError as exc:  # pragma: no cover - exercised by a test that hides the module
    raise ImportError(
        "sume_urllib3.contrib.prometheus needs prometheus_client: "
        "pip install 'sume-urllib3[prometheus]'"
    ) from exc

from .._metrics import bounded_reason, retry_reason
from .._record import Outcome, RetryEvent, SumeRecord

#: Histogram buckets for attempts per logical request (the default policy sends at most 7).
ATTEMPT_BUCKETS = (1, 2, 3, 4, 5, 6, 7, 10)


class _Collectors(NamedTuple):
    requests: Counter
    retries: Counter
    attempts: Histogram
    reasons: Set[str]  # retry reasons labelled so far (bounded, see MAX_REASONS)


_lock = threading.Lock()
# A registry refuses a second metric with the same name, so every observer on one
# registry and namespace (one per session, say) shares the same collectors.
_collectors: weakref.WeakKeyDictionary[CollectorRegistry, Dict[str, _Collectors]] = (
    weakref.WeakKeyDictionary()
)


class PrometheusObserver:
    """An observer that feeds ``{namespace}_requests_total``, ``_retries_total`` and ``_attempts``."""

    def __init__(self, registry: Optional[CollectorRegistry] = None, namespace: str = "sume") -> None:
        self.registry = REGISTRY if registry is None else registry
        self.namespace = namespace
        self._metrics = _get_collectors(self.registry, namespace)

    def on_retry(self, event: RetryEvent) -> None:
        """Count one retry under its reason (error code, else status, else error class)."""
        metrics = self._metrics
        with _lock:
            reason = bounded_reason(retry_reason(event), metrics.reasons)
            metrics.reasons.add(reason)
        metrics.retries.labels(reason=reason).inc()

    def on_outcome(self, record: SumeRecord) -> None:
        """Count one logical request by outcome and observe its attempts."""
        self._metrics.requests.labels(outcome=Outcome(record.outcome).value).inc()
        self._metrics.attempts.observe(record.attempts)


def _get_collectors(registry: CollectorRegistry, namespace: str) -> _Collectors:
    with _lock:
        per_namespace = _collectors.setdefault(registry, {})
        found = per_namespace.get(namespace)
        if found is None:
            found = per_namespace[namespace] = _create(registry, namespace)
        return found


def _create(registry: CollectorRegistry, namespace: str) -> _Collectors:
    requests = Counter(
        "requests",
        "Logical Sume API requests by final outcome.",
        ["outcome"],
        namespace=namespace,
        registry=None,
    )
    # Every outcome is exported from the start, so rate() and alerts see a 0
    # rather than a missing series.
    for outcome in Outcome:
        requests.labels(outcome=outcome.value)
    retries = Counter(
        "retries",
        "Retries by reason: error code, else HTTP status, else transport error class.",
        ["reason"],
        namespace=namespace,
        registry=None,
    )
    attempts = Histogram(
        "attempts",
        "Requests sent per logical Sume API request.",
        namespace=namespace,
        registry=None,
        buckets=ATTEMPT_BUCKETS,
    )
    # Register all three or none: a name clash half-way must not leave the first behind.
    registered: List[Collector] = []
    try:
        for collector in (requests, retries, attempts):
            registry.register(collector)
            registered.append(collector)
    except ValueError:
        for done in registered:
            registry.unregister(done)
        raise
    return _Collectors(requests, retries, attempts, set())
