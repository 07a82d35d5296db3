"""The pacing server matrix: every kind of quota server x every client shape, paced and unpaced.

Pacing is only worth having if it never does worse than no pacing. This measures it as a new
user would, on real sockets and in real time (every sleep happens), against quota servers
written apart from the library (``benchmarks/_quota_servers.py``, no code shared with
FakeSume), each in its own process:

- ``token-bucket``: 10/s burst 10, ``RateLimit-Limit/-Remaining/-Reset`` with Reset in whole
  seconds rounded up, no ``RateLimit-Policy``; a 429 adds ``Retry-After`` (whole seconds);
- ``token-bucket-policy``: the same plus ``RateLimit-Policy: 10;w=1``;
- ``fixed-window``: 20 per 2 s on the clock (10/s on average), ``X-RateLimit-*`` with Reset as
  epoch seconds (GitHub), a 429 without ``Retry-After``; every run is released 50 ms after a
  window starts, so its ideal is the same each time;
- ``retry-after``: the 10/s burst 10 bucket answering 429 + ``Retry-After`` only;
- ``bare-429``: the same bucket answering a bare 429 (no ``Retry-After``, no headers);
- ``outage-503``: 503 (no ``Retry-After``) for the first 3 s of the run, then 200.

Client shapes: ``1x60`` (one process, 60 threads, 60 POSTs released at once), ``6x10`` (6
processes x 10 threads released at once, sharing a ``RedisFleet`` on a real redis-server this
script starts on a free loopback port), ``lone`` (one thread, 30 POSTs one after another).
Clients: ``LocalFleet(rate="10/s")``, ``LocalFleet()`` (pace learned), ``RedisFleet(url,
rate="10/s")``, ``RedisFleet(url)`` (learned) and ``fleet=None`` (unpaced); every session has
``Policy(max_elapsed=30)`` and the library's other defaults. LocalFleet is not shared between
processes, so the ``6x10`` shape runs the Redis fleets and the unpaced client only.

Each cell: success, server calls per request, 429s, 503s, time from the release to the last
success the server admitted, and that time over the ideal. The ideal is the server's own
capacity (60 requests on a 10/s burst 10 bucket take 5 s; on the 20 per 2 s window 3.95 s; the
outage 3 s); for a configured client, the slower of that and its own pace (``rate="10/s"`` with
the default burst of 1 spaces n requests over (n - 1) / 10 s: 5.9 s for 60).
The issue-22 targets are checked for every paced cell and printed.

Every cell runs ``--repeats`` times (3), interleaved with the other clients of its row, and
reports its median run (by last success) whole, with the spread of all its runs.

Run: ``python benchmarks/pacing_matrix.py`` (about 25 minutes), ``--quick`` for a smoke (smaller
herds), ``--write`` to record ``benchmarks/results/pacing_matrix.json`` (full default run only).
Needs redis-server on PATH and redis-py.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import sys
import threading
import time
from collections import Counter
from typing import Any, Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import _quota_servers as qs  # noqa: E402
import _results  # noqa: E402

from sume_urllib3 import Policy, SumeSession, sume_record  # noqa: E402
from sume_urllib3.contrib.redis import RedisFleet  # noqa: E402
from sume_urllib3.pacing import LocalFleet  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402

API_KEY = "sk_bench_matrix_0123456789"
MAX_ELAPSED = 30.0
REPEATS = 3  # runs of every cell: one run of a herd is noisy on a shared 2-core machine
RATE = "10/s"
WINDOW_OFFSET = 0.05  # fixed window: release this long after a window starts
#: (processes, threads per process, requests per thread) of each shape, full and --quick
SHAPES: Dict[str, Tuple[int, int, int]] = {"1x60": (1, 60, 1), "6x10": (6, 10, 1), "lone": (1, 1, 30)}
QUICK_SHAPES: Dict[str, Tuple[int, int, int]] = {"1x60": (1, 30, 1), "6x10": (3, 10, 1), "lone": (1, 1, 25)}
#: client id -> how a user writes it
CLIENTS: Dict[str, str] = {
    "local-configured": f'LocalFleet(rate="{RATE}")',
    "local-learned": "LocalFleet()",
    "redis-configured": f'RedisFleet(url, rate="{RATE}")',
    "redis-learned": "RedisFleet(url)",
    "none": "fleet=None",
}
#: which clients run in each shape: a LocalFleet is not shared across processes
SHAPE_CLIENTS: Dict[str, Tuple[str, ...]] = {
    "1x60": tuple(CLIENTS),
    "6x10": ("redis-configured", "redis-learned", "none"),
    "lone": tuple(CLIENTS),
}
SERVERS: Tuple[str, ...] = tuple(qs.KINDS)

# The issue-22 targets.
CONFIGURED_CALLS, CONFIGURED_TIME = 1.05, 1.2
LEARNED_CALLS, LEARNED_TIME = 1.3, 1.6
LOCAL_VS_REDIS = 0.10
#: the per-cell checks, in the order they are printed
TARGETS = ("success_vs_unpaced", "calls_vs_unpaced", "all_succeeded", "calls_within_cap", "time_within_cap")


def make_fleet(client: str, redis_url: str) -> Any:
    if client == "local-configured":
        return LocalFleet(rate=RATE)
    if client == "local-learned":
        return LocalFleet()
    if client == "redis-configured":
        return RedisFleet(redis_url, rate=RATE)
    if client == "redis-learned":
        return RedisFleet(redis_url)
    if client == "none":
        return None
    raise ValueError(f"unknown client {client!r}")


# -- one process of a run -------------------------------------------------------------------------


def one_request(session: SumeSession, name: str) -> Dict[str, Any]:
    """POST once through the session; what came of it (never raises)."""
    try:
        resp = session.post("/jobs", json={"prompt": "x"}, headers={"X-Request-Id": name})
        record = sume_record(resp)
        ok = resp.status_code == 200
        reason = "" if ok else (record.reason if record else f"HTTP {resp.status_code}")
        refused = bool(record and record.fleet_refused)
    except Exception as exc:  # a give-up raised anyway, or a bug: counted, never hidden
        record = sume_record(exc)
        ok, reason = False, (record.reason if record else f"{type(exc).__name__}: {exc}")
        refused = bool(record and record.fleet_refused)
    return {"ok": ok, "end": time.monotonic(), "reason": reason[:120], "refused": refused,
            "attempts": record.attempts if record else 0, "paced": record.paced if record else 0.0,
            "fallbacks": record.fleet_fallbacks if record else 0}


def worker(index: int, shape: Tuple[int, int, int], client: str, url: str, redis_url: str,
           ready: Any, go: Any, out: Any) -> None:
    """One process: its own fleet object, a session per thread, posting when ``go`` is set."""
    _, threads, per_thread = shape
    fleet = make_fleet(client, redis_url)
    policy = Policy(max_elapsed=MAX_ELAPSED)
    records: List[Dict[str, Any]] = []
    lock = threading.Lock()

    def run(t: int) -> None:
        session = SumeSession(API_KEY, base_url=url + "/v1", fleet=fleet, policy=policy,
                              raise_on_give_up=False)
        ready.wait(60)
        go.wait(60)
        for r in range(per_thread):
            record = one_request(session, f"p{index}t{t}r{r}")
            with lock:
                records.append(record)

    pool = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    out.put(records)


# -- one cell ---------------------------------------------------------------------------------------


def ideal(server: str, shape: Tuple[int, int, int]) -> float:
    """The least time to the last success the server allows (its capacity; round trips left out)."""
    processes, threads, per_thread = shape
    n = processes * threads * per_thread
    quota = qs.make(server)
    if isinstance(quota, qs.TokenBucket):
        return max(0.0, (n - quota.burst) / quota.rate)
    if isinstance(quota, qs.FixedWindow):
        return max(0.0, (math.ceil(n / quota.limit) - 1) * quota.window - WINDOW_OFFSET)
    if isinstance(quota, qs.Outage):
        return quota.seconds
    raise TypeError(type(quota).__name__)


def pace_floor(client: str, shape: Tuple[int, int, int]) -> Optional[float]:
    """For a configured client, the least time its own pace allows: ``rate="10/s"`` keeps the
    library's default burst of 1, so n requests take (n - 1) / 10 s whatever the server admits."""
    if not client.endswith("configured"):
        return None
    processes, threads, per_thread = shape
    return (processes * threads * per_thread - 1) / float(RATE.split("/")[0])


def flush(redis_url: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        client.flushall()
    finally:
        client.close()


def run_cell(server: qs.QuotaProcess, shape_name: str, shape: Tuple[int, int, int], client: str,
             redis_url: str) -> Dict[str, Any]:
    """Release the herd (or the lone client) once; the server's counts and the clients' records."""
    processes, threads, per_thread = shape
    flush(redis_url)
    server.reset()
    ctx = multiprocessing.get_context("fork")
    ready, go, out = ctx.Barrier(processes * threads + 1), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(i, shape, client, server.url, redis_url, ready, go, out))
             for i in range(processes)]
    for p in procs:
        p.start()
    ready.wait(60)  # every thread of every process has its session and waits for `go`
    quota = qs.make(server.kind)
    if isinstance(quota, qs.FixedWindow):
        now = time.time()
        time.sleep((math.floor(now / quota.window) + 1) * quota.window + WINDOW_OFFSET - now)
    start = time.monotonic()
    go.set()
    records = [r for _ in procs for r in out.get(timeout=MAX_ELAPSED * per_thread + 60)]
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()
    stats = server.stats()
    return summarize(server.kind, shape_name, shape, client, start, records, stats)


def summarize(server: str, shape_name: str, shape: Tuple[int, int, int], client: str, start: float,
              records: List[Dict[str, Any]], stats: qs.Stats) -> Dict[str, Any]:
    processes, threads, per_thread = shape
    n = processes * threads * per_thread
    if len(records) != n:
        raise RuntimeError(f"{server} {shape_name} {client}: {len(records)} records for {n} requests")
    succeeded = sum(1 for r in records if r["ok"])
    last = max(stats.success_times) - start if stats.success_times else None
    best = ideal(server, shape)
    floor = pace_floor(client, shape)
    target = max(best, floor or 0.0)
    reasons = Counter(r["reason"] for r in records if not r["ok"])
    return {
        "server": server,
        "shape": shape_name,
        "client": client,
        "requests": n,
        "succeeded": succeeded,
        "server_oks": stats.ok,
        "calls": stats.calls,
        "calls_per_request": stats.calls / n,
        "429s": stats.throttled,
        "503s": stats.unavailable,
        "last_success_s": last,
        "ideal_s": best,
        "pace_floor_s": floor,
        "vs_ideal": (last / target) if last is not None and target > 0 else None,
        "last_answer_s": max(r["end"] for r in records) - start,
        "refused_unsent": sum(1 for r in records if r["refused"]),
        # Turns a RedisFleet served locally because Redis failed or was slow (its 50 ms
        # timeout on a loaded machine): those attempts were not paced fleet-wide.
        "fleet_fallbacks": sum(r["fallbacks"] for r in records),
        "executed_twice": stats.executed_twice,
        "gave_up": [{"reason": reason, "count": count} for reason, count in reasons.most_common(3)],
    }


def median_run(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The run whose last success is the median (a run with failures counts as the slowest),
    whole, with the spread of every run: a cell is one real run, never a mix of several."""
    def key(run: Dict[str, Any]) -> Tuple[int, float]:
        last = run["last_success_s"]
        return (run["requests"] - run["succeeded"], math.inf if last is None else last)

    ordered = sorted(runs, key=key)
    cell = dict(ordered[(len(ordered) - 1) // 2])
    lasts = [r["last_success_s"] for r in runs if r["last_success_s"] is not None]
    cell["runs"] = len(runs)
    cell["spread"] = {
        "succeeded": [min(r["succeeded"] for r in runs), max(r["succeeded"] for r in runs)],
        "calls_per_request": [min(r["calls_per_request"] for r in runs),
                              max(r["calls_per_request"] for r in runs)],
        "last_success_s": [min(lasts), max(lasts)] if lasts else None,
    }
    return cell


# -- targets -------------------------------------------------------------------------------------------


def kind_of_pace(cell: Dict[str, Any]) -> Optional[str]:
    """"configured" (a configured rate or an exact RateLimit-Policy), "learned", or None (unpaced)."""
    if cell["client"] == "none":
        return None
    if cell["client"].endswith("configured") or cell["server"] == "token-bucket-policy":
        return "configured"
    return "learned"


def check(cell: Dict[str, Any], unpaced: Dict[str, Any]) -> Dict[str, Any]:
    """The issue-22 targets for one paced cell: each True/False, or None where it does not apply.

    The absolute targets (calls per request, time over the ideal) are about a quota's pace; the
    503 outage has none (a 503 without Retry-After must be retried), so there only the
    comparison with the unpaced client applies.
    """
    pace = kind_of_pace(cell)
    calls_cap, time_cap = (CONFIGURED_CALLS, CONFIGURED_TIME) if pace == "configured" else (
        LEARNED_CALLS, LEARNED_TIME)
    quota = cell["server"] != "outage-503"
    full = cell["succeeded"] == cell["requests"]
    return {
        "pace": pace,
        "success_vs_unpaced": cell["succeeded"] >= unpaced["succeeded"],
        "calls_vs_unpaced": cell["calls_per_request"] <= unpaced["calls_per_request"] + 1e-9,
        "all_succeeded": full if quota else None,
        "calls_cap": calls_cap,
        "calls_within_cap": (cell["calls_per_request"] <= calls_cap) if quota else None,
        "time_cap": time_cap,
        "time_within_cap": (cell["vs_ideal"] is not None and cell["vs_ideal"] <= time_cap) if quota else None,
    }


def _gap(a: Optional[float], b: Optional[float]) -> Optional[float]:
    """How far apart two figures are, relative to the smaller one (None when either is missing)."""
    if a is None or b is None:
        return None
    return abs(b - a) / max(min(a, b), 1e-9)


def local_vs_redis(cells: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """LocalFleet (one process) against RedisFleet (one process, and 6 processes): the same spec."""
    index = {(c["server"], c["shape"], c["client"]): c for c in cells}
    rows: List[Dict[str, Any]] = []
    for server in dict.fromkeys(c["server"] for c in cells):
        for pace in ("configured", "learned"):
            for local_shape, redis_shape in (("1x60", "1x60"), ("1x60", "6x10"), ("lone", "lone")):
                local = index.get((server, local_shape, f"local-{pace}"))
                redis = index.get((server, redis_shape, f"redis-{pace}"))
                if local is None or redis is None:
                    continue

                gaps = {name: _gap(local[key], redis[key]) for name, key in (
                    ("last_success", "last_success_s"), ("calls_per_request", "calls_per_request"),
                    ("succeeded", "succeeded"))}
                rows.append({
                    "server": server, "pace": pace, "local_shape": local_shape, "redis_shape": redis_shape,
                    "gaps": gaps,
                    "within": all(g is not None and g <= LOCAL_VS_REDIS for g in gaps.values()),
                })
    return rows


# -- printing ---------------------------------------------------------------------------------------------


def cell_text(cell: Dict[str, Any]) -> str:
    last = "-" if cell["last_success_s"] is None else f"{cell['last_success_s']:.2f}s"
    x = "" if cell["vs_ideal"] is None else f" ({cell['vs_ideal']:.2f}x)"
    fallbacks = f" {cell['fleet_fallbacks']} fallbacks" if cell.get("fleet_fallbacks") else ""
    return (f"{cell['succeeded']}/{cell['requests']} {cell['calls_per_request']:.2f}c "
            f"{cell['429s']}x429 {cell['503s']}x503 last {last}{x}{fallbacks}")


def print_cell(cell: Dict[str, Any], verdict: Optional[Dict[str, Any]]) -> None:
    misses = [] if verdict is None else [k for k in TARGETS if verdict[k] is False]
    tail = "" if verdict is None else ("  ok" if not misses else "  MISSES " + ",".join(misses))
    reasons = "; ".join(f"{g['count']}x {g['reason'][:60]}" for g in cell["gave_up"])
    print(f"  {cell['shape']:5} {CLIENTS[cell['client']]:28} {cell_text(cell)}{tail}"
          + (f"\n        gave up: {reasons}" if reasons else ""), flush=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller herds (30 and 25 requests): a smoke")
    parser.add_argument("--servers", default=",".join(SERVERS), help="comma-separated subset of the servers")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated subset of the shapes")
    parser.add_argument("--repeats", type=int, default=REPEATS,
                        help="runs of every cell, interleaved; each cell reports its median run")
    parser.add_argument("--write", action="store_true", help="record benchmarks/results/pacing_matrix.json")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    _results.refuse_partial(parser, args, "quick", "servers", "shapes", "repeats")
    servers = [s for s in args.servers.split(",") if s]
    shapes_wanted = [s for s in args.shapes.split(",") if s]
    for name in servers:
        qs.make(name)
    shapes = QUICK_SHAPES if args.quick else SHAPES
    unknown = [s for s in shapes_wanted if s not in shapes]
    if unknown:
        parser.error(f"unknown shape(s) {', '.join(unknown)}: one of {', '.join(shapes)}")

    began = time.monotonic()
    cells: List[Dict[str, Any]] = []
    verdicts: List[Dict[str, Any]] = []
    described: List[Dict[str, Any]] = []
    redis = RedisServer.find()
    if redis is None:
        parser.error("redis-server is not on PATH (apt-get install redis-server)")
    with redis:
        for name in servers:
            with qs.QuotaProcess(name) as server:
                described.append(server.describe())
                print(f"{name}: {qs.KINDS[name][0]}", flush=True)
                for shape_name in shapes_wanted:
                    shape = shapes[shape_name]
                    clients = SHAPE_CLIENTS[shape_name]
                    # The unpaced client first: every paced cell is judged against it. Runs of
                    # a cell are interleaved with the other clients' (the machine is shared).
                    order = ("none", *[c for c in clients if c != "none"])
                    runs: Dict[str, List[Dict[str, Any]]] = {c: [] for c in order}
                    for _ in range(args.repeats):
                        for c in order:
                            runs[c].append(run_cell(server, shape_name, shape, c, redis.url))
                    done = {c: median_run(runs[c]) for c in order}
                    for client in clients:
                        cell = done[client]
                        verdict = None if client == "none" else {
                            "server": name, "shape": shape_name, "client": client,
                            **check(cell, done["none"])}
                        print_cell(cell, verdict)
                        cells.append(cell)
                        if verdict is not None:
                            verdicts.append(verdict)
    comparisons = local_vs_redis(cells)
    elapsed = time.monotonic() - began
    print(f"\n{len(cells)} cells in {elapsed:.0f} s")
    met = sum(1 for v in verdicts if not any(v[k] is False for k in TARGETS))
    print(f"paced cells meeting every target: {met}/{len(verdicts)}")
    for row in comparisons:
        gaps = ", ".join(f"{k} {v * 100:.0f}%" if v is not None else f"{k} -" for k, v in row["gaps"].items())
        print(f"  LocalFleet {row['local_shape']} vs RedisFleet {row['redis_shape']}, {row['server']}, "
              f"{row['pace']}: {gaps}{'' if row['within'] else '  OUTSIDE 10%'}")
    if args.write:
        figures = {
            "servers": described,
            "shapes": {name: {"processes": p, "threads": t, "requests_per_thread": r, "requests": p * t * r}
                       for name, (p, t, r) in shapes.items()},
            "shape_order": shapes_wanted,
            "clients": CLIENTS,
            "shape_clients": {name: list(SHAPE_CLIENTS[name]) for name in shapes_wanted},
            "max_elapsed_s": MAX_ELAPSED,
            "repeats": args.repeats,
            "window_offset_s": WINDOW_OFFSET,
            "targets": {
                "configured": {"calls_per_request": CONFIGURED_CALLS, "vs_ideal": CONFIGURED_TIME},
                "learned": {"calls_per_request": LEARNED_CALLS, "vs_ideal": LEARNED_TIME},
                "local_vs_redis": LOCAL_VS_REDIS,
            },
            "cells": cells,
            "checks": verdicts,
            "local_vs_redis": comparisons,
            "cells_meeting_every_target": met,
            "paced_cells": len(verdicts),
            "run_s": elapsed,
        }
        _results.write("pacing_matrix", figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
