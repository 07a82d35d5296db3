"""How many polls Jobs.wait costs, with default settings, for jobs of 30 s, 10 min and 30 min.

The real ``Jobs.wait`` polls a real FakeSume on 127.0.0.1; time is virtual (a clock
that moves only when something sleeps on it, shared with the fake job, which
completes ``length`` seconds after it was scripted), so the run takes about a second.
Each length is run with ``--seeds`` seeds of the jitter; the table gives the
fewest, median and most polls, and how late the end was noticed at most.

    python benchmarks/job_polls.py [--seeds 20]
"""

from __future__ import annotations

import argparse
import random
import statistics
from typing import List, Tuple

from sume_urllib3 import SumeSession
from sume_urllib3._jobs import JobEvent, Jobs
from sume_urllib3.testing import FakeSume

LENGTHS = (("30 s", 30.0), ("10 min", 600.0), ("30 min", 1800.0))


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
        Jobs(session).wait("job_1", timeout=length + 120)
    return len(polls.times), polls.times[-1] - length


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="jitter seeds per job length (default 20)")
    args = parser.parse_args()
    print("| job length | polls (fewest / median / most) | end noticed after, at most |")
    print("|---|---|---|")
    with FakeSume() as fake:
        for label, length in LENGTHS:
            results = [run(fake, length, seed) for seed in range(args.seeds)]
            counts = [polls for polls, _ in results]
            late = max(delay for _, delay in results)
            print(
                f"| {label} | {min(counts)} / {statistics.median(counts):g} / {max(counts)} | {late:.1f} s |"
            )
    print(f"\n{args.seeds} seeds each; defaults: interval=1.0, max_interval=20.0 (x1.5, jitter 0.95-1.0).")


if __name__ == "__main__":
    main()
