"""What each part of a 503 decision costs where it runs: one part at a time replaced by its answer.

A profiler says where a decision's time goes in a tight loop of it (``sampled_profile.py
decision``); in ``retry_bench.py`` the same code runs between other work, with its caches cold,
and costs about twice as much. This script measures each part there: for every part it starts a
fresh process, replaces the part with a stand-in that returns what the part returned for the
same response (everything after it does the same work), and times ``increment`` on the canned
503 of ``retry_bench.py`` as that benchmark does (one decision at a time, stock ``Retry``,
``SumeRetry()`` and the ``SumeRetry`` a ``SumeSession`` builds interleaved in a shuffled order,
a fresh response each). What a part costs is the time the stand-in saves: the decision's time
with the part minus without it, beside stock's time in the same process.

Parts (the names on the command line): ``envelope`` (the JSON body read into an
``ErrorEnvelope``: the encoding header, the openings guard, the JSON, the fields), ``policy``
(``Policy.decide``), ``counters`` (urllib3's counters and the copy of the retry), ``let-go``
(the connection given back), ``announce`` (the debug line, and for the session the
``RetryEvent`` and its observers' hooks), ``budget`` (the retry budget; the session's only).
Parts joined by ``+`` are replaced together; ``all`` replaces every one, so what it leaves is
the decision's frame (the peek, the request context, the record, the glue between parts).

    python benchmarks/decision_parts.py                 # every part, then all, 2,000 decisions x 5 runs
    python benchmarks/decision_parts.py envelope policy+counters --decisions 500 --runs 3

Not a figure of the docs: it says where to look, and its stand-ins reach into the package's
private modules, so it follows their names.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

PARTS = ("envelope", "policy", "counters", "let-go", "announce", "budget")
SETUPS = ("stock", "alone", "session")


def _stand_in(parts: str, templates: Sequence[Any], copies: int) -> None:
    """Replace each of ``parts`` (joined by ``+``; ``all``: every part) with its stand-in."""
    for part in PARTS if parts == "all" else parts.split("+"):
        _stand_in_one(part, templates, copies)


def _stand_in_one(part: str, templates: Sequence[Any], copies: int) -> None:
    """Replace ``part`` with a stand-in answering what it answered for the canned 503.

    The counters' stand-in hands out copies of each template made beforehand (``copies`` each):
    a retry urllib3 carries on is a new object, and the decision writes on it."""
    import retry_bench

    from sume_urllib3 import _retry
    from sume_urllib3 import _retry as _attempt
    from sume_urllib3._policy import Policy
    from sume_urllib3.pacing import _fleet as _budget

    if part == "envelope":
        envelope = _attempt.parse_envelope(None, retry_bench.ERROR_BODY, message=False)
        _attempt.parse_envelope = lambda *args, **kwargs: envelope  # type: ignore[assignment]
    elif part == "policy":
        decision = Policy().decide(503, "service_unavailable", None, 0, 0.0, None)
        Policy.decide = lambda self, *args, **kwargs: decision  # type: ignore[method-assign]
    elif part == "counters":
        spares = {id(template): [template.new() for _ in range(copies)] for template in templates}

        class Counted:  # urllib3's Retry as _retry calls it, its increment answered by a copy
            DEFAULT_ALLOWED_METHODS = _retry.Retry.DEFAULT_ALLOWED_METHODS

            @staticmethod
            def increment(retry: Any, *args: Any) -> Any:
                return spares[id(retry)].pop()

        _retry.Retry = Counted  # type: ignore[misc,assignment]
    elif part == "let-go":
        _retry.let_go = lambda raw, limit=0: None  # type: ignore[assignment]
    elif part == "announce":
        _retry.SumeRetry.announce_retry = lambda *args: None  # type: ignore[method-assign]
    elif part == "budget":
        _budget.RetryBudget.reserve = lambda self, time_left=0.0: 0.0  # type: ignore[method-assign]
    elif part != "none":
        raise SystemExit(f"unknown part {part!r}: one of {', '.join(PARTS)}")


def measure(part: str, decisions: int, runs: int) -> Dict[str, float]:
    """In this process: the median over runs of each set-up's mean µs per decision."""
    import random

    import retry_bench
    from urllib3.util.retry import Retry

    from sume_urllib3 import SumeRetry
    from sume_urllib3.pacing import RetryBudget

    session = retry_bench.sume_session("http://127.0.0.1:9", retry_budget=RetryBudget(min_per_second=1e6))
    adapter: Any = session.get_adapter("http://127.0.0.1:9")
    retries: Dict[str, Any] = {
        "stock": Retry(total=6, backoff_factor=0.5, status_forcelist=sorted(retry_bench.RETRY_STATUSES)),
        "alone": SumeRetry(sleep=lambda seconds: None),
        "session": adapter.max_retries,
    }
    warm_up = max(decisions // 10, 20)
    _stand_in(part, [retries["alone"], retries["session"]], decisions * runs + warm_up)
    clock = time.perf_counter
    means: Dict[str, List[float]] = {name: [] for name in SETUPS}
    rng = random.Random(0)
    for run in range(runs + 1):  # run 0 warms up
        gc.collect()
        spent: Dict[str, List[float]] = {name: [] for name in SETUPS}
        order = list(SETUPS)
        for _ in range(decisions if run else warm_up):
            rng.shuffle(order)
            for name in order:
                response = retry_bench.canned_503()
                retry = retries[name]
                t0 = clock()
                retry.increment("GET", "/503", response=response)
                spent[name].append(clock() - t0)
        if run:
            for name in SETUPS:
                means[name].append(statistics.mean(spent[name]) * 1e6)
    return {name: statistics.median(values) for name, values in means.items()}


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("parts", nargs="*", help=f"parts to replace (default: all of {', '.join(PARTS)})")
    parser.add_argument("--decisions", type=int, default=2000, help="decisions per set-up per run (2000)")
    parser.add_argument("--runs", type=int, default=5, help="runs; the median is over them (5)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.decisions, args.runs)))
        return 0
    parts = args.parts or [*PARTS, "all"]
    unknown = sorted({p for joined in parts if joined != "all" for p in joined.split("+")} - set(PARTS))
    if unknown:
        parser.error(f"unknown parts {', '.join(unknown)}: choose from {', '.join(PARTS)}")

    def child(part: str) -> Dict[str, float]:
        command = [sys.executable, __file__, "--child", part]
        command += ["--decisions", str(args.decisions), "--runs", str(args.runs)]
        output = subprocess.run(command, check=True, capture_output=True, text=True)
        return dict(json.loads(output.stdout))

    whole = child("none")
    print(
        f"503 decision on the canned body, {args.decisions} decisions per set-up per run, {args.runs} runs "
        f"(median of the runs' means); stock {whole['stock']:.1f} µs, SumeRetry() {whole['alone']:.1f} µs "
        f"({whole['alone'] / whole['stock']:.2f}x), the session's {whole['session']:.1f} µs "
        f"({whole['session'] / whole['stock']:.2f}x).\n"
    )
    print("| part replaced by its answer | alone: µs saved | x stock | the session's: µs saved | x stock |")
    print("|---|---:|---:|---:|---:|")
    frame = None
    for part in parts:
        without = child(part)
        row = [part]
        for name in ("alone", "session"):
            # Each process has its own stock time: the saving is read against it.
            saved = whole[name] / whole["stock"] - without[name] / without["stock"]
            row += [f"{saved * whole['stock']:.1f}", f"{saved:.2f}"]
        print("| " + " | ".join(row) + " |")
        if part == "all":
            frame = without
    if frame is not None:
        print(
            f"\nWith every part replaced (the frame): SumeRetry() {frame['alone'] / frame['stock']:.2f}x "
            f"stock, the session's {frame['session'] / frame['stock']:.2f}x."
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
