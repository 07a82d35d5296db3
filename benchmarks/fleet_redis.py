"""A herd of processes against one quota, with and without a RedisFleet, on real sockets.

A quota server of our own runs in another process: GCRA at 10 requests/s with a burst of
10; over the quota it answers 429 with ``Retry-After`` (whole seconds) and, on every
response, ``RateLimit-Limit/-Remaining/-Reset`` and ``RateLimit-Policy: 10;w=1``; each
response leaves in one ``sendall``. 6 worker processes x 10 threads post one request each
at the same instant; each request has 30 s and at most 7 attempts, and honours
Retry-After (plus a random spread) before retrying a 429.

Scenarios (one table): no fleet; a LocalFleet per process (learned, and configured at the
quota); a HostFleet shared by all through one file (learned); a RedisFleet shared by all
(configured ``rate="10/s", burst=10``, and learned); the same RedisFleets with redis-server
SIGKILLed 1 s into the herd. The quota server counts its calls and 429s per quarter second
after the release (each scenario's ``timeline``: what ``python benchmarks/render.py --figures``
draws for the pacing guide). Then the overhead of one
``acquire`` on loopback (p50/p99 over 5000 calls) and 30 sequential requests with Redis
down (port closed, and a stalled server) against no fleet.

Run: ``python benchmarks/fleet_redis.py`` (``--write`` to regenerate
``benchmarks/RESULTS-fleet-redis.md`` and ``benchmarks/results/fleet_redis.json``; ``--out FILE``
also writes the markdown to FILE). Needs redis-server on PATH and redis-py; about two minutes.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import multiprocessing
import os
import random
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import requests

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import _results  # noqa: E402

from sume_urllib3 import Policy, SumeSession  # noqa: E402
from sume_urllib3.contrib.redis import RedisFleet  # noqa: E402
from sume_urllib3.pacing import HostFleet  # noqa: E402
from sume_urllib3.pacing._fleet import Grant, LocalFleet, fleet_key  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402

PROCESSES, THREADS = 6, 10
RATE, BURST = 10.0, 10
DEADLINE = 30.0
MAX_ATTEMPTS = 7
OVERHEAD_CALLS, OVERHEAD_WARM_UP = 5000, 500
SEQUENTIAL = 30
#: the timeline's bins: a quarter second holds 2.5 of the quota's turns, and shows the waves of
#: retries that whole-second Retry-After values send back at once
INTERVAL = 0.25
# (stable id, label, fleet kind, seconds into the herd redis-server is SIGKILLed)
SCENARIOS: Tuple[Tuple[str, str, str, Optional[float]], ...] = (
    ("none", "no fleet", "none", None),
    ("local_learned", "LocalFleet per process (learned)", "local", None),
    ("local_configured", "LocalFleet per process (10/s burst 10)", "local-configured", None),
    ("host_learned", "HostFleet learned (one file)", "host", None),
    ("redis_configured", "RedisFleet configured (10/s burst 10)", "redis-configured", None),
    ("redis_learned", "RedisFleet learned", "redis", None),
    ("redis_configured_killed_1s", "RedisFleet configured, Redis killed at 1 s", "redis-configured", 1.0),
    ("redis_learned_killed_1s", "RedisFleet learned, Redis killed at 1 s", "redis", 1.0),
    (
        "redis_learned_killed_100ms",
        "RedisFleet learned, Redis killed at 0.1 s (mid slow start)",
        "redis",
        0.1,
    ),
)
DIRECT = False  # --direct: drive the fleet by hand (acquire, sleep, send, release) instead of SumeSession
API_KEY = "sk_bench_0123456789"
KID = fleet_key(API_KEY)

# -- the quota server ---------------------------------------------------------------------------


class Quota:
    """GCRA at RATE per second with BURST turns at once; counts every call per request id."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.tat = 0.0
            self.calls: Dict[str, int] = {}
            self.oks: Dict[str, int] = {}
            self.throttled = 0
            self.events: List[Tuple[float, int]] = []  # (time.monotonic(), status) of every call

    def take(self, rid: str) -> Tuple[int, Dict[str, str]]:
        step = 1.0 / RATE
        with self.lock:
            now = time.monotonic()
            self.calls[rid] = self.calls.get(rid, 0) + 1
            allow_at = self.tat - (BURST - 1) * step
            if now >= allow_at:
                self.tat = max(self.tat, now) + step
                self.oks[rid] = self.oks.get(rid, 0) + 1
                status, retry = 200, None
            else:
                self.throttled += 1
                status, retry = 429, allow_at - now
            self.events.append((now, status))
            left = max(0, min(BURST, int((now - (self.tat - BURST * step)) / step + 1e-9)))
            headers = {
                "RateLimit-Limit": str(BURST),
                "RateLimit-Remaining": str(left),
                "RateLimit-Reset": str(math.ceil(max(0.0, self.tat - now))),
                "RateLimit-Policy": f"{BURST};w={BURST / RATE:g}",
            }
            if retry is not None:
                headers["Retry-After"] = str(max(1, math.ceil(retry)))
            return status, headers


def _serve(conn: socket.socket, quota: Quota) -> None:
    buffer = b""
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            while b"\r\n\r\n" not in buffer:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buffer += chunk
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            fields = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
            length = int(fields.get("content-length", "0") or 0)
            while len(buffer) < length:
                buffer += conn.recv(65536)
            buffer = buffer[length:]
            path = lines[0].split(" ")[1]
            headers: Dict[str, str] = {}
            if path == "/stats":
                with quota.lock:
                    body = json.dumps({"calls": quota.calls, "oks": quota.oks, "throttled": quota.throttled,
                                       "events": quota.events})
                status, headers = 200, {}
            elif path == "/reset":
                quota.reset()
                status, headers, body = 200, {}, "{}"
            elif path == "/plain":
                status, headers, body = 200, {}, '{"ok":true}'
            else:
                status, headers = quota.take(fields.get("x-request-id", "?"))
                body = '{"ok":true}' if status == 200 else '{"error":{"code":"rate_limited"}}'
            data = body.encode()
            reason = "OK" if status == 200 else "Too Many Requests"
            out = f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
            out += f"Content-Length: {len(data)}\r\n"
            out += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            conn.sendall(out.encode() + b"\r\n" + data)  # one send per response


def quota_server(port_pipe: Any, stop_after: float) -> None:
    """Serve the quota on a free loopback port; a daemon process, and never longer than stop_after."""
    quota = Quota()
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(256)
    port_pipe.send(listener.getsockname()[1])
    threading.Timer(stop_after, lambda: os._exit(0)).start()
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_serve, args=(conn, quota), daemon=True).start()


# -- one client request --------------------------------------------------------------------------


def one_request(
    session: requests.Session, url: str, rid: str, fleet: Any, start: float, rng: random.Random
) -> Dict[str, Any]:
    """Acquire -> sleep -> send -> release until a 200, a give-up or MAX_ATTEMPTS; the record of it."""
    deadline = start + DEADLINE
    attempts, fallbacks, paced = 0, 0, 0.0
    retry: Optional[str] = None
    not_before = 0.0
    reason = ""
    while True:
        if fleet is not None:
            grant: Grant = fleet.acquire(KID, time_left=deadline - time.monotonic(), retry=retry,
                                         not_before=not_before)
            fallbacks += grant.fallback
            if grant.refused:
                reason = grant.refused
                break
            paced += max(0.0, grant.wait - not_before)
            time.sleep(grant.wait)
            if grant.again:
                continue
        else:
            grant = Grant()
            if not_before > deadline - time.monotonic():
                reason = "deadline"
                break
            time.sleep(not_before)
        attempts += 1
        try:
            resp = session.post(url, data=b'{"prompt":"x"}', headers={"X-Request-Id": rid}, timeout=10)
            status, headers = resp.status_code, resp.headers
        except requests.RequestException:
            status, headers = None, None
        if fleet is not None:
            fleet.release(KID, grant, status, headers)
        if status == 200:
            return {"ok": True, "attempts": attempts, "end": time.monotonic() - start,
                    "fallbacks": fallbacks, "paced": paced, "reason": ""}
        if attempts >= MAX_ATTEMPTS:
            reason = f"{attempts} attempts"
            break
        ra = float(headers.get("Retry-After", "1")) if headers is not None else 0.5
        # The policy's own wait: Retry-After as a floor plus a spread that grows with the attempt.
        not_before = ra + rng.uniform(0.0, 0.5 * 2 ** (attempts - 1))
        retry = "throttle" if status == 429 else "error"
    return {"ok": False, "attempts": attempts, "end": time.monotonic() - start,
            "fallbacks": fallbacks, "paced": paced, "reason": reason}


def session_request(session: Any, url: str, rid: str, start: float) -> Dict[str, Any]:
    """One request through SumeSession(fleet=...): its policy, its pacing; the record of it."""
    try:
        resp = session.post(url, json={"prompt": "x"}, headers={"X-Request-Id": rid})
    except Exception as exc:  # a give-up raised anyway, or a bug: counted, never hidden
        return {"ok": False, "attempts": 0, "end": time.monotonic() - start, "fallbacks": 0,
                "paced": 0.0, "reason": f"{type(exc).__name__}: {exc}"[:80]}
    record = resp.sume
    return {"ok": resp.status_code == 200, "attempts": record.attempts, "end": time.monotonic() - start,
            "fallbacks": record.fleet_fallbacks, "paced": record.paced,
            "reason": "" if resp.status_code == 200 else record.reason}


def make_fleet(kind: str, redis_url: str, prefix: str, host_path: str) -> Any:
    if kind == "none":
        return None
    if kind == "local":
        return LocalFleet()
    if kind == "local-configured":
        return LocalFleet(rate=RATE, burst=BURST)
    if kind == "redis-configured":
        return RedisFleet(redis_url, rate=RATE, burst=BURST, prefix=prefix)
    if kind == "redis":
        return RedisFleet(redis_url, prefix=prefix)
    if kind == "host":
        return HostFleet(host_path)
    raise ValueError(kind)


def worker(index: int, kind: str, url: str, redis_url: str, prefix: str, host_path: str, go: Any,
           start_at: Any, results: Any) -> None:
    """One process: its own fleet object, THREADS threads posting once each when `go` is set."""
    fleet = make_fleet(kind, redis_url, prefix, host_path)
    if isinstance(fleet, HostFleet):
        # A long-running worker has the file open and set up: its first use waits up to 1 s for that.
        fleet.acquire(fleet_key("warm-up"), time_left=1.0)
    if isinstance(fleet, RedisFleet):
        # A long-running worker has its connections open: open one per thread before the herd.
        warm_key = fleet_key("warm-up")
        warm = [threading.Thread(target=fleet.acquire, args=(warm_key,), kwargs={"time_left": 1.0})
                for _ in range(THREADS)]
        for th in warm:
            th.start()
        for th in warm:
            th.join()
    out: List[Dict[str, Any]] = []
    lock = threading.Lock()

    def run(t: int) -> None:
        rng = random.Random(index * 100 + t)
        if DIRECT:
            session = requests.Session()
        else:
            session = SumeSession(API_KEY, base_url=url.rsplit("/", 1)[0], fleet=fleet,
                                  policy=Policy(max_elapsed=DEADLINE), raise_on_give_up=False)
        go.wait()
        if DIRECT:
            record = one_request(session, url, f"p{index}t{t}", fleet, start_at.value, rng)
        else:
            record = session_request(session, url, f"p{index}t{t}", start_at.value)
        with lock:
            out.append(record)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    errors = fleet.errors if isinstance(fleet, RedisFleet) else 0
    for record in out:
        record["redis_errors"] = errors / len(out)
    results.put(out)


def herd(kind: str, base: str, redis: RedisServer, kill_at: Optional[float] = None) -> Dict[str, Any]:
    """Run one scenario; the server's counts and the clients' records."""
    requests.post(base + "/reset", timeout=5)
    ctx = multiprocessing.get_context("fork")
    go, start_at, results = ctx.Event(), ctx.Value("d", 0.0), ctx.Queue()
    prefix = f"bench{random.randrange(10**9)}"
    folder = tempfile.mkdtemp(prefix="sume-bench-")  # a new host file per run, as a new deploy has
    host_path = os.path.join(folder, "bench.fleet")
    procs = [ctx.Process(target=worker, args=(i, kind, base + "/v1/generate", redis.url, prefix, host_path,
                                              go, start_at, results)) for i in range(PROCESSES)]
    for p in procs:
        p.start()
    time.sleep(1.5)  # every process connected and its threads waiting
    start_at.value = time.monotonic()
    go.set()
    if kill_at is not None:
        time.sleep(kill_at)
        redis.kill()
    records = [r for _ in procs for r in results.get(timeout=DEADLINE + 30)]
    for p in procs:
        p.join(timeout=10)
    stats = requests.get(base + "/stats", timeout=5).json()
    shutil.rmtree(folder, ignore_errors=True)
    if kill_at is not None:
        redis.start()
    return {"records": records, "stats": stats, "start": start_at.value}


def timeline(events: Sequence[Sequence[float]], start: float) -> Dict[str, Any]:
    """The server's calls and 429s per INTERVAL after the release, to the last call's interval.

    The server and this process read one clock (``time.monotonic`` is system-wide on Linux), so
    the server's times are measured from the instant the herd was released.
    """
    bins = [max(0, int((at - start) / INTERVAL)) for at, _ in events]
    calls, throttled = [0] * (max(bins, default=0) + 1), [0] * (max(bins, default=0) + 1)
    for at, (_, status) in zip(bins, events):
        calls[at] += 1
        throttled[at] += status == 429
    return {"interval_s": INTERVAL, "calls": calls, "429s": throttled}


def summarize(name: str, run: Dict[str, Any]) -> Dict[str, Any]:
    """One scenario's row: what the server counted and what the clients saw."""
    records, stats = run["records"], run["stats"]
    n = PROCESSES * THREADS
    oks = [r for r in records if r["ok"]]
    calls = sum(stats["calls"].values())
    twice = sum(1 for v in stats["oks"].values() if v > 1)
    reasons = sorted({r["reason"] for r in records if not r["ok"]})
    return {
        "scenario": name,
        "succeeded": len(oks),
        "total": n,
        "calls": calls,
        "success": f"{len(oks)}/{n}",
        "calls_per_request": calls / n,
        "429s": stats["throttled"],
        "last_success": max((r["end"] for r in oks), default=float("nan")),
        "fallbacks": sum(r["fallbacks"] for r in records),
        "executed_twice": twice,
        "redis_errors": round(sum(r["redis_errors"] for r in records)),
        "gave_up": "; ".join(reasons)[:80] or "-",
        "timeline": timeline(stats["events"], run["start"]),
    }


# -- overhead ----------------------------------------------------------------------------------------


def overhead(redis: RedisServer) -> Dict[str, float]:
    """acquire() and release() wall time on loopback, p50 and p99 over 5000 calls each."""
    fleet = RedisFleet(redis.url, rate=1e6, burst=1_000_000, prefix="overhead")
    learned = RedisFleet(redis.url, prefix="overhead-learned")
    headers = {
        "RateLimit-Limit": "1000000", "RateLimit-Remaining": "999999", "RateLimit-Policy": "1000000;w=1",
    }
    acq: List[float] = []
    rel: List[float] = []
    for i in range(OVERHEAD_WARM_UP + OVERHEAD_CALLS):
        t0 = time.perf_counter()
        grant = fleet.acquire(KID, time_left=30.0)
        t1 = time.perf_counter()
        g2 = learned.acquire(KID, time_left=30.0)
        t2 = time.perf_counter()
        learned.release(KID, g2, 200, headers)
        t3 = time.perf_counter()
        if grant.fallback or g2.fallback:
            raise RuntimeError("Redis failed during the overhead measurement")
        if i >= OVERHEAD_WARM_UP:
            acq.append(t1 - t0)
            rel.append(t3 - t2)
    q = statistics.quantiles
    return {
        "acquire_p50_ms": statistics.median(acq) * 1e3, "acquire_p99_ms": q(acq, n=100)[98] * 1e3,
        "release_p50_ms": statistics.median(rel) * 1e3, "release_p99_ms": q(rel, n=100)[98] * 1e3,
    }


def sequential(base: str, fleet: Any) -> float:
    """Seconds for SEQUENTIAL requests in a row to a plain 200 endpoint through `fleet`."""
    if DIRECT:
        plain = requests.Session()
        plain.post(base + "/plain", timeout=5)
        t0 = time.perf_counter()
        for _ in range(SEQUENTIAL):
            grant = fleet.acquire(KID, time_left=30.0) if fleet is not None else Grant()
            time.sleep(grant.wait)
            resp = plain.post(base + "/plain", timeout=5)
            if fleet is not None:
                fleet.release(KID, grant, resp.status_code, resp.headers)
        return time.perf_counter() - t0
    session = SumeSession(API_KEY, base_url=base, fleet=fleet)  # new sessions: both connect once
    t0 = time.perf_counter()
    for _ in range(SEQUENTIAL):
        session.post(base + "/plain")
    return time.perf_counter() - t0


def redis_down(base: str, redis: RedisServer) -> Dict[str, float]:
    """SEQUENTIAL requests: no fleet, RedisFleet on a closed port, RedisFleet on a stalled Redis."""
    from tests.redis_server import free_port

    out = {"no_fleet_s": min(sequential(base, None) for _ in range(3))}
    closed = RedisFleet(f"redis://127.0.0.1:{free_port()}/0", rate=1000.0, burst=1000)
    out["closed_port_s"] = sequential(base, closed)
    out["closed_port_fallbacks"] = closed.fallbacks
    stalled = RedisFleet(redis.url, rate=1000.0, burst=1000, prefix="stalled")
    stalled.acquire(KID, time_left=1.0)
    redis.pause()
    try:
        out["stalled_s"] = sequential(base, stalled)
    finally:
        redis.resume()
    out["stalled_fallbacks"] = stalled.fallbacks
    out["stalled_redis_calls_failed"] = stalled.errors
    return out


# -- main ----------------------------------------------------------------------------------------------


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Run every scenario, the overhead and the Redis-down costs; print (and optionally write) the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", default=None, help="also write the results (markdown) here")
    parser.add_argument(
        "--write",
        action="store_true",
        help="write benchmarks/RESULTS-fleet-redis.md and benchmarks/results/fleet_redis.json",
    )
    parser.add_argument("--only", default=None, help="comma-separated scenario ids, kinds or labels")
    parser.add_argument("--direct", action="store_true",
                        help="drive the fleets by hand (acquire, sleep, send, release), not by SumeSession")
    args = parser.parse_args(argv)
    # A partial or different run must never replace the committed figures.
    _results.refuse_partial(parser, args, "only", "direct")
    global DIRECT
    DIRECT = args.direct
    scenarios = list(SCENARIOS)
    if args.only:
        wanted = set(args.only.split(","))
        scenarios = [s for s in scenarios if wanted & {s[0], s[1], s[2]}]
        if not scenarios:
            parser.error(f"--only {args.only!r} names no scenario; ids: {', '.join(s[0] for s in SCENARIOS)}")
    redis = RedisServer.find()
    if redis is None:
        sys.exit("redis-server not found (apt-get install redis-server)")
    reader, writer = multiprocessing.Pipe()
    ctx = multiprocessing.get_context("fork")
    server = ctx.Process(target=quota_server, args=(writer, 900.0), daemon=True)
    server.start()
    base = f"http://127.0.0.1:{reader.recv()}"
    rows = []
    try:
        with redis:
            for sid, label, kind, kill in scenarios:
                row = summarize(label, herd(kind, base, redis, kill))
                row.update(id=sid, kind=kind, redis_killed_at_s=kill)
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "timeline"}), flush=True)
            over = overhead(redis)
            print(json.dumps(over), flush=True)
            down = redis_down(base, redis)
            print(json.dumps(down), flush=True)
    finally:
        server.terminate()
    report = render(rows, over, down)
    print(report)
    targets = [args.out] if args.out else []
    if args.write:
        targets.append(os.path.join(HERE, "RESULTS-fleet-redis.md"))
    for target in targets:
        with open(target, "w", encoding="utf-8") as fh:
            fh.write(report)
        print(f"wrote {os.path.relpath(target, ROOT)}")
    if args.write:
        _results.write("fleet_redis", figures(rows, over, down))


def figures(rows: List[Dict[str, Any]], over: Dict[str, float], down: Dict[str, float]) -> Dict[str, Any]:
    """Everything ``--write`` records: the set-up, each scenario by id, the overhead, Redis down."""
    default_timeout = inspect.signature(RedisFleet).parameters["timeout"].default
    scenarios = {
        r["id"]: {
            "label": r["scenario"],
            "fleet": r["kind"],
            "redis_killed_at_s": r["redis_killed_at_s"],
            "succeeded": r["succeeded"],
            "total": r["total"],
            "calls": r["calls"],
            "calls_per_request": r["calls_per_request"],
            "429s": r["429s"],
            "last_success_s": None if math.isnan(r["last_success"]) else r["last_success"],
            "executed_twice": r["executed_twice"],
            "fallbacks": r["fallbacks"],
            "failed_redis_calls": r["redis_errors"],
            "gave_up": "" if r["gave_up"] == "-" else r["gave_up"],
            "timeline": r["timeline"],
        }
        for r in rows
    }
    return {
        "processes": PROCESSES,
        "threads": THREADS,
        "requests": PROCESSES * THREADS,
        "quota": {"rate_per_s": RATE, "burst": BURST, "window_s": BURST / RATE,
                  "policy_header": f"{BURST};w={BURST / RATE:g}"},
        "request_max_elapsed_s": DEADLINE,
        "scenario_order": [r["id"] for r in rows],
        "scenarios": scenarios,
        "executed_twice_total": sum(r["executed_twice"] for r in rows),
        "redis_round_trip": {
            "calls": OVERHEAD_CALLS,
            "warm_up_calls": OVERHEAD_WARM_UP,
            "acquire_p50_ms": over["acquire_p50_ms"],
            "acquire_p99_ms": over["acquire_p99_ms"],
            "release_p50_ms": over["release_p50_ms"],
            "release_p99_ms": over["release_p99_ms"],
        },
        "redis_down": {
            "sequential_requests": SEQUENTIAL,
            "redis_timeout_ms": default_timeout * 1e3,
            "no_fleet_s": down["no_fleet_s"],
            "closed_port": {
                "seconds": down["closed_port_s"],
                "extra_s": down["closed_port_s"] - down["no_fleet_s"],
                "fallbacks": int(down["closed_port_fallbacks"]),
            },
            "stalled": {
                "seconds": down["stalled_s"],
                "extra_s": down["stalled_s"] - down["no_fleet_s"],
                "fallbacks": int(down["stalled_fallbacks"]),
                "timed_out_calls": int(down["stalled_redis_calls_failed"]),
            },
        },
    }


def render(rows: List[Dict[str, Any]], over: Dict[str, float], down: Dict[str, float]) -> str:
    """The markdown report."""
    lines = [
        f"# RedisFleet: {PROCESSES} processes x {THREADS} threads against one quota "
        f"({RATE:g} req/s, burst {BURST})",
        "",
        f"`{_results.command_line()}` on {os.cpu_count()} CPUs; quota server in its own process;",
        f"each request: {DEADLINE:g} s, at most {MAX_ATTEMPTS} attempts, Retry-After + random spread "
        "before a retry (own loop)." if DIRECT else
        f"each request: one `SumeSession(fleet=...).post` with `Policy(max_elapsed={DEADLINE:g})`, "
        "one session per thread, one fleet object per process.",
        "",
        "| scenario | success | calls/request | 429s | last success (s) | fallbacks | failed Redis calls "
        "| executed twice | gave up |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['scenario']} | {r['success']} | {r['calls_per_request']:.2f} | {r['429s']} | "
            f"{r['last_success']:.2f} | {r['fallbacks']} | {r['redis_errors']} | {r['executed_twice']} "
            f"| {r['gave_up']} |"
        )
    lines += [
        "",
        "Each RedisFleet worker opens its connections (one per thread) before the herd, as a "
        "long-running worker has them open; a cold pool under CPU contention can hit the "
        f"{inspect.signature(RedisFleet).parameters['timeout'].default * 1e3:g} ms default timeout "
        "at the start and pace locally for a second (`timeout=` raises it).",
        "",
        f"Overhead per call on loopback ({OVERHEAD_CALLS} calls, after {OVERHEAD_WARM_UP} warm-up):",
        "",
        f"- acquire (one EVALSHA): p50 {over['acquire_p50_ms']:.3f} ms, p99 {over['acquire_p99_ms']:.3f} ms",
        f"- release with RateLimit headers (one EVALSHA): p50 {over['release_p50_ms']:.3f} ms, "
        f"p99 {over['release_p99_ms']:.3f} ms",
        "",
        f"{SEQUENTIAL} sequential requests with Redis down:",
        "",
        f"- no fleet: {down['no_fleet_s']:.3f} s",
        f"- RedisFleet, Redis port closed: {down['closed_port_s']:.3f} s "
        f"(+{down['closed_port_s'] - down['no_fleet_s']:.3f} s; "
        f"{down['closed_port_fallbacks']:.0f} fallbacks)",
        f"- RedisFleet, Redis stalled (SIGSTOP): {down['stalled_s']:.3f} s "
        f"(+{down['stalled_s'] - down['no_fleet_s']:.3f} s; "
        f"{down['stalled_redis_calls_failed']:.0f} Redis calls timed out, "
        f"{down['stalled_fallbacks']:.0f} fallbacks)",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
