"""A Sume-like submit server on 127.0.0.1 for task-queue tests, written apart from FakeSume.

``POST /v1/avatars`` runs a job at most once per Idempotency-Key, the way the API
documents it, under a quota, and can lose the first answer of each job:

- **Quota**: GCRA at ``rate`` per second (burst 1) over every POST; past it, 429
  ``rate_limit_exceeded`` with ``Retry-After`` in whole seconds (at least 1), as real
  servers round it. A refused request runs nothing.
- **Idempotency**: a key seen before answers the first run's stored result
  (``Idempotent-Replayed: true``) and runs nothing; a key whose run has not answered yet
  gets 409 ``idempotency_key_in_use``. A POST without a key runs every time (and is
  counted: the tests expect none).
- **Faults** (``faults=True``): the first answer of each job is lost after the job ran:
  ``lose`` closes the connection without a word, ``slow`` answers after ``slow`` seconds
  (past any short deadline), ``drop`` sends the headers and half the body, then closes.
  The kind cycles by the job's number (``payload["n"] % 3``).
- **Outages**: a payload with ``"outage": "503"`` always gets 503, one with ``"outage":
  "drop"`` always has its connection closed unanswered; neither runs anything.

Every job is named by its payload (``run``, ``n``): ``executions[(run, n)]`` counts how
many times that logical request ran, so a number above 1 is a job executed twice (a
retry that came with a new key). Each response leaves in one ``sendall`` with Nagle off.
"""

from __future__ import annotations

import json
import math
import socket
import threading
import time
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Tuple

FAULTS = ("lose", "slow", "drop")
Job = Tuple[str, int]


class SubmitServer:
    """The server and everything it saw; ``start()``/``stop()`` or use as a context manager."""

    def __init__(self, rate: float = 5.0, *, faults: bool = False, slow: float = 3.0) -> None:
        self.rate = rate
        self.faults = faults
        self.slow = slow
        self.lock = threading.Lock()
        self.reset()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._thread: Optional[threading.Thread] = None

    def reset(self, *, faults: Optional[bool] = None) -> None:
        """Forget everything seen (keys, runs, counters); optionally switch faults."""
        with self.lock:
            if faults is not None:
                self.faults = faults
            self.tat = 0.0
            self.keys: Dict[str, Dict[str, Any]] = {}
            self.executions: Counter[Job] = Counter()
            self.faulted: Counter[str] = Counter()
            self.calls = 0
            self.refused = 0
            self.in_use = 0
            self.replayed = 0
            self.keyless = 0

    @property
    def url(self) -> str:
        """The base URL to give SUME_API_BASE_URL."""
        port = self._httpd.server_address[1]
        return f"http://127.0.0.1:{port}/v1"

    def start(self) -> SubmitServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="submit-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> SubmitServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def twice(self) -> List[Job]:
        """Jobs that ran more than once."""
        with self.lock:
            return sorted(job for job, count in self.executions.items() if count > 1)

    # -- the decisions, under the lock ------------------------------------------------------

    def admit(self) -> Optional[int]:
        """None when the quota admits a call now, else the whole seconds of Retry-After."""
        step = 1.0 / self.rate
        now = time.monotonic()
        with self.lock:
            self.calls += 1
            tat = max(self.tat, now)
            if tat - now > 1e-9:  # burst 1: the next turn is at tat
                self.refused += 1
                return max(1, math.ceil(tat - now))
            self.tat = tat + step
            return None

    def claim(self, key: Optional[str], job: Job) -> Tuple[str, Any]:
        """What this POST does: ("run", fault or None), ("replay", body) or ("in_use", None)."""
        with self.lock:
            if key is None:
                self.keyless += 1
                self.executions[job] += 1
                return "run", None
            seen = self.keys.get(key)
            if seen is None:
                self.keys[key] = {"job": job, "body": None}
                self.executions[job] += 1
                fault = FAULTS[job[1] % len(FAULTS)] if self.faults else None
                if fault is not None:
                    self.faulted[fault] += 1
                return "run", fault
            if seen["body"] is None:
                self.in_use += 1
                return "in_use", None
            self.replayed += 1
            return "replay", seen["body"]

    def stored(self, key: Optional[str], body: bytes) -> None:
        with self.lock:
            if key is not None:
                self.keys[key]["body"] = body


def _handler(server: SubmitServer) -> type:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if self.path != "/v1/avatars":
                self._send(404, _error("not_found", "no such route"))
                return
            if not self.headers.get("x-api-key"):
                self._send(401, _error("unauthorized", "missing x-api-key"))
                return
            try:
                payload = json.loads(raw or b"{}")
                job: Job = (str(payload["run"]), int(payload["n"]))
            except (ValueError, KeyError, TypeError):
                self._send(400, _error("invalid_request", "payload needs run and n"))
                return
            outage = payload.get("outage")
            if outage == "503":  # a job the server can never take: for the give-up paths
                self._send(503, _error("service_unavailable", "down for maintenance"))
                return
            if outage == "drop":
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            wait = server.admit()
            if wait is not None:
                body = _error("rate_limit_exceeded", "too many requests", retryable=True)
                self._send(429, body, {"Retry-After": str(wait)})
                return
            key = self.headers.get("Idempotency-Key")
            what, detail = server.claim(key, job)
            if what == "in_use":
                self._send(409, _error("idempotency_key_in_use", "the first request has not answered yet"))
                return
            if what == "replay":
                self._send(201, detail, {"Idempotent-Replayed": "true"})
                return
            answer = {"data": {"id": f"av_{uuid.uuid4().hex[:12]}", "run": job[0], "n": job[1]}}
            encoded = json.dumps(answer).encode()
            if detail == "slow":
                time.sleep(server.slow)  # ran; the answer comes too late for the caller
                server.stored(key, encoded)  # until now the key was in use
                self._send(201, encoded, may_fail=True)
                return
            server.stored(key, encoded)
            if detail == "lose":
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if detail == "drop":
                head = _head(201, len(encoded), {})
                self.connection.sendall(head + encoded[: len(encoded) // 2])
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self._send(201, encoded)

        def _send(
            self,
            status: int,
            body: bytes,
            headers: Optional[Dict[str, str]] = None,
            *,
            may_fail: bool = False,
        ) -> None:
            try:
                self.connection.sendall(_head(status, len(body), headers or {}) + body)
            except OSError:
                if not may_fail:
                    raise
                self.close_connection = True

    return Handler


def _head(status: int, length: int, headers: Dict[str, str]) -> bytes:
    reason = {201: "Created", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 409: "Conflict",
              429: "Too Many Requests"}.get(status, "OK")
    lines = [f"HTTP/1.1 {status} {reason}", "Content-Type: application/json", f"Content-Length: {length}",
             f"x-request-id: req_{uuid.uuid4().hex[:10]}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


def _error(code: str, message: str, *, retryable: Optional[bool] = None) -> bytes:
    error: Dict[str, Any] = {"code": code, "message": message}
    if retryable is not None:
        error["retryable"] = retryable
    return json.dumps({"error": error}).encode()
