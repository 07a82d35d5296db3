"""The series the Prometheus and OpenTelemetry observers export, each named and described once.

A series is ``{namespace}_{name}`` in Prometheus (``_total`` added to a counter) and
``sume.{name}``, underscores as dots, in OpenTelemetry. Pacing is the one difference: Prometheus
counts the requests held and their seconds, OpenTelemetry records the seconds as a histogram.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple, Optional, Sequence, Set

from ..observe import JOB_EVENT_KINDS, RetryEvent, retry_reason


class Series(NamedTuple):
    name: str
    description: str
    #: The label it is counted by (Prometheus), and the same as an OpenTelemetry attribute.
    label: Optional[str] = None
    attribute: Optional[str] = None
    unit: str = "{request}"  # OpenTelemetry's
    buckets: Sequence[float] = ()  # a histogram's boundaries


REQUESTS = Series(
    "requests", "Logical Sume API requests by final outcome.", "outcome", "sume.outcome"
)
RETRIES = Series(
    "retries", "Retries by reason: error code, else HTTP status, else transport error class.",
    "reason", "sume.retry.reason", "{retry}",
)
#: Boundaries for attempts per logical request (the default policy sends at most 7).
ATTEMPTS = Series(
    "attempts", "Requests sent per logical Sume API request.", unit="{attempt}",
    buckets=(1, 2, 3, 4, 5, 6, 7, 10),
)
FLEET_REFUSED = Series(
    "fleet_refused", "Requests not sent: the fleet's turn would have come after the deadline."
)
FLEET_FALLBACKS = Series(
    "fleet_fallbacks", "Turns granted by local pacing because the shared fleet store failed.", unit="{grant}"
)
JOBS = Series(
    "job_events", "Job status polls (poll) and job waits ended (completed, failed, timed_out, error).",
    "event", "sume.job.event", "{event}",
)
# Prometheus's pacing series, then OpenTelemetry's.
PACED_REQUESTS = Series("paced_requests", "Requests the fleet held for their turn before sending.")
PACED_SECONDS = Series(
    "paced_seconds", "Seconds requests waited for the fleet's turn, beyond the policy's own waits.", unit="s"
)
PACED = Series(
    "paced", "Seconds a request waited for the fleet's pace.", unit="s",
    buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120),
)


def otel_name(series: Series) -> str:
    """The series' OpenTelemetry name: ``sume.fleet.refused``."""
    return "sume." + series.name.replace("_", ".")


def job_kind(event: Any) -> Optional[str]:
    """A job event's kind, or None for a kind this version does not know (not counted)."""
    kind = getattr(event, "kind", None)
    return kind if kind in JOB_EVENT_KINDS else None


class Reasons:
    """The retry reasons labelled so far, bounded (see ``observe.MAX_REASONS``); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: Set[str] = set()

    def label(self, event: RetryEvent, clean: Any = str) -> str:
        """The label of this retry (made printable by ``clean``), noted as seen."""
        with self._lock:
            reason: str = clean(retry_reason(event, self._seen))
            self._seen.add(reason)
            return reason
