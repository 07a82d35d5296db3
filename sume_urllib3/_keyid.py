"""Which fleet entry a request is paced under: its origin and the key it actually sends.

Sume's quotas are per API key on one server, so a fleet keeps one entry per (origin, key):
two environments (staging and production, two test servers) never share a cooldown, and
neither do two tenants' keys sent by one session. A keyless request is paced per origin.
The pair is hashed (``fleet_key``): the key itself is never a fleet's key.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from ._fleet import fleet_key
from ._helpers import header_value, origin

# Hashing is cheap but not free, and the success path runs it per request: the ids of the
# pairs seen last are kept. Bounded, because a multi-tenant process may send many keys.
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
    start = url.find("://")
    if start < 0:
        return url
    end = len(url)
    for mark in "/?#":  # str.find beats a character loop in Python
        found = url.find(mark, start + 3, end)
        if found >= 0:
            end = found
    return url[:end]


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
