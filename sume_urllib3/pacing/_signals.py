"""What a response says about the pace (RateLimit headers in every published form, read without
ever raising), and which fleet entry a request is paced under (its key id)."""

from __future__ import annotations

import hashlib
import math
import re
import time
from operator import itemgetter
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from .._envelope import server_time
from .._util import header_value, origin
from ._core import SECOND, Lesson

# A delta this large (about 31 years) is no delta: it is a Unix time, as GitHub sends.
_EPOCH = 1e9
_EPOCH_MS = 1e12
_MAX_VALUE_LENGTH = 1024
_MAX_NUMBER = 1e14
_NUMBER = re.compile(r"^\s*(\d{1,15}(?:\.\d{1,9})?)\s*$", re.ASCII)
_PREFIXES = ("ratelimit", "x-ratelimit", "x-rate-limit")
#: Found in a response's header names joined when any name parse_ratelimit reads is there: a
#: response without one is not parsed (most responses carry none).
QUOTA_NAME = re.compile("|".join(map(re.escape, _PREFIXES)), re.IGNORECASE)
_RAW_ORIGIN = re.compile(r".*?://[^/?#]*", re.DOTALL)


def parse_ratelimit(headers: Any, wall: Callable[[], float] = time.time) -> Optional[Lesson]:
    """The quota a response's headers describe, in the core's units (a :class:`Lesson` without a
    Retry-After: ``limit`` requests per ``window``, ``remaining`` of them now, whole again after
    ``reset``; -1 unknown), or None when they say nothing (or garbage).

    Understands ``RateLimit-Limit/-Remaining/-Reset`` (with ``10, 10;w=1`` limits),
    ``X-RateLimit-*`` and ``X-Rate-Limit-*``, the IETF draft's
    ``RateLimit: limit=10, remaining=9, reset=5`` and ``RateLimit-Policy: 10;w=60``, and
    the later ``RateLimit: "default";r=9;t=5`` / ``RateLimit-Policy: "default";q=10;w=60``.

    A reset that is a Unix time (seconds or milliseconds, as GitHub sends) is the server's
    clock: it becomes a delta from the response's ``Date`` when it has a readable one, else
    from ``wall`` (see :func:`server_time`), so a client whose clock is off waits what was asked.
    """
    try:
        found: Dict[str, str] = {}
        for name, value in headers.items() if hasattr(headers, "items") else ():
            lname = name.lower() if isinstance(name, str) else ""
            if lname.startswith(_PREFIXES) and isinstance(value, str) and len(value) <= _MAX_VALUE_LENGTH:
                found[lname] = found[lname] + ", " + value if lname in found else value
        # Most responses carry no quota fields: nothing to read.
        return _read(found, lambda: server_time(header_value(headers, "date"), wall)) if found else None
    except Exception:  # a malformed header must never break a request
        return None


def _read(found: Dict[str, str], now: Callable[[], float]) -> Optional[Lesson]:
    """The reading of the RateLimit fields ``found``; ``now`` is the server's clock (epoch resets)."""
    limit = remaining = reset = window = None
    combined = found.get("ratelimit")
    if combined is not None:
        limit, remaining, reset = _combined(combined)
        reset = _delta(reset, now)
    policy = found.get("ratelimit-policy")
    if policy is not None:
        quota, window = _policy(policy)
        limit = limit if limit is not None else quota
    for prefix in ("ratelimit-", "x-ratelimit-", "x-rate-limit-"):
        if limit is None or window is None:
            quota, w = _limit(found.get(prefix + "limit"))
            limit = limit if limit is not None else quota
            window = window if window is not None else w
        if remaining is None:
            remaining = _number(found.get(prefix + "remaining"))
        if reset is None:
            reset = _delta(_number(found.get(prefix + "reset")), now)
    if limit is None and remaining is None and reset is None and window is None:
        return None
    if limit is not None and remaining is not None:
        remaining = min(remaining, limit)
    count = [-1 if n is None else int(min(n, 1e12)) for n in (limit, remaining)]
    micros = [-1 if s is None else round(min(s, 1e7) * SECOND) for s in (reset, window)]
    return Lesson(0, *count, *micros)


def _items(value: str) -> List[Tuple[str, Dict[str, str]]]:
    """A list field's items: each one's first part, and its ``;name=value`` parameters."""
    items = []
    for item in value.split(","):
        first, *params = item.split(";")
        items.append((first.strip(), dict(_param(p) for p in params)))
    return items


def _combined(value: str) -> Tuple[Optional[float], Optional[float], Optional[float]]:
    """``limit=10, remaining=9, reset=5`` (draft 07) or ``"name";r=9;t=5`` items (later drafts)."""
    items = [(first, params) for first, params in _items(value) if first or params]
    if all("=" in first and not params for first, params in items):
        named = dict(_param(first) for first, _ in items)
        return _number(named.get("limit")), _number(named.get("remaining")), _number(named.get("reset"))
    # One item per policy: the most constrained one (fewest remaining) decides.
    policies = [(_number(params.get("r")), params) for _, params in items]
    left, params = min(((r, p) for r, p in policies if r is not None), key=itemgetter(0), default=(None, {}))
    return None, left, _number(params.get("t"))


def _policy(value: str) -> Tuple[Optional[float], Optional[float]]:
    """``10;w=60`` or ``"name";q=10;w=60``, possibly several: the slowest quota decides."""
    quotas = [(_number(params.get("q", first)), _number(params.get("w"))) for first, params in _items(value)]
    return min(((q, w) for q, w in quotas if q and w), key=lambda qw: qw[0] / qw[1], default=(None, None))


def _limit(value: Optional[str]) -> Tuple[Optional[float], Optional[float]]:
    """``10`` or ``10, 10;w=1, 1000;w=3600``: the first quota and its window when given."""
    if value is None:
        return None, None
    items = _items(value)
    limit = _number(items[0][0])
    # The policy items after the first name their window; the one for this limit counts.
    windows = [_number(params.get("w")) for first, params in items if _number(first) == limit]
    return limit, next((window for window in windows if window is not None), None)


def _delta(seconds: Optional[float], now: Callable[[], float]) -> Optional[float]:
    """A reset in seconds from now: a Unix time (seconds or milliseconds) less the server's ``now``."""
    if seconds is None:
        return None
    if seconds >= _EPOCH:
        stamp = seconds / 1000.0 if seconds >= _EPOCH_MS else seconds
        clock = now()  # asked only for a Unix time: most resets are deltas
        if not math.isfinite(clock):
            return None
        return max(stamp - clock, 0.0)
    return seconds


def _param(text: str) -> Tuple[str, str]:
    name, _, value = text.partition("=")
    return name.strip().lower(), value.strip().strip('"')


def _number(value: Optional[str]) -> Optional[float]:
    if value is None:
        return None
    match = _NUMBER.match(value)
    if match is None:
        return None
    number = float(match.group(1))
    return number if number <= _MAX_NUMBER else None


# Which fleet entry a request is paced under: its origin and the key it actually sends, hashed
# (``fleet_key``: Sume's quotas are per API key on one server). Hashing is cheap but not free, and
# the success path runs it per request: the ids of the pairs seen last are kept. Bounded, because
# a multi-tenant process may send many keys.
_CACHE_SIZE = 1024


def origin_name(url: str) -> str:
    """``scheme://host:port`` of a URL, lower-cased, the default port written out."""
    scheme, host, port = origin(url)
    return f"{scheme}://{host}:{port}" if port is not None else f"{scheme}://{host}"


def sent_key(headers: Any) -> Optional[str]:
    """The API key a request carries: ``x-api-key``, else ``Authorization`` without ``Bearer``.

    One key sent either way is one quota, so both name the same entry.
    """
    value = header_value(headers, "x-api-key")
    if value is None:
        value = header_value(headers, "authorization")
        if value is None:
            return None
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    value = str(value).strip()
    if value[:7].lower() == "bearer ":
        value = value[7:].strip()
    return value or None


def raw_origin(url: str) -> str:
    """The ``scheme://authority`` text of a URL as written (a cache key; not normalized)."""
    found = _RAW_ORIGIN.match(url)
    return found.group() if found else url


class KeyIds:
    """Fleet keys of (origin, key sent) pairs, each hashed once while it stays in use.

    Thread-safe without a lock: a lost race hashes one pair twice, to the same value.
    """

    __slots__ = ("_ids",)

    def __init__(self) -> None:
        self._ids: Dict[Tuple[str, Optional[str]], str] = {}

    def __call__(self, where: str, key: Optional[str]) -> str:
        """The fleet key of ``key`` (None: keyless) sent to the origin of ``where``.

        ``where`` is a URL or an origin (``scheme://host[:port]``); spellings of one origin
        (case, a default port written out or not) name one entry.
        """
        ids = self._ids
        found = ids.get((where, key))
        if found is None:
            if len(ids) >= _CACHE_SIZE:
                ids.clear()  # rare (a thousand live pairs): start over rather than track use
            found = ids[(where, key)] = fleet_key(key, origin_name(where))
        return found

    def for_request(self, url: str, headers: Any) -> str:
        """The fleet key of a prepared request: its URL's origin and the key it carries."""
        return self(raw_origin(url), sent_key(headers))

    def __repr__(self) -> str:
        return f"<KeyIds cached={len(self._ids)}>"  # never the keys themselves


#: The process-wide cache every session and adapter reads.
key_ids = KeyIds()


#: The KeyId of requests sent without an API key.
ANONYMOUS = "anonymous"


def fleet_key(api_key: Union[str, bytes, None], origin: str = "") -> str:
    """The fleet's name for the key a request sends to an origin: a hash, never the key.

    ``"k"`` + 16 hex digits of the SHA-256 of (origin, key); a keyless request is paced per
    origin (``"o"`` + 16 hex digits), and only one with neither is :data:`ANONYMOUS`. Two
    base URLs (staging and production, two test servers) never share a pace, and neither
    do two tenants' keys sent by one session.
    """
    scope = origin.lower().encode("utf-8", "surrogatepass") + b"\0"
    if not api_key:
        return "o" + hashlib.sha256(scope).hexdigest()[:16] if origin else ANONYMOUS
    data = api_key if isinstance(api_key, bytes) else api_key.encode("utf-8", "surrogatepass")
    return "k" + hashlib.sha256(scope + data).hexdigest()[:16]
