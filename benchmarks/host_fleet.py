"""What a HostFleet turn costs, what its storage was chosen from, and Redis's round trip beside it.

Three measurements, each p50 and p99 over thousands of calls (wall time, ``perf_counter``):

- **storage**: the two ways issue 36 allowed, prototyped as small as they go: one key's
  ``_pacing.State`` read, run through ``_pacing.acquire`` and written back under an inter-process
  lock, in an SQLite file in WAL mode (``BEGIN IMMEDIATE``) and in a memory-mapped file under an
  ``fcntl`` lock; in one process, then in four processes at once on the same key.
- **HostFleet**: ``acquire`` with a configured pace (the release of a plain success is skipped),
  ``acquire`` plus ``release`` with rate-limit headers (both write to the file), the same with
  four processes at once, and a key with nothing to pace (the open path: one look at the file's
  change counter).
- **RedisFleet**: the same two calls on loopback against a real redis-server (skipped without
  one on PATH), as ``benchmarks/fleet_redis.py`` measures them.

Run: ``python benchmarks/host_fleet.py`` (``--write`` to regenerate
``benchmarks/results/host_fleet.json``); about a minute.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import json
import mmap
import multiprocessing
import os
import sqlite3
import statistics
import struct
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import _results  # noqa: E402

from sume_urllib3.pacing import HostFleet, RetryBudget  # noqa: E402
from sume_urllib3.pacing import _core as _pacing  # noqa: E402
from sume_urllib3.pacing._fleet import fleet_key  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402

KID = fleet_key("sk_live_BENCH_0123456789abcdef")
CALLS = 5000
WARM_UP = 200
PROCESSES = 4
HEADERS = {"RateLimit-Limit": "1000000", "RateLimit-Remaining": "999999", "RateLimit-Policy": "1000000;w=1"}
_NAMES = [f.name for f in dataclasses.fields(_pacing.State)]
_CONFIG = _pacing.Config(interval=1, burst=1_000_000, window=4)


def _quantiles(seconds: List[float]) -> Dict[str, float]:
    return {
        "p50_us": statistics.median(seconds) * 1e6,
        "p99_us": statistics.quantiles(seconds, n=100)[98] * 1e6,
        "calls": len(seconds),
    }


def _timed(call: Callable[[int], None], calls: int = CALLS) -> List[float]:
    took: List[float] = []
    for i in range(WARM_UP + calls):
        started = time.perf_counter()
        call(i)
        if i >= WARM_UP:
            took.append(time.perf_counter() - started)
    return took


# -- the two storage prototypes ----------------------------------------------------------------


def _turn(text: Optional[str], now: int) -> str:
    st = _pacing.State(*json.loads(text)) if text else _pacing.State()
    _pacing.acquire(st, _CONFIG, now, retry=0, not_before=0, time_left=-1, rand=0.5, entry="1")
    return json.dumps([getattr(st, n) for n in _NAMES], separators=(",", ":"))


def _sqlite(path: str) -> Callable[[int], None]:
    db = sqlite3.connect(path, timeout=5.0, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=OFF")
    db.execute("CREATE TABLE IF NOT EXISTS keys (kid TEXT PRIMARY KEY, state TEXT) WITHOUT ROWID")

    def call(i: int) -> None:
        db.execute("BEGIN IMMEDIATE")
        row = db.execute("SELECT state FROM keys WHERE kid = ?", (KID,)).fetchone()
        db.execute("INSERT OR REPLACE INTO keys VALUES (?, ?)", (KID, _turn(row[0] if row else None, i)))
        db.execute("COMMIT")

    return call


def _mapped(path: str) -> Callable[[int], None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    if os.fstat(fd).st_size < 1 << 16:
        os.ftruncate(fd, 1 << 16)
    region = mmap.mmap(fd, 1 << 16)

    def call(i: int) -> None:
        fcntl.lockf(fd, fcntl.LOCK_EX)
        try:
            (size,) = struct.unpack_from("<I", region, 0)
            text = _turn(bytes(region[4 : 4 + size]).decode() if size else None, i).encode()
            struct.pack_into("<I", region, 0, len(text))
            region[4 : 4 + len(text)] = text
        finally:
            fcntl.lockf(fd, fcntl.LOCK_UN)

    return call


def _contended_worker(kind: str, path: str, start: Any, out: Any) -> None:
    call = _sqlite(path) if kind == "sqlite" else _mapped(path) if kind == "mmap" else _fleet_pair(path)
    start.wait()
    out.put(_timed(call, CALLS // PROCESSES))


def _contended(kind: str, path: str) -> Dict[str, float]:
    context = multiprocessing.get_context("fork")
    start, out = context.Event(), context.Queue()
    workers = [
        context.Process(target=_contended_worker, args=(kind, path, start, out)) for _ in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    start.set()
    took = [t for _ in workers for t in out.get(timeout=300)]
    for worker in workers:
        worker.join(30)
    return _quantiles(took)


# -- the fleets ---------------------------------------------------------------------------------


def _fleet_pair(path: str) -> Callable[[int], None]:
    """acquire plus release, both writing (rate-limit headers teach something)."""
    fleet = HostFleet(path, retry_budget=RetryBudget(), timeout=5.0)

    def call(i: int) -> None:
        grant = fleet.acquire(KID, time_left=30.0)
        fleet.release(KID, grant, 200, HEADERS)
        if grant.fallback:
            raise RuntimeError("the host fleet failed open during the measurement")

    return call


def host_fleet(directory: str) -> Dict[str, Any]:
    paced = HostFleet(os.path.join(directory, "paced.fleet"), rate=1e6, burst=1_000_000)
    acquire = _timed(lambda i: paced.acquire(KID, time_left=30.0) and None)
    pair = _timed(_fleet_pair(os.path.join(directory, "pair.fleet")))
    open_fleet = HostFleet(os.path.join(directory, "open.fleet"))
    for _ in range(100):  # slow start to its end: the key opens
        open_fleet.release(KID, open_fleet.acquire(KID, time_left=30.0), 200, None)
    opened = _timed(lambda i: open_fleet.release(KID, open_fleet.acquire(KID, time_left=30.0), 200, None))
    if paced.fallbacks or open_fleet.fallbacks:
        raise RuntimeError("the host fleet failed open during the measurement")
    return {
        "acquire_paced": _quantiles(acquire),
        "acquire_release": _quantiles(pair),
        "acquire_release_4_processes": _contended("fleet", os.path.join(directory, "contended.fleet")),
        "open_key": _quantiles(opened),
    }


def redis_fleet() -> Optional[Dict[str, Any]]:
    server = RedisServer.find()
    if server is None:
        return None
    from sume_urllib3.contrib.redis import RedisFleet

    server.start()
    try:
        paced = RedisFleet(server.url, rate=1e6, burst=1_000_000, prefix="bench-paced")
        learned = RedisFleet(server.url, prefix="bench-learned")

        def pair(i: int) -> None:
            learned.release(KID, learned.acquire(KID, time_left=30.0), 200, HEADERS)

        acquire = _timed(lambda i: paced.acquire(KID, time_left=30.0) and None)
        both = _timed(pair)
        if paced.fallbacks or learned.fallbacks:
            raise RuntimeError("Redis failed during the measurement")
        return {"acquire_paced": _quantiles(acquire), "acquire_release": _quantiles(both)}
    finally:
        server.kill()


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write benchmarks/results/host_fleet.json")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        storage = {
            "sqlite_wal": _quantiles(_timed(_sqlite(os.path.join(directory, "s.sqlite3")))),
            "mmap_fcntl": _quantiles(_timed(_mapped(os.path.join(directory, "m.map")))),
            "sqlite_wal_4_processes": _contended("sqlite", os.path.join(directory, "c.sqlite3")),
            "mmap_fcntl_4_processes": _contended("mmap", os.path.join(directory, "c.map")),
        }
        figures = {
            "storage": storage,
            "host_fleet": host_fleet(directory),
            "redis_fleet": redis_fleet(),
            "processes": PROCESSES,
        }
    print(json.dumps(figures, indent=1))
    if args.write:
        _results.write("host_fleet", figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
