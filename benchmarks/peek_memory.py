"""Peak client memory while SumeRetry peeks at a 100 MB error body.

The fake server runs in its own process, so its memory never counts. Each scenario runs in a
fresh client process that measures its own peak RSS (``ru_maxrss``) after a warm-up request
(baseline), after the request returns with ``stream=True`` (the peek, and for the 503 the drain
of the retried body), and after streaming the whole body with ``iter_content``. The target is
less than 2 MB over the baseline for the peek.

Run ``python benchmarks/peek_memory.py`` (``--size`` to change the body size). Exits non-zero
when a peek costs more than ``--budget-mb`` or a body does not arrive whole.
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

MB = 1024 * 1024

SCENARIOS = {
    "402-plain": "SumeSession, 402 (not retried), Content-Length",
    "402-gzip-chunked": "SumeSession, 402 (not retried), gzip + chunked",
    "503-gave-up": "SumeSession, 503 retried once, then given up (2 peeks + urllib3's drain of the first)",
    "stock-402": "reference: stock HTTPAdapter, no SumeRetry, 402",
    "stock-503": "reference: stock urllib3 Retry(total=1, status_forcelist=[503]), 503",
}


def maxrss_bytes() -> int:
    """Peak resident set size of this process (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def serve(size: int) -> None:
    """Server process: script the routes, print the URL, serve until stdin closes."""
    from sume_urllib3.testing import FakeSume, Reply

    with FakeSume() as fake:
        fake.script("GET", "/v1/warm", Reply.error(402, size=200_000))
        fake.script("GET", "/v1/402-plain", Reply.error(402, size=size))
        fake.script("GET", "/v1/402-gzip-chunked", Reply.error(402, size=size, gzip=True, chunked=True))
        fake.script("GET", "/v1/503-gave-up", Reply.error(503, size=size))
        fake.script("GET", "/v1/stock-402", Reply.error(402, size=size))
        fake.script("GET", "/v1/stock-503", Reply.error(503, size=size))
        print(fake.url, flush=True)
        sys.stdin.read()


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
                "outcome": str(record.outcome) if record is not None else "-",
                "attempts": record.attempts if record is not None else 1,
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000_000, help="error body size in bytes")
    parser.add_argument("--budget-mb", type=float, default=2.0, help="most MB a peek may add")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client", nargs=2, metavar=("URL", "SCENARIO"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.size)
        return 0
    if args.client:
        client(*args.client)
        return 0

    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    me = os.path.abspath(__file__)
    server = subprocess.Popen(
        [sys.executable, me, "--serve", "--size", str(args.size)],
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
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    finally:
        server.stdin.close()
        server.wait(10)

    failures = []
    by_name = {r["scenario"]: r for r in results}
    print(f"### Peek memory: {args.size / 1e6:.0f} MB error body, stream=True (client RSS only)\n")
    print(f"Python {sys.version.split()[0]}, {_versions()}; server in a separate process.\n")
    print(
        "| scenario | status / outcome | attempts | baseline RSS | peak over baseline at response "
        "| peak after streaming all | bytes streamed | time to response / to last byte |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {SCENARIOS[r['scenario']]} | {r['status']} {r['outcome']} | {r['attempts']} "
            f"| {r['baseline'] / MB:.1f} MB | {r['peek'] / MB:.2f} MB | {r['stream'] / MB:.2f} MB "
            f"| {r['bytes']:,} | {r['returned_s']:.2f} s / {r['streamed_s']:.2f} s |"
        )
        if r["bytes"] != args.size:
            failures.append(f"{r['scenario']}: streamed {r['bytes']} of {args.size} bytes")
    budget = args.budget_mb * MB
    for name in ("402-plain", "402-gzip-chunked"):
        if by_name[name]["peek"] > budget:
            failures.append(
                f"{name}: the peek cost {by_name[name]['peek'] / MB:.2f} MB > {args.budget_mb} MB"
            )
    extra = by_name["503-gave-up"]["peek"] - by_name["stock-503"]["peek"]
    if extra > budget:
        failures.append(
            f"503-gave-up: retrying cost {extra / MB:.2f} MB more than stock urllib3 Retry "
            f"(> {args.budget_mb} MB)"
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
    return 1 if failures else 0


def _versions() -> str:
    import requests
    import urllib3

    return f"urllib3 {urllib3.__version__}, requests {requests.__version__}"  # type: ignore[attr-defined]


if __name__ == "__main__":
    sys.exit(main())
