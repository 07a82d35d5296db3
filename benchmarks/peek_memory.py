"""Peak client memory while SumeRetry peeks at a 100 MB error body.

The fake server runs in its own process, so its memory never counts, and it counts the
requests each scenario's route received (the attempts, also for stock urllib3, which keeps
no record of them). Each scenario runs in a fresh client process that measures its own peak
RSS (``ru_maxrss``) after a warm-up request (baseline), after the request returns with
``stream=True`` (the peek, and for a 503 the drain of the retried first body), and after
streaming the whole body with ``iter_content``. The target is less than 2 MB over the
baseline for the peek.

How a retried body is drained depends on urllib3: its ``drain_conn`` reads the body whole
up to 2.7 and in pieces from 2.8, so the stock 503 row is a per-version figure; SumeRetry
drains a retried body itself, 64 KiB at a time, before urllib3's drain runs.

Run ``python benchmarks/peek_memory.py`` (``--size`` to change the body size); ``--write``
records the default run in ``benchmarks/results/peek_memory-urllib3-<version>.json``. Exits
non-zero (and writes nothing) when a peek costs more than ``--budget-mb`` or a body does not
arrive whole.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import _results  # noqa: E402

MB = 1024 * 1024

SCENARIOS = {
    "402-plain": "SumeSession, 402 (not retried), Content-Length",
    "402-gzip-chunked": "SumeSession, 402 (not retried), gzip + chunked",
    "503-gave-up": "SumeSession, 503 retried once, then given up (2 peeks + SumeRetry's drain of the first)",
    "stock-402": "reference: stock HTTPAdapter, no SumeRetry, 402",
    "stock-503": "reference: stock urllib3 Retry(total=1, status_forcelist=[503]), 503",
}


def maxrss_bytes() -> int:
    """Peak resident set size of this process (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def serve(size: int) -> None:
    """Server process: script the routes, print the URL, answer request counts until stdin closes.

    Each line read is a path; the answer is one line, how many GETs that path received.
    """
    from sume_urllib3.testing import FakeSume, Reply

    with FakeSume() as fake:
        fake.script("GET", "/v1/warm", Reply.error(402, size=200_000))
        fake.script("GET", "/v1/402-plain", Reply.error(402, size=size))
        fake.script("GET", "/v1/402-gzip-chunked", Reply.error(402, size=size, gzip=True, chunked=True))
        fake.script("GET", "/v1/503-gave-up", Reply.error(503, size=size))
        fake.script("GET", "/v1/stock-402", Reply.error(402, size=size))
        fake.script("GET", "/v1/stock-503", Reply.error(503, size=size))
        print(fake.url, flush=True)
        for line in sys.stdin:
            print(len(fake.requests_for("GET", line.strip())), flush=True)


def client(url: str, scenario: str) -> None:
    """Client process: measure one scenario, print one JSON line."""
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry

    from sume_urllib3 import Policy, SumeSession

    session: requests.Session
    if scenario.startswith("stock"):
        session = requests.Session()
        retry = Retry(total=1, status_forcelist=[503], raise_on_status=False, backoff_factor=0)
        session.mount("http://", HTTPAdapter(max_retries=retry))
    else:
        session = SumeSession(
            "sk_bench",
            base_url=url + "/v1",
            policy=Policy(max_retries=1),
            raise_on_give_up=False,
            sleep=lambda seconds: None,  # memory, not backoff, is measured
        )
    target = url + "/v1/" + scenario
    with session.get(url + "/v1/warm", stream=True) as warm:  # imports, buffers, the peek path itself
        sum(len(chunk) for chunk in warm.iter_content(1 << 16))
    baseline = maxrss_bytes()

    started = time.perf_counter()
    response = session.get(target, stream=True)
    returned = time.perf_counter() - started
    after_peek = maxrss_bytes()
    total = 0
    with response:
        for chunk in response.iter_content(1 << 16):
            total += len(chunk)
    streamed = time.perf_counter() - started
    record = getattr(response, "sume", None)
    print(
        json.dumps(
            {
                "scenario": scenario,
                "status": response.status_code,
                "outcome": record.outcome.value if record is not None else None,
                "record_attempts": record.attempts if record is not None else None,
                "baseline": baseline,
                "peek": after_peek - baseline,
                "stream": maxrss_bytes() - baseline,
                "bytes": total,
                "returned_s": returned,
                "streamed_s": streamed,
            }
        ),
        flush=True,
    )


def main() -> int:
    """Run every scenario in its own client process, print the table, write it with ``--write``."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000_000, help="error body size in bytes")
    parser.add_argument("--budget-mb", type=float, default=2.0, help="most MB a peek may add")
    parser.add_argument(
        "--write", action="store_true", help="write benchmarks/results/peek_memory-urllib3-<version>.json"
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client", nargs=2, metavar=("URL", "SCENARIO"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.size)
        return 0
    if args.client:
        client(*args.client)
        return 0
    _results.refuse_partial(parser, args, "size")

    results = measure(args.size)
    failures = check(results, args.size, args.budget_mb * MB)
    print(f"### Peek memory: {args.size / 1e6:.0f} MB error body, stream=True (client RSS only)\n")
    print(f"Python {sys.version.split()[0]}, {_versions()}; server in a separate process.\n")
    print(
        "| scenario | status / outcome | attempts (server / record) | baseline RSS "
        "| peak over baseline at response | peak after streaming all | bytes streamed "
        "| time to response / to last byte |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        recorded = "-" if r["record_attempts"] is None else r["record_attempts"]
        print(
            f"| {SCENARIOS[r['scenario']]} | {r['status']} {r['outcome'] or '-'} "
            f"| {r['server_attempts']} / {recorded} "
            f"| {r['baseline'] / MB:.1f} MB | {r['peek'] / MB:.2f} MB | {r['stream'] / MB:.2f} MB "
            f"| {r['bytes']:,} | {r['returned_s']:.2f} s / {r['streamed_s']:.2f} s |"
        )
    print()
    print(
        "**result:** "
        + (
            "FAIL: " + "; ".join(failures)
            if failures
            else f"pass (each peek, and SumeRetry's extra, < {args.budget_mb} MB)"
        )
    )
    if failures:
        if args.write:
            print("nothing written: a failed run is not a figure")
        return 1
    if args.write:
        import urllib3

        version = urllib3.__version__  # type: ignore[attr-defined]
        _results.write(f"peek_memory-urllib3-{version}", figures(results, args))
    return 0


def measure(size: int) -> List[Dict[str, Any]]:
    """Serve ``size``-byte bodies from one process; run each scenario in a fresh client process.

    Each result is the client's line plus ``server_attempts``, the GETs its route received.
    """
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    me = os.path.abspath(__file__)
    server = subprocess.Popen(
        [sys.executable, me, "--serve", "--size", str(size)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert server.stdout is not None
    assert server.stdin is not None
    url = server.stdout.readline().strip()
    results: List[Dict[str, Any]] = []
    try:
        for scenario in SCENARIOS:
            out = subprocess.run(
                [sys.executable, me, "--client", url, scenario],
                capture_output=True,
                text=True,
                env=env,
                check=True,
                timeout=300,
            )
            result: Dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
            # The client has exited, so every attempt it made is already recorded.
            server.stdin.write(f"/v1/{scenario}\n")
            server.stdin.flush()
            result["server_attempts"] = int(server.stdout.readline())
            results.append(result)
    finally:
        server.stdin.close()
        server.wait(10)
    return results


def check(results: List[Dict[str, Any]], size: int, budget: float) -> List[str]:
    """What failed: a body not streamed whole, a peek over budget, SumeRetry costing more than stock."""
    failures = []
    by_name = {r["scenario"]: r for r in results}
    for r in results:
        if r["bytes"] != size:
            failures.append(f"{r['scenario']}: streamed {r['bytes']} of {size} bytes")
        if r["record_attempts"] is not None and r["record_attempts"] != r["server_attempts"]:
            failures.append(
                f"{r['scenario']}: the record says {r['record_attempts']} attempts, "
                f"the server saw {r['server_attempts']}"
            )
    for name in ("402-plain", "402-gzip-chunked"):
        if by_name[name]["peek"] > budget:
            failures.append(f"{name}: the peek cost {by_name[name]['peek'] / MB:.2f} MB > {budget / MB} MB")
    extra = by_name["503-gave-up"]["peek"] - by_name["stock-503"]["peek"]
    if extra > budget:
        failures.append(
            f"503-gave-up: retrying cost {extra / MB:.2f} MB more than stock urllib3 Retry "
            f"(> {budget / MB} MB)"
        )
    return failures


def figures(results: List[Dict[str, Any]], args: argparse.Namespace) -> Dict[str, Any]:
    """The results file's figures: one entry per scenario id, memory in MiB as measured."""
    return {
        "body_bytes": args.size,
        "budget_mb": args.budget_mb,
        "mb_is_bytes": MB,
        "scenarios": {
            r["scenario"]: {
                "label": SCENARIOS[r["scenario"]],
                "status": r["status"],
                "outcome": r["outcome"],
                "server_attempts": r["server_attempts"],
                "record_attempts": r["record_attempts"],
                "baseline_rss_mb": r["baseline"] / MB,
                "peak_over_baseline_at_response_mb": r["peek"] / MB,
                "peak_over_baseline_after_streaming_mb": r["stream"] / MB,
                "bytes_streamed": r["bytes"],
                "seconds_to_response": r["returned_s"],
                "seconds_to_last_byte": r["streamed_s"],
            }
            for r in results
        },
    }


def _versions() -> str:
    import requests
    import urllib3

    return f"urllib3 {urllib3.__version__}, requests {requests.__version__}"  # type: ignore[attr-defined]


if __name__ == "__main__":
    sys.exit(main())
