"""PrometheusObserver: the counters and histogram on a real registry."""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Optional

import pytest

prometheus_client = pytest.importorskip("prometheus_client")

from sume_urllib3._record import (  # noqa: E402
    Outcome,
    RetryEvent,
    SumeRecord,
)
from sume_urllib3.contrib.prometheus import PrometheusObserver  # noqa: E402

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

OUTCOMES = ["ok", "retried_ok", "gave_up", "fix", "no_retry", "poll"]


def record(outcome: Outcome, attempts: int) -> SumeRecord:
    """A record with the given outcome and attempts."""
    return SumeRecord(
        idempotency_key=None, attempts=attempts, outcome=outcome, status=200, code=None,
        request_id=None, request_ids=(), waits=(), elapsed=0.0, reason="",
    )


def event(status: Optional[int], code: Optional[str] = None, error: Optional[str] = None) -> RetryEvent:
    """A retry event with the given status, code and transport error."""
    return RetryEvent(
        method="GET", url="/v1/jobs", attempt=1, max_retries=6, wait=1.0, wait_source="backoff",
        status=status, code=code, request_id=None, key_prefix=None, reason="", error=error,
    )


@pytest.fixture
def registry() -> CollectorRegistry:
    """A fresh registry per test."""
    from prometheus_client import CollectorRegistry

    return CollectorRegistry()


def test_outcomes_start_at_zero(registry: CollectorRegistry) -> None:
    """Every outcome series exists with value 0 before any request."""
    PrometheusObserver(registry)
    for outcome in OUTCOMES:
        assert registry.get_sample_value("sume_requests_total", {"outcome": outcome}) == 0.0


def test_outcomes_and_attempts_are_counted(registry: CollectorRegistry) -> None:
    """on_outcome counts by outcome and observes attempts in the histogram."""
    obs = PrometheusObserver(registry)
    obs.on_outcome(record(Outcome.OK, 1))
    obs.on_outcome(record(Outcome.RETRIED_OK, 3))
    obs.on_outcome(record(Outcome.GAVE_UP, 7))
    get = registry.get_sample_value
    assert get("sume_requests_total", {"outcome": "ok"}) == 1.0
    assert get("sume_requests_total", {"outcome": "retried_ok"}) == 1.0
    assert get("sume_requests_total", {"outcome": "gave_up"}) == 1.0
    assert get("sume_requests_total", {"outcome": "fix"}) == 0.0
    assert get("sume_attempts_count") == 3.0
    assert get("sume_attempts_sum") == 11.0
    assert get("sume_attempts_bucket", {"le": "1.0"}) == 1.0
    assert get("sume_attempts_bucket", {"le": "3.0"}) == 2.0
    assert get("sume_attempts_bucket", {"le": "7.0"}) == 3.0
    assert get("sume_attempts_bucket", {"le": "10.0"}) == 3.0
    assert get("sume_attempts_bucket", {"le": "+Inf"}) == 3.0


def test_histogram_buckets(registry: CollectorRegistry) -> None:
    """The attempts histogram has buckets 1-7 and 10."""
    PrometheusObserver(registry)
    les = {
        s.labels["le"]
        for metric in registry.collect()
        if metric.name == "sume_attempts"
        for s in metric.samples
        if s.name == "sume_attempts_bucket"
    }
    assert les == {"1.0", "2.0", "3.0", "4.0", "5.0", "6.0", "7.0", "10.0", "+Inf"}


def test_retries_by_reason(registry: CollectorRegistry) -> None:
    """Retries are labelled code, else status, else error class, like SumeMetrics."""
    obs = PrometheusObserver(registry)
    obs.on_retry(event(429, "queue_full"))
    obs.on_retry(event(503))
    obs.on_retry(event(503))
    obs.on_retry(event(None, None, "ConnectTimeoutError"))
    get = registry.get_sample_value
    assert get("sume_retries_total", {"reason": "queue_full"}) == 1.0
    assert get("sume_retries_total", {"reason": "503"}) == 2.0
    assert get("sume_retries_total", {"reason": "ConnectTimeoutError"}) == 1.0


def test_namespace(registry: CollectorRegistry) -> None:
    """The namespace prefixes every metric name."""
    PrometheusObserver(registry, namespace="billing").on_outcome(record(Outcome.FIX, 1))
    assert registry.get_sample_value("billing_requests_total", {"outcome": "fix"}) == 1.0
    assert registry.get_sample_value("sume_requests_total", {"outcome": "fix"}) is None


def test_two_observers_share_one_registry(registry: CollectorRegistry) -> None:
    """A second observer on the same registry (another session) adds to the same series."""
    PrometheusObserver(registry).on_outcome(record(Outcome.OK, 1))
    PrometheusObserver(registry).on_outcome(record(Outcome.OK, 1))
    assert registry.get_sample_value("sume_requests_total", {"outcome": "ok"}) == 2.0


def test_default_registry() -> None:
    """Without a registry the global REGISTRY is used."""
    obs = PrometheusObserver()
    assert obs.registry is prometheus_client.REGISTRY
    before = prometheus_client.REGISTRY.get_sample_value("sume_requests_total", {"outcome": "poll"})
    obs.on_outcome(record(Outcome.POLL, 1))
    after = prometheus_client.REGISTRY.get_sample_value("sume_requests_total", {"outcome": "poll"})
    assert after == (before or 0.0) + 1.0


def test_missing_prometheus_client_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without prometheus_client the import fails with the pip command for the extra."""
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    monkeypatch.delitem(sys.modules, "sume_urllib3.contrib.prometheus")
    with pytest.raises(ImportError, match=r"pip install 'sume-urllib3\[prometheus\]'"):
        importlib.import_module("sume_urllib3.contrib.prometheus")


def test_a_name_clash_leaves_the_registry_as_it_was() -> None:
    """If one metric name is taken, none of ours is registered, and a retry later works."""
    registry = prometheus_client.CollectorRegistry()
    squatter = prometheus_client.Counter("sume_retries", "taken", registry=registry)

    with pytest.raises(ValueError, match="Duplicated"):
        PrometheusObserver(registry=registry)
    registry.unregister(squatter)

    PrometheusObserver(registry=registry)
    assert registry.get_sample_value("sume_requests_total", {"outcome": "ok"}) == 0.0
