"""FakeSume: a scriptable fake of the Sume HTTP API served on a real loopback socket.

Script replies per ``METHOD /path``, point your client at ``fake.url`` and inspect
``fake.requests`` afterwards::

    with FakeSume() as fake:
        fake.script("POST", "/v1/jobs", 503, Reply.error(429, retry_after=1), Reply(json={"id": 1}))
        ...  # exercise your code against fake.url
        assert len(fake.requests_for("POST", "/v1/jobs")) == 3
"""

from __future__ import annotations

import contextlib
import http.server
import itertools
import json as _json
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing_extensions import Self  # mypy's own stubs: no runtime dependency

from ._jobs import ScriptedJob
from ._nosleep import shared_monotonic
from ._quota import Quota
from ._reply import Headers, Reply, as_reply

__all__ = ["FakeSume", "RecordedRequest", "Reply"]

_STOP_GRACE = 1.0  # seconds stop() waits for handler threads before giving up on them


@dataclass(frozen=True)
class RecordedRequest:
    """A request as the fake received it, body fully read and de-chunked."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes
    time: float
    connection: int

    def json(self) -> Any:
        """Parse the body as JSON (raises ``ValueError`` if it is not)."""
        return _json.loads(self.body.decode("utf-8"))


def _route(target: str) -> str:
    """Reduce a request target to the path scripts are keyed on (no query string)."""
    path = target.split("?", 1)[0]
    if "://" in path:  # absolute-form target, as clients send it to a proxy
        path = "/" + path.split("://", 1)[1].partition("/")[2]
    return path


def _shut(sock: socket.socket) -> None:
    # shutdown() (unlike close()) wakes a handler thread blocked in recv() or send() on sock.
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


#: Largest request body the fake accepts (a test that sends more has a bug of its own).
_MAX_REQUEST_BODY = 1 << 30


class _Server(http.server.ThreadingHTTPServer):  # daemon handler threads
    # stop() closes connections and joins the handlers itself, with a time cap.
    block_on_close = False
    request_queue_size = 128  # a backlog of 5 drops SYNs under 32 concurrent clients

    def __init__(self, address: tuple[str, int], fake: FakeSume) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.fake = fake
        self.stopping = threading.Event()
        self.live: dict[socket.socket, threading.Thread] = {}
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls getfqdn(), a reverse DNS lookup that can stall for seconds.
        socketserver.TCPServer.server_bind(self)
        self.server_name = str(self.server_address[0])
        self.server_port = int(self.server_address[1])

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Disconnects are routine for a fault-injecting server; anything else is a real bug.
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body are separate writes; Nagle + delayed ACK would add 40 ms each.
    disable_nagle_algorithm = True
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.conn_id = self.server.fake._connected(self.server, self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.server.fake._lock:
                self.server.live.pop(self.connection, None)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def version_string(self) -> str:
        return "FakeSume"

    def _serve(self) -> None:
        arrived = time.monotonic()
        try:
            body = self._read_body()
        except ValueError:
            self.send_error(400, "Malformed request body framing")
            return
        headers = Headers(self.headers.items())
        request = RecordedRequest(self.command, self.path, headers, body, arrived, self.conn_id)
        self._respond(*self.server.fake._answer(request))

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_TRACE = _serve

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts: list[bytes] = []
            while size := int(self.rfile.readline(1024).split(b";", 1)[0].strip(), 16):
                parts.append(self._read_exactly(size))
                self.rfile.readline(1024)
            while self.rfile.readline(65536) not in (b"\r\n", b"\n", b""):
                pass  # trailers are read (so keep-alive stays in sync) but not recorded
            return b"".join(parts)
        return self._read_exactly(int(self.headers.get("Content-Length") or 0))

    def _read_exactly(self, size: int) -> bytes:
        if size < 0 or size > _MAX_REQUEST_BODY:
            raise ValueError(size)  # answered 400; never pre-allocate what a client claims
        data = self.rfile.read(size)
        if len(data) < size:
            raise ConnectionAbortedError("client closed mid-body")
        return data

    def _respond(self, reply: Reply, request_id: str, quota: Mapping[str, str]) -> None:
        stopping = self.server.stopping
        if (reply.delay and stopping.wait(reply.delay)) or reply.drop == "before_headers":
            self.close_connection = True
            return
        defaults = [
            ("Server", self.version_string()),
            ("Date", self.date_time_string()),
            *quota.items(),
            *reply.body_headers(request_id),
        ]
        if self.close_connection:
            defaults.append(("Connection", "close"))
        self.send_response_only(reply.status)
        for name, value in defaults:
            if name not in reply.headers:
                self.send_header(name, value)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        if reply.drop == "after_headers" or reply.truncate is not None:
            self.close_connection = True
        if reply.drop or not reply.framed or self.command == "HEAD":
            return
        remaining = reply.truncate
        for piece in reply.payload(request_id):
            if remaining is not None:
                piece = piece[:remaining]
                remaining -= len(piece)
            if piece:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if reply.chunked else piece)
            if stopping.is_set() or remaining == 0:
                self.close_connection = True
                return
        if reply.chunked and remaining is None:
            self.wfile.write(b"0\r\n\r\n")


class FakeSume:
    """A scriptable fake Sume API on a real, threaded HTTP/1.1 loopback server.

    Script replies with :meth:`script` (the last reply of a script repeats forever),
    start it (or use ``with``), send requests to :attr:`url`, then inspect :attr:`requests`.
    Unscripted routes answer 404 ``not_found``. Every method is thread-safe.

    Quota mode (``FakeSume(quota="10/s", burst=10)`` or :meth:`quota`) rate limits each API
    key as the real API does, to reproduce a herd of clients against one quota.
    """

    def __init__(
        self,
        routes: Mapping[tuple[str, str], Iterable[Reply | int]] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        quota: str | float | None = None,
        burst: int = 1,
    ) -> None:
        self._address = (host, port)
        self.quota(quota, burst)
        self._lock = threading.Lock()
        self._lifecycle = threading.Lock()
        self._scripts: dict[tuple[str, str], Iterator[Reply]] = {}  # the last reply repeats
        self._requests: list[RecordedRequest] = []
        self._connections = 0
        # Never reset, so request ids stay unique for the fake's whole lifetime.
        self._request_ids = 0
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._url: str | None = None
        self._jobs: dict[str, ScriptedJob] = {}  # by route, e.g. /v1/jobs/job_1
        for (method, path), replies in (routes or {}).items():
            self.script(method, path, *replies)

    def script(self, method: str, path: str, *replies: Reply | int) -> Self:
        """Replace the replies for ``METHOD path`` (path without query string); returns self.

        Ints are shorthand: ``>= 400`` gives a Sume error envelope, 2xx gives ``{"ok": true}``.
        The last reply repeats. A HEAD with no script of its own is answered (without a
        body) from the GET script, taking its next reply.
        """
        if not replies:
            raise ValueError("script() needs at least one reply")
        if not path.startswith("/") or "?" in path:
            raise ValueError(f"path must start with '/' and have no query string, got {path!r}")
        script = [as_reply(reply) for reply in replies]
        with self._lock:
            self._scripts[method.upper(), path] = itertools.chain(script, itertools.repeat(script[-1]))
        return self

    def job(self, job_id: str, steps: Iterable[Any], **options: Any) -> ScriptedJob:
        """Script a job's lifecycle at ``/v1/jobs/{id}/status|result|cancel``; see ``ScriptedJob``.

        Routes that have a script of their own keep it.
        """
        job = ScriptedJob(job_id, steps, **options)
        with self._lock:
            self._jobs[job.route] = job  # replacing a job scripted earlier at the same route
        return job

    def start(self) -> Self:
        """Bind and start serving in a background thread; a no-op if already running."""
        with self._lifecycle:
            if self._server is None:
                server = _Server(self._address, self)
                host, port = str(server.server_name), server.server_port
                self._url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
                self._thread = threading.Thread(
                    target=server.serve_forever,
                    kwargs={"poll_interval": 0.01},  # bounds how long stop() waits for the loop
                    name=f"FakeSume:{port}",
                    daemon=True,
                )
                self._server = server
                self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close open connections, interrupting delays; idempotent and prompt."""
        with self._lifecycle:
            server, thread = self._server, self._thread
            if server is None or thread is None:
                return
            self._server = self._thread = None
            server.stopping.set()
            # Wakes serve_forever() out of its poll at once (accept() then fails, handled).
            _shut(server.socket)
            server.shutdown()
            with self._lock:
                open_connections = dict(server.live)
            for sock in open_connections:
                _shut(sock)
            server.server_close()
            deadline = time.monotonic() + _STOP_GRACE
            for worker in [thread, *open_connections.values()]:
                worker.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self._server is not None else "stopped"
        return f"<FakeSume {self._url or 'unbound'} {state}>"

    @property
    def url(self) -> str:
        """Base URL such as ``http://127.0.0.1:54321`` (available once started)."""
        if self._url is None:
            raise RuntimeError("FakeSume is not started; call start() or use it as a context manager")
        return self._url

    @property
    def requests(self) -> list[RecordedRequest]:
        """A copy of every request received, in arrival order."""
        with self._lock:
            return list(self._requests)

    def requests_for(self, method: str, path: str) -> list[RecordedRequest]:
        """Recorded requests for ``METHOD path``, matching the path without its query string."""
        method = method.upper()
        return [r for r in self.requests if r.method == method and _route(r.path) == path]

    @property
    def connections(self) -> int:
        """Number of TCP connections accepted so far."""
        with self._lock:
            return self._connections

    def reset(self) -> None:
        """Forget scripts and their positions, scripted jobs, recorded requests and the connection count."""
        with self._lock:
            self._scripts.clear()
            self._requests.clear()
            self._connections = 0
            self._jobs.clear()

    def _connected(self, server: _Server, sock: socket.socket) -> int:
        with self._lock:
            self._connections += 1
            server.live[sock] = threading.current_thread()
            if server.stopping.is_set():
                # Accepted just as stop() ran: make sure this connection cannot outlive it.
                _shut(sock)
            return self._connections

    def quota(self, rate: str | float | None, burst: int = 1, *, clock: Any = shared_monotonic) -> Self:
        """Rate limit each API key to ``rate`` ("10/s", "10/min", or per second) with ``burst`` (GCRA).

        The key is the ``x-api-key`` header, else ``Authorization``; requests with neither share
        one quota. Every reply carries ``RateLimit-Limit/-Remaining/-Reset`` and ``RateLimit-Policy``;
        a request over the quota gets 429 ``rate_limit_exceeded`` with ``Retry-After`` instead of
        its scripted reply, and the scripts do not advance. ``None`` turns quota mode off. Returns
        self. ``clock`` defaults to the clients' fleet clock: under ``no_sleep()`` the quota
        refills in virtual time.
        """
        self._quota = None if rate is None else Quota(rate, burst, clock=clock)
        return self

    @property
    def quota_state(self) -> Any:
        """The quota in force (``admitted``/``refused`` counts), or None outside quota mode."""
        return self._quota

    def _answer(self, request: RecordedRequest) -> tuple[Reply, str, Mapping[str, str]]:
        """The reply, its request id and the quota's headers (sent unless the reply has its own)."""
        quota = self._quota
        admitted, extra = quota.take(request.headers) if quota is not None else (True, {})
        with self._lock:
            self._request_ids += 1
            self._requests.append(request)
            request_id = f"req_{self._request_ids}"
            reply = self._scripted(request) if admitted or quota is None else quota.refusal(extra)
        return reply, reply.headers.get("x-sume-request-id", request_id), extra

    def _scripted(self, request: RecordedRequest) -> Reply:
        path = _route(request.path)
        script = self._scripts.get((request.method, path))
        if script is None and request.method == "HEAD":
            # As real servers do: HEAD answers like GET, without the body.
            script = self._scripts.get(("GET", path))
        if script is not None:
            return next(script)
        route, _, action = path.rpartition("/")
        job = self._jobs.get(route)
        answer = job.answer(request.method, action) if job is not None else None
        return answer or Reply.error(404, "not_found", message=f"No script for {request.method} {path}")
