"""``SUME["FLEET"]``: how every session of the process paces its requests.

- ``{"REDIS_URL": "redis://...", "RATE": "10/min", "BURST": 10, "PREFIX": "sume",
  "TIMEOUT": 0.05}``: a ``RedisFleet`` shared by every process that uses the same Redis
  (``pip install "sume-urllib3[redis]"``); only ``REDIS_URL`` is required.
- ``{"HOST": True, "RATE": "10/min", "BURST": 10, "TIMEOUT": 0.2}``: a ``HostFleet`` shared by
  every process of this host through a local file (``True``: the default path, per user and per
  app; or a file path); only ``HOST`` is required.
- ``{"RATE": "10/min", "BURST": 10}`` without ``REDIS_URL`` or ``HOST``: a ``LocalFleet`` with that
  quota, shared by the threads of this process.
- ``None``: no pacing at all.
- no ``FLEET`` key: the session's default (the process-wide ``LocalFleet``).

The fleet is built once per process (one Redis connection pool, one quota) and shared by every
thread's session; a changed setting builds it again.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any, Dict, Mapping, Optional, Tuple

from ..._errors import ConfigurationError
from ...pacing.store import check_burst, check_prefix, check_timeout, parse_rate

#: The keys ``SUME["FLEET"]`` may have.
FLEET_KEYS: Tuple[str, ...] = ("REDIS_URL", "HOST", "RATE", "BURST", "PREFIX", "TIMEOUT")
_REDIS_ONLY = ("PREFIX", "TIMEOUT")  # TIMEOUT: a host fleet's too
_REDIS_SCHEMES = ("redis", "rediss", "unix")
_LOCAL = ("sume_urllib3.pacing._fleet", "LocalFleet")
_REDIS = ("sume_urllib3.contrib.redis", "RedisFleet")
_HOST = ("sume_urllib3.pacing.host", "HostFleet")

_lock = threading.Lock()
# (the normalized setting, the fleet built from it): one slot, as for the observers.
_built: Optional[Tuple[Tuple[Any, ...], Any]] = None


def fleet_arguments(value: Any) -> Dict[str, Any]:
    """The fleet's constructor arguments (``url`` for Redis); raises ConfigurationError naming the key.

    Checked here without importing anything, so ``manage.py check`` names the key at fault.
    """
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            f'must be a dict such as {{"RATE": "10/min"}} or None (no pacing), got {type(value).__name__}'
        )
    unknown = [key for key in value if key not in FLEET_KEYS]
    if unknown:
        raise ConfigurationError(f"unknown key {unknown[0]!r}; valid keys: {', '.join(FLEET_KEYS)}")
    arguments: Dict[str, Any] = {}
    url = value.get("REDIS_URL")
    host = _check_host(value.get("HOST"))
    if url is not None and host is not None:
        raise ConfigurationError("give REDIS_URL (every host on that Redis) or HOST (this host), not both")
    if url is not None:
        arguments["url"] = _check_url(url)
    elif host is not None:
        arguments["host"] = host
        if "PREFIX" in value:
            raise ConfigurationError("PREFIX applies to a Redis fleet only: remove it, or use REDIS_URL")
    elif any(key in value for key in _REDIS_ONLY):
        given = next(key for key in _REDIS_ONLY if key in value)
        fleets = "a Redis fleet or a host fleet" if given == "TIMEOUT" else "a Redis fleet"
        also = "REDIS_URL or HOST" if given == "TIMEOUT" else "REDIS_URL"
        raise ConfigurationError(f"{given} applies to {fleets} only: set {also} too, or remove {given}")
    if value.get("RATE") is not None:
        arguments["rate"] = _check_rate(value["RATE"])
    if value.get("BURST") is not None:
        arguments["burst"] = _check_burst(value["BURST"])
    if "PREFIX" in value:
        arguments["prefix"] = check_prefix(value["PREFIX"], "PREFIX")
    if "TIMEOUT" in value:
        arguments["timeout"] = _check_timeout(value["TIMEOUT"])
    return arguments


def build_fleet(value: Any) -> Any:
    """The fleet for this value of the setting (``None`` for None), built once; raises ConfigurationError."""
    global _built
    if value is None:
        return None
    arguments = fleet_arguments(value)
    key = tuple(sorted(arguments.items()))
    with _lock:
        if _built is not None and _built[0] == key:
            return _built[1]
        fleet = _construct(arguments)
        _built = (key, fleet)
        return fleet


def forget() -> None:
    """Drop the built fleet: the next call builds it again (tests)."""
    global _built
    with _lock:
        _built = None


def _construct(arguments: Dict[str, Any]) -> Any:
    arguments = dict(arguments)
    url = arguments.pop("url", None)
    host = arguments.pop("host", None)
    module_name, name = _REDIS if url is not None else _HOST if host is not None else _LOCAL
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except ImportError as exc:
        extra = " (pip install 'sume-urllib3[redis]')" if url is not None else ""
        raise ConfigurationError(f"cannot import {module_name}.{name}{extra}: {exc}") from exc
    try:
        if host is not None:
            return cls(None if host is True else host, **arguments)
        return cls(**arguments) if url is None else cls(url, **arguments)
    except (TypeError, ValueError) as exc:  # ConfigurationError is a ValueError
        raise ConfigurationError(str(exc)) from exc


def _check_url(url: Any) -> str:
    if not isinstance(url, str):
        raise ConfigurationError(f"REDIS_URL must be a str, got {type(url).__name__}")
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme not in _REDIS_SCHEMES:
        # The URL may carry a password: name only the scheme.
        raise ConfigurationError(
            f"REDIS_URL must start with redis://, rediss:// or unix://, got scheme {scheme!r}"
        )
    return url


def _check_host(host: Any) -> Any:
    """True (the default path), a file path, or None for no host fleet (False too)."""
    if host is None or host is False:
        return None
    if host is True:
        return True
    if not isinstance(host, str) or not host:
        shown = type(host).__name__ if not isinstance(host, str) else "an empty str"
        raise ConfigurationError(f"HOST must be True (the default path) or a file path, got {shown}")
    return host


def _check_rate(rate: Any) -> Any:
    # The fleets' own parser: every spelling LocalFleet and RedisFleet accept passes here,
    # and nothing else, so `manage.py check` and the fleet can never disagree.
    try:
        parse_rate(rate)
    except ConfigurationError as exc:
        raise ConfigurationError(f"RATE: {exc}") from None
    return rate.strip() if isinstance(rate, str) else rate


def _check_burst(burst: Any) -> int:
    # The fleets' own checks (as for RATE): what manage.py check passes, the fleet accepts.
    return check_burst(burst, "BURST")


def _check_timeout(timeout: Any) -> float:
    return check_timeout(timeout, "TIMEOUT")
