"""What sume-urllib3 costs per request next to plain requests and other retry libraries.

Success path. A loopback HTTP/1.1 keep-alive server in its own process (benchmarks/
_loopback.py, every response in one send) answers 200 with a small JSON body and an
``x-request-id`` header. Every variant sends the same request (``x-api-key`` header,
5/60 s timeouts) and reads the body:

- ``plain-get`` / ``plain-post``: ``requests.Session`` (the 1.000 baselines);
- ``retry-get``: + ``HTTPAdapter(max_retries=urllib3 Retry(...))``;
- ``sumeretry-get``: + ``HTTPAdapter(max_retries=SumeRetry())``;
- ``tenacity-get`` / ``stamina-get`` / ``backoff-get``: a plain ``session.get`` wrapped by
  that library's retry decorator (retrying connection errors, timeouts and 429/5xx);
- ``sume-get`` / ``sume-post``: ``SumeSession`` with its defaults (metrics, logging observer
  and retry budget on; POST sends a JSON body and gets an ``Idempotency-Key``);
- ``mem-*``: the same plain and ``SumeSession`` requests with no socket at all (see
  ``MemoryConnection``): what is left is the pure Python path of requests, urllib3 and
  sume-urllib3, so the ratio is the package's overhead with nothing to hide behind.

Method: per-request interleaving. Each round sends ONE request per variant, in an order
that changes every round (a seeded shuffle; ``--order rotate`` rotates by one instead),
each request timed on its own; a run is ``--requests``
rounds and gives each variant's ratio to its baseline (sum of its times / sum of the
baseline's); ``--runs`` runs give the median ratio and the spread (min-max of the run
ratios). Drift in machine load therefore hits every variant alike.

503 decision: one ``increment`` on a 503 with a ~1 KiB Sume JSON error body, stock
``Retry(status_forcelist=...)`` against ``SumeRetry()`` alone and against the
``SumeRetry`` a ``SumeSession`` builds (observers and a budget that never runs dry),
interleaved per decision in the same run, on a canned in-memory response and on a live
response from the server's ``/503`` (body unread when ``increment`` sees it, as in urllib3's
retry loop). Each is timed twice: ``increment`` alone, and the 503 handled as urllib3's loop
handles every retried response, ``increment`` then ``drain_conn`` (both lines drain before the
sleep). The second is the like-for-like figure: stock's ``increment`` leaves the body for the
drain to read and the connection for it to give back, where ``SumeRetry`` does both inside
``increment`` (it reads the body to decide), so ``increment`` alone charges one side only.
One retry end to end: a GET that meets one 503 then a 200 (``/flaky/...``), stock ``Retry``
on an ``HTTPAdapter`` against ``SumeSession``, neither sleeping, interleaved per request.

Run ``python benchmarks/retry_bench.py`` (about 2 minutes; ``--write`` also writes
``benchmarks/results/retry.json``, which docs/measured.md's Performance table is rendered from),
``--quick`` for a smoke run, ``--profile sume-get`` to see where one variant's time goes.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import http.client
import io
import json
import os
import platform
import pstats
import random
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3._collections import HTTPHeaderDict
from urllib3._version import __version__ as URLLIB3_VERSION
from urllib3.connection import HTTPConnection
from urllib3.connectionpool import HTTPConnectionPool
from urllib3.util.retry import Retry

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _results
from _loopback import ERROR_BODY, OK_BODY, LoopbackServer

API_KEY = "sk_bench_0123456789"
TIMEOUT = (5, 60)
PATH = "/v1/jobs/job_0123456789"
POST_PATH = "/v1/jobs"
POST_JSON = {"name": "bench", "input": {"n": 1, "text": "hello"}}
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
MEMORY_ORIGIN = "http://127.0.0.1:9"  # never connected to: the memory transport has no socket
URLLIB3_2 = int(URLLIB3_VERSION.split(".")[0]) >= 2


# -- the in-memory transport ---------------------------------------------------------------


def _memory_headers() -> http.client.HTTPMessage:
    message = http.client.HTTPMessage()
    message["Content-Type"] = "application/json"
    message["Content-Length"] = str(len(OK_BODY))
    message["x-request-id"] = "req_000000000001"
    return message


_MEMORY_MESSAGE = _memory_headers()


class _Body(io.BytesIO):
    """A body that stands in for http.client's response as urllib3 and requests use it.

    urllib3 returns the connection to its pool once ``isclosed()`` is true (without it
    every request would build a new connection object); requests reads cookies from
    ``msg``, as it does for every real response.
    """

    msg = _MEMORY_MESSAGE

    def isclosed(self) -> bool:
        """True once the body has been read to its end."""
        return self.closed


class MemoryConnection(HTTPConnection):
    """An urllib3 connection that never opens a socket: ``getresponse`` returns a canned 200.

    Everything above the socket still runs: requests' session and adapter, urllib3's
    pool (get/put connection, timeouts, the retry loop) and ``HTTPResponse`` reading,
    and all of sume-urllib3 (session, adapter, ``SumeRetry``, record, observers,
    budget). Only http.client's writing and header parsing are skipped, for the plain
    session and ``SumeSession`` alike. (The ``responses`` library was not used: it
    replaces ``HTTPAdapter.send`` and so would skip urllib3 and ``SumeRetry``.)
    """

    def connect(self) -> None:
        """Nothing to connect."""

    def close(self) -> None:
        """Nothing to close."""

    @property
    def is_closed(self) -> bool:
        """Never closed (urllib3 asks before reading)."""
        return False

    @property
    def is_connected(self) -> bool:
        """Always connected, so the pool keeps reusing it like a kept-alive socket."""
        return True

    def request(  # type: ignore[override]
        self,
        method: str,
        url: str,
        body: Any = None,
        headers: Any = None,
        *,
        chunked: bool = False,
        preload_content: bool = True,
        decode_content: bool = True,
        enforce_content_length: bool = True,
    ) -> None:
        """Remember what the response needs; the body is taken as a socket would take it."""
        if body is not None and not isinstance(body, (bytes, str)):
            body = b"".join(body) if not hasattr(body, "read") else body.read()
        self._memory = (method, url, preload_content, decode_content, enforce_content_length)

    def getresponse(self) -> urllib3.HTTPResponse:  # type: ignore[override]
        """A fresh 200 with a small JSON body and an x-request-id, as the server sends."""
        method, url, preload, decode, enforce = self._memory
        body = _Body(OK_BODY)
        return urllib3.HTTPResponse(
            body=body,
            headers=HTTPHeaderDict(_MEMORY_MESSAGE.items()),
            status=200,
            version=11,
            reason="OK",
            preload_content=preload,
            decode_content=decode,
            enforce_content_length=enforce,
            original_response=body,  # type: ignore[arg-type]
            request_method=method,
            request_url=url,
        )


class MemoryPool(HTTPConnectionPool):
    """A connection pool whose connections are ``MemoryConnection``."""

    ConnectionCls = MemoryConnection


def use_memory_transport(adapter: HTTPAdapter) -> HTTPAdapter:
    """Make ``adapter`` (plain or Sume, the same way) send through ``MemoryPool``."""
    adapter.poolmanager.clear()
    adapter.poolmanager.pool_classes_by_scheme = {"http": MemoryPool, "https": MemoryPool}
    return adapter


# -- the variants ------------------------------------------------------------------------


class Variant(NamedTuple):
    """One way of sending a request; ``call`` sends one and reads its body."""

    name: str
    label: str
    baseline: str
    call: Callable[[], object]


class _Retryable(Exception):
    """Raised inside the wrapped call for a status the retry libraries should retry."""


def _checked(send: Callable[[], requests.Response]) -> Callable[[], requests.Response]:
    def call() -> requests.Response:
        response = send()
        if response.status_code in RETRY_STATUSES:
            raise _Retryable(response.status_code)
        return response

    return call


RETRYABLE_ERRORS = (requests.ConnectionError, requests.Timeout, _Retryable)


def plain_session(adapter: Optional[HTTPAdapter] = None, remembering: bool = False) -> requests.Session:
    """A requests.Session sending the same headers SumeSession sends (the key). ``remembering``
    is kept for the ``env-*`` cases: SumeSession now reads the environment as requests does."""
    session = requests.Session()
    session.headers["x-api-key"] = API_KEY
    if adapter is not None:
        session.mount("http://", adapter)
    return session


def sume_session(base_url: str, **kwargs: Any) -> requests.Session:
    """A SumeSession with its defaults (metrics, logging, retry budget)."""
    from sume_urllib3 import SumeSession

    return SumeSession(API_KEY, base_url=base_url, **kwargs)


def _get(session: requests.Session, url: str) -> Callable[[], requests.Response]:
    def call() -> requests.Response:
        response = session.get(url, timeout=TIMEOUT)
        response.content  # noqa: B018 - read like a caller would
        return response

    return call


def _get_default_timeout(session: requests.Session, url: str) -> Callable[[], requests.Response]:
    def call() -> requests.Response:
        response = session.get(url)  # SumeSession applies its (5, 60) default
        response.content  # noqa: B018
        return response

    return call


def _post(session: requests.Session, url: str, timeout: Any = TIMEOUT) -> Callable[[], requests.Response]:
    def call() -> requests.Response:
        if timeout is None:
            response = session.post(url, json=POST_JSON)
        else:
            response = session.post(url, json=POST_JSON, timeout=timeout)
        response.content  # noqa: B018
        return response

    return call


def build_variants(server_url: str, names: Optional[Sequence[str]] = None) -> List[Variant]:
    """Every variant (or only ``names`` and their baselines), with fresh sessions."""
    import backoff
    import stamina
    import tenacity

    from sume_urllib3 import SumeRetry

    url, post_url = server_url + PATH, server_url + POST_PATH
    stock = Retry(total=6, backoff_factor=0.5, status_forcelist=sorted(RETRY_STATUSES))
    makers: Dict[str, Tuple[str, str, Callable[[], Callable[[], object]]]] = {
        "plain-get": ("requests.Session GET", "plain-get", lambda: _get(plain_session(), url)),
        "retry-get": (
            "+ HTTPAdapter(max_retries=urllib3 Retry)",
            "plain-get",
            lambda: _get(plain_session(HTTPAdapter(max_retries=stock)), url),
        ),
        "sumeretry-get": (
            "+ HTTPAdapter(max_retries=SumeRetry())",
            "plain-get",
            lambda: _get(plain_session(HTTPAdapter(max_retries=SumeRetry())), url),
        ),
        "tenacity-get": (
            "tenacity around session.get",
            "plain-get",
            lambda: tenacity.retry(
                stop=tenacity.stop_after_attempt(7),
                wait=tenacity.wait_exponential_jitter(max=30),
                retry=tenacity.retry_if_exception_type(RETRYABLE_ERRORS),
                reraise=True,
            )(_checked(_get(plain_session(), url))),
        ),
        "stamina-get": (
            "stamina around session.get",
            "plain-get",
            lambda: stamina.retry(on=RETRYABLE_ERRORS, attempts=7)(_checked(_get(plain_session(), url))),
        ),
        "backoff-get": (
            "backoff around session.get",
            "plain-get",
            lambda: backoff.on_exception(backoff.expo, RETRYABLE_ERRORS, max_tries=7)(
                _checked(_get(plain_session(), url))
            ),
        ),
        "sume-get": (
            "SumeSession GET (defaults)",
            "plain-get",
            lambda: _get_default_timeout(sume_session(server_url + "/v1"), PATH[len("/v1") :]),
        ),
        "env-get": (
            "requests.Session GET, environment read as SumeSession reads it",
            "plain-get",
            lambda: _get(plain_session(remembering=True), url),
        ),
        "host-get": (
            "SumeSession GET, fleet=HostFleet()",
            "plain-get",
            lambda: _get_default_timeout(
                sume_session(server_url + "/v1", fleet=_host_fleet()), PATH[len("/v1") :]
            ),
        ),
        "plain-post": ("requests.Session POST json", "plain-post", lambda: _post(plain_session(), post_url)),
        "env-post": (
            "requests.Session POST json, environment read as SumeSession reads it",
            "plain-post",
            lambda: _post(plain_session(remembering=True), post_url),
        ),
        "sume-post": (
            "SumeSession POST json (defaults, Idempotency-Key)",
            "plain-post",
            lambda: _post(sume_session(server_url + "/v1"), POST_PATH[len("/v1") :], timeout=None),
        ),
        "host-post": (
            "SumeSession POST json, fleet=HostFleet()",
            "plain-post",
            lambda: _post(
                sume_session(server_url + "/v1", fleet=_host_fleet()), POST_PATH[len("/v1") :], timeout=None
            ),
        ),
    }
    if URLLIB3_2:
        mem_url, mem_post = MEMORY_ORIGIN + PATH, MEMORY_ORIGIN + POST_PATH
        makers.update(
            {
                "mem-plain-get": (
                    "in memory: requests.Session GET",
                    "mem-plain-get",
                    lambda: _get(plain_session(use_memory_transport(HTTPAdapter())), mem_url),
                ),
                "mem-env-get": (
                    "in memory: requests.Session GET, environment read as SumeSession reads it",
                    "mem-plain-get",
                    lambda: _get(
                        plain_session(use_memory_transport(HTTPAdapter()), remembering=True), mem_url
                    ),
                ),
                "mem-sume-get": (
                    "in memory: SumeSession GET",
                    "mem-plain-get",
                    lambda: _get_default_timeout(_memory_sume(), PATH[len("/v1") :]),
                ),
                "mem-plain-post": (
                    "in memory: requests.Session POST json",
                    "mem-plain-post",
                    lambda: _post(plain_session(use_memory_transport(HTTPAdapter())), mem_post),
                ),
                "mem-env-post": (
                    "in memory: requests.Session POST json, environment read as SumeSession reads it",
                    "mem-plain-post",
                    lambda: _post(
                        plain_session(use_memory_transport(HTTPAdapter()), remembering=True), mem_post
                    ),
                ),
                "mem-sume-post": (
                    "in memory: SumeSession POST json",
                    "mem-plain-post",
                    lambda: _post(_memory_sume(), POST_PATH[len("/v1") :], timeout=None),
                ),
                "mem-host-get": (
                    "in memory: SumeSession GET, fleet=HostFleet()",
                    "mem-plain-get",
                    lambda: _get_default_timeout(_memory_sume(fleet=_host_fleet()), PATH[len("/v1") :]),
                ),
                "mem-host-post": (
                    "in memory: SumeSession POST json, fleet=HostFleet()",
                    "mem-plain-post",
                    lambda: _post(_memory_sume(fleet=_host_fleet()), POST_PATH[len("/v1") :], timeout=None),
                ),
            }
        )
    wanted = list(makers) if not names else list(names)
    unknown = [n for n in wanted if n not in makers]
    if unknown:
        raise SystemExit(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(makers)}")
    for name in list(wanted):
        base = makers[name][1]
        if base not in wanted:
            wanted.insert(0, base)
    return [Variant(n, makers[n][0], makers[n][1], makers[n][2]()) for n in makers if n in wanted]


def _host_fleet() -> Any:
    """A HostFleet on a file of its own (issue 36: one process with it within these targets)."""
    import tempfile

    from sume_urllib3.pacing import HostFleet

    return HostFleet(os.path.join(tempfile.mkdtemp(prefix="sume-bench-"), "fleet.sqlite3"))


def _memory_sume(**kwargs: Any) -> requests.Session:
    session = sume_session(MEMORY_ORIGIN + "/v1", **kwargs)
    adapter = session.get_adapter(MEMORY_ORIGIN)
    assert isinstance(adapter, HTTPAdapter)
    use_memory_transport(adapter)
    return session


# -- measuring the success path ----------------------------------------------------------


def round_orders(k: int, rounds: int, order: str, seed: int) -> List[List[int]]:
    """The order of the k variants in each round.

    ``rotate`` starts each round one variant later (A B C, B C A, ...): every variant
    goes first equally often, but always after the same neighbour. ``shuffle`` (the
    default) draws a fresh seeded permutation per round, so neighbours vary too: a
    socket request after in-memory ones finds the server process idle, and with a
    fixed neighbour that cost fell on one variant only.
    """
    if order == "rotate":
        return [[(r + seed + j) % k for j in range(k)] for r in range(rounds)]
    rng = random.Random(seed)
    orders = []
    for _ in range(rounds):
        perm = list(range(k))
        rng.shuffle(perm)
        orders.append(perm)
    return orders


def interleaved_run(variants: Sequence[Variant], orders: Sequence[Sequence[int]]) -> List[List[float]]:
    """Seconds per request, per variant, one request each per round in that round's order."""
    calls = [v.call for v in variants]
    times: List[List[float]] = [[] for _ in variants]
    clock = time.perf_counter
    for order in orders:
        for i in order:
            call = calls[i]
            t0 = clock()
            call()
            times[i].append(clock() - t0)
    return times


class Row(NamedTuple):
    """One variant's result over all runs (each figure is the median over runs)."""

    variant: Variant
    us_per_request: float  # mean µs per request in a run
    ratio: float  # the variant's total time / the baseline's total time in the same run
    low: float  # the lowest and highest run ratio
    high: float
    median_ratio: float  # the variant's median request / the baseline's median request


def measure_success(
    variants: Sequence[Variant], requests_per_run: int, runs: int, warmup: int, order: str = "shuffle"
) -> List[Row]:
    """Median ratio to the baseline and its spread over ``runs`` interleaved runs."""
    k = len(variants)
    interleaved_run(variants, round_orders(k, warmup, order, seed=-1))
    index = {v.name: i for i, v in enumerate(variants)}
    totals: List[List[float]] = []
    medians: List[List[float]] = []
    for run in range(runs):
        orders = round_orders(k, requests_per_run, order, seed=run)
        gc.collect()
        times = interleaved_run(variants, orders)
        totals.append([sum(t) for t in times])
        medians.append([statistics.median(t) for t in times])
    rows = []
    for i, variant in enumerate(variants):
        b = index[variant.baseline]
        ratios = [run[i] / run[b] for run in totals]
        rows.append(
            Row(
                variant,
                us_per_request=statistics.median(run[i] / requests_per_run * 1e6 for run in totals),
                ratio=statistics.median(ratios),
                low=min(ratios),
                high=max(ratios),
                median_ratio=statistics.median(run[i] / run[b] for run in medians),
            )
        )
    return rows


# -- measuring the 503 decision ----------------------------------------------------------


def canned_503() -> urllib3.HTTPResponse:
    """A 503 with the error envelope, body unread, as urllib3 hands it to ``increment``."""
    return urllib3.HTTPResponse(
        body=io.BytesIO(ERROR_BODY),
        headers={"Content-Type": "application/json", "Content-Length": str(len(ERROR_BODY))},
        status=503,
        preload_content=False,
        decode_content=False,
    )


class BodyReadingRetry:
    """The floor of any decision that trusts the body: stock ``Retry.increment``, then the body
    read to its end, its JSON parsed, the bytes put back for the caller and the connection
    given back to the pool. Not a retry anyone should use (no policy, no deadline, no record):
    the least a ``SumeRetry`` decision could cost, measured beside it."""

    def __init__(self, stock: Retry) -> None:
        self.stock = stock
        self.decoder = json.JSONDecoder()

    def increment(self, method: str, url: str, response: Any) -> Retry:
        from sume_urllib3._body import PrefixedFP

        new = self.stock.increment(method, url, response=response)
        fp = response._fp
        pieces = []
        while True:
            piece = fp.read1(65536)
            if not piece:
                break
            pieces.append(piece)
        body = b"".join(pieces)
        self.decoder.decode(body.decode("utf-8"))
        response._fp = PrefixedFP(body, fp)
        response.length_remaining = 0  # read around urllib3's count, as SumeRetry's let_go says
        response.release_conn()
        return new


class DecisionRuns(NamedTuple):
    """Per set-up ("stock", "alone", "session", "floor"): each run's mean and median µs per
    ``increment``, and each run's mean µs per 503 handled (``increment``, then ``drain_conn``)."""

    source: str
    means: Dict[str, List[float]]
    medians: Dict[str, List[float]]
    handled: Dict[str, List[float]]


def measure_decisions(server_url: str, decisions: int, runs: int) -> List[DecisionRuns]:
    """µs per ``increment`` for stock Retry and the two SumeRetry set-ups, per response source."""
    from sume_urllib3 import SumeRetry
    from sume_urllib3.pacing import RetryBudget

    stock = Retry(total=6, backoff_factor=0.5, status_forcelist=sorted(RETRY_STATUSES))
    alone = SumeRetry(sleep=lambda s: None)
    # What SumeSession builds (metrics and logging observers, a budget); the budget's
    # floor is set so high that thousands of decisions in a second never empty it.
    configured = sume_session(server_url, retry_budget=RetryBudget(min_per_second=1e6))
    adapter = configured.get_adapter(server_url)
    assert isinstance(adapter, HTTPAdapter)
    session_retry = adapter.max_retries
    assert isinstance(session_retry, SumeRetry)
    retries: List[Tuple[str, Any]] = [
        ("stock", stock),
        ("alone", alone),
        ("session", session_retry),
        ("floor", BodyReadingRetry(stock)),
    ]

    host, port = server_url.rsplit("/", 1)[-1].split(":")
    pool = HTTPConnectionPool(host, int(port), maxsize=1, retries=False)

    def live_503() -> Any:
        return pool.urlopen("GET", "/503", retries=False, redirect=False, preload_content=False)

    sources: List[Tuple[str, Callable[[], Any]]] = [
        ("canned 503, 1 KiB JSON body", canned_503),
        ("live 503 from the loopback server", live_503),
    ]
    results = []
    clock = time.perf_counter
    for source_name, make in sources:
        means: Dict[str, List[float]] = {name: [] for name, _ in retries}
        medians: Dict[str, List[float]] = {name: [] for name, _ in retries}
        handled: Dict[str, List[float]] = {name: [] for name, _ in retries}
        for run in range(runs + 1):  # run 0 warms up
            gc.collect()
            times: Dict[str, List[float]] = {name: [] for name in means}
            with_drain: Dict[str, List[float]] = {name: [] for name in means}
            n = decisions if run else max(decisions // 10, 20)
            for order in round_orders(len(retries), n, "shuffle", seed=run):
                for i in order:
                    name, retry = retries[i]
                    response = make()
                    t0 = clock()
                    retry.increment("GET", "/503", response=response)
                    t1 = clock()
                    response.drain_conn()  # what urllib3's loop does next, on both lines
                    t2 = clock()
                    response.release_conn()  # (a no-op once drained: urllib3 gave it back)
                    times[name].append(t1 - t0)
                    with_drain[name].append(t2 - t0)
            if run:
                for name, spent in times.items():
                    means[name].append(statistics.mean(spent) * 1e6)
                    medians[name].append(statistics.median(spent) * 1e6)
                    handled[name].append(statistics.mean(with_drain[name]) * 1e6)
        results.append(DecisionRuns(source_name, means, medians, handled))
    pool.close()
    return results


def measure_one_retry(server_url: str, rounds: int, runs: int) -> List[Row]:
    """A GET that meets one 503 and then a 200: stock Retry on HTTPAdapter vs SumeSession.

    Unlike ``increment`` alone this runs the decision inside a real request (the
    adapter's per-request state, the record, the observers' retry event). Neither
    sleeps: stock's backoff_factor is 0, SumeSession's sleep is a no-op, and its budget
    never runs dry, so both make exactly one retry per request.
    """
    from sume_urllib3.pacing import RetryBudget

    stock = Retry(total=6, backoff_factor=0, status_forcelist=sorted(RETRY_STATUSES))
    stock_session = plain_session(HTTPAdapter(max_retries=stock))
    sume = sume_session(server_url, retry_budget=RetryBudget(min_per_second=1e6), sleep=lambda s: None)
    counter = iter(range(10**9))

    def flaky(session: requests.Session, prefix: str) -> Callable[[], object]:
        def call() -> object:
            response = session.get(f"{prefix}/flaky/{next(counter)}", timeout=TIMEOUT)
            response.content  # noqa: B018
            if response.status_code != 200:
                raise RuntimeError(f"expected 200 after one retry, got {response.status_code}")
            return response

        return call

    variants = [
        Variant(
            "retry-503-200",
            "HTTPAdapter(urllib3 Retry): 503 then 200",
            "retry-503-200",
            flaky(stock_session, server_url),
        ),
        Variant("sume-503-200", "SumeSession: 503 then 200", "retry-503-200", flaky(sume, server_url)),
    ]
    rows = measure_success(variants, rounds, runs, warmup=min(100, rounds))
    # Both really retried once (a refused retry would have raised above on the 503).
    history = getattr(getattr(flaky(stock_session, server_url)(), "raw", None), "retries", None)
    attempts = getattr(getattr(flaky(sume, server_url)(), "sume", None), "attempts", None)
    if history is None or len(history.history) != 1 or attempts != 2:
        raise RuntimeError(f"expected one retry each; stock history {history!r}, sume attempts {attempts!r}")
    return rows


# -- reporting ---------------------------------------------------------------------------


def _git(args: Sequence[str], where: str) -> str:
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, cwd=where, check=False)
    except OSError:
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def package_source() -> str:
    """Which sume_urllib3 was measured: its directory, commit and whether it had local edits."""
    import sume_urllib3

    where = os.path.dirname(os.path.abspath(sume_urllib3.__file__))
    commit = _git(["rev-parse", "--short", "HEAD"], where)
    if not commit:
        return f"sume-urllib3 {sume_urllib3.__version__} from {where} (not a git checkout)"
    dirty = _git(["status", "--porcelain", "--", "."], where)
    state = "with uncommitted changes" if dirty else "clean"
    return f"sume-urllib3 {sume_urllib3.__version__} at commit {commit} ({state})"


def environment() -> str:
    """Versions, package source and machine, for the table's caption."""
    return (
        f"{package_source()}, python {platform.python_version()}, "
        f"requests {requests.__version__}, urllib3 {URLLIB3_VERSION}, "
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.2f}, {len(os.environ)} environment variables "
        "(requests scans them for proxies on every request)"
    )


def success_table(rows: Sequence[Row], requests_per_run: int, runs: int, order: str) -> List[str]:
    """The success-path table in markdown."""
    how = "shuffled (seeded)" if order == "shuffle" else "rotating by one"
    lines = [
        f"Success path: {requests_per_run} requests per variant per run, {runs} runs, "
        f"interleaved per request (one request per variant per round, order {how} each round).",
        "",
        "| variant | µs/request | ratio vs baseline (median) | spread (min-max) "
        "| ratio of per-request medians | baseline |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        v = row.variant
        base = "—" if v.baseline == v.name else v.baseline
        lines.append(
            f"| `{v.name}` {v.label} | {row.us_per_request:.1f} | {row.ratio:.3f}x "
            f"| {row.low:.3f}-{row.high:.3f} | {row.median_ratio:.3f}x | {base} |"
        )
    lines += [
        "",
        "µs/request: mean per request. Ratio: the variant's total time over its baseline's in the same "
        "run; median over runs, spread = lowest-highest run. Ratio of per-request medians: the same "
        "with each run's median request; it shrugs off load bursts from other processes but also "
        "hides occasional costs such as a garbage collection.",
    ]
    return lines


def _ratios(runs: Dict[str, List[float]], name: str) -> List[float]:
    return [x / stock for x, stock in zip(runs[name], runs["stock"])]


def decision_table(results: Sequence[DecisionRuns], decisions: int, runs: int) -> List[str]:
    """The 503 decision table in markdown."""
    lines = [
        f"503 decision: `increment` on a 503, {decisions} decisions per set-up per run, {runs} runs, "
        "interleaved per decision (order shuffled each round); each timed alone, and as urllib3's "
        "loop handles every retried response (`increment`, then `drain_conn`).",
        "",
        "| response | timed | stock `Retry` (status_forcelist) µs | `SumeRetry()` alone µs "
        "| ratio (spread) | ratio of medians | SumeSession's `SumeRetry` (observers, budget) µs "
        "| ratio (spread) | ratio of medians | the floor µs | ratio (spread) | ratio of medians |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for result in results:
        for timed, runs_of, medians_of in (
            ("`increment`", result.means, result.medians),
            ("+ `drain_conn`", result.handled, None),
        ):
            cells = [result.source, timed, f"{statistics.median(runs_of['stock']):.1f}"]
            for name in ("alone", "session", "floor"):
                ratios = _ratios(runs_of, name)
                cells += [
                    f"{statistics.median(runs_of[name]):.1f}",
                    f"{statistics.median(ratios):.1f}x ({min(ratios):.1f}-{max(ratios):.1f})",
                    f"{statistics.median(_ratios(medians_of, name)):.1f}x" if medians_of else "",
                ]
            lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "µs: mean per decision (median over runs). Ratio: to stock's mean in the same run (median over "
        "runs; spread = lowest-highest run). Ratio of medians: the same with each run's median decision. "
        "The floor: stock's increment, then the body read, parsed and put back and the connection "
        "given back (BodyReadingRetry): the least a decision that trusts the body costs. "
        "`+ drain_conn`: stock's `increment` leaves the body to urllib3's drain, where `SumeRetry` "
        "reads it (and gives the connection back) inside `increment`: the like-for-like figure.",
    ]
    return lines


def one_retry_table(rows: Sequence[Row], rounds: int, runs: int) -> List[str]:
    """The end-to-end retry table in markdown."""
    lines = [
        f"One retry end to end: GET -> 503 (1 KiB envelope) -> retry -> 200, {rounds} requests per "
        f"set-up per run, {runs} runs, interleaved per request; no sleeping.",
        "",
        "| set-up | µs/request | ratio (spread) | ratio of per-request medians |",
        "|---|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| `{row.variant.name}` {row.variant.label} | {row.us_per_request:.1f} "
            f"| {row.ratio:.3f}x ({row.low:.3f}-{row.high:.3f}) | {row.median_ratio:.3f}x |"
        )
    return lines


# -- profiling ---------------------------------------------------------------------------


def _profiled(variants: Sequence[Variant], n: int) -> List[cProfile.Profile]:
    """One profiler per variant, over ``n`` interleaved rounds (drift hits all alike)."""
    for _ in range(50):
        for variant in variants:
            variant.call()
    profilers = [cProfile.Profile() for _ in variants]
    for order in round_orders(len(variants), n, "shuffle", seed=0):
        for i in order:
            profilers[i].enable()
            variants[i].call()
            profilers[i].disable()
    return profilers


_Key = Tuple[str, int, str]


def _where(key: _Key) -> str:
    filename, line, function = key
    return f"{os.path.basename(filename)}:{line}({function})" if line else function


def _own_times(stats: pstats.Stats) -> Dict[_Key, Tuple[int, float]]:
    raw: Dict[_Key, Tuple[Any, ...]] = stats.stats  # type: ignore[attr-defined]
    return {key: (int(value[1]), float(value[2])) for key, value in raw.items()}


def _extra_over_baseline(variant: pstats.Stats, baseline: pstats.Stats, n: int, top: int) -> List[str]:
    """Functions whose own time (tottime) grew most from the baseline to the variant."""
    mine, theirs = _own_times(variant), _own_times(baseline)
    deltas: List[Tuple[float, float, _Key]] = []
    for key in set(mine) | set(theirs):
        count, spent = mine.get(key, (0, 0.0))
        base_count, base_spent = theirs.get(key, (0, 0.0))
        deltas.append(((spent - base_spent) / n * 1e6, (count - base_count) / n, key))
    deltas.sort(reverse=True)
    total = sum(delta for delta, _, _ in deltas)
    called = [d for d in deltas if d[1] != 0]
    same = [d for d in deltas if d[1] == 0]
    lines = [
        f"extra own time per request over the baseline, under the profiler: {total:.1f} µs in all, "
        f"{sum(d for d, _, _ in called):.1f} µs in functions called a different number of times.",
        "",
        f"Functions called a different number of times per request (top {top} by extra own time):",
        "",
        "  µs/req  calls/req  function",
    ]
    lines += [f"{delta:8.2f} {calls:10.2f}  {_where(key)}" for delta, calls, key in called[:top]]
    lines += [
        "",
        "Functions called as often, but slower (cache and load effects, partly noise; top 10):",
        "",
        "  µs/req  function",
    ]
    lines += [f"{delta:8.2f}  {_where(key)}" for delta, _, key in same[:10]]
    return lines


def _print_stats(stats: pstats.Stats, sort: str, *restrictions: Any) -> str:
    out = io.StringIO()
    stats.stream = out  # type: ignore[attr-defined]
    stats.sort_stats(sort).print_stats(*restrictions)
    return out.getvalue()


def profile(server_url: str, name: str, n: int, sort: str, top: int) -> str:
    """cProfile over ``n`` requests of one variant, interleaved with its baseline's.

    Prints the variant's top entries by ``sort``, its sume_urllib3 functions, and the
    functions whose own time grew most over the baseline's.
    """
    variants = {v.name: v for v in build_variants(server_url, [name])}
    variant = variants[name]
    baseline = variants[variant.baseline]
    pair = [variant] if baseline is variant else [variant, baseline]
    profilers = _profiled(pair, n)
    stats = pstats.Stats(profilers[0], stream=io.StringIO())
    package = _print_stats(stats, sort, r"sume_urllib3", top)
    sections = [
        f"profile of {n} requests of `{name}` ({variant.label}), sorted by {sort}",
        _print_stats(stats.strip_dirs(), sort, top),
        f"sume_urllib3 functions only, sorted by {sort}",
        package,
    ]
    if len(profilers) > 1:
        base_stats = pstats.Stats(profilers[1], stream=io.StringIO()).strip_dirs()
        sections.append(
            f"`{name}` against `{baseline.name}` ({baseline.label}), {n} interleaved requests each"
        )
        sections += _extra_over_baseline(stats, base_stats, n, top)
    return "\n".join(sections)


# -- command line ------------------------------------------------------------------------


def _row_figures(row: Row) -> Dict[str, Any]:
    return {
        "id": row.variant.name,
        "label": row.variant.label,
        "baseline": row.variant.baseline,
        "us_per_request": row.us_per_request,
        "ratio": row.ratio,
        "ratio_low": row.low,
        "ratio_high": row.high,
        "ratio_of_medians": row.median_ratio,
    }


def figures(
    rows: Sequence[Row],
    decisions: Sequence[DecisionRuns],
    one_retry: Sequence[Row],
    args: argparse.Namespace,
    took: float,
) -> Dict[str, Any]:
    """Everything the tables show, as plain JSON for ``benchmarks/results/retry.json``."""
    setups = []
    for result in decisions:
        stock_us = statistics.median(result.means["stock"])
        entry: Dict[str, Any] = {
            "source": result.source,
            "stock_us": stock_us,
            "stock_handled_us": statistics.median(result.handled["stock"]),
        }
        for name in ("alone", "session", "floor"):
            ratios = _ratios(result.means, name)
            handled = _ratios(result.handled, name)
            entry[name] = {
                "us": statistics.median(result.means[name]),
                "ratio": statistics.median(ratios),
                "ratio_low": min(ratios),
                "ratio_high": max(ratios),
                "ratio_of_medians": statistics.median(_ratios(result.medians, name)),
                # The 503 handled as urllib3's loop does: increment, then drain_conn.
                "handled_us": statistics.median(result.handled[name]),
                "handled_ratio": statistics.median(handled),
                "handled_ratio_low": min(handled),
                "handled_ratio_high": max(handled),
            }
        setups.append(entry)
    return {
        "requests_per_run": args.requests,
        "runs": args.runs,
        "decisions_per_run": args.decisions,
        "order": args.order,
        "success": [_row_figures(row) for row in rows],
        "decision": setups,
        "one_retry": [_row_figures(row) for row in one_retry],
        "took_s": round(took),
    }


def main(argv: Sequence[str]) -> int:
    """Run the benchmark and print markdown (and write it with --out)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per variant per run (2000)")
    parser.add_argument("--runs", type=int, default=5, help="runs; the median and spread are over them (5)")
    parser.add_argument("--decisions", type=int, default=2000, help="503 decisions per set-up per run (2000)")
    parser.add_argument("--variants", default="", help="comma-separated variant names (default: all)")
    parser.add_argument(
        "--order", choices=("shuffle", "rotate"), default="shuffle", help="order within a round (shuffle)"
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 200 requests, 2 runs")
    parser.add_argument("--out", help="also write the markdown to this file")
    parser.add_argument(
        "--write", action="store_true", help="also write benchmarks/results/retry.json (full runs only)"
    )
    parser.add_argument("--profile", metavar="VARIANT", help="cProfile one variant instead of benchmarking")
    parser.add_argument("--profile-requests", type=int, default=3000, help="requests to profile (3000)")
    parser.add_argument("--sort", default="tottime", help="pstats sort key for --profile (tottime)")
    parser.add_argument("--top", type=int, default=25, help="entries to print for --profile (25)")
    args = parser.parse_args(argv)
    if args.quick:
        args.requests, args.runs, args.decisions = 200, 2, 300
    if min(args.requests, args.runs, args.decisions, args.profile_requests) < 1:
        parser.error("--requests, --runs, --decisions and --profile-requests must be at least 1")
    _results.refuse_partial(parser, args, "quick", "variants", "profile")

    with LoopbackServer() as server:
        if args.profile:
            text = profile(server.url, args.profile, args.profile_requests, args.sort, args.top)
            print(text)
            if args.out:
                with open(args.out, "w", encoding="utf-8") as f:
                    f.write(text)
            return 0
        names = [n.strip() for n in args.variants.split(",") if n.strip()]
        variants = build_variants(server.url, names or None)
        started = time.monotonic()
        rows = measure_success(variants, args.requests, args.runs, min(200, args.requests), args.order)
        decisions = measure_decisions(server.url, args.decisions, args.runs)
        one_retry = measure_one_retry(server.url, max(args.decisions // 2, 1), args.runs)
        took = time.monotonic() - started

    lines = [
        environment(),
        "",
        *success_table(rows, args.requests, args.runs, args.order),
        "",
        *decision_table(decisions, args.decisions, args.runs),
        "",
        *one_retry_table(one_retry, max(args.decisions // 2, 1), args.runs),
        "",
        f"Took {took:.0f} s; load average at the end {os.getloadavg()[0]:.2f}.",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    if args.write:
        _results.write("retry", figures(rows, decisions, one_retry, args, took))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
