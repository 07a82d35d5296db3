"""A raw HTTP/1.1 server on loopback, independent of FakeSume, and handlers for it.

It writes raw bytes and pauses where a test says (a body that trickles or stalls, a redirect
to another port), so a test controls exactly what crosses the socket and when. The
``raw_server`` fixture (tests/conftest.py) starts one per call and stops them all at the end.
"""

from __future__ import annotations

import contextlib
import random
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

from sume_urllib3 import Policy, SumeSession

KEY = "sk_live_HARDENING_0123456789abcdef"
BEARER = "Bearer " + KEY
# Backoff without jitter: every retry in these tests waits exactly what the test says.
QUICK = Policy(backoff_base=0.05, jitter=(1.0, 1.0))

CLOSE = object()  # a handler step: close the connection now
Step = Union[bytes, float, object]


@dataclass
class Seen:
    """One request as it arrived: method, path, lower-cased headers, body, time, connection."""

    method: str
    path: str
    headers: Dict[str, str]
    body: bytes
    at: float
    conn: int


Handler = Callable[[Seen, int], Iterable[Step]]


def reply(
    status: int, body: bytes = b"", headers: Optional[Dict[str, str]] = None, length: Any = None
) -> bytes:
    """One whole HTTP/1.1 response, head and body in one piece (one send, no Nagle delay)."""
    lines = [f"HTTP/1.1 {status} X"]
    fields = {"Content-Length": str(len(body) if length is None else length)}
    fields.update(headers or {})
    lines += [f"{k}: {v}" for k, v in fields.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def echo(seen: Seen, n: int) -> Iterable[Step]:
    """Answer 200 with the request's path as the body."""
    yield reply(200, seen.path.encode())


class Loopback:
    """A raw HTTP/1.1 server on 127.0.0.1: a handler yields bytes to send and pauses (floats).

    The handler gets the request and how many requests to the same path came before it.
    Connections are kept alive; ``CLOSE`` ends one. Stopping interrupts every pause.
    """

    def __init__(self, handler: Handler = echo, tls: Optional[ssl.SSLContext] = None) -> None:
        self.handler = handler
        self._tls = tls
        self.requests: List[Seen] = []
        self._counts: Dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._conns: List[socket.socket] = []
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def __enter__(self) -> Loopback:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                conn.close()

    def paths(self) -> List[str]:
        return [seen.path for seen in self.requests]

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._conns.append(conn)
                number = len(self._conns)
            threading.Thread(target=self._serve, args=(conn, number), daemon=True).start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        if self._tls is not None:
            try:  # on this thread: a client that never finishes its handshake holds only this one
                wrapped = self._tls.wrap_socket(conn, server_side=True)
            except (OSError, ssl.SSLError):
                conn.close()
                return
            with self._lock:  # stop() closes what is open now: the TLS socket, not the one it took over
                self._conns[self._conns.index(conn)] = conn = wrapped
        reader = conn.makefile("rb")
        try:
            while not self._stop.is_set():
                seen = self._read(reader, number)
                if seen is None:
                    return
                with self._lock:
                    self.requests.append(seen)
                    route = seen.path.split("?")[0]
                    n = self._counts.get(route, 0)
                    self._counts[route] = n + 1
                for step in self.handler(seen, n):
                    if step is CLOSE:
                        return
                    if isinstance(step, bytes):
                        conn.sendall(step)
                    elif isinstance(step, (int, float)) and self._stop.wait(step):
                        return
        except OSError:
            return
        finally:
            with contextlib.suppress(OSError):
                conn.close()

    @staticmethod
    def _read(reader: Any, number: int) -> Optional[Seen]:
        line = reader.readline()
        if not line.strip():
            return None
        method, path, _ = line.decode("latin-1").split(" ", 2)
        headers: Dict[str, str] = {}
        while True:
            field = reader.readline().decode("latin-1")
            if field in ("\r\n", "\n", ""):
                break
            name, _, value = field.partition(":")
            headers[name.strip().lower()] = value.strip()
        body = reader.read(int(headers.get("content-length", "0") or 0))
        return Seen(method, path, headers, body, time.monotonic(), number)


def raw_session(srv: Loopback, **kwargs: Any) -> SumeSession:
    """A session whose base URL is ``srv``'s /v1, real time, seeded jitter, no pacing."""
    kwargs.setdefault("policy", QUICK)
    kwargs.setdefault("fleet", None)
    kwargs.setdefault("rng", random.Random(7))
    return SumeSession(kwargs.pop("api_key", KEY), base_url=srv.url + "/v1", **kwargs)


def auth_headers(seen: Seen) -> Dict[str, str]:
    return {k: v for k, v in seen.headers.items() if k in ("x-api-key", "authorization")}


def trickled_body(seen: Seen, n: int) -> Iterable[Step]:
    """Headers at once, then a 30-byte body one byte every 0.3 s: under a 1 s read timeout,
    which each byte restarts, so only a deadline ends it early."""
    yield b"HTTP/1.1 200 OK\r\nContent-Length: 30\r\n\r\n"
    for _ in range(30):
        yield 0.3
        yield b"x"


def redirect_to(target: str) -> Handler:
    """A handler: a path with /start answers 302 to ``target``, any other 200 ``landed``."""

    def handler(seen: Seen, n: int) -> Iterable[Step]:
        if "/start" in seen.path:
            yield reply(302, b"", {"Location": target})
        else:
            yield reply(200, b"landed")

    return handler


def status_then_ok(status: int, headers: Optional[Dict[str, str]] = None) -> Handler:
    """A handler: the first request to a path gets ``status`` (empty body), the next ones 200."""

    def handler(seen: Seen, n: int) -> Iterable[Step]:
        yield reply(status, b"", headers) if n == 0 else reply(200, b"ok")

    return handler


def always(status: int, body: bytes = b"", headers: Optional[Dict[str, str]] = None) -> Handler:
    """A handler: every request gets the same answer."""

    def handler(seen: Seen, n: int) -> Iterable[Step]:
        yield reply(status, body, headers)

    return handler


def status_503_once_on_warm(seen: Seen, n: int) -> Iterable[Step]:
    """/v1/warm answers 503 once, then 200; every other path 200 with the path as the body."""
    if seen.path == "/v1/warm" and n == 0:
        yield reply(503, b'{"error":{"code":"busy"}}')
    else:
        yield reply(200, seen.path.encode())


class Socks5Relay:
    """A SOCKS5 proxy on 127.0.0.1 (no authentication, CONNECT only) relaying to loopback
    servers, as PySocks speaks to it under ``proxies={"https": "socks5h://..."}``. ``targets``
    lists every CONNECT it was asked for (host, port)."""

    def __init__(self) -> None:
        self.targets: List[Tuple[str, int]] = []
        self._stop = threading.Event()
        self._socks: List[socket.socket] = []
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.url = f"socks5h://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        for sock in [self._listener, *self._socks]:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._socks.append(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            reader = client.makefile("rb")
            _version, methods = reader.read(2)
            reader.read(methods)
            client.sendall(b"\x05\x00")  # no authentication
            _version, _command, _reserved, kind = reader.read(4)
            # A host name (socks5h: the proxy resolves it), else an IPv4 address.
            host = reader.read(reader.read(1)[0]).decode() if kind == 3 else socket.inet_ntoa(reader.read(4))
            port = int.from_bytes(reader.read(2), "big")
            self.targets.append((host, port))
            upstream = socket.create_connection((host, port), timeout=5)
            self._socks.append(upstream)
            client.sendall(b"\x05\x00\x00\x01\x7f\x00\x00\x01\x00\x00")  # granted
            threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()
            _pipe(client, upstream)
        except (OSError, ValueError):
            with contextlib.suppress(OSError):
                client.close()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    """Copy ``source`` to ``sink`` until either closes."""
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
