"""Every exception sume_urllib3 raises, in one place.

::

    SumeError
    ├── ConfigurationError (also ValueError)            bad configuration, nothing sent
    ├── SumeRetryError (also requests' RetryError)       gave up: .record, .retry_in, .idempotency_key
    │   ├── SumeConnectionError (also ConnectionError)   no response: connection failed or was dropped
    │   │   ├── SumeConnectTimeout (also ConnectTimeout)
    │   │   ├── SumeProxyError (also ProxyError)
    │   │   └── SumeSSLError (also SSLError)
    │   ├── SumeTimeout (also Timeout)
    │   ├── SumeReadTimeout (also ReadTimeout)           the read, or the deadline, ran out
    │   ├── SumeChunkedEncodingError (also ChunkedEncodingError)   the body broke mid-read
    │   └── SumeContentDecodingError (also ContentDecodingError)
    └── JobError                                          a job (session.jobs) did not give a result
        ├── JobFailed
        ├── JobTimeout
        └── JobNotCompleted

A transport failure keeps requests' own class as a base, so ``except
requests.exceptions.ReadTimeout`` (or ``ConnectionError``, ``RequestException``) still catches
what it caught before; ``except SumeRetryError`` catches every give-up. The most used ones
(``SumeError``, ``ConfigurationError``, ``SumeRetryError``, ``JobFailed``, ``JobTimeout``) are
also at the top level of ``sume_urllib3``.
"""

from __future__ import annotations

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
from ._jobs import JobError, JobFailed, JobNotCompleted, JobTimeout

__all__ = [
    "ConfigurationError",
    "JobError",
    "JobFailed",
    "JobNotCompleted",
    "JobTimeout",
    "SumeChunkedEncodingError",
    "SumeConnectTimeout",
    "SumeConnectionError",
    "SumeContentDecodingError",
    "SumeError",
    "SumeProxyError",
    "SumeReadTimeout",
    "SumeRetryError",
    "SumeSSLError",
    "SumeTimeout",
]
