"""Instructions per operation, counted under valgrind: a figure the machine's load cannot move.

Each operation runs ``--n`` times after 20 warm-up runs, in a Python under ``valgrind
--tool=callgrind`` with ``PYTHONHASHSEED=0``; a second run does the warm-up alone, and the
difference over ``--n`` is the operation's own count. The package measured is the one this
script's tree imports first: run it as ``PYTHONPATH=<tree> python benchmarks/instructions.py``
to count another tree with the same operations (an A/B that no other process disturbs).

    python benchmarks/instructions.py                      # every operation, 400 runs each
    python benchmarks/instructions.py --ops decision,get   # some of them

Needs ``valgrind`` (Debian: ``apt-get install valgrind``); about half a minute per operation.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from typing import Callable, Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
OPS = (
    "get", "plain-get", "decision", "stock-decision", "response", "urllib3-increment", "envelope", "decide"
)


def operation(name: str) -> Callable[[], object]:
    """One run of operation ``name`` (imported here, so only its own modules load)."""
    sys.path.insert(0, HERE)
    import retry_bench

    if name in ("get", "plain-get"):
        variant = "mem-sume-get" if name == "get" else "mem-plain-get"
        variants = retry_bench.build_variants("http://127.0.0.1:9", [variant])
        return next(v.call for v in variants if v.name == variant)
    if name in ("decision", "stock-decision", "response", "urllib3-increment"):
        from urllib3.util.retry import Retry

        from sume_urllib3 import SumeRetry

        stock = Retry(total=6, backoff_factor=0.5, status_forcelist=[429, 500, 502, 503, 504])
        retry = SumeRetry(sleep=lambda s: None) if name != "stock-decision" else stock

        def decide_one() -> None:
            # "response": the canned 503 made and drained, nothing decided; "urllib3-increment":
            # urllib3's own counting (Retry.increment) on a SumeRetry, which SumeRetry.increment calls.
            response = retry_bench.canned_503()
            if name == "urllib3-increment":
                Retry.increment(retry, "GET", "/503", response)
            elif name != "response":
                retry.increment("GET", "/503", response=response)
            response.drain_conn()

        return decide_one
    if name == "envelope":
        from sume_urllib3._envelope import parse_envelope

        headers = retry_bench.canned_503().headers
        body = retry_bench.ERROR_BODY
        return lambda: parse_envelope(headers, body, limit=65536, decoded=True, message=False)
    from sume_urllib3 import Policy

    policy = Policy()
    return lambda: policy.decide(503, "service_unavailable", 0.0, 0, 0.0, None)


def counted(name: str, runs: int) -> int:
    """Instructions of the whole process that warms ``name`` up and then runs it ``runs`` times."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__,
             "--child", name, str(runs)],
            env=dict(os.environ, PYTHONHASHSEED="0"),
            capture_output=True,
            text=True,
            check=True,
        )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"valgrind said no count for {name}: {done.stderr[-500:]}")
    return int(found.group(1))


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--ops", default=",".join(OPS), help=f"comma-separated, of {', '.join(OPS)}")
    parser.add_argument("--n", type=int, default=400, help="runs counted per operation (400)")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:  # inside valgrind: warm up, then run
        run = operation(args.child[0])
        for _ in range(20 + int(args.child[1])):
            run()
        return 0
    names: List[str] = [n for n in args.ops.split(",") if n]
    unknown = sorted(set(names) - set(OPS))
    if unknown:
        parser.error(f"unknown operation(s) {', '.join(unknown)}")
    import sume_urllib3

    print(f"sume_urllib3 from {os.path.dirname(sume_urllib3.__file__)}")
    counts: Dict[str, int] = {}
    for name in names:
        counts[name] = (counted(name, args.n) - counted(name, 0)) // args.n
        print(f"{name:>15}: {counts[name]:>12,} instructions per run", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
