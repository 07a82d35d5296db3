"""Fleet simulation in virtual time: what each retry strategy costs the server.

A discrete-event simulation (a heap of timed events, no sleeping) of many logical
requests against a model server. The sume strategies call the real
``Policy.decide`` and the real ``RetryBudget`` (with the simulation's clock
injected); the urllib3 strategy drives a real ``urllib3.util.Retry`` object
(``is_retry``, ``increment``, ``sleep`` with its own ``get_backoff_time`` and
``parse_retry_after``), only recording its sleeps instead of sleeping.

Modelling choices:

* Server calls take no time and each client sends one request at a time, so
  server calls per logical request is exactly the retry amplification.
* The fleet shares one ``RetryBudget``: the clients are the worker threads of
  one process using one ``SumeSession`` (a web app's worker pool, a batch job's
  thread pool), which is how the budget is meant to be deployed. A fleet of N
  processes behaves like N such simulations at 1/N of the load each: the
  ratio part scales with load, but each process keeps its own floor of 10
  retries/s, so once a process's traffic is under 50 requests/s the floor, not
  the ratio, sets its allowance. (At one logical request per process the floor
  alone allows 100 retries, and the budget never binds.)
* The budget is consulted after the policy says RETRY; a refusal gives up.
* All requests are idempotent (GET-like), so urllib3 retries them too.

Run ``python benchmarks/fleet.py`` (``--quick`` for a smaller run, ``--write``
to regenerate ``benchmarks/RESULTS-fleet.md``); it also draws
``benchmarks/fleet.png`` when matplotlib is installed.
"""

from __future__ import annotations

import argparse
import heapq
import math
import os
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from urllib3.exceptions import MaxRetryError
from urllib3.util.retry import Retry

from sume_urllib3._budget import RetryBudget
from sume_urllib3._policy import Policy

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 20240611
Clock = Callable[[], float]

# --------------------------------------------------------------------------- servers


class TokenBucketServer:
    """Admits ``rate`` calls per second (burst ``burst``); otherwise 429 with Retry-After."""

    def __init__(self, rate: float = 20.0, burst: float = 20.0, retry_after: str = "1") -> None:
        self.rate, self.burst, self.retry_after = rate, burst, retry_after
        self.tokens, self.last = burst, 0.0

    def call(self, now: float) -> Tuple[int, Optional[str]]:
        """Answer one call at virtual time ``now``."""
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        # Exact refills (20/s for 1.0 s) must admit the 20th call despite rounding.
        if self.tokens >= 1.0 - 1e-9:
            self.tokens -= 1.0
            return 200, None
        return 429, self.retry_after


class OutageServer:
    """503 without Retry-After until ``until``, then 200."""

    def __init__(self, until: float = math.inf) -> None:
        self.until = until

    def call(self, now: float) -> Tuple[int, Optional[str]]:
        """Answer one call at virtual time ``now``."""
        return (503, None) if now < self.until else (200, None)


class FlakyServer:
    """Each call independently fails with 503 (no Retry-After) with probability ``p``."""

    def __init__(self, p: float, rng: random.Random) -> None:
        self.p, self.rng = p, rng

    def call(self, now: float) -> Tuple[int, Optional[str]]:
        """Answer one call at virtual time ``now``."""
        return (503, None) if self.rng.random() < self.p else (200, None)


# ------------------------------------------------------------------------ strategies


class Client:
    """One logical request's retry state: ``on_failure`` returns the wait, or None to give up."""

    def on_failure(self, status: int, retry_after: Optional[str], now: float) -> Optional[float]:
        raise NotImplementedError


class SumeClient(Client):
    """Follows ``Policy.decide``; each retry also needs a token from the shared budget."""

    def __init__(
        self, policy: Policy, budget: Optional[RetryBudget], rng: random.Random, start: float
    ) -> None:
        self.policy, self.budget, self.rng, self.start = policy, budget, rng, start
        self.retries = 0
        if budget is not None:
            budget.record_request()

    def on_failure(self, status: int, retry_after: Optional[str], now: float) -> Optional[float]:
        decision = self.policy.decide(status, None, retry_after, self.retries, now - self.start, rng=self.rng)
        if not decision.retry or decision.wait is None:
            return None
        if self.budget is not None and not self.budget.try_spend():
            return None
        self.retries += 1
        return decision.wait


class _RecordingRetry(Retry):
    """urllib3's Retry with its two sleeping primitives recording instead of sleeping."""

    slept: float = 0.0

    def sleep_for_retry(self, response: Any) -> bool:
        # Same body as urllib3's, minus time.sleep.
        retry_after = self.get_retry_after(response)
        if retry_after:
            self.slept = retry_after
            return True
        return False

    def _sleep_backoff(self) -> None:
        backoff = self.get_backoff_time()
        self.slept = backoff if backoff > 0 else 0.0


class _Headers(Dict[str, str]):
    """The one header method Retry uses."""


class _FakeResponse:
    """Just what ``Retry.increment``/``sleep`` read from a response."""

    def __init__(self, status: int, retry_after: Optional[str]) -> None:
        self.status = status
        self.headers = _Headers({"Retry-After": retry_after} if retry_after is not None else {})

    def get_redirect_location(self) -> bool:
        return False


class Urllib3Client(Client):
    """What ``urllib3.connectionpool.urlopen`` does with ``Retry(total=6, backoff_factor=1, ...)``."""

    def __init__(self) -> None:
        self.retry: Retry = _RecordingRetry(total=6, backoff_factor=1, status_forcelist=(429, 503))

    def on_failure(self, status: int, retry_after: Optional[str], now: float) -> Optional[float]:
        response = _FakeResponse(status, retry_after)
        has_retry_after = bool(response.headers.get("Retry-After"))
        if not self.retry.is_retry("GET", status, has_retry_after):
            return None
        try:
            retry = self.retry.increment(method="GET", url="/v1/jobs", response=response)  # type: ignore[arg-type]
        except MaxRetryError:
            return None
        assert isinstance(retry, _RecordingRetry)
        retry.slept = 0.0
        retry.sleep(response)  # type: ignore[arg-type]
        self.retry = retry
        return retry.slept


class NaiveClient(Client):
    """``for _ in range(7): try; sleep(1)``: ignores status and Retry-After."""

    def __init__(self) -> None:
        self.retries = 0

    def on_failure(self, status: int, retry_after: Optional[str], now: float) -> Optional[float]:
        if self.retries >= 6:
            return None
        self.retries += 1
        return 1.0


@dataclass(frozen=True)
class Strategy:
    """A named way to build one client per logical request, sharing state per run."""

    name: str
    build: Callable[[Clock, random.Random], Callable[[float], Client]]


def _sume(policy: Policy, budget: bool) -> Callable[[Clock, random.Random], Callable[[float], Client]]:
    def build(clock: Clock, rng: random.Random) -> Callable[[float], Client]:
        shared = RetryBudget(clock=clock) if budget else None
        return lambda start: SumeClient(policy, shared, rng, start)

    return build


STRATEGIES: Tuple[Strategy, ...] = (
    Strategy("sume default (budget)", _sume(Policy(), budget=True)),
    Strategy("sume, no budget", _sume(Policy(), budget=False)),
    Strategy("sume, full jitter (budget)", _sume(Policy(jitter=(0.0, 1.0)), budget=True)),
    Strategy(
        "sume, Retry-After +U(0, 50%), no budget",
        _sume(Policy(retry_after_jitter=0.5), budget=False),
    ),
    Strategy(
        "urllib3 Retry(total=6, backoff_factor=1)",
        lambda clock, rng: lambda start: Urllib3Client(),
    ),
    Strategy("naive fixed 1 s x6", lambda clock, rng: lambda start: NaiveClient()),
)

# ------------------------------------------------------------------------- scenarios


@dataclass(frozen=True)
class Scenario:
    """Arrival times of logical requests and the server they meet."""

    key: str
    title: str
    arrivals: Sequence[float]
    server: Callable[[random.Random], Any]


def steady(rate: float, seconds: float) -> List[float]:
    """``rate`` arrivals per second, evenly spaced, for ``seconds``."""
    return [i / rate for i in range(int(rate * seconds))]


def scenarios(quick: bool) -> List[Scenario]:
    """The scenarios, smaller with ``quick``."""
    herd = 100 if quick else 500
    secs = 20.0 if quick else 60.0
    return [
        Scenario(
            "a",
            f"herd: {herd} clients at t=0, server admits 20/s (burst 20), else 429 Retry-After: 1"
            f" (ideal: 1 call each, done by {(herd - 20) / 20:g} s)",
            [0.0] * herd,
            lambda rng: TokenBucketServer(),
        ),
        Scenario(
            "b",
            f"total outage: every call 503, 50 req/s for {secs:g} s",
            steady(50, secs),
            lambda rng: OutageServer(),
        ),
        Scenario(
            "b200",
            f"total outage: every call 503, 200 req/s for {secs:g} s",
            steady(200, secs),
            lambda rng: OutageServer(),
        ),
        Scenario(
            "c",
            f"5% random 503s, 50 req/s for {secs:g} s",
            steady(50, secs),
            lambda rng: FlakyServer(0.05, rng),
        ),
        Scenario(
            "d",
            f"outage then recovery: 503 for {secs:g} s, 50 req/s for {2 * secs:g} s",
            steady(50, 2 * secs),
            lambda rng: OutageServer(until=secs),
        ),
    ]


# ------------------------------------------------------------------------ simulation


@dataclass
class Result:
    """What one scenario x strategy run measured."""

    scenario: str
    strategy: str
    logical: int
    calls: int
    successes: int
    completion: float
    peak_100ms: int
    per_second: Dict[int, int] = field(default_factory=dict)

    @property
    def amplification(self) -> float:
        """Server calls per logical request."""
        return self.calls / self.logical

    @property
    def success_rate(self) -> float:
        """Fraction of logical requests that succeeded."""
        return self.successes / self.logical


def simulate(scenario: Scenario, strategy: Strategy, seed: int = SEED) -> Result:
    """Run one scenario with one strategy in virtual time."""
    now = 0.0

    def clock() -> float:
        return now

    make_client = strategy.build(clock, random.Random(seed))
    server = scenario.server(random.Random(seed + 1))
    # (time, sequence, client index or -1 for a new arrival); the sequence keeps
    # simultaneous events first-come first-served and the run deterministic.
    heap: List[Tuple[float, int, int]] = [(t, i, -1) for i, t in enumerate(scenario.arrivals)]
    heapq.heapify(heap)
    seq = len(heap)
    clients: List[Client] = []
    calls = successes = 0
    completion = 0.0
    windows: Dict[int, int] = {}
    per_second: Dict[int, int] = {}
    while heap:
        now, _, index = heapq.heappop(heap)
        if index < 0:
            clients.append(make_client(now))
            index = len(clients) - 1
        calls += 1
        window = math.floor(now * 10 + 1e-9)
        windows[window] = windows.get(window, 0) + 1
        per_second[window // 10] = per_second.get(window // 10, 0) + 1
        status, retry_after = server.call(now)
        wait = None
        if status < 400:
            successes += 1
        else:
            wait = clients[index].on_failure(status, retry_after, now)
        if wait is None:
            completion = max(completion, now)
        else:
            heapq.heappush(heap, (now + wait, seq, index))
            seq += 1
    return Result(
        scenario.key,
        strategy.name,
        len(scenario.arrivals),
        calls,
        successes,
        completion,
        max(windows.values()),
        per_second,
    )


# -------------------------------------------------------------------------- reports


def table(results: Iterable[Result], titles: Dict[str, str]) -> str:
    """The results as one markdown table per scenario."""
    lines: List[str] = []
    current = None
    for r in results:
        if r.scenario != current:
            current = r.scenario
            if lines:
                lines.append("")
            lines += [
                f"**({r.scenario}) {titles[r.scenario]}** ({r.logical} logical requests)",
                "",
                "| strategy | server calls / request | success | completion (s) | peak calls / 100 ms |",
                "|---|---:|---:|---:|---:|",
            ]
        lines.append(
            f"| {r.strategy} | {r.amplification:.2f} | {100 * r.success_rate:.1f}% | "
            f"{r.completion:.1f} | {r.peak_100ms} |"
        )
    return "\n".join(lines)


def checks(results: List[Result]) -> List[str]:
    """The targets, each with PASS or FAIL and the numbers behind it."""
    by = {(r.scenario, r.strategy): r for r in results}
    default, nobudget = STRATEGIES[0].name, STRATEGIES[1].name
    out = []
    for key, rate in (("b", 50), ("b200", 200)):
        with_budget, without = by[(key, default)], by[(key, nobudget)]
        bound = 1 + max(0.2, 10.0 / rate)
        verdict = "PASS" if with_budget.amplification <= 1.3 else "FAIL"
        out.append(
            f"- {verdict}: total outage at {rate} req/s, amplification with the budget "
            f"{with_budget.amplification:.2f}x (target <= 1.3x; steady-state bound "
            f"1 + max(0.2, 10/{rate}) = {bound:.2f}x), without {without.amplification:.2f}x (expected ~7x)"
        )
    flaky_budget, flaky_free = by[("c", default)], by[("c", nobudget)]
    verdict = "PASS" if flaky_budget.successes >= flaky_free.successes else "FAIL"
    out.append(
        f"- {verdict}: 5% errors, success with the budget {100 * flaky_budget.success_rate:.2f}% "
        f"vs without {100 * flaky_free.success_rate:.2f}% (target: no loss)"
    )
    return out


def plot(results: List[Result], titles: Dict[str, str], path: str) -> bool:
    """Server calls per second over time, one panel per scenario; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    keys = list(dict.fromkeys(r.scenario for r in results))
    fig, axes = plt.subplots(len(keys), 1, figsize=(10, 3.2 * len(keys)))
    for ax, key in zip(axes, keys):
        for r in (r for r in results if r.scenario == key):
            seconds = range(max(r.per_second) + 1)
            ax.step(
                list(seconds),
                [r.per_second.get(s, 0) for s in seconds],
                where="post",
                label=f"{r.strategy} ({r.amplification:.2f}x)",
            )
        ax.set_title(f"({key}) {titles[key]}", fontsize=9)
        ax.set_ylabel("server calls / s")
        ax.legend(fontsize=7, loc="upper right")
    axes[-1].set_xlabel("virtual time (s)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run every scenario with every strategy, print the table and the checks."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smaller scenarios")
    parser.add_argument("--write", action="store_true", help="write benchmarks/RESULTS-fleet.md")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    scens = scenarios(args.quick)
    titles = {s.key: s.title for s in scens}
    results = [simulate(s, strategy, args.seed) for s in scens for strategy in STRATEGIES]
    took = time.perf_counter() - started

    report = table(results, titles)
    targets = "\n".join(checks(results))
    print(report)
    print("\nTargets:\n" + targets)
    print(f"\n(simulated in {took:.1f}s of real time, seed {args.seed})")
    if not args.no_plot:
        png = os.path.join(HERE, "fleet.png")
        if plot(results, titles, png):
            print(f"plot: {os.path.relpath(png)}")
        else:
            print("matplotlib is not installed: no plot (pip install matplotlib)")
    if args.write:
        with open(os.path.join(HERE, "RESULTS-fleet.md"), "w", encoding="utf-8") as f:
            f.write(_results_page(report, targets, args))
        print("wrote benchmarks/RESULTS-fleet.md")
    return 0


def _results_page(report: str, targets: str, args: argparse.Namespace) -> str:
    command = "python benchmarks/fleet.py --write" + (" --quick" if args.quick else "")
    if args.seed != SEED:
        command += f" --seed {args.seed}"
    return f"""# Fleet simulation: retry cost on the server

Generated by `{command}` (virtual time, seed {args.seed}; do not edit by hand).
Each scenario runs every strategy against the same model server. The sume rows call
the real `Policy.decide` and `RetryBudget`; the urllib3 row drives a real
`urllib3.util.Retry(total=6, backoff_factor=1, status_forcelist=(429, 503))`
(waits 0, 2, 4, 8, 16, 32 s; Retry-After honoured). The whole fleet shares one
retry budget, as the threads of one process sharing one session do (see the module
docstring of `benchmarks/fleet.py`). Server calls take no time; completion is when
the last logical request ends (success or give-up).

{report}

## Targets

{targets}

Plot: `benchmarks/fleet.png` (server calls per second over time).
"""


if __name__ == "__main__":
    sys.exit(main())
