"""A minimal HTTP/1.1 keep-alive server on 127.0.0.1, run in its own process for benchmarks.

Every response (status line, headers and body) leaves in ONE ``sendall``, so no
client waits on a delayed ACK between a header write and a body write, and the
server's own Python work runs on another interpreter rather than between the
client's timed lines. Paths:

- ``/503...`` answers 503 with a ~1 KiB Sume JSON error envelope (``service_unavailable``);
- ``/flaky/<anything>`` answers that 503 the first time a path is asked for, 200 after;
- anything else answers 200 with a small JSON body and an ``x-request-id`` header.

Request bodies are read by ``Content-Length`` and dropped. The server stops when the
process that started it goes away (its pipe closes) or after ``max_seconds``.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import socket
import threading
from multiprocessing.connection import Connection
from typing import Any, Callable, Optional, Set, Tuple

ERROR_BODY = json.dumps(
    {
        "error": {"code": "service_unavailable", "message": "x" * 900, "details": {}},
        "request_id": "req_0123456789",
    }
).encode()
OK_BODY = b'{"ok":true,"id":"job_0123456789","status":"done"}'
_MAX_HEAD = 64 * 1024


def _response(status: bytes, body: bytes, request_id: bytes) -> bytes:
    return (
        b"HTTP/1.1 " + status + b"\r\n"
        b"Content-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n"
        b"x-request-id: " + request_id + b"\r\n"
        b"\r\n" + body
    )


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip() or b"0")
    return 0


def _serve_connection(conn: socket.socket, counter: Any, seen: Set[bytes]) -> None:
    """Answer requests on one kept-alive connection until the client closes it."""
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buffer = b""
    try:
        while True:
            while b"\r\n\r\n" not in buffer:
                chunk = conn.recv(65536)
                if not chunk or len(buffer) > _MAX_HEAD:
                    return
                buffer += chunk
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            need = _content_length(head)
            while len(buffer) < need:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buffer += chunk
            buffer = buffer[need:]
            path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b"/"
            request_id = b"req_%012d" % next(counter)
            flaky_first = path.startswith(b"/flaky/") and path not in seen
            if flaky_first:
                seen.add(path)  # one set operation: atomic under the GIL
            if flaky_first or path.startswith(b"/503"):
                conn.sendall(_response(b"503 Service Unavailable", ERROR_BODY, request_id))
            else:
                conn.sendall(_response(b"200 OK", OK_BODY, request_id))
    except OSError:
        return
    finally:
        conn.close()


def _watch_parent(parent: Connection) -> None:
    """Exit as soon as the benchmark process is gone (its end of the pipe closes)."""
    with contextlib.suppress(EOFError, OSError):
        parent.recv()
    os._exit(0)


def _run(parent: Connection, max_seconds: float) -> None:
    """Process entry point: listen, report the port, serve until told or orphaned."""
    import itertools

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    parent.send(listener.getsockname()[1])
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    threading.Timer(max_seconds, os._exit, args=(0,)).start()
    counter = itertools.count(1)
    seen: Set[bytes] = set()
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_serve_connection, args=(conn, counter, seen), daemon=True).start()


class SpawnedServer:
    """A server in a spawned process: its first pipe message is its address; closing the pipe stops it.

    Subclasses say what runs (``_target``, called with the pipe then ``_args()``) and how the
    first message becomes ``url``.
    """

    what = "server"

    def __init__(self) -> None:
        self.url = ""
        self._process: Optional[Any] = None
        self._pipe: Optional[Connection] = None

    def _target(self) -> Callable[..., None]:
        raise NotImplementedError

    def _args(self) -> Tuple[Any, ...]:
        return ()

    def _url(self, first: Any) -> str:
        return str(first)

    def start(self) -> None:
        """Spawn the process and wait (30 s at most) for its address."""
        ctx = multiprocessing.get_context("spawn")
        mine, theirs = ctx.Pipe()
        self._process = ctx.Process(target=self._target(), args=(theirs, *self._args()), daemon=True)
        self._process.start()
        theirs.close()
        if not mine.poll(30):
            self.stop()
            raise RuntimeError(f"{self.what} did not start within 30 s")
        self.url = self._url(mine.recv())
        self._pipe = mine

    def stop(self) -> None:
        """Close the pipe (the server exits) and reap the process."""
        if self._pipe is not None:
            self._pipe.close()
            self._pipe = None
        if self._process is not None:
            self._process.join(5)
            if self._process.is_alive():
                self._process.terminate()
                self._process.join(5)
            self._process = None


class LoopbackServer(SpawnedServer):
    """The server process; use as a context manager. ``url`` is ``http://127.0.0.1:<port>``."""

    what = "loopback server"

    def __init__(self, max_seconds: float = 900.0) -> None:
        super().__init__()
        self.max_seconds = max_seconds

    def _target(self) -> Callable[..., None]:
        return _run

    def _args(self) -> Tuple[Any, ...]:
        return (self.max_seconds,)

    def _url(self, first: Any) -> str:
        return f"http://127.0.0.1:{first}"

    def __enter__(self) -> LoopbackServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
