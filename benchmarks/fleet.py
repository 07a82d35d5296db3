"""Fleet simulation in virtual time: what each retry and pacing strategy costs the server.

A discrete-event simulation (a heap of timed events, no sleeping) of many logical
requests against a model server. The sume strategies call the real
``Policy.decide``, the real ``RetryBudget`` and the real ``LocalFleet`` (with the
simulation's clock and a seeded rng injected); the urllib3 strategy drives a real
``urllib3.util.Retry`` object (``is_retry``, ``increment``, ``sleep`` with its own
``get_backoff_time`` and ``parse_retry_after``), only recording its sleeps instead
of sleeping.

Modelling choices:

* Each client sends one request at a time, so server calls per logical request is
  exactly the retry amplification. In the original scenarios server calls take no
  time; the scenarios marked "50 ms" answer each call 50 ms after it is sent (the
  server decides when the call arrives), which is what slow start needs to show.
* The fleet shares one ``RetryBudget`` (and, in the "fleet" rows, one
  ``LocalFleet``): the clients are the worker threads of one process using one
  ``SumeSession`` (a web app's worker pool, a batch job's thread pool), which is how
  the budget is meant to be deployed. A fleet of N processes behaves like N such
  simulations at 1/N of the load each: the ratio part scales with load, but each
  process keeps its own floor of 10 retries/s, so once a process's traffic is under
  50 requests/s the floor, not the ratio, sets its allowance. (At one logical
  request per process the floor alone allows 100 retries, and the budget never binds.)
  The "alone" rows are that extreme: every client has its own budget and its own
  ``LocalFleet``, nothing shared (one process per request).
* The fleet rows follow the wiring of ``FLEET_API.md``: ``acquire`` before the first
  attempt (sleep ``wait``; ``again`` means acquire again; ``refused`` means give up with
  nothing sent), ``release`` with every response, and before each retry ``acquire``
  with ``not_before`` = the policy's wait. A retry the server paced (429, or 503 with
  Retry-After) does not spend the retry budget; any other retry does.
* The budget is consulted after the policy says RETRY; a refusal gives up.
* All requests are idempotent (GET-like), so urllib3 retries them too.
* Scenario (f) has rows of its own: a fleet of 50 processes x 10 threads. "One shared
  store" is one ``LocalFleet`` and one ``RetryBudget`` shared by all 500 clients, which is
  the state ``RedisFleet`` keeps in Redis for every process (the cooldown, the GCRA pace,
  configured or learned, the first-wave bound and the retry budget); the Redis round trip
  itself is not modelled. The per-process rows give each process a ``LocalFleet`` and a
  ``RetryBudget`` of its own shared by its 10 threads; client i runs in process i % 50,
  as processes posting at once interleave their first requests.
* "Retry-After spread" rows run ``Policy(retry_after_spread=4)``, the opt-in for lone
  clients: a wait that came from Retry-After becomes ``Retry-After + U(0, min(backoff_max,
  4 * 2**retries))`` (still bounded by ``max_elapsed``).

Run ``python benchmarks/fleet.py`` (``--quick`` for a smaller run, ``--write``
to regenerate ``benchmarks/RESULTS-fleet.md`` and ``benchmarks/results/fleet.json``);
it also draws ``benchmarks/fleet.png`` when matplotlib is installed.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import math
import os
import random
import sys
import textwrap
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _results
from urllib3.exceptions import MaxRetryError
from urllib3.util.retry import Retry

from sume_urllib3._policy import Policy
from sume_urllib3.pacing._fleet import Grant, LocalFleet, RetryBudget, parse_rate

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 20240611
KEY = "k0123456789abcdef"  # one API key's fleet id; the simulation never sees a key
Clock = Callable[[], float]
Headers = Dict[str, str]
Answer = Tuple[int, Headers]

# --------------------------------------------------------------------------- servers


class TokenBucketServer:
    """Admits ``rate`` calls per second (burst ``burst``); otherwise 429 with Retry-After.

    ``ratelimit`` adds ``RateLimit-Limit`` (the burst), ``-Remaining`` and ``-Reset``
    (whole seconds until the bucket is full, as the IETF draft's delta-seconds) to every
    reply; ``policy`` also adds ``RateLimit-Policy: <burst>;w=<burst/rate>``. Without
    ``retry_after`` the 429 says how long until the next token (whole seconds, >= 1).
    """

    def __init__(
        self,
        rate: float = 20.0,
        burst: float = 20.0,
        retry_after: Optional[str] = "1",
        ratelimit: bool = False,
        policy: bool = False,
    ) -> None:
        self.rate, self.burst, self.retry_after = rate, burst, retry_after
        self.ratelimit, self.policy = ratelimit, policy
        self.tokens, self.last = burst, 0.0

    def call(self, now: float) -> Answer:
        """Answer one call at virtual time ``now``."""
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        # Exact refills (20/s for 1.0 s) must admit the 20th call despite rounding.
        ok = self.tokens >= 1.0 - 1e-9
        if ok:
            self.tokens -= 1.0
        headers: Headers = {}
        if self.ratelimit:
            left = max(self.tokens, 0.0)
            headers["RateLimit-Limit"] = f"{self.burst:g}"
            headers["RateLimit-Remaining"] = str(int(left + 1e-9))
            headers["RateLimit-Reset"] = str(math.ceil((self.burst - left) / self.rate - 1e-9))
        if self.policy:
            headers["RateLimit-Policy"] = f"{self.burst:g};w={self.burst / self.rate:g}"
        if ok:
            return 200, headers
        wait = self.retry_after or str(max(1, math.ceil((1.0 - self.tokens) / self.rate)))
        headers["Retry-After"] = wait
        return 429, headers

    def params(self) -> Dict[str, Any]:
        """What the server is, for the results file (``retry_after`` None: until the next token)."""
        return {
            "kind": "token_bucket",
            "rate_per_s": self.rate,
            "burst": self.burst,
            "retry_after": self.retry_after,
            "ratelimit_headers": self.ratelimit,
            "ratelimit_policy_header": self.policy,
        }


class OutageServer:
    """503 without Retry-After until ``until``, then 200."""

    def __init__(self, until: float = math.inf) -> None:
        self.until = until

    def call(self, now: float) -> Answer:
        """Answer one call at virtual time ``now``."""
        return (503, {}) if now < self.until else (200, {})

    def params(self) -> Dict[str, Any]:
        """What the server is, for the results file (``until_s`` None: the outage never ends)."""
        return {"kind": "outage", "status": 503, "until_s": None if math.isinf(self.until) else self.until}


class FlakyServer:
    """Each call independently fails with 503 (no Retry-After) with probability ``p``."""

    def __init__(self, p: float, rng: random.Random) -> None:
        self.p, self.rng = p, rng

    def call(self, now: float) -> Answer:
        """Answer one call at virtual time ``now``."""
        return (503, {}) if self.rng.random() < self.p else (200, {})

    def params(self) -> Dict[str, Any]:
        """What the server is, for the results file."""
        return {"kind": "flaky", "status": 503, "error_probability": self.p}


# ------------------------------------------------------------------------ strategies


class Client:
    """One logical request's retry state.

    ``first`` says what to do before the first attempt: ("send", delay), ("again",
    delay) or ("refused", 0). ``on_response`` returns the wait before the next attempt,
    or None when the request is over (success or giving up).
    """

    refused_reason: Optional[str] = None

    def first(self, now: float) -> Tuple[str, float]:
        return "send", 0.0

    def on_response(self, status: int, headers: Headers, now: float) -> Optional[float]:
        if status < 400:
            return None
        return self.on_failure(status, headers.get("Retry-After"), now)

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


class FleetClient(Client):
    """The wiring of FLEET_API.md: the fleet before every attempt, told of every response."""

    def __init__(
        self,
        policy: Policy,
        budget: Optional[RetryBudget],
        fleet: LocalFleet,
        rng: random.Random,
        start: float,
        spread: float = 0.0,
    ) -> None:
        if spread:
            policy = policy.replace(retry_after_spread=spread)
        self.policy, self.budget, self.fleet, self.rng, self.start = policy, budget, fleet, rng, start
        self.retries = 0
        self.grant: Grant = Grant()
        if budget is not None:
            budget.record_request()

    def first(self, now: float) -> Tuple[str, float]:
        grant = self.fleet.acquire(KEY, time_left=self.policy.max_elapsed - (now - self.start))
        if grant.refused:
            self.refused_reason = grant.refused
            return "refused", 0.0
        self.grant = grant
        return ("again" if grant.again else "send"), grant.wait

    def on_response(self, status: int, headers: Headers, now: float) -> Optional[float]:
        self.fleet.release(KEY, self.grant, status, headers)
        if status < 400:
            return None
        retry_after = headers.get("Retry-After")
        elapsed = now - self.start
        decision = self.policy.decide(status, None, retry_after, self.retries, elapsed, rng=self.rng)
        if not decision.retry or decision.wait is None:
            return None
        throttle = status == 429 or (status == 503 and retry_after is not None)
        if not throttle and self.budget is not None and not self.budget.try_spend():
            return None
        grant = self.fleet.acquire(
            KEY,
            time_left=self.policy.max_elapsed - elapsed,
            retry="throttle" if throttle else "error",
            not_before=decision.wait,
        )
        if grant.refused:
            return None
        self.retries += 1
        self.grant = grant
        return grant.wait


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


#: The urllib3 row's ``Retry`` arguments.
URLLIB3_RETRY: Dict[str, Any] = {"total": 6, "backoff_factor": 1, "status_forcelist": (429, 503)}


class Urllib3Client(Client):
    """What ``urllib3.connectionpool.urlopen`` does with ``Retry(total=6, backoff_factor=1, ...)``."""

    def __init__(self) -> None:
        self.retry: Retry = _RecordingRetry(**URLLIB3_RETRY)

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


Build = Callable[[Clock, random.Random, "Scenario"], Optional[Callable[[float], Client]]]


@dataclass(frozen=True)
class Strategy:
    """A named way to build one client per logical request, sharing state per run.

    ``key`` names the row in ``results/fleet.json`` (stable, unlike the label ``name``);
    ``build`` returns None when the strategy does not apply to a scenario (a configured
    quota where the server has none).
    """

    key: str
    name: str
    build: Build


def _sume(policy: Policy, budget: bool) -> Build:
    def build(clock: Clock, rng: random.Random, scenario: Scenario) -> Callable[[float], Client]:
        shared = RetryBudget(clock=clock) if budget else None
        return lambda start: SumeClient(policy, shared, rng, start)

    return build


def _fleet(configured: bool = False) -> Build:
    """One LocalFleet and one budget shared by every client (threads of one process)."""

    def build(clock: Clock, rng: random.Random, scenario: Scenario) -> Optional[Callable[[float], Client]]:
        if configured and scenario.quota is None:
            return None
        fleet = LocalFleet(scenario.quota if configured else None, clock=clock, rng=rng)
        budget = RetryBudget(clock=clock)
        return lambda start: FleetClient(Policy(), budget, fleet, rng, start)

    return build


def _alone(spread: float = 0.0) -> Build:
    """Every client with a LocalFleet and a budget of its own: nothing shared."""

    def build(clock: Clock, rng: random.Random, scenario: Scenario) -> Callable[[float], Client]:
        def make(start: float) -> Client:
            fleet = LocalFleet(clock=clock, rng=rng)
            return FleetClient(Policy(), RetryBudget(clock=clock), fleet, rng, start, spread)

        return make

    return build


def _processes(procs: int, configured: bool = False, divide: int = 1) -> Build:
    """``procs`` processes, each with a LocalFleet and a budget of its own shared by its threads.

    Client i runs in process ``i % procs``; ``configured`` gives every process's fleet the
    scenario's quota divided by ``divide``.
    """

    def build(clock: Clock, rng: random.Random, scenario: Scenario) -> Optional[Callable[[float], Client]]:
        quota = parse_rate(scenario.quota)
        if configured and quota is None:
            return None
        rate = quota / divide if configured and quota is not None else None
        fleets = [LocalFleet(rate, clock=clock, rng=rng) for _ in range(procs)]
        budgets = [RetryBudget(clock=clock) for _ in range(procs)]
        count = itertools.count()

        def make(start: float) -> Client:
            p = next(count) % procs
            return FleetClient(Policy(), budgets[p], fleets[p], rng, start)

        return make

    return build


#: ``Policy(retry_after_spread=...)`` for the lone clients that opt in.
SPREAD = 4.0

STRATEGIES: Tuple[Strategy, ...] = (
    Strategy("budget", "sume default (budget)", _sume(Policy(), budget=True)),
    Strategy("no_budget", "sume, no budget", _sume(Policy(), budget=False)),
    Strategy("full_jitter", "sume, full jitter (budget)", _sume(Policy(jitter=(0.0, 1.0)), budget=True)),
    Strategy(
        "retry_after_jitter",
        "sume, Retry-After +U(0, 50%), no budget",
        _sume(Policy(retry_after_jitter=0.5), budget=False),
    ),
    Strategy(
        "urllib3",
        "urllib3 Retry(total=6, backoff_factor=1)",
        lambda clock, rng, scenario: lambda start: Urllib3Client(),
    ),
    Strategy("naive", "naive fixed 1 s x6", lambda clock, rng, scenario: lambda start: NaiveClient()),
    Strategy("fleet_learned", "fleet: shared LocalFleet, pace learned", _fleet()),
    Strategy("fleet_configured", "fleet: shared LocalFleet(rate=quota)", _fleet(configured=True)),
    Strategy("alone", "alone: own LocalFleet + budget each", _alone()),
    Strategy("alone_spread", f"alone, Policy(retry_after_spread={SPREAD:g})", _alone(SPREAD)),
)
LEARNED, CONFIGURED, ALONE, SPREAD_ROW = (s.name for s in STRATEGIES[6:10])

#: Scenario (f): processes of this many threads each, all on one API key.
PROCS, THREADS = 50, 10
STORE = "one shared store (RedisFleet's state)"
PROCESS_STRATEGIES: Tuple[Strategy, ...] = (
    Strategy("store_learned", f"{STORE}, pace learned", _fleet()),
    Strategy("store_configured", f"{STORE}, rate=quota", _fleet(configured=True)),
    Strategy(
        "processes_learned",
        f"{PROCS} processes, own LocalFleet + budget each, pace learned",
        _processes(PROCS),
    ),
    Strategy(
        "processes_configured",
        f"{PROCS} processes, own LocalFleet(rate=quota) each",
        _processes(PROCS, configured=True),
    ),
    Strategy(
        "processes_divided",
        f"{PROCS} processes, own LocalFleet(rate=quota/{PROCS}) each",
        _processes(PROCS, configured=True, divide=PROCS),
    ),
)

# ------------------------------------------------------------------------- scenarios


@dataclass(frozen=True)
class Scenario:
    """Arrival times of logical requests, the server they meet, and how they arrive.

    ``latency`` is seconds from sending a call to reading its answer; ``workers`` turns
    the arrivals into a queue of jobs taken by that many workers, each starting its
    next job when the last one ends; ``quota`` is what a user would configure;
    ``strategies`` are the rows this scenario runs (None: ``STRATEGIES``). ``rate`` (arrivals
    per second, None: all at t=0) and ``procs`` (the clients' processes) only describe the
    scenario in the results file.
    """

    key: str
    title: str
    arrivals: Sequence[float]
    server: Callable[[random.Random], Any]
    latency: float = 0.0
    workers: Optional[int] = None
    quota: Optional[str] = None
    strategies: Optional[Tuple[Strategy, ...]] = None
    rate: Optional[float] = None
    procs: Optional[int] = None


def steady(rate: float, seconds: float) -> List[float]:
    """``rate`` arrivals per second, evenly spaced, for ``seconds``."""
    return [i / rate for i in range(int(rate * seconds))]


def ideal_herd(clients: int, rate: float, burst: float) -> Tuple[float, float]:
    """When the last of ``clients`` posting at t=0 can succeed at one call each: with the burst, without."""
    return max(clients - burst, 0.0) / rate, clients / rate


def scenarios(quick: bool) -> List[Scenario]:
    """The scenarios, smaller with ``quick``."""
    herd = 100 if quick else 500
    secs = 20.0 if quick else 60.0
    jobs = 100
    threads = 2 if quick else THREADS
    best, worst = ideal_herd(herd, 20.0, 20.0)
    ideal = f"ideal: 1 call each, done by {best:g} s with the burst, {worst:g} s without"
    return [
        Scenario(
            "a",
            f"herd: {herd} clients at t=0, server admits 20/s (burst 20), else 429 Retry-After: 1; "
            f"replies carry RateLimit-Limit/Remaining/Reset ({ideal})",
            [0.0] * herd,
            lambda rng: TokenBucketServer(ratelimit=True),
            quota="20/s",
        ),
        Scenario(
            "a0",
            "herd as (a), the server sends no RateLimit headers (429 + Retry-After: 1 only)",
            [0.0] * herd,
            lambda rng: TokenBucketServer(),
            quota="20/s",
        ),
        Scenario(
            "a50",
            "herd as (a), 50 ms between sending a call and reading its answer",
            [0.0] * herd,
            lambda rng: TokenBucketServer(ratelimit=True),
            latency=0.05,
            quota="20/s",
        ),
        Scenario(
            "b",
            f"total outage: every call 503, 50 req/s for {secs:g} s",
            steady(50, secs),
            lambda rng: OutageServer(),
            rate=50,
        ),
        Scenario(
            "b200",
            f"total outage: every call 503, 200 req/s for {secs:g} s",
            steady(200, secs),
            lambda rng: OutageServer(),
            rate=200,
        ),
        Scenario(
            "c",
            f"5% random 503s, 50 req/s for {secs:g} s",
            steady(50, secs),
            lambda rng: FlakyServer(0.05, rng),
            rate=50,
        ),
        Scenario(
            "d",
            f"outage then recovery: 503 for {secs:g} s, 50 req/s for {2 * secs:g} s",
            steady(50, 2 * secs),
            lambda rng: OutageServer(until=secs),
            rate=50,
        ),
        Scenario(
            "e",
            f"10/min quota (GCRA, burst 10; 429 + Retry-After to the next token, RateLimit headers "
            f"with RateLimit-Policy: 10;w=60) shared by 40 workers submitting {jobs} jobs, 50 ms",
            [0.0] * jobs,
            lambda rng: TokenBucketServer(10 / 60, 10, retry_after=None, ratelimit=True, policy=True),
            latency=0.05,
            workers=40,
            quota="10/min",
        ),
        Scenario(
            "f",
            f"fleet of {PROCS} processes x {threads} threads ({PROCS * threads} clients) posting at once "
            "against the herd server of (a): 20/s (burst 20), else 429 Retry-After: 1, RateLimit headers",
            [0.0] * (PROCS * threads),
            lambda rng: TokenBucketServer(ratelimit=True),
            quota="20/s",
            strategies=PROCESS_STRATEGIES,
            procs=PROCS,
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
    throttled: int = 0
    refused: int = 0
    last_success: float = 0.0
    key: str = ""  # the strategy's key

    @property
    def amplification(self) -> float:
        """Server calls per logical request."""
        return self.calls / self.logical

    @property
    def success_rate(self) -> float:
        """Fraction of logical requests that succeeded."""
        return self.successes / self.logical

    @property
    def gave_up_after_sending(self) -> int:
        """Logical requests that ended without success after at least one call."""
        return self.logical - self.successes - self.refused


_ACQUIRE, _SEND, _ANSWER = 0, 1, 2


def simulate(scenario: Scenario, strategy: Strategy, seed: int = SEED) -> Optional[Result]:
    """Run one scenario with one strategy in virtual time (None when it does not apply)."""
    now = 0.0

    def clock() -> float:
        return now

    make_client = strategy.build(clock, random.Random(seed), scenario)
    if make_client is None:
        return None
    server = scenario.server(random.Random(seed + 1))
    arrivals = list(scenario.arrivals)
    first = arrivals if scenario.workers is None else arrivals[: scenario.workers]
    queued = arrivals[len(first) :]
    # (time, sequence, client index or -1 for a new arrival, phase); the sequence keeps
    # simultaneous events first-come first-served and the run deterministic.
    heap: List[Tuple[float, int, int, int]] = [(t, i, -1, _ACQUIRE) for i, t in enumerate(first)]
    heapq.heapify(heap)
    seq = len(heap)
    clients: List[Client] = []
    answers: Dict[int, Answer] = {}
    calls = successes = throttled = refused = 0
    completion = last_success = 0.0
    windows: Dict[int, int] = {}
    per_second: Dict[int, int] = {}

    def push(at: float, index: int, phase: int) -> None:
        nonlocal seq
        heapq.heappush(heap, (at, seq, index, phase))
        seq += 1

    def finish() -> None:
        nonlocal completion
        completion = max(completion, now)
        if queued:
            queued.pop(0)
            push(now, -1, _ACQUIRE)

    while heap:
        now, _, index, phase = heapq.heappop(heap)
        if index < 0:
            clients.append(make_client(now))
            index = len(clients) - 1
        client = clients[index]
        if phase == _ACQUIRE:
            what, delay = client.first(now)
            if what == "refused":
                refused += 1
                finish()
                continue
            if what == "again" or delay > 0:
                push(now + delay, index, _ACQUIRE if what == "again" else _SEND)
                continue
            phase = _SEND
        if phase == _SEND:
            calls += 1
            window = math.floor(now * 10 + 1e-9)
            windows[window] = windows.get(window, 0) + 1
            per_second[window // 10] = per_second.get(window // 10, 0) + 1
            answer = server.call(now)
            if answer[0] == 429:
                throttled += 1
            if scenario.latency > 0:
                answers[index] = answer
                push(now + scenario.latency, index, _ANSWER)
                continue
        else:
            answer = answers.pop(index)
        status, headers = answer
        if status < 400:
            successes += 1
            last_success = max(last_success, now)
        wait = client.on_response(status, headers, now)
        if wait is None:
            finish()
        else:
            push(now + wait, index, _SEND)
    return Result(
        scenario.key,
        strategy.name,
        len(scenario.arrivals),
        calls,
        successes,
        completion,
        max(windows.values()) if windows else 0,
        per_second,
        throttled,
        refused,
        last_success,
        strategy.key,
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
                "| strategy | server calls / request | success | 429s | refused unsent | last success (s) "
                "| completion (s) | peak calls / 100 ms |",
                "|---|---:|---:|---:|---:|---:|---:|---:|",
            ]
        lines.append(
            f"| {r.strategy} | {r.amplification:.2f} | {100 * r.success_rate:.1f}% | {r.throttled} | "
            f"{r.refused} | {r.last_success:.1f} | {r.completion:.1f} | {r.peak_100ms} |"
        )
    return "\n".join(lines)


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def checks(results: List[Result]) -> List[str]:
    """The targets, each with PASS or FAIL and the numbers behind it."""
    by = {(r.scenario, r.strategy): r for r in results}
    default, nobudget = STRATEGIES[0].name, STRATEGIES[1].name
    out = []
    for key, rate in (("b", 50), ("b200", 200)):
        with_budget, without = by[(key, default)], by[(key, nobudget)]
        bound = 1 + max(0.2, 10.0 / rate)
        out.append(
            f"- {_verdict(with_budget.amplification <= 1.3)}: total outage at {rate} req/s, amplification "
            f"with the budget {with_budget.amplification:.2f}x (target <= 1.3x; steady-state bound "
            f"1 + max(0.2, 10/{rate}) = {bound:.2f}x), without {without.amplification:.2f}x (expected ~7x)"
        )
    flaky_budget, flaky_free = by[("c", default)], by[("c", nobudget)]
    out.append(
        f"- {_verdict(flaky_budget.successes >= flaky_free.successes)}: 5% errors, success with the budget "
        f"{100 * flaky_budget.success_rate:.2f}% vs without {100 * flaky_free.success_rate:.2f}% "
        "(target: no loss)"
    )
    for key in ("a", "a50"):
        r = by[(key, LEARNED)]
        ok = r.success_rate >= 0.99 and r.amplification <= 1.3
        out.append(
            f"- {_verdict(ok)}: ({key}) herd, shared fleet, pace learned from headers: "
            f"{100 * r.success_rate:.1f}% success, {r.amplification:.2f} calls/request, last success "
            f"{r.last_success:.1f} s (target >= 99%, <= 1.3)"
        )
    for key in ("a", "a50"):
        r = by[(key, CONFIGURED)]
        ok = r.success_rate >= 0.995 and r.amplification <= 1.05 and r.last_success <= 26.0
        out.append(
            f"- {_verdict(ok)}: ({key}) herd, shared fleet, rate='20/s' configured: "
            f"{100 * r.success_rate:.1f}% success, {r.amplification:.2f} calls/request, last success "
            f"{r.last_success:.1f} s (target >= 99.5%, <= 1.05, <= 26 s)"
        )
    for key in ("a0", "a"):
        for name in (ALONE, SPREAD_ROW):
            r = by[(key, name)]
            ok = r.success_rate >= 0.95 and r.amplification <= 3.5
            out.append(
                f"- {_verdict(ok)}: ({key}) herd, every client alone ({name}): "
                f"{100 * r.success_rate:.1f}% success, {r.amplification:.2f} calls/request "
                f"(target >= 95%, <= 3.5)"
            )
    for key, rate in (("b", 50), ("b200", 200)):
        r = by[(key, LEARNED)]
        out.append(
            f"- {_verdict(round(r.amplification, 2) <= 1.2)}: total outage at {rate} req/s, {LEARNED}: "
            f"{r.amplification:.3f}x (target <= 1.2x at two decimals; the budget alone: "
            f"{by[(key, default)].amplification:.3f}x)"
        )
        alone = by[(key, ALONE)]
        out.append(
            f"- (info) total outage at {rate} req/s, every client alone: {alone.amplification:.2f}x "
            f"(one process per request: each has a budget of its own whose floor allows all 6 retries)"
        )
    for name in (LEARNED, ALONE, SPREAD_ROW):
        r = by[("c", name)]
        out.append(
            f"- {_verdict(r.success_rate == 1.0)}: 5% random 503s, {name}: {100 * r.success_rate:.2f}% "
            f"success (target 100%)"
        )
    for name in (CONFIGURED, LEARNED):
        r = by[("e", name)]
        ok = r.gave_up_after_sending == 0 and (name != CONFIGURED or r.throttled == 0)
        out.append(
            f"- {_verdict(ok)}: (e) 10/min quota, 40 workers, 100 jobs, {name}: {r.successes} succeeded, "
            f"{r.refused} refused up front (turn after the 120 s deadline, nothing sent), "
            f"{r.gave_up_after_sending} gave up after sending, {r.throttled} 429s "
            f"(target: every job succeeds or is refused unsent; 0 429s when configured)"
        )
    if any(r.scenario == "f" for r in results):
        out += _process_checks(by)
    return out


def _summary(r: Result) -> str:
    return (
        f"{100 * r.success_rate:.1f}% success, {r.amplification:.2f} calls/request, {r.throttled} 429s, "
        f"last success {r.last_success:.1f} s"
    )


def _process_checks(by: Dict[Tuple[str, str], Result]) -> List[str]:
    """What scenario (f) shows; issue 14 sets no number for it, so these are (info) lines."""
    shared = [by[("f", s.name)] for s in PROCESS_STRATEGIES[:2]]
    learned, full, divided = (by[("f", s.name)] for s in PROCESS_STRATEGIES[2:])
    return [
        f"- (info) (f) {PROCS} processes on one shared store (the state RedisFleet shares: cooldown, "
        f"GCRA pace, first-wave bound, retry budget): pace learned: {_summary(shared[0])}; "
        f"rate='20/s': {_summary(shared[1])} (no target in issue 14; it shows that with one store the "
        f"processes pace as the threads of one process do in (a): the cost does not grow with the "
        f"number of processes)",
        f"- (info) (f) the same {PROCS} processes, each with its own LocalFleet and budget: pace learned: "
        f"{_summary(learned)}; rate=quota each: {_summary(full)}; rate=quota/{PROCS} each: "
        f"{_summary(divided)}, peak {divided.peak_100ms} calls/100 ms (each process paces alone: at the "
        f"full quota the processes together send {PROCS}x the quota and herd; dividing the quota saves "
        f"the requests but the processes' turns fall at the same instants, so each wave meets the "
        f"server's burst and the herd takes far longer than one shared pace)",
    ]


def row_figures(r: Result) -> Dict[str, Any]:
    """One strategy's row of a scenario, as the results file records it."""
    return {
        "strategy": r.key,
        "label": r.strategy,
        "server_calls": r.calls,
        "calls_per_request": r.amplification,
        "successes": r.successes,
        "success_fraction": r.success_rate,
        "responses_429": r.throttled,
        "refused_unsent": r.refused,
        "gave_up_after_sending": r.gave_up_after_sending,
        "last_success_s": r.last_success,
        "completion_s": r.completion,
        "peak_calls_per_100ms": r.peak_100ms,
    }


def scenario_figures(scenario: Scenario, results: List[Result]) -> Dict[str, Any]:
    """One scenario's parameters and its rows, in the order the table prints them."""
    model = scenario.server(random.Random(0))
    server: Dict[str, Any] = model.params()
    clients = len(scenario.arrivals)
    at_once = scenario.rate is None
    ideal: Optional[Dict[str, Any]] = None
    if at_once and isinstance(model, TokenBucketServer):
        best, worst = ideal_herd(clients, model.rate, model.burst)
        ideal = {
            "calls_per_request": 1,
            "last_success_s_with_burst": best,
            "last_success_s_without_burst": worst,
        }
    return {
        "key": scenario.key,
        "title": scenario.title,
        "logical_requests": clients,
        "arrivals": "all at t=0" if at_once else "steady",
        "arrival_rate_per_s": scenario.rate,
        "arrival_seconds": None if at_once or not scenario.rate else clients / scenario.rate,
        "workers": scenario.workers,
        "processes": scenario.procs,
        "threads_per_process": clients // scenario.procs if scenario.procs else None,
        "latency_s": scenario.latency,
        "quota": scenario.quota,
        "server": server,
        "ideal": ideal,
        "rows": [row_figures(r) for r in results if r.scenario == scenario.key],
    }


def figures(scens: List[Scenario], results: List[Result], targets: List[str], seed: int) -> Dict[str, Any]:
    """Everything ``--write`` records in ``results/fleet.json``: every scenario, every row, the checks."""
    policy = Policy()
    return {
        "seed": seed,
        "policy_defaults": {"max_retries": policy.max_retries, "max_elapsed_s": policy.max_elapsed},
        "retry_after_spread": SPREAD,
        "urllib3_retry": {**URLLIB3_RETRY, "status_forcelist": list(URLLIB3_RETRY["status_forcelist"])},
        "scenarios": [scenario_figures(s, results) for s in scens],
        "checks": targets,
    }


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
        ax.set_title("\n".join(textwrap.wrap(f"({key}) {titles[key]}", 130)), fontsize=9)
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
    parser.add_argument(
        "--write",
        action="store_true",
        help="write benchmarks/RESULTS-fleet.md and benchmarks/results/fleet.json",
    )
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    _results.refuse_partial(parser, args, "quick")

    started = time.perf_counter()
    scens = scenarios(args.quick)
    titles = {s.key: s.title for s in scens}
    runs = (simulate(s, strategy, args.seed) for s in scens for strategy in s.strategies or STRATEGIES)
    results = [r for r in runs if r is not None]
    took = time.perf_counter() - started

    report = table(results, titles)
    verdicts = checks(results)
    targets = "\n".join(verdicts)
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
        command = None if argv is None else _results.command_line(["fleet.py", *argv])
        _results.write("fleet", figures(scens, results, verdicts, args.seed), command)
    return 0


def _results_page(report: str, targets: str, args: argparse.Namespace) -> str:
    command = "python benchmarks/fleet.py --write"
    if args.seed != SEED:
        command += f" --seed {args.seed}"
    return f"""# Fleet simulation: retry cost on the server

Generated by `{command}` (virtual time, seed {args.seed}; do not edit by hand).
Each scenario runs every strategy against the same model server. The sume rows call
the real `Policy.decide` and `RetryBudget`, the fleet and alone rows the real
`LocalFleet` as well; the urllib3 row drives a real
`urllib3.util.Retry(total=6, backoff_factor=1, status_forcelist=(429, 503))`
(waits 0, 2, 4, 8, 16, 32 s; Retry-After honoured). The whole fleet shares one
retry budget (and in the "fleet" rows one `LocalFleet`), as the threads of one process
sharing one session do; the "alone" rows share nothing, as one process per request
(see the module docstring of `benchmarks/fleet.py`). Server calls take no time except in
the scenarios marked 50 ms; completion is when the last logical request ends (success,
give-up or refusal); "refused unsent" counts requests the fleet refused before sending
anything because their turn came after their deadline. The "retry_after_spread" rows run
the opt-in `Policy(retry_after_spread=4)` for lone clients. A configured quota applies only where
the server has one. Scenario (f) runs rows of its own: 50 processes x 10 threads on one
API key. "One shared store" is one `LocalFleet` and one retry budget shared by all 500
clients, which is exactly the state `RedisFleet` keeps in Redis for every process (the
cooldown, the GCRA pace, configured or learned, the first-wave bound of slow start, and the
retry budget; the Redis round trip itself is not modelled, see `benchmarks/fleet_redis.py`
for real processes on a real Redis). The per-process rows give each process a `LocalFleet`
and a retry budget of its own, shared by its 10 threads (client i runs in process i % 50).

{report}

## Targets

{targets}

Plot: `benchmarks/fleet.png` (server calls per second over time).
"""


if __name__ == "__main__":
    sys.exit(main())
