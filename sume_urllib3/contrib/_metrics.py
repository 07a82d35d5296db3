"""What each series of the Prometheus and OpenTelemetry observers counts, written once for both.

Prometheus names a series ``{namespace}_{name}`` (a counter's with ``_total``), OpenTelemetry
``sume.{name}`` with dots for underscores (:func:`otel`).
"""

from __future__ import annotations

from typing import Dict, Tuple

#: name: (description, unit in OpenTelemetry). Pacing is counted by the two ``paced_*`` counters
#: in Prometheus, by the ``paced`` histogram in OpenTelemetry.
SERIES: Dict[str, Tuple[str, str]] = {
    "requests": ("Logical Sume API requests by final outcome.", "{request}"),
    "retries": ("Retries by reason: error code, else HTTP status, else transport error class.", "{retry}"),
    "attempts": ("Requests sent per logical Sume API request.", "{attempt}"),
    "fleet_refused": ("Requests not sent: the fleet's turn would have come after the deadline.", "{request}"),
    "fleet_fallbacks": ("Turns granted by local pacing because the shared fleet store failed.", "{grant}"),
    "job_events": (
        "Job status polls (poll) and job waits ended (completed, failed, timed_out, error).", "{event}"
    ),
    "paced_requests": ("Requests the fleet held for their turn before sending.", "{request}"),
    "paced_seconds": ("Seconds requests waited for the fleet's turn, beyond the policy's own waits.", "s"),
    "paced": ("Seconds a request waited for the fleet's pace.", "s"),
}
#: Boundaries of the attempts histogram (the default policy sends at most 7 requests).
ATTEMPT_BUCKETS = (1, 2, 3, 4, 5, 6, 7, 10)


def otel(name: str) -> Tuple[str, str, str]:
    """An instrument's name, unit and description in OpenTelemetry."""
    description, unit = SERIES[name]
    return "sume." + name.replace("_", "."), unit, description
