"""Run the fault-injection suite (tests/test_faults.py) and count what it tried.

The docs' Measured page (docs/measured.md) states how many fault cases run on real loopback
sockets and how they ended. This runs that suite with pytest in this process, counts every case by
outcome and by scenario (test function), and with ``--write`` records the counts in
``benchmarks/results/faults.json``. Exits non-zero when a case fails: a count of cases that
did not pass is not a claim to print.

    python benchmarks/faults.py [--write]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from typing import Any, Counter, Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import _results  # noqa: E402

SUITE = "tests/test_faults.py"


class Tally:
    """A pytest plugin counting each case's outcome, and cases per scenario."""

    def __init__(self) -> None:
        self.outcomes: Dict[str, str] = {}

    def pytest_runtest_logreport(self, report: Any) -> None:
        """Keep the worst outcome of a case over its setup, call and teardown."""
        if report.failed:
            self.outcomes[report.nodeid] = "failed"
        elif report.skipped and self.outcomes.get(report.nodeid) != "failed":
            self.outcomes[report.nodeid] = "skipped"
        elif report.when == "call" and report.nodeid not in self.outcomes:
            self.outcomes[report.nodeid] = "passed"

    def figures(self) -> Dict[str, Any]:
        """Counts by outcome and by scenario, as plain JSON."""
        by_outcome: Counter[str] = collections.Counter(self.outcomes.values())
        by_scenario: Counter[str] = collections.Counter(
            nodeid.split("::", 1)[1].split("[", 1)[0] for nodeid in self.outcomes
        )
        return {
            "suite": SUITE,
            "cases": len(self.outcomes),
            "passed": by_outcome["passed"],
            "skipped": by_outcome["skipped"],
            "failed": by_outcome["failed"],
            "scenarios": dict(sorted(by_scenario.items())),
        }


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the suite, print the counts, and write them with ``--write``."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write benchmarks/results/faults.json")
    args = parser.parse_args(argv)

    import pytest

    tally = Tally()
    os.chdir(ROOT)
    code = pytest.main([SUITE, "-q", "-p", "no:cacheprovider"], plugins=[tally])
    figures = tally.figures()
    lines: List[str] = [f"{figures['cases']} cases in {len(figures['scenarios'])} scenarios: "]
    lines[0] += ", ".join(f"{figures[k]} {k}" for k in ("passed", "skipped", "failed"))
    print("\n".join(lines))
    if code != 0 or figures["failed"]:
        print("the suite did not pass: nothing written")
        return 1
    if args.write:
        _results.write("faults", figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
