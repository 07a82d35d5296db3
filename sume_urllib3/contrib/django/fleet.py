"""``SUME["FLEET"]``: how every session of the process paces its requests.

- ``{"REDIS_URL": "redis://...", "RATE": "10/min", "BURST": 10, "PREFIX": "sume",
  "TIMEOUT": 0.05}``: a ``RedisFleet`` shared by every process that uses the same Redis
  (``pip install "sume-urllib3[redis]"``); only ``REDIS_URL`` is required.
- ``{"HOST": True, "RATE": "10/min", "BURST": 10, "TIMEOUT": 0.2}``: a ``HostFleet`` shared by
  every process of this host through a local file (``True``: the default path, per user and per
  app; or a file path); only ``HOST`` is required.
- ``{"RATE": "10/min", "BURST": 10}`` without ``REDIS_URL`` or ``HOST`` (``"HOST": False`` too):
  a ``LocalFleet`` with that quota, shared by the threads of this process.
- ``None``: no pacing at all.
- no ``FLEET`` key: ``{"HOST": True}`` (:data:`DEFAULT`), so that the workers of a preforking
  server (gunicorn, uWSGI) share one pace per host and API key as one client would.

The fleet is built once per process (one Redis connection pool, one quota) and shared by every
thread's session; a changed setting builds it again.

``"HOST": True`` (so the default too) never shares by accident: while Django runs tests (its test
runner or pytest-django, which set up Django's test environment, or any pytest run) it is a file
of the test run's own in a temporary directory, and under ``runserver`` a file of runserver's own
beside the deployment's: what tests or a developer's server learn never reaches a deployment on
the same host, nor the next test run.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import threading
from typing import Any, Dict, Mapping, Optional, Tuple

from django.core import mail

from ...exceptions import ConfigurationError
from ...pacing import HostFleet, LocalFleet
from ...pacing.host import default_app

#: The keys ``SUME["FLEET"]`` may have.
FLEET_KEYS: Tuple[str, ...] = ("REDIS_URL", "HOST", "RATE", "BURST", "PREFIX", "TIMEOUT")
_REDIS_ONLY = ("PREFIX", "TIMEOUT")  # TIMEOUT: a host fleet's too
_REDIS_SCHEMES = ("redis", "rediss", "unix")
#: ``SUME["FLEET"]`` when the key is absent: the host fleet at the default path.
DEFAULT: Mapping[str, Any] = {"HOST": True}

_lock = threading.Lock()
_test_run_dir: Optional[str] = None  # created on first use while tests run (see _host_place)
# (the normalized setting, the fleet built from it): one slot, as for the observers.
_built: Optional[Tuple[Tuple[Any, ...], Any]] = None


def fleet_arguments(value: Any) -> Dict[str, Any]:
    """The fleet's constructor arguments (``url`` for Redis); raises ConfigurationError naming the key.

    The shape is checked here; the values (rate, burst, prefix, timeout) by the fleet itself
    when :func:`build_fleet` builds it, so ``manage.py check`` and the fleet never disagree.
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
        rate = value["RATE"]
        arguments["rate"] = rate.strip() if isinstance(rate, str) else rate
    if value.get("BURST") is not None:
        arguments["burst"] = value["BURST"]
    for key in _REDIS_ONLY:
        if key in value:
            arguments[key.lower()] = value[key]
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
    """Drop the built fleet, and what it learned if it is a local or a host fleet: the next call
    builds it again (tests). A ``RedisFleet``'s state is shared with other hosts: left alone."""
    global _built
    with _lock:
        built, _built = _built, None
    if built is not None and isinstance(built[1], (LocalFleet, HostFleet)):
        built[1].reset()


def _construct(arguments: Dict[str, Any]) -> Any:
    arguments = dict(arguments)
    url, host = arguments.pop("url", None), arguments.pop("host", None)
    cls = _redis_fleet() if url is not None else HostFleet if host is not None else LocalFleet
    try:
        if host is not None:
            return cls(**_host_place(host), **arguments)
        return cls(**arguments) if url is None else cls(url, **arguments)
    except (TypeError, ValueError) as exc:  # ConfigurationError is a ValueError
        # The fleet names its argument first ("burst must be ..."): name the setting's key too.
        text = str(exc)
        name = text.split(" ", 1)[0]
        raise ConfigurationError(f"{name.upper()}: {text}" if name in arguments else text) from exc


def _host_place(host: Any) -> Dict[str, Any]:
    """HostFleet's ``path=`` or ``app=`` for ``"HOST"``: the file given; for True the default
    path (nothing), a test run's own file, or runserver's own name beside the default."""
    global _test_run_dir
    if host is not True:
        return {"path": str(host)}
    if hasattr(mail, "outbox") or "pytest" in sys.modules:
        # mail.outbox: Django's setup_test_environment(), which both test runners call
        if _test_run_dir is None:  # build_fleet holds _lock
            _test_run_dir = tempfile.mkdtemp(prefix="sume_urllib3-tests-")
            atexit.register(shutil.rmtree, _test_run_dir, ignore_errors=True)
        return {"path": os.path.join(_test_run_dir, "host.fleet")}
    if _RUNSERVER in sys.modules:
        # A file (not a LocalFleet) so that a cooldown outlives the autoreloader's restarts.
        return {"app": default_app() + ".runserver"}
    return {}


# Imported by runserver and the commands built on it (staticfiles', daphne's); never by a WSGI
# or ASGI server, nor by a management command other than these.
_RUNSERVER = "django.core.management.commands.runserver"


def _redis_fleet() -> Any:
    try:
        from ..redis import RedisFleet
    except ImportError as exc:
        raise ConfigurationError(
            f"cannot import sume_urllib3.contrib.redis.RedisFleet (pip install 'sume-urllib3[redis]'): {exc}"
        ) from exc
    return RedisFleet


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
