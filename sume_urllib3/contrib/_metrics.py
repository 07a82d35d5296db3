"""The series the Prometheus and OpenTelemetry observers export, each named and described once.

A series is ``{namespace}_{name}`` in Prometheus (a counter's with ``_total``) and ``sume.{name}``,
underscores as dots, in OpenTelemetry. Pacing differs: Prometheus counts the requests held and
their seconds (``PACED_REQUESTS``, ``PACED_SECONDS``), OpenTelemetry records a histogram (``PACED``).
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence


class Series(NamedTuple):
    name: str
    description: str
    label: Optional[str] = None  # the label it is counted by in Prometheus,
    attribute: Optional[str] = None  # and the attribute in OpenTelemetry
    unit: str = "{request}"  # OpenTelemetry's
    buckets: Sequence[float] = ()  # a histogram's boundaries

    @property
    def otel_name(self) -> str:
        return "sume." + self.name.replace("_", ".")


REQUESTS = Series("requests", "Logical Sume API requests by final outcome.", "outcome", "sume.outcome")
RETRIES = Series(
    "retries", "Retries by reason: error code, else HTTP status, else transport error class.",
    "reason", "sume.retry.reason", "{retry}",
)
JOBS = Series(
    "job_events", "Job status polls (poll) and job waits ended (completed, failed, timed_out, error).",
    "event", "sume.job.event", "{event}",
)
ATTEMPTS = Series(
    "attempts", "Requests sent per logical Sume API request.", unit="{attempt}",
    buckets=(1, 2, 3, 4, 5, 6, 7, 10),  # the default policy sends at most 7
)
FLEET_REFUSED = Series(
    "fleet_refused", "Requests not sent: the fleet's turn would have come after the deadline."
)
FLEET_FALLBACKS = Series(
    "fleet_fallbacks", "Turns granted by local pacing because the shared fleet store failed.", unit="{grant}"
)
PACED_REQUESTS = Series("paced_requests", "Requests the fleet held for their turn before sending.")
PACED_SECONDS = Series(
    "paced_seconds", "Seconds requests waited for the fleet's turn, beyond the policy's own waits."
)
PACED = Series(
    "paced", "Seconds a request waited for the fleet's pace.", unit="s",
    buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120),
)
