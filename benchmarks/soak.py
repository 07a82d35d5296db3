"""Soak: 32 threads x 500 logical POSTs through ONE SumeSession, one answer in five a 503.

The fake server runs in its own process (its recordings must not count as client memory)
and answers from a deterministic script (``random.Random(seed)``: 20% 503, else 201, the
last reply 201). Retries do not sleep (``no_sleep()``: waits are recorded instead). The
client keeps its per-request results in preallocated arrays, so its own bookkeeping does
not grow either.

Checks (exit status 1 if any fails):

* every logical request sent exactly one Idempotency-Key on all its attempts;
* no key was used by two logical requests;
* the outcome counters in ``session.metrics`` add up to the number of logical requests;
* the attempts in the records add up to the requests the server received;
* nothing but ``SumeRetryError`` (a recorded give-up) was raised;
* resident memory is flat: growth from 25% to 100% of the run stays under ``--rss-budget-mb``.

Run ``python benchmarks/soak.py`` (``--threads``/``--per-thread`` for other sizes); ``--write``
records the default run in ``benchmarks/results/soak.json``, and writes nothing when a check fails.
"""

from __future__ import annotations

import argparse
import array
import json
import os
import random
import resource
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from typing import Any, Dict, List, Set, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import _results  # noqa: E402

MB = 1024 * 1024


def script(length: int, seed: int, failure_rate: float) -> List[int]:
    rng = random.Random(seed)
    return [503 if rng.random() < failure_rate else 201 for _ in range(length)] + [201]


def serve(length: int, seed: int, failure_rate: float) -> None:
    """Server process: print the URL, serve until stdin says "report", then print what it saw."""
    from sume_urllib3.testing import FakeSume

    with FakeSume() as fake:
        fake.script("POST", "/v1/jobs", *script(length, seed, failure_rate))
        print(fake.url, flush=True)
        sys.stdin.readline()
        seen = [(r.json()["n"], r.headers.get("Idempotency-Key"), r.connection) for r in fake.requests]
        print(json.dumps({"requests": seen, "connections": fake.connections}), flush=True)


def current_rss() -> int:
    """Resident set size now, from /proc/self/statm (Linux), else the peak."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return peak_rss()


def peak_rss() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def main() -> int:
    """Soak one session from many threads, print what happened, write it with ``--write``."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--per-thread", type=int, default=500)
    parser.add_argument("--failure-rate", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rss-budget-mb", type=float, default=8.0, help="most RSS growth from 25%% to 100%%")
    parser.add_argument("--write", action="store_true", help="write benchmarks/results/soak.json")
    parser.add_argument("--serve", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(int(args.serve[0]), int(args.serve[1]), float(args.serve[2]))
        return 0
    _results.refuse_partial(parser, args, "threads", "per_thread", "failure_rate", "seed")

    from sume_urllib3 import Outcome, SumeRetryError, SumeSession
    from sume_urllib3.testing import no_sleep

    total = args.threads * args.per_thread
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    server = subprocess.Popen(
        [
            sys.executable,
            os.path.abspath(__file__),
            "--serve",
            str(total * 2),
            str(args.seed),
            str(args.failure_rate),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert server.stdin is not None
    assert server.stdout is not None
    url = server.stdout.readline().strip()

    session = SumeSession("sk_soak_benchmark", base_url=url + "/v1", rng=random.Random(args.seed))
    outcome_index = {o.value: i for i, o in enumerate(Outcome)}
    # Preallocated: the harness itself must not grow while memory is being watched.
    keys = bytearray(16 * total)
    attempts = array.array("H", [0]) * total
    outcomes = bytearray(total)
    done = [0]
    unexpected: List[str] = []
    give_ups: Counter[str] = Counter()
    samples: Dict[int, Tuple[int, int, float]] = {}
    marks = {total * q // 4: q * 25 for q in (1, 2, 3, 4)}
    lock = threading.Lock()
    started = time.perf_counter()

    def finish() -> None:
        with lock:
            done[0] += 1
            if done[0] in marks:
                samples[marks[done[0]]] = (current_rss(), peak_rss(), time.perf_counter() - started)

    def work(thread: int) -> None:
        for i in range(args.per_thread):
            n = thread * args.per_thread + i
            try:
                record = session.post("/jobs", json={"n": n}).sume  # type: ignore[attr-defined]
            except SumeRetryError as exc:
                record = exc.record
                with lock:
                    give_ups[record.reason] += 1
            except Exception as exc:  # counted, reported, fails the run
                with lock:
                    unexpected.append(f"{n}: {type(exc).__name__}: {exc}")
                finish()
                continue
            keys[16 * n : 16 * n + 16] = uuid.UUID(record.idempotency_key).bytes
            attempts[n] = record.attempts
            outcomes[n] = outcome_index[record.outcome.value]
            finish()

    with no_sleep() as recorder:
        threads = [threading.Thread(target=work, args=(t,), name=f"soak-{t}") for t in range(args.threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    elapsed = time.perf_counter() - started

    server.stdin.write("report\n")
    server.stdin.flush()
    report: Dict[str, Any] = json.loads(server.stdout.readline())
    server.stdin.close()
    server.wait(10)
    session.close()

    seen: List[Tuple[int, str, int]] = report["requests"]
    keys_by_n: Dict[int, Set[str]] = {}
    for n, key, _ in seen:
        keys_by_n.setdefault(n, set()).add(key)
    key_owner = Counter(key for _, key in {(n, key) for n, key, _ in seen})  # logical requests per key
    snapshot = session.metrics.snapshot()
    client_keys = {str(uuid.UUID(bytes=bytes(keys[16 * n : 16 * n + 16]))) for n in range(total)}
    names = [o.value for o in Outcome]
    record_outcomes = Counter(names[i] for i in outcomes)

    checks = [
        (
            "every logical request reached the server",
            len(keys_by_n) == total,
            f"{len(keys_by_n):,} / {total:,}",
        ),
        (
            "one Idempotency-Key per logical request, on every attempt",
            all(len(k) == 1 for k in keys_by_n.values())
            and all(
                {str(uuid.UUID(bytes=bytes(keys[16 * n : 16 * n + 16])))} == keys_by_n[n] for n in keys_by_n
            ),
            f"{sum(len(k) > 1 for k in keys_by_n.values())} requests with more than one key",
        ),
        (
            "no key reused across logical requests",
            len(key_owner) == total == len(client_keys) and max(key_owner.values()) == 1,
            f"{len(key_owner):,} distinct keys",
        ),
        (
            "metrics outcome counts add up",
            sum(snapshot["outcomes"].values()) == total,
            f"{sum(snapshot['outcomes'].values()):,} = {total:,}",
        ),
        (
            "records agree with metrics",
            dict(record_outcomes) == {k: v for k, v in snapshot["outcomes"].items() if v},
            ", ".join(f"{k} {v:,}" for k, v in sorted(record_outcomes.items())),
        ),
        (
            "sum(record.attempts) == requests the server received",
            sum(attempts) == len(seen),
            f"{sum(attempts):,} = {len(seen):,}",
        ),
        (
            "nothing unexpected raised",
            not unexpected,
            f"{len(unexpected)} ({unexpected[:3]})" if unexpected else "0",
        ),
    ]
    growth = samples[100][0] - samples[25][0]
    peak_growth = samples[100][1] - samples[25][1]
    checks.append(
        (
            f"RSS flat from 25% to 100% (< {args.rss_budget_mb} MB)",
            growth < args.rss_budget_mb * MB and peak_growth < args.rss_budget_mb * MB,
            f"current {growth / MB:+.2f} MB, peak {peak_growth / MB:+.2f} MB",
        )
    )

    print(f"### Soak: {args.threads} threads x {args.per_thread} logical POSTs, one SumeSession\n")
    print(
        f"Python {sys.version.split()[0]}, {_versions()}; FakeSume in a separate process, "
        f"{args.failure_rate:.0%} 503s (seed {args.seed}); no_sleep.\n"
    )
    print(
        f"{total:,} logical requests, {len(seen):,} HTTP requests on {report['connections']:,} connections "
        f"in {elapsed:.1f} s ({total / elapsed:,.0f} logical/s); "
        f"{len(recorder.waits):,} retry waits recorded ({sum(recorder.waits):,.0f} s not slept).\n"
    )
    print("| outcome | count |\n|---|---:|")
    for name, count in snapshot["outcomes"].items():
        print(f"| {name} | {count:,} |")
    print(f"\nretries by reason: {snapshot['retries']}; attempts per request: {snapshot['attempts']}")
    print(f"give-ups by reason: {dict(give_ups) or 'none'}\n")
    print("| progress | current RSS | peak RSS (ru_maxrss) | elapsed |\n|---:|---:|---:|---:|")
    for q in (25, 50, 75, 100):
        rss, peak, at = samples[q]
        print(f"| {q}% | {rss / MB:.1f} MB | {peak / MB:.1f} MB | {at:.1f} s |")
    print("\n| check | result | detail |\n|---|---|---|")
    for name, ok, detail in checks:
        print(f"| {name} | {'pass' if ok else 'FAIL'} | {detail} |")
    failed = [name for name, ok, _ in checks if not ok]
    print(f"\n**result:** {'FAIL: ' + '; '.join(failed) if failed else 'pass'}")
    if failed:
        if args.write:
            print("nothing written: a failed run is not a figure")
        return 1
    if args.write:
        budget = session.retry_budget
        figures: Dict[str, Any] = {
            "threads": args.threads,
            "per_thread": args.per_thread,
            "logical_requests": total,
            "failure_rate": args.failure_rate,
            "seed": args.seed,
            "outcomes": dict(snapshot["outcomes"]),
            "give_ups_by_reason": dict(sorted(give_ups.items())),
            "retries_by_reason": snapshot["retries"],
            "attempts_server_saw": len(seen),
            "attempts_records_report": sum(attempts),
            "connections": report["connections"],
            "requests_missing_at_server": total - len(keys_by_n),
            "requests_with_more_than_one_key": sum(len(k) > 1 for k in keys_by_n.values()),
            "keys_shared_by_requests": sum(count > 1 for count in key_owner.values()),
            "lost": sum(1 for n in range(total) if attempts[n] == 0),
            "unexpected_exceptions": len(unexpected),
            "retries_per_logical_request": (len(seen) - total) / total,
            "retries_needed_without_budget": args.failure_rate / (1 - args.failure_rate),
            "retry_budget": None
            if budget is None
            else {"ratio": budget.ratio, "window_s": budget.window, "min_per_second": budget.min_per_second},
            "rss_mb": {str(q): samples[q][0] / MB for q in (25, 50, 75, 100)},
            "peak_rss_mb": {str(q): samples[q][1] / MB for q in (25, 50, 75, 100)},
            "rss_growth_25_to_100_mb": growth / MB,
            "peak_rss_growth_25_to_100_mb": peak_growth / MB,
            "rss_budget_mb": args.rss_budget_mb,
            "seconds": elapsed,
            "retry_waits_recorded": len(recorder.waits),
            "checks": {name: ok for name, ok, _ in checks},
            "all_checks_passed": not failed,
        }
        _results.write("soak", figures)
    return 0


def _versions() -> str:
    import requests
    import urllib3

    return f"urllib3 {urllib3.__version__}, requests {requests.__version__}"  # type: ignore[attr-defined]


if __name__ == "__main__":
    sys.exit(main())
