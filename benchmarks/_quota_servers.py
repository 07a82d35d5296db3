"""Quota servers with real servers' habits, on loopback, for the pacing benchmarks.

Written apart from ``sume_urllib3.testing`` on purpose (no shared code): a server tuned with
the library hides the library's bugs. Each is a real ``ThreadingHTTPServer`` on 127.0.0.1
writing every response (status line, headers, body) in one send with Nagle off, so no client
waits on a delayed ACK. Paths:

- any method on ``/v1/...``: counted and answered by the quota (200 with a small JSON job, 429
  or 503 with a Sume error envelope ``{"error": {"code", "message", "details"}, "request_id"}``);
- ``GET /_stats``: what the server counted since the last reset, as JSON (``Stats``);
- ``POST /_reset``: forget the counts and give the quota back in full.

The quotas (``KINDS`` holds the benchmark's settings, ``make(kind)`` builds one):

- ``TokenBucket(rate, burst, style)``: GCRA, ``burst`` turns at once refilled at ``rate`` per
  second. ``style`` says what it tells the client, as real servers do:

  - ``"ratelimit"``: ``RateLimit-Limit/-Remaining/-Reset`` on every response, Reset being the
    seconds until the bucket is full again **rounded up to a whole second** (redis-cell, Kong);
    a 429 adds ``Retry-After`` (seconds until the next token, rounded up, at least 1). No
    ``RateLimit-Policy``.
  - ``"ratelimit-policy"``: the same plus ``RateLimit-Policy: <burst>;w=<burst/rate>``.
  - ``"retry-after"``: a 429 carries ``Retry-After`` only (rounded up as above); no RateLimit
    headers anywhere (Stripe-like).
  - ``"bare"``: a 429 with no ``Retry-After`` and no rate-limit headers at all.

- ``FixedWindow(limit, window)``: ``limit`` calls per window of ``window`` whole seconds,
  windows aligned on the wall clock (Kong, envoyproxy/ratelimit); ``X-RateLimit-Limit/
  -Remaining/-Used/-Reset`` on every response, Reset as **epoch seconds** of the window's end
  (GitHub, X); over the limit a 429 with those headers and no ``Retry-After`` (GitHub's primary
  limit).
- ``Outage(seconds)``: 503 (no ``Retry-After``) for ``seconds`` from the first counted call
  after a reset, then 200 to everything: a load balancer with no healthy backend.

Time is injected (``clock`` for the quota and the success stamps, ``wall`` for the fixed
window), so tests drive a server on real sockets through exact schedules without sleeping.
Run one in-process (``QuotaServer``) or in its own process (``QuotaProcess``: the server's
Python then never competes with the clients' threads for the GIL); both expose ``url``,
``stats()`` and ``reset()``::

    with QuotaProcess("token-bucket") as server:       # 10/s, burst 10, RateLimit-* headers
        ... post to server.url + "/v1/jobs" ...
        print(server.stats().calls_per_key)
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import threading
import time
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing.connection import Connection
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from _loopback import SpawnedServer  # benchmarks/ is on the path wherever this is imported

Clock = Callable[[], float]
Headers = Dict[str, str]
Answer = Tuple[int, Headers]

#: How a token bucket talks about its quota (see the module docstring).
STYLES = ("ratelimit", "ratelimit-policy", "retry-after", "bare")
_EPS = 1e-9  # float slack in GCRA comparisons: a turn due "now" is not refused by rounding


def _whole_seconds(seconds: float, floor: int = 0) -> int:
    """``seconds`` rounded up to a whole second, as real servers send it (never below ``floor``)."""
    return max(floor, math.ceil(seconds - _EPS))


class TokenBucket:
    """GCRA: ``burst`` turns at once, one more every ``1/rate`` s; ``style`` picks the headers."""

    def __init__(self, rate: float = 10.0, burst: int = 10, style: str = "ratelimit") -> None:
        if not rate > 0 or burst < 1:
            raise ValueError(f"need rate > 0 and burst >= 1, got rate={rate!r} burst={burst!r}")
        if style not in STYLES:
            raise ValueError(f"style must be one of {STYLES}, got {style!r}")
        self.rate, self.burst, self.style = float(rate), int(burst), style
        self.tat = float("-inf")  # theoretical arrival time: the bucket starts full

    def describe(self) -> Dict[str, Any]:
        """The quota's parameters, for a results file."""
        return {"algorithm": "token bucket", "rate_per_s": self.rate, "burst": self.burst,
                "style": self.style}

    def reset(self) -> None:
        self.tat = float("-inf")

    def take(self, now: float, wall: float) -> Answer:
        step = 1.0 / self.rate
        tau = self.burst * step
        start = max(self.tat, now)
        admitted = start + step - now <= tau + _EPS
        if admitted:
            self.tat = start + step
        full_in = max(0.0, self.tat - now)  # seconds until the bucket holds `burst` again
        remaining = 0 if not admitted else max(0, min(self.burst, int((tau - full_in) / step + _EPS)))
        headers: Headers = {}
        if self.style in ("ratelimit", "ratelimit-policy"):
            headers["RateLimit-Limit"] = str(self.burst)
            headers["RateLimit-Remaining"] = str(remaining)
            headers["RateLimit-Reset"] = str(_whole_seconds(full_in))
            if self.style == "ratelimit-policy":
                headers["RateLimit-Policy"] = f"{self.burst};w={self.burst / self.rate:g}"
        if admitted:
            return 200, headers
        if self.style != "bare":
            next_token = start + step - tau - now
            headers["Retry-After"] = str(_whole_seconds(next_token, floor=1))
        return 429, headers


class FixedWindow:
    """``limit`` calls per ``window`` s, windows aligned on the wall clock; GitHub-style headers."""

    def __init__(self, limit: int = 20, window: int = 2) -> None:
        if limit < 1 or window < 1 or int(window) != window:
            raise ValueError(f"need limit >= 1 and a whole window >= 1 s, got {limit!r} per {window!r}")
        self.limit, self.window = int(limit), int(window)
        self.index, self.used = -1, 0

    def describe(self) -> Dict[str, Any]:
        return {"algorithm": "fixed window", "limit": self.limit, "window_s": self.window}

    def reset(self) -> None:
        self.index, self.used = -1, 0

    def take(self, now: float, wall: float) -> Answer:
        index = math.floor(wall / self.window)
        if index != self.index:
            self.index, self.used = index, 0
        admitted = self.used < self.limit
        self.used += admitted
        headers = {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(self.limit - self.used),
            "X-RateLimit-Used": str(self.used),
            "X-RateLimit-Reset": str((index + 1) * self.window),  # epoch seconds of the window's end
        }
        return (200 if admitted else 429), headers


class Outage:
    """503 for ``seconds`` from the first call after a reset, then 200 to everything."""

    def __init__(self, seconds: float = 3.0) -> None:
        if not seconds > 0:
            raise ValueError(f"need seconds > 0, got {seconds!r}")
        self.seconds = float(seconds)
        self.began: Optional[float] = None

    def describe(self) -> Dict[str, Any]:
        return {"algorithm": "outage", "outage_s": self.seconds}

    def reset(self) -> None:
        self.began = None

    def take(self, now: float, wall: float) -> Answer:
        if self.began is None:
            self.began = now
        return (503 if now < self.began + self.seconds else 200), {}


Quota = Any  # TokenBucket | FixedWindow | Outage: describe(), reset(), take(now, wall)

#: The benchmark's servers: name -> (what it is, how to build it).
KINDS: Dict[str, Tuple[str, Callable[[], Quota]]] = {
    "token-bucket": (
        "token bucket 10/s burst 10, RateLimit-Limit/Remaining/Reset (Reset whole seconds), "
        "429 + Retry-After",
        lambda: TokenBucket(10.0, 10, "ratelimit"),
    ),
    "token-bucket-policy": (
        "the same token bucket plus RateLimit-Policy: 10;w=1",
        lambda: TokenBucket(10.0, 10, "ratelimit-policy"),
    ),
    "fixed-window": (
        "fixed window 20 per 2 s on the clock, X-RateLimit-* (Reset epoch seconds), 429 without "
        "Retry-After",
        lambda: FixedWindow(20, 2),
    ),
    "retry-after": (
        "token bucket 10/s burst 10 answering 429 + Retry-After (whole seconds) only, no RateLimit headers",
        lambda: TokenBucket(10.0, 10, "retry-after"),
    ),
    "bare-429": (
        "token bucket 10/s burst 10 answering a bare 429: no Retry-After, no headers",
        lambda: TokenBucket(10.0, 10, "bare"),
    ),
    "outage-503": ("503 (no Retry-After) for the first 3 s, then 200", lambda: Outage(3.0)),
}


def make(kind: str) -> Quota:
    """A fresh quota of one of ``KINDS``."""
    if kind not in KINDS:
        raise ValueError(f"unknown server {kind!r}: one of {', '.join(KINDS)}")
    return KINDS[kind][1]()


# -- what a server counted -----------------------------------------------------------------------


@dataclass
class Stats:
    """Counts since the last reset. Times are ``clock()`` readings (time.monotonic by default)."""

    calls: int = 0
    ok: int = 0
    throttled: int = 0  # 429s
    unavailable: int = 0  # 503s
    success_times: List[float] = field(default_factory=list)
    #: calls and successes per Idempotency-Key (or X-Request-Id), to see a job executed twice
    calls_per_key: Dict[str, int] = field(default_factory=dict)
    oks_per_key: Dict[str, int] = field(default_factory=dict)

    @property
    def executed_twice(self) -> int:
        """Keys that succeeded more than once (a job the server executed twice)."""
        return sum(1 for n in self.oks_per_key.values() if n > 1)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Stats:
        return cls(**json.loads(text))


def _body(status: int, serial: int) -> bytes:
    if status == 200:
        doc: Dict[str, Any] = {"id": f"job_{serial:08d}", "status": "done"}
    else:
        code, message = (
            ("rate_limit_exceeded", "Too many requests") if status == 429
            else ("service_unavailable", "Service unavailable")
        )
        doc = {"error": {"code": code, "message": message, "details": {}}, "request_id": f"req_{serial:08d}"}
    return json.dumps(doc).encode()


_REASONS = {200: "OK", 404: "Not Found", 429: "Too Many Requests", 503: "Service Unavailable"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as API clients use it
    disable_nagle_algorithm = True  # TCP_NODELAY: with one send per response, no 40 ms stalls
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a benchmark's herd would print a line per call."""

    def _answer(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        head = f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}\r\n"
        head += "Content-Type: application/json\r\n"
        head += f"Content-Length: {len(body)}\r\n"
        head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        self.wfile.write(head.encode("latin-1") + b"\r\n" + body)  # one send

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        path = self.path.split("?", 1)[0]
        if path == "/_stats":
            self._answer(200, {}, self.server.stats().to_json().encode())
        elif path == "/_reset":
            self.server.reset()
            self._answer(200, {}, b"{}")
        elif path.startswith("/v1/"):
            key = self.headers.get("Idempotency-Key") or self.headers.get("X-Request-Id") or ""
            status, headers, serial = self.server.take(key)
            self._answer(status, headers, _body(status, serial))
        else:
            self._answer(404, {}, b'{"error":{"code":"not_found","message":"Not Found","details":{}}}')

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # a herd connects at once: a backlog of 5 would drop SYNs (1 s stalls)

    def __init__(self, quota: Quota, clock: Clock, wall: Clock) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.quota, self.clock, self.wall = quota, clock, wall
        self.lock = threading.Lock()
        self.counts = Stats()

    def take(self, key: str) -> Tuple[int, Headers, int]:
        with self.lock:
            now = self.clock()
            status, headers = self.quota.take(now, self.wall())
            c = self.counts
            c.calls += 1
            c.calls_per_key[key] = c.calls_per_key.get(key, 0) + 1
            if status == 200:
                c.ok += 1
                c.success_times.append(now)
                c.oks_per_key[key] = c.oks_per_key.get(key, 0) + 1
            elif status == 429:
                c.throttled += 1
            elif status == 503:
                c.unavailable += 1
            return status, headers, c.calls

    def stats(self) -> Stats:
        with self.lock:
            return Stats.from_json(self.counts.to_json())  # a copy

    def reset(self) -> None:
        with self.lock:
            self.quota.reset()
            self.counts = Stats()


class QuotaServer:
    """One quota served from a thread of this process; a context manager."""

    def __init__(self, quota: Quota, *, clock: Clock = time.monotonic, wall: Clock = time.time) -> None:
        self.quota = quota
        self._server = _Server(quota, clock, wall)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def stats(self) -> Stats:
        return self._server.stats()

    def reset(self) -> None:
        self._server.reset()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> QuotaServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- in its own process -----------------------------------------------------------------------------


def _serve_process(pipe: Connection, kind: str) -> None:
    """Process entry point: serve ``make(kind)``, report the URL, exit when the parent's pipe closes."""
    server = QuotaServer(make(kind))
    pipe.send(server.url)
    with contextlib.suppress(EOFError, OSError):
        pipe.recv()  # blocks until the parent closes its end (or goes away)
    server.close()


def _request(url: str, method: str, path: str) -> bytes:
    host, port = url.rsplit("/", 1)[-1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{method} {path}: {resp.status}")
        return body
    finally:
        conn.close()


class QuotaProcess(SpawnedServer):
    """``make(kind)`` served by a spawned process; ``stats()`` and ``reset()`` go over HTTP."""

    def __init__(self, kind: str) -> None:
        make(kind)  # an unknown kind fails here, not in the child
        super().__init__()
        self.kind = kind
        self.what = f"quota server {kind!r}"

    def _target(self) -> Callable[..., None]:
        return _serve_process

    def _args(self) -> Tuple[Any, ...]:
        return (self.kind,)

    def __enter__(self) -> QuotaProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def describe(self) -> Dict[str, Any]:
        return {"kind": self.kind, "summary": KINDS[self.kind][0], **make(self.kind).describe()}

    def stats(self) -> Stats:
        return Stats.from_json(_request(self.url, "GET", "/_stats").decode())

    def reset(self) -> None:
        _request(self.url, "POST", "/_reset")
