"""One honest retry policy for every requests/urllib3 call to the Sume HTTP API."""

from __future__ import annotations

from ._adapter import SumeAdapter
from ._budget import RetryBudget
from ._errors import (
    ConfigurationError,
    SumeChunkedEncodingError,
    SumeConnectionError,
    SumeConnectTimeout,
    SumeContentDecodingError,
    SumeError,
    SumeProxyError,
    SumeReadTimeout,
    SumeRetryError,
    SumeSSLError,
    SumeTimeout,
)
from ._fleet import Fleet, Grant, LocalFleet
from ._jobs import Job, JobError, JobEvent, JobFailed, JobNotCompleted, Jobs, JobTimeout
from ._logging import LoggingObserver
from ._metrics import SumeMetrics
from ._policy import ANY, IN_USE_WAIT, Decision, Policy, Rule, Verdict, wait_seconds
from ._record import Outcome, RequestStart, RetryEvent, SumeObserver, SumeRecord, sume_record
from ._retry import SumeRetry
from ._session import SumeSession
from ._task_keys import idempotency_key_for
from ._version import __version__

__all__ = [
    "ANY",
    "IN_USE_WAIT",
    "ConfigurationError",
    "Decision",
    "Fleet",
    "Grant",
    "Job",
    "JobError",
    "JobEvent",
    "JobFailed",
    "JobNotCompleted",
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
    "SumeChunkedEncodingError",
    "SumeConnectTimeout",
    "SumeConnectionError",
    "SumeContentDecodingError",
    "SumeError",
    "SumeMetrics",
    "SumeObserver",
    "SumeProxyError",
    "SumeReadTimeout",
    "SumeRecord",
    "SumeRetry",
    "SumeRetryError",
    "SumeSSLError",
    "SumeSession",
    "SumeTimeout",
    "Verdict",
    "__version__",
    "idempotency_key_for",
    "sume_record",
    "wait_seconds",
]
