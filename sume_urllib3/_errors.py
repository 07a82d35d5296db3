"""The exceptions sume_urllib3 defines, and how a transport error becomes a give-up.

The tree and what each class means: :mod:`sume_urllib3.exceptions`, the public namespace.
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Mapping, NoReturn, Optional, Tuple, Type, Union

import requests

from ._record import SumeRecord, describe, record_from_summary, summary
from ._redact import redact_error, secrets_of


class SumeError(Exception):
    """Base class for every error sume_urllib3 raises itself."""

    #: Its text is built from redacted parts: redact_error leaves it as it is.
    text_is_redacted = True


class ConfigurationError(SumeError, ValueError):
    """Bad configuration, raised before anything is sent."""


class SumeRetryError(SumeError, requests.exceptions.RetryError):
    """The request ended without a usable response: carries the record and the last response.

    Raised on a give-up (attempt cap, deadline, budget), when the fleet refuses a turn
    before the deadline (nothing sent: ``record.attempts == 0``), and, as one of its
    subclasses that are also requests' own classes (``SumeReadTimeout`` is a
    ``requests.exceptions.ReadTimeout``), when a transport error ends the request.

    ``retry_in`` is how many seconds until trying again could succeed (what is left of
    the server's Retry-After, else the next backoff; after a fleet refusal a turn spread
    over the pace) and None when retrying cannot help; ``idempotency_key`` the key to send
    again, so a task queue can retry later as the same logical request.

    It pickles with its record (not the live response), and its ``args`` end with
    ``(message, summary)``, a JSON-safe summary of the record, from which it is built
    again: a JSON result backend (Celery's, which calls ``cls(*args)``) returns the same
    class with the same ``retry_in``, ``idempotency_key`` and record. A transport give-up
    puts what requests put first in front of them, as requests does: ``args[0]`` is
    urllib3's error (``exc.args[0].args[0]`` reads ``"... Read timed out ..."``; a JSON
    backend keeps its repr).
    """

    # The last response, body intact. None when no response ended the request: nothing was
    # sent (the fleet refused the turn), a transport error, or rebuilt from its summary.
    response: Optional[requests.Response]

    def __init__(
        self, record: Union[SumeRecord, str, object], response: Any = None, request: Any = None
    ) -> None:
        message = None
        first: Tuple[object, ...] = ()
        if not isinstance(record, SumeRecord) and isinstance(response, str):
            # A transport give-up's args: urllib3's error (or its repr), the message, the summary.
            first, record, response, request = (record,), response, request, None
        if isinstance(record, str):
            # A give-up's args (a JSON result backend calls ``cls(*args)``): the message, the summary.
            message = record
            record = record_from_summary(response if isinstance(response, Mapping) else {}, message)
            response = None
        if not isinstance(record, SumeRecord):
            raise TypeError(f"SumeRetryError needs a SumeRecord, got {type(record).__name__}")
        self.record = record
        self.message = message or describe(record)
        super().__init__(
            self.message,
            response=response,
            request=request if request is not None else getattr(response, "request", None),
        )
        self.args = (*first, self.message, summary(record))

    def __str__(self) -> str:
        return self.message

    @property
    def sume(self) -> SumeRecord:
        """The record, under the same name as ``response.sume``."""
        return self.record

    @property
    def retry_in(self) -> Optional[float]:
        """Seconds until trying again could succeed; None when retrying cannot help."""
        return self.record.retry_in

    @property
    def idempotency_key(self) -> Optional[str]:
        """The key every attempt carried: send it again to resume the same logical request."""
        return self.record.idempotency_key

    def __reduce__(self) -> Any:
        # RetryError pickles its args only; keep the record and drop the live response.
        args = (*map(_picklable, self.args[:-2]), self.message, self.args[-1])
        return (type(self), (self.record,), {"message": self.message, "args": args})


class SumeConnectionError(SumeRetryError, requests.exceptions.ConnectionError):
    """No response: the connection failed or was dropped, and the request ended there."""


class SumeConnectTimeout(SumeConnectionError, requests.exceptions.ConnectTimeout):
    """No response: connecting timed out, and the request ended there."""


class SumeProxyError(SumeConnectionError, requests.exceptions.ProxyError):
    """No response: the proxy failed, and the request ended there."""


class SumeSSLError(SumeConnectionError, requests.exceptions.SSLError):
    """No response: TLS failed, and the request ended there."""


class SumeTimeout(SumeRetryError, requests.exceptions.Timeout):
    """No response: the request timed out, and ended there."""


class SumeReadTimeout(SumeRetryError, requests.exceptions.ReadTimeout):
    """No response: the server did not answer in time, and the request ended there."""


class SumeChunkedEncodingError(SumeRetryError, requests.exceptions.ChunkedEncodingError):
    """No usable response: the body broke mid-read, and the request ended there."""


class SumeContentDecodingError(SumeRetryError, requests.exceptions.ContentDecodingError):
    """No usable response: the body could not be decoded, and the request ended there."""


#: requests' transport error classes and the give-up raised in their place (exact types:
#: a subclass someone else defined keeps its own class, so its except clauses still work).
_TRANSPORT: Dict[type, Type[SumeRetryError]] = {
    give_up.__bases__[-1]: give_up  # each names requests' class last among its bases
    for give_up in (SumeConnectionError, SumeConnectTimeout, SumeProxyError, SumeSSLError, SumeTimeout,
                    SumeReadTimeout, SumeChunkedEncodingError, SumeContentDecodingError)
}


def raisable(error: Exception, record: SumeRecord) -> Exception:
    """What to raise (``from error``, see :func:`throw`) for a transport error that ended a request:
    for requests' own class the give-up that is also one (saying what requests said after the
    record's message), any other error as it is; either tagged ``exc.sume``. ``error``'s chain is
    redacted first: the give-up repeats urllib3's message, and the traceback shows the original's."""
    setattr(error, "sume", record)
    redact(error)
    cls = _TRANSPORT.get(type(error))
    if cls is None:
        return error
    give_up = cls(record, getattr(error, "response", None), getattr(error, "request", None))
    # requests' own message, its first line kept short (urllib3's can repeat itself at length).
    detail = (str(error).strip().splitlines() or [""])[0]
    if detail:
        give_up.message = f"{give_up.message}: {detail if len(detail) <= 300 else detail[:299] + '…'}"
    # args[0] stays urllib3's error, as requests put it (see SumeRetryError).
    give_up.args = (*error.args[:1], give_up.message, give_up.args[-1])
    return give_up


def throw(error: Exception, record: SumeRecord) -> NoReturn:
    """Raise :func:`raisable` for ``error`` (from ``error``, so the traceback keeps both)."""
    give_up = raisable(error, record)
    if give_up is error:
        raise error
    raise give_up from error


def redact(error: BaseException) -> BaseException:
    """``error`` with the secrets of the request it names (requests' ``error.request``: its
    query, userinfo, key and Authorization values) and every URL's query taken out of its
    text, its ``args`` and its chain, in place (see :mod:`sume_urllib3._redact`)."""
    request = getattr(error, "request", None)
    secrets = secrets_of(getattr(request, "url", None), getattr(request, "headers", None))
    return redact_error(error, secrets)


def _picklable(value: object) -> object:
    """``value``, or its repr if it does not pickle (as Celery's JSON backend replaces what it
    cannot encode): a give-up always pickles with its record. One that pickles but comes back
    saying something else (older urllib3's pool errors come back as "None: None") is replaced
    by its repr too, so the message survives."""
    import pickle  # only when a give-up is pickled

    with contextlib.suppress(Exception):  # the object's own __reduce__ may raise anything
        if str(pickle.loads(pickle.dumps(value))) == str(value):
            return value
    return repr(value)
