"""Where one variant's time goes, sampled rather than traced: what ``--profile`` cannot show.

``retry_bench.py --profile`` runs cProfile, which charges every Python call a fixed cost: a
function called often and doing little (a header lookup, a small helper) looks several times
dearer than it is, and code that replaces work the baseline does elsewhere (a timeout built
without validation) is not set against that work. This script runs the variant and its
baseline interleaved in one process under py-spy (a sampling profiler outside the process:
no per-call cost) and prints:

- the ratio of samples taken in the variant to those taken in its baseline (close to the
  ratio of their times, each doing the same number of requests);
- the samples taken in this package's own code, per function (or line, ``--lines``), as a
  share of the baseline's samples (a C function it calls counts as its caller's);
- the samples taken in other code (requests, urllib3, json, ...), per function, as the
  variant's count minus the baseline's: what this package makes others do (``+``), and what it
  spares them (``-``: requests' ``.netrc`` look-up, for one). The two lists together, not the
  first alone, are the variant's cost.

``decision`` samples ``SumeRetry().increment`` on the canned 503 of ``retry_bench.py`` against
stock ``Retry.increment`` instead of a request; ``decision-live`` does the same on a 503 read
from the loopback server, each drained afterwards unsampled.

    python benchmarks/sampled_profile.py mem-sume-get              # 20 s, functions
    python benchmarks/sampled_profile.py decision --lines --top 40 # lines
    python benchmarks/sampled_profile.py sume-get --seconds 30     # over the loopback socket

Needs py-spy (``pip install py-spy``, in the ``bench`` extra) and the right to trace a child
process (as root, or ``kernel.yama.ptrace_scope`` 0 or 1).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Counter, Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

#: The two frames every sample is sorted under (see _loop): the variant's and the baseline's.
VARIANT_ROOT, BASELINE_ROOT = "_sampled_variant", "_sampled_baseline"
_ROOTS = (VARIANT_ROOT + " ", BASELINE_ROOT + " ")
_FRAME = re.compile(r"^(?P<function>.*) \((?P<path>.*):(?P<line>\d+)\)$")


def _sampled_variant(call: Callable[[Any], object], given: Any) -> None:
    call(given)


def _sampled_baseline(call: Callable[[Any], object], given: Any) -> None:
    call(given)


#: What each side is given, made outside the sampled frames (None for a request).
Pair = Tuple[Callable[[], Any], Callable[[Any], object], Callable[[Any], object]]


def _pair(name: str, server_url: str) -> Pair:
    """How to make each call's argument, the variant's call and its baseline's."""
    import retry_bench

    if name in ("decision", "decision-live"):
        from urllib3.util.retry import Retry

        from sume_urllib3 import SumeRetry

        stock = Retry(total=6, backoff_factor=0.5, status_forcelist=sorted(retry_bench.RETRY_STATUSES))
        ours = SumeRetry(sleep=lambda seconds: None)
        make: Callable[[], Any] = retry_bench.canned_503  # a fresh unread 503 each, made unsampled
        if name == "decision-live":
            from urllib3 import HTTPConnectionPool

            host, port = server_url.rsplit("/", 1)[-1].split(":")
            pool = HTTPConnectionPool(host, int(port), maxsize=1, retries=False)
            last: List[Any] = []

            def make() -> Any:
                # The one before is drained and its connection given back here, unsampled, as
                # retry_bench.py does after timing each increment.
                while last:
                    done = last.pop()
                    done.drain_conn()
                    done.release_conn()
                last.append(pool.urlopen("GET", "/503", retries=False, redirect=False, preload_content=False))
                return last[0]

        return (
            make,
            lambda response: ours.increment("GET", "/503", response=response),
            lambda response: stock.increment("GET", "/503", response=response),
        )
    variants = {v.name: v for v in retry_bench.build_variants(server_url, [name])}
    variant, baseline = variants[name].call, variants[variants[name].baseline].call
    return (lambda: None), (lambda _: variant()), (lambda _: baseline())


def _loop(name: str, seconds: float) -> None:
    """The child py-spy watches: the pair, alternated, for ``seconds``."""
    from _loopback import LoopbackServer

    server: Optional[LoopbackServer] = None
    url = "http://127.0.0.1:9"
    if name != "decision" and not name.startswith("mem-"):  # decision-live needs the server
        server = LoopbackServer()
        server.start()
        url = server.url
    try:
        make, variant, baseline = _pair(name, url)
        for _ in range(200):  # warm both before the first sample counts for much
            variant(make())
            baseline(make())
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for _ in range(100):
                _sampled_variant(variant, make())
                _sampled_baseline(baseline, make())
    finally:
        if server is not None:
            server.stop()


def _ours(path: str) -> bool:
    # py-spy names a file by its path below the sys.path entry it was imported from.
    return path.startswith("sume_urllib3/") or "/sume_urllib3/" in path


def _where(frame: str, lines: bool) -> Tuple[str, bool]:
    """``function (file[:line])`` of one py-spy frame, and whether it is this package's."""
    match = _FRAME.match(frame)
    if match is None:
        return frame, False
    path = match.group("path")
    where = os.path.basename(path) + (f":{match.group('line')}" if lines else "")
    return f"{match.group('function')} ({where})", _ours(path)


def summarise(raw_lines: Sequence[str], lines: bool, top: int) -> List[str]:
    """The report from py-spy's raw output (``frame;frame;... count`` per line)."""
    totals: Counter[str] = collections.Counter()
    own: Counter[str] = collections.Counter()  # the variant's samples in this package's code
    leaves: Dict[str, Counter[str]] = {
        VARIANT_ROOT: collections.Counter(),
        BASELINE_ROOT: collections.Counter(),
    }
    for raw in raw_lines:
        stack, _, count = raw.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        root = next((f.split(" ", 1)[0] for f in frames if f.startswith(_ROOTS)), None)
        if root is None:
            continue
        totals[root] += int(count)
        leaf, ours = _where(frames[-1], lines)
        if ours:
            own[leaf] += int(count)
        else:
            leaves[root][leaf] += int(count)
    base = totals[BASELINE_ROOT]
    if not base or not totals[VARIANT_ROOT]:
        return ["no samples under the variant or the baseline: was py-spy allowed to trace?"]
    mine = sum(own.values())
    grown = leaves[VARIANT_ROOT]
    grown.subtract(leaves[BASELINE_ROOT])
    report = [
        f"samples: variant {totals[VARIANT_ROOT]}, baseline {base}, ratio {totals[VARIANT_ROOT] / base:.3f}",
        "",
        f"In this package's code (the innermost frame): {100 * mine / base:.1f}% of the baseline's samples",
        "",
        "  % of baseline  where",
    ]
    report += [f"  {100 * n / base:12.2f}  {where}" for where, n in own.most_common(top)]
    report += [
        "",
        "In other code, more (+) or less (-) than in the baseline (what this package calls, or skips):",
        "",
        "  % of baseline  where",
    ]
    changed = sorted(grown.items(), key=lambda item: -abs(item[1]))
    report += [f"  {100 * n / base:+12.2f}  {where}" for where, n in changed[:top] if n]
    return report


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "variant", help="a retry_bench.py variant (mem-sume-get, ...), 'decision' or 'decision-live'"
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to sample (20)")
    parser.add_argument("--rate", type=int, default=1000, help="samples per second (1000)")
    parser.add_argument("--lines", action="store_true", help="per line rather than per function")
    parser.add_argument("--top", type=int, default=30, help="entries to print (30)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _loop(args.variant, args.seconds)
        return 0
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(spy):
        print("py-spy is not installed: pip install py-spy", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as scratch:
        out = os.path.join(scratch, "samples.txt")
        child = [sys.executable, os.path.abspath(__file__), args.variant, "--child"]
        child += ["--seconds", str(args.seconds)]
        subprocess.run(
            [spy, "record", "--rate", str(args.rate), "--format", "raw", "--output", out, "--", *child],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        with open(out, encoding="utf-8") as samples:
            report = summarise(samples.readlines(), args.lines, args.top)
    print(f"{args.variant}: {args.seconds:g} s sampled at {args.rate}/s, the pair alternated")
    print("\n".join(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
