"""A small Sume-like job server on 127.0.0.1, written apart from FakeSume to test jobs against.

It knows only what the API documents for jobs: ``GET /v1/jobs/{id}/status`` (``data.status``,
``data.error.code`` once failed), ``GET /v1/jobs/{id}/result`` (409 ``job_not_completed`` with
``details.status`` until the job is done) and ``POST /v1/jobs/{id}/cancel`` (409
``job_not_cancelable`` once the job has ended). Every response goes out in one send with
Nagle off, so a poll costs a loopback round trip, not a 40 ms delayed ACK.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

DONE = ("completed",)
ENDED = ("completed", "failed", "canceled", "nsfw", "expired")


@dataclass
class ServedJob:
    """One job: its statuses, one per status read (the last one stays), and what it ends with."""

    statuses: Sequence[str]
    error_code: Optional[str] = None  # data.error.code once the job has failed
    result: Mapping[str, Any] = field(default_factory=dict)
    recommended: Optional[float] = None  # data.recommended_poll_interval_seconds
    delay: float = 0.0  # real seconds before a status answer goes out
    reads: int = 0
    canceled: bool = False

    @property
    def status(self) -> str:
        """The status now, without counting a read."""
        if self.canceled:
            return "canceled"
        return self.statuses[min(self.reads, len(self.statuses) - 1)]


@dataclass(frozen=True)
class Seen:
    """One request the server got: method, path and the (injected) clock time it arrived."""

    method: str
    path: str
    at: float


Canned = Tuple[int, Mapping[str, Any], Mapping[str, str]]


class JobServer:
    """``with JobServer(clock=...) as server:`` serves jobs at ``server.url`` (``.../v1``).

    ``clock`` stamps each request (pass a test's virtual clock to read poll times in
    virtual seconds). ``server.canned(method, path, *answers)`` answers a path verbatim,
    one answer per request, the last one repeating (a 429 to a submit, say).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.jobs: Dict[str, ServedJob] = {}
        self.seen: List[Seen] = []
        self._canned: Dict[Tuple[str, str], List[Canned]] = {}
        self._lock = threading.Lock()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}/v1"
        # A short poll interval: shutdown() waits for one, and every test stops a server.
        self._thread = threading.Thread(target=self._http.serve_forever, args=(0.02,), daemon=True)

    def __enter__(self) -> JobServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        # Wakes serve_forever() out of its poll (accept() then fails, handled): no poll's wait.
        with contextlib.suppress(OSError):
            self._http.socket.shutdown(socket.SHUT_RDWR)
        self._http.shutdown()
        self._http.server_close()
        self._thread.join()

    def add(self, job_id: str, statuses: Sequence[str], **kwargs: Any) -> ServedJob:
        """Serve a job; ``statuses`` advance one per status read, the last one stays."""
        job = ServedJob(list(statuses), **kwargs)
        self.jobs[job_id] = job
        return job

    def canned(self, method: str, path: str, *answers: Canned) -> None:
        """Answer ``method path`` with these (status, JSON body, headers), one per request."""
        self._canned[(method, path)] = list(answers)

    def polls(self, job_id: str) -> List[float]:
        """When each status read of ``job_id`` arrived, on the server's clock."""
        path = f"/v1/jobs/{job_id}/status"
        return [seen.at for seen in self.seen if seen.method == "GET" and seen.path == path]

    def answer(self, method: str, path: str) -> Tuple[int, Dict[str, Any], Dict[str, str], float]:
        """(status, body, headers, delay) for one request; records it."""
        with self._lock:
            self.seen.append(Seen(method, path, self.clock()))
            rid = {"request_id": f"req_{len(self.seen)}"}
            canned = self._canned.get((method, path))
            if canned:
                status, body, headers = canned.pop(0) if len(canned) > 1 else canned[0]
                return status, {**body, **rid}, dict(headers), 0.0
            parts = path.split("/")  # "", "v1", "jobs", id, action
            job = self.jobs.get(parts[3]) if len(parts) == 5 and parts[:3] == ["", "v1", "jobs"] else None
            if job is None:
                return 404, {"error": {"code": "not_found", "message": "no such job"}, **rid}, {}, 0.0
            action = parts[4]
            if (method, action) == ("GET", "status"):
                body = {"data": _job_object(parts[3], job), **rid}
                job.reads += 1
                return 200, body, {}, job.delay
            if (method, action) == ("GET", "result"):
                if job.status in DONE:
                    return 200, {"data": {"id": parts[3], **job.result}, **rid}, {}, 0.0
                error = {
                    "code": "job_not_completed",
                    "message": "the job has no result",
                    "details": {"status": job.status},
                }
                return 409, {"error": error, **rid}, {}, 0.0
            if (method, action) == ("POST", "cancel"):
                if job.status in ENDED:
                    error = {"code": "job_not_cancelable", "message": "the job has ended"}
                    return 409, {"error": error, **rid}, {}, 0.0
                job.canceled = True
                return 200, {"data": _job_object(parts[3], job), **rid}, {}, 0.0
            return 405, {"error": {"code": "method_not_allowed", "message": "no"}, **rid}, {}, 0.0


def _job_object(job_id: str, job: ServedJob) -> Dict[str, Any]:
    status = job.status
    data: Dict[str, Any] = {"id": job_id, "status": status}
    if status in ("failed", "nsfw") and job.error_code:
        data["error"] = {"code": job.error_code, "message": "the job failed"}
    if job.recommended is not None:
        data["recommended_poll_interval_seconds"] = job.recommended
    return data


def _handler_for(server: JobServer) -> type:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            self._serve("POST")

        def _serve(self, method: str) -> None:
            status, body, headers, delay = server.answer(method, self.path.split("?")[0])
            if delay:
                time.sleep(delay)
            payload = json.dumps(body).encode()
            lines = [
                f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}",
                "Content-Type: application/json",
                f"Content-Length: {len(payload)}",
            ]
            lines += [f"{name}: {value}" for name, value in headers.items()]
            # Headers and body in one send: no delayed-ACK stall between them.
            self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
