"""RedisFleet per attempt on loopback: Redis round trips and wall time of acquire + release.

Plain successes (200, no rate-limit headers), one attempt after another on one key, against a
real redis-server on 127.0.0.1, in three set-ups:

- a configured pace (``rate=1e6``): a plain success was never released;
- a pace learned from 429s (slow start's round: three admitted, then a 429), each success
  released at once, as every release was before lessons could be told late (this run swaps
  ``_fleet.release_need`` for one that answers RELEASE_NOW where it says RELEASE_LATER);
- the same learned pace as the fleet releases now: each success rides on the next acquire.

Round trips are the server's own count (``INFO commandstats``, EVALSHA calls, the last lesson's
flush included) per attempt; wall time is ``acquire`` + ``release`` per attempt, p50 and p99.
The set-ups alternate in ROUNDS rounds, so a slower minute of a shared machine falls on all three.

Run: ``python benchmarks/redis_round_trips.py`` (``--write`` to regenerate
``benchmarks/results/redis_round_trips.json``). Needs redis-server on PATH and redis-py; about
half a minute.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import time
from typing import Any, Dict, Iterator, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import _results  # noqa: E402
import redis  # noqa: E402

from sume_urllib3.contrib.redis import RedisFleet  # noqa: E402
from sume_urllib3.pacing import _fleet  # noqa: E402
from sume_urllib3.pacing._fleet import fleet_key  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402

KID = fleet_key("sk_bench_round_trips")
ROUNDS, CALLS, WARM_UP = 5, 1000, 200
SETUPS = ("configured", "learned_at_once", "learned")


@contextlib.contextmanager
def each_release_at_once() -> Iterator[None]:
    """RedisFleet as it released before: what it would tell late, it tells at once."""
    decide = _fleet.release_need

    def at_once(*args: Any) -> int:
        need = decide(*args)
        return _fleet.RELEASE_NOW if need == _fleet.RELEASE_LATER else need

    _fleet.release_need = at_once  # type: ignore[assignment]
    try:
        yield
    finally:
        _fleet.release_need = decide  # type: ignore[assignment]


def learn_a_pace(fleet: RedisFleet) -> None:
    """Slow start's four in flight, three admitted, then a 429: a pace learned from 429s."""
    grants = [fleet.acquire(KID, time_left=math.inf) for _ in range(4)]
    for grant in grants[:3]:
        fleet.release(KID, grant, 200, {})
    fleet.release(KID, grants[3], 429, {})


def attempt(fleet: RedisFleet) -> float:
    """One plain success: acquire, then release; its wall time in seconds. The turn is not waited
    for (time_left is infinite, so a pace never refuses): the calls are what is measured."""
    t0 = time.perf_counter()
    grant = fleet.acquire(KID, time_left=math.inf)
    fleet.release(KID, grant, 200, {})
    elapsed = time.perf_counter() - t0
    if grant.fallback or grant.refused:
        raise RuntimeError(f"Redis failed during the measurement: {grant}")
    return elapsed


def evalshas(client: Any) -> int:
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def block(fleet: RedisFleet, client: Any, calls: int) -> Dict[str, Any]:
    """``calls`` attempts in a row: their wall times and the EVALSHAs they cost, the lessons they
    left to tell included."""
    before = evalshas(client)
    times = [attempt(fleet) for _ in range(calls)]
    fleet._flush_all()
    return {"times": times, "evalsha": evalshas(client) - before}


def measure(server: RedisServer) -> Dict[str, Any]:
    client = redis.Redis.from_url(server.url)
    fleets = {
        "configured": RedisFleet(server.url, rate=1e6, burst=1_000_000, prefix="rt-configured"),
        "learned_at_once": RedisFleet(server.url, prefix="rt-at-once"),
        "learned": RedisFleet(server.url, prefix="rt-learned"),
    }
    learn_a_pace(fleets["learned_at_once"])
    learn_a_pace(fleets["learned"])
    runs: Dict[str, List[Dict[str, Any]]] = {name: [] for name in SETUPS}
    for round_ in range(ROUNDS + 1):  # round 0 warms every set-up up and is not kept
        for name in SETUPS:
            with each_release_at_once() if name == "learned_at_once" else contextlib.nullcontext():
                runs[name].append(block(fleets[name], client, WARM_UP if round_ == 0 else CALLS))
    for name, fleet in fleets.items():
        if fleet.fallbacks or fleet.errors:
            raise RuntimeError(f"{name}: Redis failed during the measurement")
    client.close()
    return {name: summary(done[1:]) for name, done in runs.items()}


def summary(blocks: List[Dict[str, Any]]) -> Dict[str, Any]:
    times = [t for b in blocks for t in b["times"]]
    return {
        "attempts": len(times),
        "evalsha_per_attempt": sum(b["evalsha"] for b in blocks) / len(times),
        "p50_us": statistics.median(times) * 1e6,
        "p99_us": statistics.quantiles(times, n=100)[98] * 1e6,
    }


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--write", action="store_true", help="write benchmarks/results/redis_round_trips.json"
    )
    args = parser.parse_args(argv)
    server = RedisServer.find()
    if server is None:
        sys.exit("redis-server not found (apt-get install redis-server)")
    server.start()
    try:
        setups = measure(server)
    finally:
        server.kill()
    figures = {"rounds": ROUNDS, "calls_per_round": CALLS, "warm_up_calls": WARM_UP, "setups": setups}
    print(json.dumps(figures, indent=1))
    if args.write:
        _results.write("redis_round_trips", figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
