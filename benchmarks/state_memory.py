"""Memory a long-running multi-tenant process keeps: the fleet, the counters, the exporters.

A service that calls Sume for many tenants sends many API keys to many origins. Every
structure kept per key or per origin must be bounded, and forget what went idle. This drives
``KEYS`` distinct API keys across ``ORIGINS`` origins (ten keys each, 1,000 requests a
second of virtual time, one request per key) through what a session uses for each request:

- ``fleet``: the key-id cache (``_keyid.key_ids``) and ``LocalFleet.default()``, an acquire
  and a release per request; one answer in 100 a 429 with ``Retry-After: 30`` (a cooldown),
  one in 10 states a pace (``RateLimit-Policy: 100;w=60``), the rest plain 200s. Then an idle
  hour (``no_sleep()``'s virtual time, so the default fleet's own clock moves) and one request
  of a new tenant: the fleet's retained memory (tracemalloc) must be at most ``--budget-mb``.
- ``metrics``, ``prometheus``, ``opentelemetry``: ``SumeMetrics``, ``PrometheusObserver`` (its
  own registry) and ``OpenTelemetryObserver`` (the SDK's ``MeterProvider`` with an in-memory
  reader; a ``TracerProvider`` that exports nowhere) fed one retry (1,000 distinct server error
  codes in all) and one outcome per request. Their label sets must stay bounded, and no label
  value may name an origin or a key.

Each part runs in a process of its own (tracemalloc counts what that part keeps, after
``gc.collect()``, over what the process held before it started). ``baseline`` is the fleet
part again with the package as it was at ``BASELINE`` (extracted with ``git archive``), the
figure before entries were bounded.

Run ``python benchmarks/state_memory.py`` (``--keys``/``--origins`` for a smaller run);
``--write`` records the default run in ``benchmarks/results/state_memory.json``. Exits
non-zero (and writes nothing) when a target is missed.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import _results  # noqa: E402

MB = 1024 * 1024
KEYS = 100_000
ORIGINS = 10_000
#: Requests per second of virtual time while the keys are driven.
RATE = 1_000
#: The idle spell after the busy one: an hour and a second (a pace is kept for an hour).
IDLE_S = 3601.0
#: The package before entries were bounded (issue 32), for the baseline row.
BASELINE = "e4ccc9f"
PARTS = ("fleet", "metrics", "prometheus", "opentelemetry")
#: Distinct server error codes among the retries (SumeMetrics and the exporters keep 50).
CODES = 1_000


def origin(n: int, origins: int) -> str:
    return f"https://tenant-{n % origins:05d}.sume.example"


def api_key(n: int) -> str:
    return f"sk_live_tenant_{n:06d}_0123456789abcdef"


def answer(n: int) -> Tuple[int, Dict[str, str]]:
    """The n-th request's answer: a 429 with a cooldown, a stated pace, or a plain 200."""
    if n % 100 == 0:
        return 429, {"Retry-After": "30", "Content-Type": "application/json"}
    if n % 10 == 1:
        return 200, {"RateLimit-Policy": "100;w=60", "Content-Type": "application/json"}
    return 200, {"Content-Type": "application/json"}


def retained(base: int) -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0] - base


# -- the parts, each in its own process -----------------------------------------------------------


def fleet_part(keys: int, origins: int) -> Dict[str, Any]:
    """LocalFleet.default() and the key-id cache through a busy spell, an idle hour, one request."""
    from sume_urllib3.pacing import _fleet
    from sume_urllib3.pacing._signals import key_ids
    from sume_urllib3.testing import no_sleep

    def entries(fleet: Any) -> int:
        return len(fleet._keys)  # also the baseline's, which has no ``entries``

    def request(fleet: Any, n: int) -> None:
        kid = key_ids.for_request(origin(n, origins) + "/v1/jobs", {"x-api-key": api_key(n)})
        status, headers = answer(n)
        fleet.release(kid, fleet.acquire(kid, time_left=30.0), status, headers)

    with no_sleep() as recorder:
        fleet = _fleet.LocalFleet.default()
        request(fleet, keys + 1)  # the code paths warm, outside the count
        fleet.reset()
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        started = time.perf_counter()
        peak_entries = 0
        for n in range(keys):
            request(fleet, n)
            if n % RATE == RATE - 1:
                recorder.record(1.0)  # a second of virtual time per RATE requests
                peak_entries = max(peak_entries, entries(fleet))
        seconds = time.perf_counter() - started
        busy_entries, busy = entries(fleet), retained(base)
        peak = tracemalloc.get_traced_memory()[1] - base
        recorder.record(IDLE_S)
        request(fleet, keys + 2)  # the first request after the idle hour: a new tenant
        idle_entries, idle = entries(fleet), retained(base)
        tracemalloc.stop()
    return {
        "max_keys": getattr(fleet, "max_keys", None),
        "idle_s": getattr(fleet, "idle", None),
        "peak_entries": max(peak_entries, busy_entries),
        "entries_after_busy": busy_entries,
        "entries_after_idle": idle_entries,
        "key_id_cache_entries": len(key_ids._ids),
        "peak_mb": peak / MB,
        "retained_after_busy_mb": busy / MB,
        "retained_after_idle_mb": idle / MB,
        "us_per_request": seconds / keys * 1e6,
    }


def _events(keys: int, origins: int) -> Tuple[Callable[[int], Any], Callable[[int], Any]]:
    from sume_urllib3._record import Outcome, SumeRecord
    from sume_urllib3.observe import RetryEvent

    outcomes = list(Outcome)

    def event(n: int) -> RetryEvent:
        return RetryEvent(
            method="POST",
            url=origin(n, origins) + f"/v1/jobs/{n}",
            attempt=1,
            max_retries=6,
            wait=1.0,
            wait_source="backoff",
            status=503,
            code=f"server_code_{n % CODES:04d}",
            request_id=f"req_{n}",
            key_prefix=f"{n:08d}",
            reason="503",
        )

    def record(n: int) -> SumeRecord:
        return SumeRecord(
            idempotency_key=f"{n:08d}-idempotency",
            attempts=1 + n % 7,
            outcome=outcomes[n % len(outcomes)],
            status=200,
            code=None,
            request_id=f"req_{n}",
            request_ids=(f"req_{n}",),
            waits=(1.0,),
            elapsed=0.5,
            reason="",
            method="POST",
            url=origin(n, origins) + f"/v1/jobs/{n}",
            paced=0.25 if n % 10 == 0 else 0.0,
        )

    return event, record


def _drive(observer: Any, keys: int, origins: int) -> Tuple[int, float]:
    """Feed one retry and one outcome per request; (bytes retained, seconds)."""
    event, record = _events(keys, origins)
    observer.on_retry(event(keys + 1))  # warm
    observer.on_outcome(record(keys + 1))
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    started = time.perf_counter()
    for n in range(keys):
        observer.on_retry(event(n))
        observer.on_outcome(record(n))
    seconds = time.perf_counter() - started
    kept = retained(base)
    tracemalloc.stop()
    return kept, seconds


def _leaks(values: List[str]) -> int:
    """Label values that name an origin or a key."""
    return sum(1 for v in values if "tenant" in v or "sume.example" in v or "sk_live" in v)


def metrics_part(keys: int, origins: int) -> Dict[str, Any]:
    from sume_urllib3.observe import SumeMetrics

    metrics = SumeMetrics()
    kept, seconds = _drive(metrics, keys, origins)
    snap = metrics.snapshot()
    labels = [str(k) for part in ("outcomes", "retries", "attempts", "jobs") for k in snap[part]]
    return {
        "label_sets": {part: len(snap[part]) for part in ("outcomes", "retries", "attempts", "jobs")},
        "labels_naming_an_origin_or_key": _leaks(labels),
        "retained_mb": kept / MB,
        "us_per_request": seconds / keys * 1e6,
    }


def prometheus_part(keys: int, origins: int) -> Dict[str, Any]:
    from prometheus_client import CollectorRegistry

    from sume_urllib3.contrib.prometheus import PrometheusObserver

    registry = CollectorRegistry()
    kept, seconds = _drive(PrometheusObserver(registry=registry), keys, origins)
    series: Dict[str, int] = {}
    labels: List[str] = []
    for family in registry.collect():
        sets = {tuple(sorted(s.labels.items())) for s in family.samples}
        series[family.name] = len(sets)
        labels += [v for s in family.samples for v in s.labels.values()]
    return {
        "label_sets": series,
        "labels_naming_an_origin_or_key": _leaks(labels),
        "retained_mb": kept / MB,
        "us_per_request": seconds / keys * 1e6,
    }


def opentelemetry_part(keys: int, origins: int) -> Dict[str, Any]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider

    from sume_urllib3.contrib.opentelemetry import OpenTelemetryObserver

    reader = InMemoryMetricReader()
    observer = OpenTelemetryObserver(tracer_provider=TracerProvider(), meter_provider=MeterProvider([reader]))
    kept, seconds = _drive(observer, keys, origins)
    data = reader.get_metrics_data()
    series: Dict[str, int] = {}
    labels: List[str] = []
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points: List[Any] = list(metric.data.data_points)
                series[metric.name] = len(points)
                labels += [str(v) for p in points for v in (p.attributes or {}).values()]
    return {
        "label_sets": series,
        "labels_naming_an_origin_or_key": _leaks(labels),
        "retained_mb": kept / MB,
        "us_per_request": seconds / keys * 1e6,
    }


PART_RUNNERS: Mapping[str, Callable[[int, int], Dict[str, Any]]] = {
    "fleet": fleet_part,
    "metrics": metrics_part,
    "prometheus": prometheus_part,
    "opentelemetry": opentelemetry_part,
}


# -- the driver ---------------------------------------------------------------------------------------


def run_part(part: str, keys: int, origins: int, package: Optional[str] = None) -> Dict[str, Any]:
    """One part in a fresh process (``package``: the directory sume_urllib3 is imported from)."""
    command = [sys.executable, os.path.abspath(__file__), "--part", part, "--keys", str(keys)]
    command += ["--origins", str(origins), "--package", package or ROOT]
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"the {part} part failed:\n{done.stderr[-4000:]}")
    result: Dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def baseline(keys: int, origins: int) -> Dict[str, Any]:
    """The fleet part with the package as it was at BASELINE."""
    with tempfile.TemporaryDirectory(prefix="state_memory-") as tmp:
        archive = subprocess.run(
            ["git", "archive", "--format=tar", BASELINE, "sume_urllib3"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        )
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        result = run_part("fleet", keys, origins, package=tmp)
    result["commit"] = BASELINE
    return result


def failures(figures: Mapping[str, Any], budget_mb: float) -> List[str]:
    """The targets missed: the fleet over budget after the idle hour, or a label set unbounded."""
    missed = []
    fleet = figures["fleet"]
    if fleet["retained_after_idle_mb"] > budget_mb:
        missed.append(
            f"fleet: {fleet['retained_after_idle_mb']:.2f} MB retained after the idle hour (> {budget_mb})"
        )
    if fleet["peak_entries"] > fleet["max_keys"]:
        missed.append(f"fleet: {fleet['peak_entries']} entries at the peak (> max_keys {fleet['max_keys']})")
    for part in PARTS[1:]:
        if figures[part]["labels_naming_an_origin_or_key"]:
            missed.append(f"{part}: a label value names an origin or a key")
        sizes = figures[part]["label_sets"]
        widest = max(sizes.values()) if sizes else 0
        if widest > 60:  # 50 retry reasons, "other", and a few more for a histogram's buckets
            missed.append(f"{part}: {widest} label sets in one metric (unbounded?)")
    return missed


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--keys", type=int, default=KEYS, help="distinct API keys (one request each)")
    parser.add_argument("--origins", type=int, default=ORIGINS, help="distinct origins they are sent to")
    parser.add_argument(
        "--budget-mb", type=float, default=2.0, help="most MB the fleet may keep after idling"
    )
    parser.add_argument("--no-baseline", action="store_true", help=f"skip the fleet run at {BASELINE}")
    parser.add_argument("--write", action="store_true", help="write benchmarks/results/state_memory.json")
    parser.add_argument("--part", choices=PARTS, help=argparse.SUPPRESS)
    parser.add_argument("--package", help=argparse.SUPPRESS)
    args = parser.parse_args()
    _results.refuse_partial(parser, args, "keys", "origins", "budget_mb", "no_baseline")
    if args.part:
        sys.path.insert(0, args.package or ROOT)
        print(json.dumps(PART_RUNNERS[args.part](args.keys, args.origins)))
        return 0
    figures: Dict[str, Any] = {
        "keys": args.keys,
        "origins": args.origins,
        "requests_per_second": RATE,
        "idle_s": IDLE_S,
        "budget_mb": args.budget_mb,
        "codes": CODES,
    }
    for part in PARTS:
        figures[part] = run_part(part, args.keys, args.origins)
        print(f"{part}: {json.dumps(figures[part])}", flush=True)
    if not args.no_baseline:
        figures["baseline"] = baseline(args.keys, args.origins)
        print(f"baseline ({BASELINE}): {json.dumps(figures['baseline'])}", flush=True)
    missed = failures(figures, args.budget_mb)
    for line in missed:
        print("MISSED " + line)
    if missed:
        return 1
    if args.write:
        _results.write("state_memory", figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
