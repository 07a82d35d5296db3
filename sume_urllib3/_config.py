"""Checks of the values constructors are given: refuse at construction what would fail later.

A value a constructor accepts must work on every request (a ``max_elapsed`` past what a socket
timeout accepts would make each one raise ``OverflowError``). Each check raises
:class:`ConfigurationError` naming the argument and what it accepts, and never echoes a value
that may be a secret.
"""

from __future__ import annotations

import math
import os
import random
import threading
from typing import Any, Callable, Dict, Optional, TypeVar
from urllib.parse import urlsplit

from urllib3.exceptions import LocationParseError
from urllib3.util import parse_url

from ._errors import ConfigurationError
from ._util import is_visible_ascii

#: The longest duration any setting may be, in seconds: what ``time.sleep``, socket
#: timeouts and lock waits all accept (``threading.TIMEOUT_MAX``, about 49 days on Windows),
#: and never more than 10**9 s (about 31 years; a socket timeout of 10**10 s overflows).
MAX_SECONDS: float = min(float(threading.TIMEOUT_MAX), 1e9)

T = TypeVar("T")


def check_seconds(
    value: Any,
    name: str,
    *,
    positive: bool = False,
    low: float = 0.0,
    high: float = MAX_SECONDS,
    unit: str = "seconds",
) -> float:
    """``value`` as a float: a finite number from ``low`` to ``high`` (above ``low`` when
    ``positive``); by default seconds from 0 to ``MAX_SECONDS``. ``unit`` names what it counts."""
    what = f"a number of {unit}" if unit else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(f"{name} must be {what}, got {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an int past float range
        number = math.inf
    if math.isfinite(number) and low <= number <= high and not (positive and number == low):
        return number
    if (low, high) == (0.0, MAX_SECONDS):
        raise ConfigurationError(
            f"{name} must be finite and {'> 0' if positive else '>= 0'}, at most {MAX_SECONDS:.0f} seconds "
            f"(what time.sleep and socket timeouts accept), got {value!r}"
        )
    span = f"above {low:g} and at most" if positive else f"between {low:g} and"
    raise ConfigurationError(f"{name} must be {span} {high:g}{' ' + unit if unit else ''}, got {value!r}")


def as_seconds(value: Any, default: float = 0.0) -> float:
    """Seconds someone else's object holds (the parts of a urllib3 ``Timeout``): a number below 0
    is 0, anything that is not a number (None, NaN, a bool, urllib3's markers) is ``default``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return default
    return max(float(value), 0.0)


def check_int(value: Any, name: str, low: int, high: int) -> int:
    """``value``, an int (not a bool) between ``low`` and ``high``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"{name} must be an int, got {value!r}")
    if not low <= value <= high:
        raise ConfigurationError(f"{name} must be between {low} and {high}, got {value!r}")
    return value


def check_flag(value: Any, name: str) -> bool:
    """``value``, True or False: a string such as "false" is a mistake, not a truthy value."""
    if not isinstance(value, bool):
        raise ConfigurationError(f"{name} must be True or False, got {type(value).__name__}")
    return value


def check_rng(value: Any, name: str = "rng") -> Any:
    """A source of jitter, as every part of the library takes one (``LocalFleet``, ``Jobs``):
    None (the ``random`` module), a ``random.Random`` (``SystemRandom`` too), or a callable
    returning a float in [0, 1)."""
    if value is None or isinstance(value, random.Random) or callable(value):
        return value
    raise ConfigurationError(
        f"{name} must be None, a random.Random or a callable returning a float in [0, 1), "
        f"got {type(value).__name__}"
    )


#: The most connections (or pools) an adapter may keep: requests' default is 10; each pool
#: fills a queue of ``pool_maxsize`` slots up front.
MAX_POOL = 10_000


def check_pool_arguments(kwargs: Dict[str, Any]) -> None:
    """requests' ``HTTPAdapter`` pool arguments, which urllib3 would only use at the first request."""
    for name in ("pool_connections", "pool_maxsize"):
        if name in kwargs:
            check_int(kwargs[name], name, 1, MAX_POOL)
    if "pool_block" in kwargs:
        check_flag(kwargs["pool_block"], "pool_block")


def setting(value: Any, variable: str, check: Callable[[Any], T], default: Any = None) -> T:
    """``check(value)``; when ``value`` is None or "" the environment ``variable`` (a bad one is
    refused under its own name), else ``check(default)``."""
    if value is not None and value != "":
        return check(value)
    from_env = os.environ.get(variable)
    if not from_env:
        return check(default)
    try:
        return check(from_env)
    except ConfigurationError as exc:
        raise ConfigurationError(f"the {variable} environment variable: {exc}") from None


def check_clock(clock: Any, name: str) -> None:
    """A clock must be callable and read as a finite number: checked once, here, not per request."""
    if not callable(clock):
        raise ConfigurationError(f"{name} must be a callable returning seconds, got {type(clock).__name__}")
    try:
        now = clock()
    except Exception as exc:
        raise ConfigurationError(
            f"{name} must be a callable returning seconds; reading it raised {type(exc).__name__}"
        ) from None
    if isinstance(now, bool) or not isinstance(now, (int, float)) or not math.isfinite(now):
        raise ConfigurationError(f"{name} must return a finite number of seconds, got {type(now).__name__}")


#: The auth modes a session accepts, and the header each one sends.
AUTH_HEADERS = {"x-api-key": "x-api-key", "bearer": "Authorization"}


def check_auth_header(mode: Any) -> str:
    """The auth mode, lower-cased: "x-api-key" or "bearer"."""
    if not isinstance(mode, str) or mode.lower() not in AUTH_HEADERS:
        # Named, not echoed: "Bearer sk_live_..." pasted here is the key.
        got = f"a str of {len(mode)} characters" if isinstance(mode, str) else type(mode).__name__
        raise ConfigurationError(f"auth_header must be 'x-api-key' or 'bearer', got {got}")
    return mode.lower()


def check_api_key(key: Any) -> Optional[str]:
    """The API key, or None; refuses anything that cannot be a header value."""
    if key is None:
        return None
    if not isinstance(key, str):
        raise ConfigurationError(f"api_key must be a str, got {type(key).__name__}")
    if not key or not is_visible_ascii(key):
        # The message must not echo the key: it is a secret even when malformed.
        raise ConfigurationError("api_key must be non-empty visible ASCII (no spaces or newlines)")
    return key


#: What RFC 3986 allows in a host name besides letters and digits (non-ASCII is IDNA's to check).
_HOST_CHARS = "-._~%!$&'()*+,;="


def check_base_url(url: Any) -> str:
    """An http(s) base URL with a host and nothing secret in it, without the trailing slash,
    that parses as requests will parse it when sending (a bad port or host would fail every
    request with InvalidURL). The URL may carry credentials, so a message names the part,
    never the URL."""
    if not isinstance(url, str):
        raise ConfigurationError(f"base_url must be a str, got {type(url).__name__}")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # "http://host:abc", "http://host:99999", "http://[::1"
        raise ConfigurationError(
            "base_url must be a URL with a valid host and, if any, a port from 1 to 65535"
        ) from None
    if port == 0:
        raise ConfigurationError("base_url must have a port from 1 to 65535, got port 0")
    host = parts.hostname or ""
    if ":" not in host and any(ch.isascii() and not (ch.isalnum() or ch in _HOST_CHARS) for ch in host):
        # urllib3 1.26 lets "exa mple.com" through to a DNS lookup that fails on every request.
        raise ConfigurationError("base_url must be a URL with a valid host name (letters, digits, '-', '.')")
    try:
        parse_url(url)
    except LocationParseError:  # what every request would raise (requests' InvalidURL)
        raise ConfigurationError(
            "base_url must be a URL with a valid host (urllib3 cannot parse it)"
        ) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(
            f"base_url must be an http(s) URL with a host, got scheme {parts.scheme!r}"
            f" and host {parts.hostname!r}"
        )
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ConfigurationError("base_url must not carry credentials, a query or a fragment")
    return url.rstrip("/")
