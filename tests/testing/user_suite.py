"""A test suite written the way a user writes one: run by test_user_suite.py in a subprocess.

Not collected here (the name has no ``test_`` prefix): ``test_user_suite.py`` copies it into
an empty folder as ``test_user_suite.py`` and runs pytest on it in several orders, with
nothing but the installed package and its plugin (opted into by a one-line conftest), as a
user's CI would.

Every test starts its own loopback server (written here, not FakeSume: HTTP/1.1 keep-alive,
``Date`` and ``Server`` headers, JSON bodies, 429 with ``Retry-After: 30``), every test uses
the same test key, many sessions live in one process, and nothing resets anything by hand.
Before issue 23 the first 429 held or refused every later test's requests.
"""

from __future__ import annotations

import email.utils
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Dict, List, Optional, Tuple, Type

import pytest

from sume_urllib3 import Policy, SumeRetryError, SumeSession
from sume_urllib3.pacing import LocalFleet
from sume_urllib3.testing import SleepRecorder

TEST_KEY = "sk_test_0123456789abcdef0123456789"

# Application code often builds its fleet once, at import (a module-level quota).
APP_FLEET = LocalFleet(rate="10/min")

Answer = Tuple[int, Dict[str, str], Dict[str, Any]]
OK: Answer = (200, {}, {"data": {"id": "av_1", "status": "ready"}})
CREATED: Answer = (201, {}, {"data": {"id": "av_2"}})
THROTTLED: Answer = (
    429,
    {"Retry-After": "30"},
    {"error": {"code": "rate_limit_exceeded", "message": "Too many requests", "retryable": True}},
)


class Api:
    """A small HTTP/1.1 API on 127.0.0.1 that gives ``answers`` in order (the last repeats)."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers) or [OK]
        self.seen: List[Tuple[str, str, Optional[str]]] = []  # (method, path, x-api-key)
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, like any real API
            server_version = "demo-api/1.0"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def handle_one(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                status, headers, body = api.answer(self.command, self.path, self.headers.get("x-api-key"))
                payload = json.dumps(body).encode()
                lines = [
                    f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}",
                    f"Server: {self.server_version}",
                    f"Date: {email.utils.formatdate(usegmt=True)}",
                    "Content-Type: application/json",
                    f"Content-Length: {len(payload)}",
                    f"x-request-id: req_{len(api.seen):06d}",
                    *(f"{name}: {value}" for name, value in headers.items()),
                ]
                # One write: headers and body in one segment, as real servers send them.
                self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)

            do_GET = do_POST = do_DELETE = handle_one

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # A short poll, so shutdown() at the end of a test returns at once.
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True)

    def answer(self, method: str, path: str, key: Optional[str]) -> Answer:
        with self._lock:
            self.seen.append((method, path, key))
            return self.answers[min(len(self.seen), len(self.answers)) - 1]

    def __enter__(self) -> Api:
        self._thread.start()
        return self

    def __exit__(
        self, kind: Optional[Type[BaseException]], value: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.server.shutdown()
        self.server.server_close()


def session_for(api: Api, **kwargs: Any) -> SumeSession:
    return SumeSession(TEST_KEY, base_url=api.url + "/v1", **kwargs)


# -- plain calls: never held, whatever ran before ------------------------------------------------


@pytest.mark.parametrize("n", range(8))
def test_get_goes_at_once(n: int) -> None:
    with Api(OK) as api:
        started = time.monotonic()
        response = session_for(api, policy=Policy(max_elapsed=10)).get("/avatars/av_1")

        status = response.json()["data"]["status"]
        assert (200, "ready", 0.0) == (response.status_code, status, response.sume.paced)
        assert time.monotonic() - started < 2.0
        assert [("GET", "/v1/avatars/av_1", TEST_KEY)] == api.seen


@pytest.mark.parametrize("n", range(4))
def test_post_is_sent_once_with_one_idempotency_key(n: int) -> None:
    with Api(CREATED) as api:
        response = session_for(api, policy=Policy(max_elapsed=10)).post("/avatars", json={"name": f"ada{n}"})

        assert (201, "ok", 1) == (response.status_code, response.sume.outcome, response.sume.attempts)
        assert response.sume.idempotency_key


# -- a 429 with Retry-After 30: the test gives up at once and leaves a cooldown behind -----------


@pytest.mark.parametrize("n", range(8))
def test_throttled_call_gives_up_with_the_servers_wait(n: int) -> None:
    with Api(THROTTLED) as api:
        with pytest.raises(SumeRetryError) as raised:
            session_for(api, policy=Policy(max_elapsed=10)).post("/avatars", json={"n": n})

        assert raised.value.record.status == 429
        assert raised.value.retry_in == pytest.approx(30.0, abs=1.0)
        assert 1 == len(api.seen)


# -- 429 then success, without waiting: sume_no_sleep records the 30 s -------------------------


@pytest.mark.parametrize("n", range(8))
def test_throttled_call_succeeds_after_the_recorded_wait(n: int, sume_no_sleep: SleepRecorder) -> None:
    with Api(THROTTLED, OK) as api:
        response = session_for(api).get("/avatars/av_1")

        assert (200, "retried_ok") == (response.status_code, response.sume.outcome)
        assert [30.0] == sume_no_sleep.waits
        assert 2 == len(api.seen)


# -- many sessions, one key, one process -----------------------------------------------------------


@pytest.mark.parametrize("n", range(4))
def test_many_sessions_with_one_key(n: int) -> None:
    with Api(OK) as api:
        sessions = [session_for(api, policy=Policy(max_elapsed=10)) for _ in range(5)]
        statuses = [session.get("/me").status_code for session in sessions for _ in range(2)]

        assert [200] * 10 == statuses
        assert 10 == len(api.seen)


@pytest.mark.parametrize("n", range(2))
def test_threads_share_a_session(n: int) -> None:
    with Api(OK) as api:
        session = session_for(api, policy=Policy(max_elapsed=10))
        statuses: List[int] = []

        def work() -> None:
            statuses.extend(session.get("/me").status_code for _ in range(3))

        threads = [threading.Thread(target=work) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        assert [200] * 12 == statuses


# -- a quota the test builds, and the application's module-level one ------------------------------


@pytest.mark.parametrize("n", range(3))
def test_own_quota_paces_at_six_seconds_under_no_sleep(n: int, sume_no_sleep: SleepRecorder) -> None:
    with Api(OK) as api:
        session = session_for(api, fleet=LocalFleet(rate="10/min"), policy=Policy(max_elapsed=60))
        statuses = [session.get("/me").status_code for _ in range(5)]

        assert [200] * 5 == statuses
        assert [6.0] * 4 == pytest.approx(sume_no_sleep.waits, abs=0.1)


@pytest.mark.parametrize("n", range(2))
def test_app_quota_spent_under_no_sleep(n: int, sume_no_sleep: SleepRecorder) -> None:
    with Api(OK) as api:
        session = session_for(api, fleet=APP_FLEET)
        statuses = [session.get("/me").status_code for _ in range(3)]

        assert [200] * 3 == statuses
        assert [6.0] * 2 == pytest.approx(sume_no_sleep.waits, abs=0.1)


@pytest.mark.parametrize("n", range(2))
def test_app_quota_first_call_is_not_held(n: int) -> None:
    """The application's fleet lives for the whole run; no earlier test's turns are owed."""
    with Api(OK) as api:
        response = session_for(api, fleet=APP_FLEET, policy=Policy(max_elapsed=3)).get("/me")

        assert (200, 0.0) == (response.status_code, response.sume.paced)


# -- keyless and tenant calls ---------------------------------------------------------------------


def test_tenant_keys_per_call() -> None:
    with Api(THROTTLED, OK) as api:
        session = SumeSession(base_url=api.url + "/v1", policy=Policy(max_elapsed=10))
        with pytest.raises(SumeRetryError):
            session.get("/me", headers={"x-api-key": "sk_test_tenant_a"})
        response = session.get("/me", headers={"x-api-key": "sk_test_tenant_b"})

        assert (200, 0.0) == (response.status_code, response.sume.paced)


def test_keyless_health_check() -> None:
    with Api(OK) as api:
        response = SumeSession(base_url=api.url, policy=Policy(max_elapsed=3)).get("/health")

        assert (200, 0.0) == (response.status_code, response.sume.paced)
        assert [("GET", "/health", None)] == api.seen
