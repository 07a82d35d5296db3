"""One honest retry policy for every requests/urllib3 call to the Sume HTTP API.

The everyday names are here; the rest live in namespaces: ``sume_urllib3.exceptions`` (every
exception), ``sume_urllib3.pacing`` (fleets and the retry budget), ``sume_urllib3.observe``
(observers, events, metrics, logging), ``sume_urllib3.testing`` and ``sume_urllib3.contrib``.
"""

from __future__ import annotations

from ._adapter import SumeAdapter
from ._errors import ConfigurationError, SumeError, SumeRetryError
from ._idempotency import idempotency_key_for
from ._jobs import Job, JobFailed, JobTimeout
from ._policy import ANY, IN_USE_WAIT, Decision, Policy, Rule, Verdict
from ._record import Outcome, SumeRecord, sume_record
from ._retry import SumeRetry
from ._session import SumeSession
from ._version import __version__

__all__ = [
    "ANY",
    "IN_USE_WAIT",
    "ConfigurationError",
    "Decision",
    "Job",
    "JobFailed",
    "JobTimeout",
    "Outcome",
    "Policy",
    "Rule",
    "SumeAdapter",
    "SumeError",
    "SumeRecord",
    "SumeRetry",
    "SumeRetryError",
    "SumeSession",
    "Verdict",
    "__version__",
    "idempotency_key_for",
    "sume_record",
]
