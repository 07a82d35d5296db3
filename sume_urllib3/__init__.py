"""One honest retry policy for every requests/urllib3 call to the Sume HTTP API."""

from __future__ import annotations

import importlib as _importlib
from typing import Any as _Any

from ._adapter import SumeAdapter
from ._errors import ConfigurationError, SumeError, SumeRetryError
from ._idempotency import idempotency_key_for
from ._jobs import Job, JobEvent, JobFailed, Jobs, JobTimeout
from ._policy import ANY, IN_USE_WAIT, Decision, Policy, Rule, Verdict
from ._record import Outcome, SumeRecord, sume_record
from ._retry import SumeRetry
from ._session import SumeSession
from ._version import __version__
from .observe import LoggingObserver, RequestStart, RetryEvent, SumeMetrics, SumeObserver
from .pacing._fleet import Fleet, Grant, LocalFleet, RetryBudget
from .pacing.host import HostFleet

__all__ = [
    "ANY",
    "IN_USE_WAIT",
    "ConfigurationError",
    "Decision",
    "Fleet",
    "Grant",
    "HostFleet",
    "Job",
    "JobEvent",
    "JobFailed",
    "JobTimeout",
    "Jobs",
    "LocalFleet",
    "LoggingObserver",
    "Outcome",
    "Policy",
    "RequestStart",
    "RetryBudget",
    "RetryEvent",
    "Rule",
    "SumeAdapter",
    "SumeError",
    "SumeMetrics",
    "SumeObserver",
    "SumeRecord",
    "SumeRetry",
    "SumeRetryError",
    "SumeSession",
    "Verdict",
    "__version__",
    "idempotency_key_for",
    "sume_record",
]


def __getattr__(name: str) -> _Any:
    """The exceptions that moved to :mod:`sume_urllib3.exceptions` still import from here."""
    exceptions = _importlib.import_module(f"{__name__}.exceptions")  # not "from .": that asks here
    if name in exceptions.__all__:
        return getattr(exceptions, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
