"""requests' reading of the environment, done again only when the environment changes.

With ``trust_env`` on (its default), every ``requests.Session.request`` scans the whole of
``os.environ`` for ``*_proxy`` variables (twice: the bypass check, then the proxies), decoding
each name and value, before it sends a byte: 92 µs per request with the 35 variables of the
project's 2-core machine, a quarter of an in-memory request (the command is in
benchmarks/RESULTS-retry.md), and linear in their count (a Kubernetes pod holds one set per
service in its namespace: psf/requests#5600, python/cpython#91539).

``EnvironmentSettings`` keeps what requests' ``merge_environment_settings`` returned for the
same inputs (the URL's origin, the call's and the session's proxies, stream, verify and cert)
while ``os.environ`` holds exactly what it held then (one comparison of two dicts in C), and
asks requests again the moment a variable is set, changed or removed. What requests decides
is unchanged, version by version: a miss asks requests itself. Only where urllib reads
proxies from nothing but the environment (not on macOS or Windows, whose system settings can
change without it) is anything kept.
"""

from __future__ import annotations

import os
import threading
import urllib.request
from typing import Any, Callable, Dict, Hashable, Optional, Tuple
from urllib.parse import urlsplit

#: True where urllib's proxies come from the environment alone (Linux, the BSDs).
ENVIRONMENT_ONLY = urllib.request.getproxies is urllib.request.getproxies_environment and (
    urllib.request.proxy_bypass is getattr(urllib.request, "proxy_bypass_environment", None)
)

#: Origins × settings kept per session: a session calls a handful; more starts afresh.
MAX_KEPT = 64

Merge = Callable[..., Any]  # requests.Session.merge_environment_settings, bound


#: One kept answer: requests' settings, and what it added to the caller's proxies dict.
_Kept = Tuple[Dict[str, Any], Dict[str, Any]]


class EnvironmentSettings:
    """One session's memo of ``merge_environment_settings``, valid while ``os.environ`` is."""

    __slots__ = ("_lock", "_state")

    def __init__(self) -> None:
        # What os.environ held (a copy) and the answers kept under it, swapped as one
        # attribute: a reader never pairs one environment with another's answers.
        self._state: Tuple[Optional[Dict[bytes, bytes]], Dict[Hashable, _Kept]] = (None, {})
        self._lock = threading.Lock()

    def merge(
        self, merge: Merge, session: Any, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any
    ) -> Any:
        """What ``merge(url, proxies, stream, verify, cert)`` returns; asked only on a change.

        ``merge`` is requests' own method; ``session`` gives the session-wide settings it
        merges in, part of what a kept answer depends on.
        """
        environ = getattr(os.environ, "_data", None)  # read afresh: os.environ may be replaced
        if not ENVIRONMENT_ONLY or not session.trust_env or not isinstance(environ, dict):
            return merge(url, proxies, stream, verify, cert)
        try:
            key = (
                # no_proxy matches a host and port; the proxies found are per scheme, all kept
                urlsplit(url).netloc,
                frozenset(proxies.items()),
                stream,
                verify,
                cert,
                frozenset(session.proxies.items()),
                session.stream,
                session.verify,
                session.cert,
            )
            hash(key)
        except (AttributeError, TypeError, ValueError):  # no URL or mapping, a setting unhashable
            return merge(url, proxies, stream, verify, cert)
        held, kept = self._state
        answer = kept.get(key) if environ == held else None
        if answer is None:
            before = dict(proxies)
            snapshot = dict(environ)
            settings = merge(url, proxies, stream, verify, cert)
            if environ != snapshot:  # changed meanwhile: nothing kept
                return settings
            answer = (settings, {k: v for k, v in proxies.items() if k not in before})
            with self._lock:
                held, kept = self._state
                if snapshot != held or len(kept) >= MAX_KEPT:
                    kept = {}
                    self._state = (snapshot, kept)
                kept[key] = answer
        else:
            for name, value in answer[1].items():  # requests fills the caller's own dict in; so do we
                proxies.setdefault(name, value)
        # A copy the caller may change (requests passes the proxies dict on).
        settings = dict(answer[0])
        if isinstance(settings.get("proxies"), dict):
            settings["proxies"] = dict(settings["proxies"])
        return settings
