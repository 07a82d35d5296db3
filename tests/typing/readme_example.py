"""Never run, only type-checked by mypy --strict: the README's "Use it" example as a user writes it."""

from __future__ import annotations

from typing import Any, Optional

import urllib3

from sume_urllib3 import Outcome, SumeRecord, SumeRetryError, SumeSession, sume_record


def use_it() -> None:
    """The README's "Use it" block, unchanged but for the typed record accessor."""
    session = SumeSession()  # API key and base URL from SUME_API_KEY / SUME_API_BASE_URL
    try:
        response = session.post("/avatars", json={"type": "prompt", "name": "Ada", "prompt": "a presenter"})
    except SumeRetryError as error:  # gave up: status, code, request ids, attempts, elapsed, why
        print("gave up:", error)
        if error.response is not None:  # the server answered: its last error body, intact
            body: Any = error.response.json()  # None-checked: a give-up may have no response
            print(body)
    else:
        record = sume_record(response)  # outcome, attempts, waits, request_id(s), idempotency_key, reason
        if record is not None:
            print(response.status_code, record.outcome, record.attempts, record.idempotency_key)


def background_task(key: Optional[str] = None) -> Optional[float]:
    """A task queue's call: its own deadline, and what to retry later with (seconds, key)."""
    session = SumeSession(timeout=(5, None))
    headers = {"Idempotency-Key": key} if key else {}
    try:
        shorter = session.policy.replace(max_elapsed=10)
        session.request("POST", "/jobs", json={"avatar": "av_1"}, headers=headers, policy=shorter)
        session.post("/jobs", json={"avatar": "av_1"}, headers=headers, policy=shorter)
    except SumeRetryError as error:
        record: SumeRecord = error.record
        retry_in: Optional[float] = error.retry_in
        again: Optional[str] = error.idempotency_key
        print(record.outcome is Outcome.GAVE_UP, again)
        return retry_in
    except Exception as exc:  # a transport error carries the record too
        failed: Optional[SumeRecord] = sume_record(exc)
        print(failed.reason if failed is not None else "no record")
    return None


def timeouts() -> None:
    """Every timeout form requests accepts, in the constructor and per call."""
    session = SumeSession(timeout=urllib3.Timeout(connect=2.0, read=30.0))
    session.get("/jobs", timeout=(5, None))
    session.get("/jobs", timeout=urllib3.Timeout(total=10.0))
