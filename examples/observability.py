"""Traces and metrics of Sume calls from a Django view and a Celery-style worker.

Runs on its own against a local fake Sume API (no network, no key):

    pip install "sume-urllib3[django,opentelemetry]" opentelemetry-sdk
    python examples/observability.py

It prints every span with OpenTelemetry's console exporter (one CLIENT span per Sume call,
parented to the view's or the task's span, with a ``retry`` event per retry), then the
process-wide counters that ``get_session().metrics`` keeps for every thread.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any, Dict, List

import django
from django.conf import settings
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from sume_urllib3.testing import FakeSume, Reply

tracer = trace.get_tracer("examples.observability")


def setup(base_url: str) -> None:
    """Tracing on (the three lines from docs/guide/observability.md), then Django with SUME["OBSERVERS"]."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stdout)))
    trace.set_tracer_provider(provider)
    settings.configure(
        INSTALLED_APPS=["sume_urllib3.contrib.django"],
        ALLOWED_HOSTS=["testserver"],
        SUME={
            "API_KEY": "sk_example_not_a_real_key",
            "BASE_URL": base_url,
            "BACKOFF_BASE": 0.05,  # short waits, so the example finishes at once
            "OBSERVERS": ["sume_urllib3.contrib.opentelemetry.OpenTelemetryObserver"],
        },
    )
    django.setup()


def avatar_view(request: Any) -> Any:
    """A Django view: one Sume call through the thread's session."""
    from django.http import JsonResponse

    from sume_urllib3.contrib.django import get_session

    with tracer.start_as_current_span("POST /avatars/new"):
        response = get_session().post("/avatars", json={"name": request.GET.get("name", "Ada")})
        record = response.sume  # type: ignore[attr-defined]  # SumeRecord: how the call went
        return JsonResponse({"status": response.status_code, "outcome": record.outcome.value})


def generate_avatar(name: str) -> str:
    """A Celery-style task body (decorate it with @shared_task in a real project)."""
    from sume_urllib3.contrib.django import get_session

    with tracer.start_as_current_span("task generate_avatar"):
        response = get_session().post("/avatars", json={"name": name})
        return str(response.sume.outcome.value)  # type: ignore[attr-defined]


def worker(names: List[str], results: List[str]) -> None:
    """One worker thread: runs tasks, then closes its session as a worker does on shutdown."""
    from sume_urllib3.contrib.django import close_session

    try:
        results.extend(generate_avatar(name) for name in names)
    finally:
        close_session()


def main() -> Dict[str, Any]:
    """Run the view once and two workers, print the spans and the counters; return the counters."""
    with FakeSume() as fake:
        fake.script("POST", "/v1/avatars", 503, Reply.error(429, "rate_limit_exceeded", retry_after="0"), 201)
        setup(fake.url + "/v1")
        from django.test import RequestFactory

        from sume_urllib3.contrib.django import get_session

        body = json.loads(avatar_view(RequestFactory().get("/avatars/new", {"name": "Ada"})).content)
        results: List[str] = []
        batches = [[f"w{n}-{i}" for i in range(2)] for n in range(2)]
        threads = [threading.Thread(target=worker, args=(batch, results)) for batch in batches]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        snapshot = get_session().metrics.snapshot()
        print(f"view: {body}")
        print(f"tasks: {sorted(results)}")
        print(f"metrics: {json.dumps(snapshot, sort_keys=True)}")
        return snapshot


if __name__ == "__main__":
    main()
