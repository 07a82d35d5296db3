"""The WSGI app ``test_uwsgi.py`` serves with uWSGI: one SumeSession built at import, used there once.

uWSGI imports this module in its master and forks the workers from C (its default), or
imports it in each worker (``--lazy-apps``). At import the session posts once (a warm-up), so
under preforking the master holds a pooled keep-alive connection, and with a Redis fleet a
client id, before any worker exists. Configured from the environment the test gives uWSGI:

- ``SUME_API_KEY`` and ``SUME_API_BASE_URL``: read by the session (the test's echo server);
- ``UWSGI_APP_REDIS_URL``: when set, the session paces through a ``RedisFleet`` built here;
- ``UWSGI_APP_NO_PID_CHECK=1``: ``sume_urllib3._fork.check`` becomes a no-op, so a worker has
  neither an at-fork hook nor the pid check: the failure the tests guard against.

``GET /call?id=N`` posts ``{"id": N}`` through the import-time session and answers JSON: the
id sent, the id the answer named, status, attempts, Redis fallbacks, this pid, the pid the library's fork
module last saw, the fleet's client id. ``GET /ready`` answers the pid.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, Iterable, Optional
from urllib.parse import parse_qs

import sume_urllib3
from sume_urllib3 import SumeSession, _fork, sume_record

if os.environ.get("UWSGI_APP_NO_PID_CHECK") == "1":

    def _no_check() -> None:
        """The pid check, switched off: only an at-fork hook could reset a worker now."""

    _fork.check = _no_check

_fleet: Any = None
if os.environ.get("UWSGI_APP_REDIS_URL"):
    from sume_urllib3.contrib.redis import RedisFleet

    # A generous pace: the tests look at who shares the key, not at pacing.
    _fleet = RedisFleet(os.environ["UWSGI_APP_REDIS_URL"], rate="500/s", burst=100, timeout=1.0)

# A bounded read timeout: a worker whose answer another worker read must not hang the test.
session = SumeSession(timeout=(5, 10)) if _fleet is None else SumeSession(timeout=(5, 10), fleet=_fleet)
WARM_UP = session.post("/echo", json={"id": f"warm-up-{os.getpid()}"})
WARM_UP.raise_for_status()

Start = Callable[[str, Any], Any]


def _call(query: Dict[str, Any]) -> Dict[str, Any]:
    sent = query.get("id", [""])[0]
    report: Dict[str, Any] = {"sent": sent, "pid": os.getpid()}
    try:
        response = session.post("/echo", json={"id": sent})
        record = sume_record(response)
        assert record is not None
        report.update(
            status=response.status_code,
            attempts=record.attempts,
            outcome=record.outcome.value,
            fallbacks=record.fleet_fallbacks,
            error_before=record.error,
            reason=record.reason,
            answered=response.json().get("id"),
        )
    except Exception as exc:  # a give-up, a transport error, a spliced body: the test counts it
        failed = sume_record(exc)
        report.update(
            attempts=None if failed is None else failed.attempts, error=f"{type(exc).__name__}: {exc}"[:300]
        )
    report["fork_pid"] = _fork.pid
    report["client_id"] = None if _fleet is None else _fleet._client_id
    return report


def application(environ: Dict[str, Any], start_response: Start) -> Iterable[bytes]:
    """``/call?id=N`` and ``/ready``."""
    path = environ.get("PATH_INFO", "")
    body: Optional[Dict[str, Any]] = None
    if path == "/call":
        body = _call(parse_qs(environ.get("QUERY_STRING", "")))
    elif path == "/ready":
        body = {"pid": os.getpid(), "sume_urllib3": os.path.dirname(sume_urllib3.__file__)}
    if body is None:
        start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", "0")])
        return [b""]
    data = json.dumps(body).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]
