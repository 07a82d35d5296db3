"""The measured view: one POST to Sume through the thread's ``get_session()``, as an app would.

It answers with what the library reports about the call (status, attempts, time paced, Redis
fallbacks), so the benchmark can count outcomes without reaching into the worker.
"""

from __future__ import annotations

import os
import time

import requests
from django.http import HttpRequest, JsonResponse

import sume_urllib3
from sume_urllib3 import SumeError
from sume_urllib3.contrib.django import get_session


def generate(request: HttpRequest) -> JsonResponse:
    """POST a generation request upstream; 200 with the record when Sume said 200, else 502."""
    started = time.monotonic()
    try:
        response = get_session().post("/generate", json={"prompt": "a lighthouse at dusk"})
    except (SumeError, requests.RequestException) as exc:  # a give-up (RAISE_ON_GIVE_UP), a transport error
        record = getattr(exc, "record", None)
        return JsonResponse(
            {
                "ok": False,
                "status": getattr(record, "status", None),
                "attempts": getattr(record, "attempts", 0),
                "reason": f"{type(exc).__name__}: {getattr(record, 'reason', '')}"[:200],
                "pid": os.getpid(),
                "elapsed": time.monotonic() - started,
            },
            status=502,
        )
    record = response.sume
    ok = response.status_code == 200
    return JsonResponse(
        {
            "ok": ok,
            "status": response.status_code,
            "attempts": record.attempts,
            "paced": record.paced,
            "fallbacks": record.fleet_fallbacks,
            "refused": record.fleet_refused,
            "reason": "" if ok else record.reason[:200],
            "pid": os.getpid(),
            "elapsed": time.monotonic() - started,
        },
        status=200 if ok else 502,
    )


def ready(request: HttpRequest) -> JsonResponse:
    """Which worker answered, running which copy of the library (the benchmark checks it is its own)."""
    return JsonResponse({"pid": os.getpid(), "sume_urllib3": os.path.dirname(sume_urllib3.__file__)})
