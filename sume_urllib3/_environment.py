"""requests' reading of the environment, done again only when the environment changes.

With ``trust_env`` on (its default), every ``requests.Session.request`` scans the whole of
``os.environ`` for ``*_proxy`` variables, twice, before it sends a byte: a cost linear in the
variables' count, which a Kubernetes pod multiplies (psf/requests#5600, python/cpython#91539).
``EnvironmentSession`` keeps requests' answer for the same inputs while ``os.environ`` holds
exactly what it held then, and asks requests again once a variable is set, changed or removed
(a miss asks requests itself). Only where urllib reads proxies from the environment alone (not
on macOS or Windows) is anything kept.
"""

from __future__ import annotations

import os
import threading
import urllib.request
from typing import Any, Dict, Hashable, Optional, Tuple
from urllib.parse import urlsplit

import requests

#: True where urllib's proxies come from the environment alone (Linux, the BSDs).
ENVIRONMENT_ONLY = urllib.request.getproxies is urllib.request.getproxies_environment and (
    urllib.request.proxy_bypass is getattr(urllib.request, "proxy_bypass_environment", None)
)

#: Origins × settings kept per session: a session calls a handful; more starts afresh.
MAX_KEPT = 64

#: One kept answer: requests' settings, and what it added to the caller's proxies dict.
_Kept = Tuple[Any, Dict[str, Any]]


class EnvironmentSession(requests.Session):
    """A ``requests.Session`` whose ``merge_environment_settings`` is kept while ``os.environ`` is."""

    def __init__(self) -> None:
        super().__init__()
        # What os.environ held (a copy) and the answers kept under it, swapped as one
        # attribute: a reader never pairs one environment with another's answers.
        self._environment: Tuple[Optional[Dict[bytes, bytes]], Dict[Hashable, _Kept]] = (None, {})
        self._environment_lock = threading.Lock()

    def merge_environment_settings(self, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any) -> Any:
        """As requests merges them, with the environment read again only when it changed."""
        environ = getattr(os.environ, "_data", None)  # read afresh: os.environ may be replaced
        if not ENVIRONMENT_ONLY or not self.trust_env or not isinstance(environ, dict):
            return super().merge_environment_settings(url, proxies, stream, verify, cert)
        try:
            key = (
                # no_proxy matches a host and port; the proxies found are per scheme, all kept
                urlsplit(url).netloc,
                frozenset(proxies.items()),
                stream,
                verify,
                cert,
                frozenset(self.proxies.items()),
                self.stream,
                self.verify,
                self.cert,
            )
            hash(key)
        except (AttributeError, TypeError, ValueError):  # no URL or mapping, a setting unhashable
            return super().merge_environment_settings(url, proxies, stream, verify, cert)
        held, kept = self._environment
        answer = kept.get(key) if environ == held else None
        if answer is None:
            before = dict(proxies)
            snapshot = dict(environ)
            merged = super().merge_environment_settings(url, proxies, stream, verify, cert)
            if environ != snapshot:  # changed meanwhile: nothing kept
                return merged
            answer = (merged, {k: v for k, v in proxies.items() if k not in before})
            with self._environment_lock:
                held, kept = self._environment
                if snapshot != held or len(kept) >= MAX_KEPT:
                    kept = {}
                    self._environment = (snapshot, kept)
                kept[key] = answer
        else:
            for name, value in answer[1].items():  # requests fills the caller's own dict in; so do we
                proxies.setdefault(name, value)
        # A copy the caller may change (requests passes the proxies dict on).
        settings: Dict[str, Any] = dict(answer[0])
        if isinstance(settings.get("proxies"), dict):
            settings["proxies"] = dict(settings["proxies"])
        return settings
