"""PrometheusObserver: the counters and histogram on a real registry."""

from __future__ import annotations

import copy
import importlib
import multiprocessing
import pickle
import sys
from typing import TYPE_CHECKING, Any, Callable, Optional

import pytest

prometheus_client = pytest.importorskip("prometheus_client")

from sume_urllib3 import Job, JobFailed, JobTimeout, Policy, SumeRetryError, SumeSession  # noqa: E402
from sume_urllib3._record import Outcome, SumeRecord  # noqa: E402
from sume_urllib3.contrib.prometheus import JOB_EVENTS, PrometheusObserver  # noqa: E402
from sume_urllib3.observe import JobEvent, RetryEvent  # noqa: E402
from sume_urllib3.pacing import LocalFleet  # noqa: E402
from sume_urllib3.testing import FakeSume  # noqa: E402

from .conftest import VirtualTime  # noqa: E402

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

PACING = ("sume_paced_requests_total", "sume_paced_seconds_total", "sume_fleet_refused_total",
          "sume_fleet_fallbacks_total")

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


def test_pacing_and_job_series_start_at_zero(registry: CollectorRegistry) -> None:
    """The pacing counters and every job event series exist with value 0 before any request."""
    PrometheusObserver(registry)
    get = registry.get_sample_value
    assert [0.0] * 4 == [get(name) for name in PACING]
    assert [0.0] * len(JOB_EVENTS) == [get("sume_job_events_total", {"event": kind}) for kind in JOB_EVENTS]


def test_a_request_the_fleet_held_is_counted_with_its_wait(
    registry: CollectorRegistry, make_session: Callable[..., Any], fake: FakeSume, vtime: VirtualTime
) -> None:
    """At 1/min the second and third calls each wait 60 s for their turn: 2 paced requests, 120 s."""
    fake.script("GET", "/v1/me", 200)
    fleet = LocalFleet(rate="1/min", burst=1, clock=vtime.clock)
    session = make_session(observers=[PrometheusObserver(registry)], fleet=fleet)

    for _ in range(3):
        session.get("/me")

    get = registry.get_sample_value
    assert [60.0, 60.0] == vtime.sleeps
    assert (2.0, 120.0) == (get("sume_paced_requests_total"), get("sume_paced_seconds_total"))
    assert 0.0 == get("sume_fleet_refused_total")


def test_a_request_the_fleet_refused_is_counted(
    registry: CollectorRegistry, make_session: Callable[..., Any], fake: FakeSume, vtime: VirtualTime
) -> None:
    """A turn after the deadline sends nothing and counts one refusal, no paced request."""
    fake.script("GET", "/v1/me", 200)
    fleet = LocalFleet(rate="1/min", burst=1, clock=vtime.clock)
    observers = [PrometheusObserver(registry)]
    session = make_session(observers=observers, fleet=fleet, policy=Policy(max_elapsed=10))
    session.get("/me")

    with pytest.raises(SumeRetryError):
        session.get("/me")

    get = registry.get_sample_value
    assert 1 == len(fake.requests)
    assert (1.0, 0.0) == (get("sume_fleet_refused_total"), get("sume_paced_requests_total"))


def test_fleet_fallbacks_are_counted(registry: CollectorRegistry) -> None:
    """Each turn local pacing granted because the shared store failed adds one."""
    paced = SumeRecord(
        idempotency_key=None, attempts=1, outcome=Outcome.OK, status=200, code=None, request_id=None,
        request_ids=(), waits=(), elapsed=2.5, reason="", paced=2.5, fleet_fallbacks=2,
    )

    PrometheusObserver(registry).on_outcome(paced)

    get = registry.get_sample_value
    assert (2.0, 1.0, 2.5) == (
        get("sume_fleet_fallbacks_total"), get("sume_paced_requests_total"), get("sume_paced_seconds_total")
    )


def test_job_polls_and_endings_are_counted_by_event(
    registry: CollectorRegistry, make_session: Callable[..., Any], fake: FakeSume
) -> None:
    """session.jobs.wait: one poll per status read, then how it ended; an unknown kind is skipped."""
    fake.job("job_1", ["queued", "processing", "completed"])
    fake.job("job_2", ["processing", ("failed", {"error": {"code": "bad_input"}})])
    stuck = fake.job("job_3", ["processing"])
    observer = PrometheusObserver(registry)
    session = make_session(observers=[observer])

    session.jobs.wait("job_1")
    with pytest.raises(JobFailed):
        session.jobs.wait("job_2")
    with pytest.raises(JobTimeout):
        session.jobs.wait("job_3", timeout=5)
    observer.on_job(JobEvent("paused", Job("job_4"), 1, 0.0))

    get = registry.get_sample_value
    counts = {kind: get("sume_job_events_total", {"event": kind}) for kind in JOB_EVENTS}
    polls = 3 + 2 + len(stuck.history)
    assert {"poll": polls, "completed": 1.0, "failed": 1.0, "timed_out": 1.0, "error": 0.0} == counts
    assert None is registry.get_sample_value("sume_job_events_total", {"event": "paused"})


def test_a_copy_counts_into_the_same_series() -> None:
    """copy.deepcopy and pickle (of a session too) keep the observer: same namespace, same series."""
    registry = prometheus_client.CollectorRegistry()
    own = PrometheusObserver(registry=registry, namespace="copied")
    copy.deepcopy(own).on_outcome(record(Outcome.OK, 1))
    assert registry.get_sample_value("copied_requests_total", {"outcome": "ok"}) == 1.0

    glob = PrometheusObserver(namespace="pickled")
    for clone in (pickle.loads(pickle.dumps(glob)), copy.deepcopy(glob)):
        assert (clone.registry, clone.namespace) == (prometheus_client.REGISTRY, "pickled")
    session = pickle.loads(pickle.dumps(SumeSession("sk_test_x", observers=[glob])))
    assert [PrometheusObserver] == [type(o) for o in session.user_observers]
    with pytest.raises(TypeError, match="own registry cannot be pickled"):
        pickle.dumps(own)


def _count_in_a_spawned_worker(session: SumeSession, url: str, out: Any) -> None:
    session.get(url)
    out.put(prometheus_client.REGISTRY.get_sample_value("spawned_requests_total", {"outcome": "ok"}))


@pytest.mark.slow
def test_a_session_with_the_observer_reaches_a_spawned_worker() -> None:
    """multiprocessing's spawn pickles the session: the worker counts its request in its own registry."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    with FakeSume() as fake:
        fake.script("GET", "/v1/me", 200)
        observer = PrometheusObserver(namespace="spawned")
        session = SumeSession("sk_test_x", base_url=fake.url + "/v1", observers=[observer])
        worker = context.Process(target=_count_in_a_spawned_worker, args=(session, "/me", out))
        worker.start()
        counted = out.get(timeout=60)
        worker.join(timeout=30)
    assert (0, 1.0) == (worker.exitcode, counted)
    assert 1 == len(fake.requests)
