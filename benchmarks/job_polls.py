"""How many polls Jobs.wait costs, with default settings, for jobs of 30 s, 10 min and 30 min.

The real ``Jobs.wait`` polls a real FakeSume on 127.0.0.1; time is virtual (a clock
that moves only when something sleeps on it, shared with the fake job, which
completes ``length`` seconds after it was scripted), so the run takes about a second.
Each length is run with ``--seeds`` seeds of the jitter; the table gives the
fewest, median and most polls, and how late the end was noticed at most.

    python benchmarks/job_polls.py [--seeds 20] [--write]

``--write`` also records the table in ``benchmarks/results/job_polls.json``.
"""

from __future__ import annotations

import argparse
import inspect
import os
import random
import statistics
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _results

from sume_urllib3 import SumeRecord, SumeSession
from sume_urllib3._jobs import GROWTH, JITTER, JobEvent, Jobs
from sume_urllib3.observe import RetryEvent
from sume_urllib3.testing import FakeSume

LENGTHS = (("30 s", 30.0), ("10 min", 600.0), ("30 min", 1800.0))
#: Each wait's timeout is the job's length plus this.
MARGIN = 120.0


class VirtualTime:
    """A clock that moves only when slept on."""

    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class PollTimes:
    """An observer noting when each poll was sent."""

    def __init__(self, time: VirtualTime) -> None:
        self.time = time
        self.times: List[float] = []

    def on_job(self, event: JobEvent) -> None:
        if event.kind == "poll":
            self.times.append(self.time.now)

    def on_retry(self, event: RetryEvent) -> None:
        """A retried poll is still one poll: only ``on_job`` counts."""

    def on_outcome(self, record: SumeRecord) -> None:
        """Each poll's outcome is already counted by ``on_job``."""


def run(fake: FakeSume, length: float, seed: int) -> Tuple[int, float]:
    """Polls spent and how late the end was seen, for one job of ``length`` seconds."""
    time = VirtualTime()
    polls = PollTimes(time)
    fake.job("job_1", ["processing", ("completed", {})], every=length, clock=time.clock)
    with SumeSession(
        "sk_bench",
        base_url=fake.url + "/v1",
        sleep=time.sleep,
        clock=time.clock,
        rng=random.Random(seed),
        observers=[polls],
    ) as session:
        Jobs(session).wait("job_1", timeout=length + MARGIN)
    return len(polls.times), polls.times[-1] - length


def defaults() -> Dict[str, Any]:
    """The spacing settings every run uses: ``Jobs.wait``'s own defaults, read from the code."""
    params = inspect.signature(Jobs.wait).parameters
    return {
        "interval_s": params["interval"].default,
        "max_interval_s": params["max_interval"].default,
        "growth": GROWTH,
        "jitter": list(JITTER),
    }


def measure(seeds: int) -> List[Dict[str, Any]]:
    """Every job length's row: polls fewest / median / most and the latest the end was noticed."""
    rows = []
    with FakeSume() as fake:
        for label, length in LENGTHS:
            results = [run(fake, length, seed) for seed in range(seeds)]
            counts = [polls for polls, _ in results]
            rows.append(
                {
                    "label": label,
                    "length_s": length,
                    "timeout_s": length + MARGIN,
                    "polls_fewest": min(counts),
                    "polls_median": statistics.median(counts),
                    "polls_most": max(counts),
                    "end_noticed_after_at_most_s": max(delay for _, delay in results),
                }
            )
    return rows


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Print the table (and with ``--write`` record it)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seeds", type=int, default=20, help="jitter seeds per job length (default 20)")
    parser.add_argument("--write", action="store_true", help="write benchmarks/results/job_polls.json")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    rows = measure(args.seeds)
    settings = defaults()
    print("| job length | polls (fewest / median / most) | end noticed after, at most |")
    print("|---|---|---|")
    for row in rows:
        print(
            f"| {row['label']} | {row['polls_fewest']} / {row['polls_median']:g} / {row['polls_most']} "
            f"| {row['end_noticed_after_at_most_s']:.1f} s |"
        )
    low, high = settings["jitter"]
    print(
        f"\n{args.seeds} seeds each; defaults: interval={settings['interval_s']}, "
        f"max_interval={settings['max_interval_s']} (x{settings['growth']:g}, jitter {low}-{high})."
    )
    if args.write:
        command = None if argv is None else _results.command_line(["job_polls.py", *argv])
        figures = {
            "seeds": args.seeds,
            "seed_values": f"0..{args.seeds - 1}",
            "defaults": settings,
            "jobs": rows,
        }
        _results.write("job_polls", figures, command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
