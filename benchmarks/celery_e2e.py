"""The Celery guide's task at size: tests/contrib/test_celery.py with 100 tasks per batch.

    python benchmarks/celery_e2e.py [--tasks 100] [--write]

Runs the project's own end-to-end test twice, each time on a fresh real prefork worker (4
processes, Redis broker and JSON backend) and a fresh 5/s quota server (burst 1, whole-second
``Retry-After``), with ``SUME_E2E_TASKS`` tasks per batch:

- the whole file: every batch in order on one worker, so the guide's ``RedisFleet`` carries
  the pace it learned from batch to batch, as a deployed worker does;
- ``-k "under_quota_pressure or paces_each_process or host_fleet"``: the quota-only batches,
  where the guide's pace starts fresh.

The test asserts what it always does (every task succeeds, no job runs twice, no keyless
POST) and, from 50 tasks, that the guide's task ends within 1.5x of the quota's ideal; each
batch reports here through ``SUME_E2E_RESULTS``. Needs the celery extra and redis-server.
``--write`` records ``benchmarks/results/celery_e2e.json`` (the Celery table of docs/measured.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import _results  # noqa: E402

TEST = "tests/contrib/test_celery.py"
#: (name, extra pytest arguments) of each run, in the order they run.
RUNS = (
    ("whole file", []),
    ("fresh pace", ["-k", "under_quota_pressure or paces_each_process or host_fleet"]),
)


def run(tasks: int, extra: List[str]) -> List[Dict[str, Any]]:
    """One pytest run of the end-to-end file; the batches it reported."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "batches.jsonl")
        env = {**os.environ, "SUME_E2E_TASKS": str(tasks), "SUME_E2E_RESULTS": out, "PYTHONPATH": ROOT}
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", TEST, *extra],
            cwd=ROOT, env=env, check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"{TEST} failed (exit {done.returncode}): nothing recorded")
        with open(out, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100, help="tasks per batch (SUME_E2E_TASKS)")
    parser.add_argument("--write", action="store_true", help="write benchmarks/results/celery_e2e.json")
    args = parser.parse_args(argv)
    _results.refuse_partial(parser, args, "tasks")
    runs = [{"name": name, "batches": run(args.tasks, extra)} for name, extra in RUNS]
    for r in runs:
        for b in r["batches"]:
            print(f"{r['name']}: {b['batch']}: {b['succeeded']}/{b['tasks']}, twice {b['twice']}, "
                  f"{b['last_success_s']:.1f} s ({b['last_success_s'] / b['ideal_s']:.2f}x the ideal)")
    if args.write:
        command = None if argv is None else _results.command_line(["celery_e2e.py", *argv])
        _results.write("celery_e2e", {"tasks": args.tasks, "runs": runs}, command)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
