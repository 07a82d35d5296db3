"""Secrets out of every text the library makes or passes on: one set of rules, used everywhere.

A presigned URL's signature, ``user:password@`` in a URL, the API key, an ``Authorization``
value, another request's Idempotency-Key: none of them may reach an error's ``str``,
``repr`` or ``args``, a log line, a metric label, a span attribute, a record, a pickle or a
result backend's JSON. The same rules apply to a URL the library keeps (:func:`redact_url`:
records, retry events, spans), to free text someone else wrote (:func:`redact_text`: urllib3's
and requests' messages), to an exception the library raises or chains (:func:`redact_error`)
and to urllib3's own log lines (:class:`RedactingFilter`, installed by
:func:`redact_urllib3_logs`, not by the import). ``_envelope.key_prefix`` is how much of an
Idempotency-Key any text may show.

Redacting in place, rather than raising copies, is deliberate: the urllib3 error requests
put in ``args[0]`` is also the ``__context__`` of requests' error, and a traceback printer,
Sentry or a JSON result backend each reach it by a different road.
"""

from __future__ import annotations

import contextlib
import logging
import re
from typing import Any, Iterable, List, Optional, Sequence, Set, Tuple, overload
from urllib.parse import unquote, unquote_plus, urlsplit, urlunsplit

#: What stands where a secret was.
REDACTED = "<redacted>"

#: Headers whose values are secrets (lower-case).
SECRET_HEADERS = ("authorization", "proxy-authorization", "x-api-key", "idempotency-key", "cookie")

#: A known secret shorter than this is not searched for in text: it would match ordinary words.
MIN_SECRET = 6

#: Characters that close a word in a message (quotes, brackets, punctuation): kept after a
#: redacted query so the message keeps its shape ("... url: /x?<redacted> (Caused by ...").
_CLOSERS = "'\")]}>,.;:!"

#: Words that may carry a URL: with a query (``?``) or a scheme (``://``). Tried only where a
#: word starts: from every position, a long word without either would cost its length squared.
_URL_WORD = re.compile(r"(?<!\S)\S*(?:\?|://)\S*")

#: URL attributes of urllib3's and requests' errors (``MaxRetryError.url``, ``LocationParseError.location``).
_URL_ATTRIBUTES = ("url", "location", "redirect_location")
#: Exception attributes that hold another exception (``MaxRetryError.reason``, ``ProxyError.original_error``).
_LINKED_ATTRIBUTES = ("reason", "original_error")
#: Text attributes of OSError, shown by its ``str``.
_TEXT_ATTRIBUTES = ("strerror", "filename", "filename2")


@overload
def redact_url(url: str) -> str: ...
@overload
def redact_url(url: None) -> None: ...
def redact_url(url: Optional[str]) -> Optional[str]:
    """``url`` without userinfo or fragment, its query string (if any) replaced by ``<redacted>``."""
    if url is None or ("?" not in url and "@" not in url and "#" not in url):
        return url  # the usual case: nothing to take out
    try:
        parts = urlsplit(url)
    except ValueError:  # an unparsable URL (a bad port, a bad IPv6 literal): cut it by hand
        return _redact_word(url)
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, REDACTED if parts.query else "", ""))


def redact_text(text: str, secrets: Sequence[str] = ()) -> str:
    """``text`` with every known secret and every URL-shaped word's secrets replaced."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return _URL_WORD.sub(lambda match: _redact_word(match.group(0)), text)


def redact_error(error: BaseException, secrets: Sequence[str] = ()) -> BaseException:
    """``error`` itself, with its ``args``, URL attributes and ``__cause__``/``__context__`` chain
    redacted in place, so ``isinstance(e.args[0], MaxRetryError)`` and ``e.args[0].reason`` keep working.

    Exceptions of this library (their class sets ``text_is_redacted``) are left as built: their
    text comes from records, whose URL is already redacted. Their chain is walked all the same;
    it may end in an exception the caller was handling when it made the request, which a
    traceback prints with the rest.
    """
    seen: Set[int] = set()
    pending: List[object] = [error]  # exceptions to walk, and values (None) that link nowhere
    while pending:
        exc = pending.pop()
        if not isinstance(exc, BaseException) or id(exc) in seen:
            continue
        seen.add(id(exc))
        if not getattr(exc, "text_is_redacted", False):
            _redact_one(exc, secrets, pending)
        pending += (exc.__cause__, exc.__context__)
    return error


def secrets_of(url: Any = None, *carriers: Any) -> Tuple[str, ...]:
    """The secrets a request carries, as they may appear in a message: its URL's query,
    fragment and userinfo (raw and unquoted), and from ``carriers`` (header mappings, or
    secrets themselves such as an API key) every secret header's value (a Bearer token
    alone too). Short values are left out (see ``MIN_SECRET``)."""
    found: List[str] = []
    if isinstance(url, bytes):
        url = url.decode("latin-1")
    if isinstance(url, str) and url:
        with contextlib.suppress(ValueError):  # an unparsable URL: no secrets known from it
            parts = urlsplit(url)
            userinfo = parts.netloc.rpartition("@")[0]
            for value in (parts.query, parts.fragment, userinfo, *userinfo.split(":", 1)):
                found.extend((value, unquote(value), unquote_plus(value)))
    for carrier in carriers:
        if isinstance(carrier, str):
            found.append(carrier)
            continue
        for name, value in _items(carrier):
            if name.lower() in SECRET_HEADERS:
                text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
                # requests names a value it refuses (a trailing newline, a control character) by
                # its repr: the value is looked for as it is, stripped, and escaped as repr shows it.
                found.extend((text, text.strip(), repr(text)[1:-1]))
                scheme, _, token = text.partition(" ")
                if token and scheme.isalpha():
                    found.extend((token.strip(), repr(token.strip())[1:-1]))
    unique = {value for value in found if len(value) >= MIN_SECRET}
    # The longest first: a secret that contains another is replaced whole.
    return tuple(sorted(unique, key=len, reverse=True))


def _items(headers: Any) -> Iterable[Tuple[str, Any]]:
    try:
        return [(name, value) for name, value in headers.items() if isinstance(name, str)]
    except Exception:  # not a mapping, or one of the caller's own kind that misbehaves: no secrets known
        return ()


def _redact_word(word: str) -> str:
    """One whitespace-free word of a message: userinfo and fragment of a URL out, query redacted."""
    body = word.rstrip(_CLOSERS)
    tail = word[len(body) :]
    head, scheme_sep, rest = body.partition("://")
    if scheme_sep:
        cut = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
        rest = rest[:cut].rpartition("@")[2] + rest[cut:]
        body = head + scheme_sep + rest.partition("#")[0]
    query = body.find("?")
    if 0 <= query < len(body) - 1 and not (body + tail).startswith(REDACTED, query + 1):
        body = body[: query + 1] + REDACTED
    return body + tail


def _redact_value(value: Any, secrets: Sequence[str], pending: List[object]) -> Any:
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, BaseException):
        pending.append(value)  # redacted in place: the same object stays in args
        return value
    if isinstance(value, (tuple, list)):
        items = [_redact_value(item, secrets, pending) for item in value]
        return tuple(items) if isinstance(value, tuple) else items
    return value


def _redact_one(exc: BaseException, secrets: Sequence[str], pending: List[object]) -> None:
    # A foreign exception class may refuse new values: it keeps them, its chain is still walked.
    with contextlib.suppress(Exception):
        exc.args = tuple(_redact_value(arg, secrets, pending) for arg in exc.args)
    for name in _URL_ATTRIBUTES + _TEXT_ATTRIBUTES:
        value = getattr(exc, name, None)
        if isinstance(value, str):
            with contextlib.suppress(Exception):
                setattr(exc, name, redact_text(value, secrets))
    pending.extend(getattr(exc, name, None) for name in _LINKED_ATTRIBUTES)


#: urllib3's loggers (1.26 and 2.x) whose lines name a request's URL with its query ("Retrying
#: (...) after connection broken by ...: /upload?X-Amz-Signature=..."); a filter only sees the
#: records logged on its own logger, so each gets one.
URLLIB3_LOGGERS = (
    "urllib3.connectionpool",
    "urllib3.poolmanager",
    "urllib3.util.retry",
    "urllib3.connection",
    "urllib3.response",
)


class RedactingFilter(logging.Filter):
    """Rewrites a log record's message with :func:`redact_text` when it names a URL."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact the record in place; never drops it."""
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is logging's to report, not ours
            return True
        redacted = redact_text(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


def redact_urllib3_logs() -> None:
    """Keep secrets out of urllib3's log lines: install :class:`RedactingFilter` on its loggers
    (a logger that has one gets no second). Every ``SumeRetry`` calls it when made."""
    for name in URLLIB3_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(existing, RedactingFilter) for existing in logger.filters):
            logger.addFilter(RedactingFilter())
