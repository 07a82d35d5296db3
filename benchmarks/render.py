"""Write the documentation's measured figures from the committed results files.

Every figure the documentation (``docs/*.md``, mostly ``docs/measured.md``, and README.md)
states about speed, memory, pacing or reliability sits between a pair of markers,
``<!-- figures: NAME -->`` and ``<!-- /figures: NAME -->``, and is generated here from
``benchmarks/results/*.json`` (written by each benchmark's ``--write``). Each block names the
command that produced its figures. ``tests/test_docs_figures.py`` renders the blocks again and
fails when a page differs, so a figure edited by hand, or left behind by a new measurement,
fails the test run.

The pictures (``PICTURES``, SVG files under ``docs/img/``) are drawn from the same files with
matplotlib (``pip install -e '.[bench]'``). Each names, in its metadata, the SHA-256 of the data
it draws; ``--check`` compares that with the committed results, matplotlib or not.

    python benchmarks/render.py             # rewrite the blocks of every page
    python benchmarks/render.py --figures   # ... and draw every picture again
    python benchmarks/render.py --check     # exit 1 and show the difference instead
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import io
import json
import os
import re
import sys
import textwrap
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _results  # noqa: E402

ROOT = os.path.dirname(HERE)
README = os.path.join(ROOT, "README.md")
DOCS = os.path.join(ROOT, "docs")
BLOCK = re.compile(r"(<!-- figures: ([a-z0-9-]+) -->\n)(.*?)(<!-- /figures: \2 -->)", re.S)

Document = Dict[str, Any]


class Results:
    """The committed results files, loaded on first use; remembers which were read."""

    def __init__(self) -> None:
        self._cache: Dict[str, Document] = {}
        self.used: Set[str] = set()

    def __getitem__(self, name: str) -> Document:
        if name not in self._cache:
            self._cache[name] = _results.load(name)
        self.used.add(name)
        return self._cache[name]

    def matching(self, prefix: str) -> List[Document]:
        """Every committed results file whose name starts with ``prefix``, in name order."""
        return [self[name] for name in _results.names() if name.startswith(prefix)]


# -- formatting ---------------------------------------------------------------------------


def command(doc: Document) -> str:
    """The command that made ``doc``, as inline code."""
    return f"`{doc['stamp']['command']}`"


def provenance(doc: Document) -> str:
    """Where a figure comes from: commit, versions and machine."""
    s = doc["stamp"]
    return (
        f"commit {s['commit']}, Python {s['python']}, urllib3 {s['urllib3']}, requests {s['requests']}, "
        f"{s['machine']}"
    )


def ratio(x: float, digits: int = 3) -> str:
    """``1.042x``."""
    return f"{x:.{digits}f}x"


def spread(low: float, high: float, digits: int = 3) -> str:
    """``1.040-1.045``."""
    return f"{low:.{digits}f}-{high:.{digits}f}"


def percent(fraction: float) -> str:
    """``100%``, ``28%``: success rates as the tables print them."""
    return f"{fraction * 100:.0f}%"


def thousands(n: int) -> str:
    """``16,000``."""
    return f"{n:,}"


_UNIT = re.compile(r"(\d) (MB|KB|KiB|ms|µs|s|req/s|calls|threads|processes)\b")
_MARKDOWN_START = re.compile(r"^([-+*>#|]|\d+[.)])( |$)")


def wrap(text: str, indent: str = "") -> str:
    """``text`` filled to the pages' width; no line may start like a Markdown list, quote or table."""
    # A figure and its unit stay on one line: join them with a character textwrap never breaks at.
    glued = _UNIT.sub(lambda m: m.group(1) + "\0" + m.group(2), " ".join(text.split()))
    for width in range(95, 120):
        lines = textwrap.wrap(
            glued,
            width,
            subsequent_indent=indent,
            break_long_words=False,
            break_on_hyphens=False,
        )
        if not any(_MARKDOWN_START.match(line.strip()) for line in lines[1:]):
            return "\n".join(lines).replace("\0", " ")
    raise ValueError(f"cannot wrap without a line that reads as Markdown: {text[:60]!r}...")


def by_id(rows: Iterable[Mapping[str, Any]], key: str = "id") -> Dict[str, Mapping[str, Any]]:
    """Rows of a results list, by their id."""
    return {row[key]: row for row in rows}


# -- blocks -------------------------------------------------------------------------------


def performance(results: Results) -> str:
    """The Performance section: success path, the 503 decision and one retry, all ratios from one run."""
    doc = results["retry"]
    f = doc["figures"]
    rows = by_id(f["success"])
    canned = f["decision"][0]
    one = by_id(f["one_retry"])["sume-503-200"]

    def row(label: str, name: str, bold: bool = False) -> str:
        r = rows[name]
        shown = ratio(r["ratio"])
        return (
            f"| {label} | {r['us_per_request']:.0f} | {f'**{shown}**' if bold else shown} "
            f"| {spread(r['ratio_low'], r['ratio_high'])} |"
        )

    wrappers = [rows[n] for n in ("backoff-get", "tenacity-get", "stamina-get")]
    lines = [
        wrap(
            f"""{command(doc)} (a loopback HTTP/1.1 server in its own process writing each response
            in one send; every variant sends the same request, one request per variant per round in a
            shuffled order, {thousands(f['requests_per_run'])} rounds per run, {f['runs']} runs; ratio =
            the variant's total time over plain `requests.Session` in the same run, median over the
            runs, spread = the lowest and highest run; {provenance(doc)}; every table of the run in
            `benchmarks/results/retry.json`, the method, earlier runs and profiles in
            `benchmarks/RESULTS-retry.md`):"""
        ),
        "",
        "| variant | µs/request | vs plain requests | spread |",
        "|---|---:|---:|---:|",
        f"| plain `requests.Session` GET | {rows['plain-get']['us_per_request']:.0f} | {ratio(1)} | |",
        row("+ `HTTPAdapter(max_retries=urllib3 Retry(...))`", "retry-get"),
        row("+ `HTTPAdapter(max_retries=SumeRetry())`", "sumeretry-get"),
        "| backoff / tenacity / stamina around `session.get` | "
        + " / ".join(f"{r['us_per_request']:.0f}" for r in wrappers)
        + " | "
        + " / ".join(ratio(r["ratio"]) for r in wrappers)
        + " | |",
        row("**`SumeSession` GET** (metrics, logging, budget, fleet on)", "sume-get", bold=True),
        row("**`SumeSession` POST** (+ Idempotency-Key)", "sume-post", bold=True),
    ]

    def pair(label: str, names: Tuple[str, str]) -> None:
        if all(n in rows for n in names):
            both = [rows[n] for n in names]
            lines.append(
                f"| {label} | "
                + " / ".join(f"{r['us_per_request']:.0f}" for r in both)
                + " | "
                + " / ".join(ratio(r["ratio"]) for r in both)
                + " | |"
            )

    pair("`SumeSession` GET / POST in memory (no socket)", ("mem-sume-get", "mem-sume-post"))
    pair("`SumeSession(fleet=HostFleet())` GET / POST", ("host-get", "host-post"))
    pair("the same in memory", ("mem-host-get", "mem-host-post"))
    pair(
        "plain `requests.Session` GET / POST reading the environment as `SumeSession` does",
        ("env-get", "env-post"),
    )
    pair("the same in memory", ("mem-env-get", "mem-env-post"))
    alone, session = canned["alone"], canned["session"]
    lines += [
        f"| one 503 decision (1 KiB JSON body), `SumeRetry()` vs stock `Retry`, `increment` alone "
        f"| {alone['us']:.1f} vs {canned['stock_us']:.1f} µs | {ratio(alone['ratio'], 1)} "
        f"| {spread(alone['ratio_low'], alone['ratio_high'], 1)} |",
        f"| the same with the session's metrics, logging and budget | {session['us']:.1f} µs "
        f"| {ratio(session['ratio'], 1)} | {spread(session['ratio_low'], session['ratio_high'], 1)} |",
        f"| the same 503 handled as urllib3's loop does (`increment`, then `drain_conn`) "
        f"| {alone['handled_us']:.1f} vs {canned['stock_handled_us']:.1f} µs "
        f"| {ratio(alone['handled_ratio'], 1)} "
        f"| {spread(alone['handled_ratio_low'], alone['handled_ratio_high'], 1)} |",
        f"| ... with the session's metrics, logging and budget | {session['handled_us']:.1f} µs "
        f"| {ratio(session['handled_ratio'], 1)} "
        f"| {spread(session['handled_ratio_low'], session['handled_ratio_high'], 1)} |",
        f"| a GET meeting one 503 then a 200, `SumeSession` vs stock `Retry` (no sleeping) "
        f"| {one['us_per_request']:.0f} | {ratio(one['ratio'])} "
        f"| {spread(one['ratio_low'], one['ratio_high'])} |",
        "",
        *performance_targets(f),
    ]
    return "\n".join(lines)


def performance_targets(f: Dict[str, Any]) -> List[str]:
    """Issue 35's targets against the same run's medians: which are met and which are not."""
    rows = by_id(f["success"])
    canned, live = f["decision"][0], f["decision"][1]
    one = by_id(f["one_retry"])["sume-503-200"]
    backoff = rows["backoff-get"]["ratio"]

    def line(target: str, measured: List[float], bound: float, digits: int = 3) -> str:
        met = "yes" if all(x <= bound for x in measured) else "**no**"
        return f"| {target} | {' / '.join(ratio(x, digits) for x in measured)} | {met} |"

    socket = [rows["sume-get"]["ratio"], rows["sume-post"]["ratio"]]
    below = "yes" if all(x < backoff for x in socket) else "**no**"
    lines = [
        "| target (issue 35), median of the runs above | measured | met |",
        "|---|---:|---:|",
        line(f"`SumeSession` GET / POST over the socket at most {ratio(1.03)}", socket, 1.03),
        f"| ... and below `backoff`'s {ratio(backoff)} in the same run "
        f"| {' / '.join(ratio(x) for x in socket)} | {below} |",
    ]
    if "mem-sume-get" in rows:
        memory = [rows["mem-sume-get"]["ratio"], rows["mem-sume-post"]["ratio"]]
        lines.append(line(f"GET / POST in memory at most {ratio(1.05)}", memory, 1.05))
    own = [("sume-get", "env-get"), ("sume-post", "env-post")]
    own += [("mem-sume-get", "mem-env-get"), ("mem-sume-post", "mem-env-post")]
    if all(a in rows and b in rows for a, b in own):
        # Not a target: this package's own cost once the environment scan it spares requests
        # is taken out (the same memo on both sides).
        lines.append(
            "| (no target) our own code: `SumeSession` over a `requests.Session` reading the "
            "environment as it does, GET / POST over the socket, then in memory | "
            + " / ".join(ratio(rows[a]["ratio"] / rows[b]["ratio"]) for a, b in own)
            + " | — |"
        )
    host = ["host-get", "host-post", "mem-host-get", "mem-host-post"]
    if all(n in rows for n in host):
        lines.append(
            line(
                "with `HostFleet` (issue 36): GET / POST over the socket, then in memory, "
                f"at most {ratio(1.03)}",
                [rows[n]["ratio"] for n in host],
                1.03,
            )
        )
    # Targets on a 503 as urllib3's loop handles it (increment, then drain_conn): stock's
    # increment leaves the body for the drain, ours reads it to decide, so increment alone
    # charges one side only. Both are shown.
    lines += [
        line(
            f"one 503 decision, canned / live, at most {ratio(3, 1)} stock's "
            "(`increment`, then urllib3's `drain_conn`)",
            [canned["alone"]["handled_ratio"], live["alone"]["handled_ratio"]],
            3.0,
            1,
        ),
        line(
            f"the same with the session's observers at most {ratio(3.5, 1)}",
            [canned["session"]["handled_ratio"], live["session"]["handled_ratio"]],
            3.5,
            1,
        ),
        "| (no target) `increment` alone, canned / live: `SumeRetry()`, then the session's "
        f"| {ratio(canned['alone']['ratio'], 1)} / {ratio(live['alone']['ratio'], 1)}, "
        f"{ratio(canned['session']['ratio'], 1)} / {ratio(live['session']['ratio'], 1)} | — |",
    ]
    lines += [
        line(f"one retry end to end at most {ratio(1.08)}", [one["ratio"]], 1.08),
    ]
    if "floor" in canned:
        # Not a target: what any decision that reads and parses the body must cost at least.
        lines.append(
            "| (no target) the floor: stock's `increment`, then the body read, parsed and put back "
            "and the connection given back, canned / live "
            f"| {ratio(canned['floor']['ratio'], 1)} / {ratio(live['floor']['ratio'], 1)} | — |"
        )
    return lines


def faults_line(results: Results) -> str:
    """The Reliability bullet on the fault-injection suite."""
    doc = results["faults"]
    f = doc["figures"]
    retry_after = f["scenarios"]["test_every_retry_after_through_the_session_is_honoured_ignored_or_refused"]
    return wrap(
        f"""- **Faults tried: {f['cases']} cases** ({command(doc)} runs `{f['suite']}` and counts
        them: {f['passed']} passed, {f['skipped']} skipped, {f['failed']} failed). Connections dropped
        before the headers, after them and mid-body (Content-Length, chunked, gzip), read timeouts,
        keep-alive connections closed between attempts, 20 MB and 100 MB error bodies, malformed JSON
        bodies, JSON under the wrong Content-Type, a gzip bomb (48 KB inflating to 50 MB) and
        {retry_after} Retry-After values, valid and garbage. Every one ends in a clear outcome: an
        intact response or requests' own exception (a broken error body raises
        `ChunkedEncodingError` exactly as without the peek). None hangs beyond `max_elapsed` plus
        one timeout, no connection is leaked, and a request that is not replay-safe is never sent
        twice once it may have reached the server.""",
        indent="  ",
    )


def job_polls(results: Results) -> str:
    """The Jobs section's table of polls per job length."""
    doc = results["job_polls"]
    f = doc["figures"]
    d = f["defaults"]
    lines = [
        wrap(
            f"""With the defaults ({command(doc)}: the real `Jobs.wait` against FakeSume in virtual
            time, {f['seeds']} jitter seeds per length; interval {d['interval_s']:g} s growing
            x{d['growth']:g} to {d['max_interval_s']:g} s):"""
        ),
        "",
        "| job length | polls (fewest / median / most) | end noticed after, at most |",
        "|---|---|---|",
    ]
    for job in f["jobs"]:
        lines.append(
            f"| {job['label']} | {job['polls_fewest']} / {job['polls_median']:g} / {job['polls_most']} "
            f"| {job['end_noticed_after_at_most_s']:.1f} s |"
        )
    return "\n".join(lines)


_CELERY_ROWS = (
    ("whole file", "README (RedisFleet), retry_later, faults",
     "the guide's task, server loses first answers"),
    ("whole file", "README (RedisFleet), autoretry_for, faults",
     "`autoretry_for`, server loses first answers"),
    ("fresh pace", "README (RedisFleet), retry_later, quota only",
     "the guide's task, quota only, a fresh pace"),
    ("whole file", "README (RedisFleet), retry_later, quota only",
     "the guide's task, quota only, the pace learned before"),
    ("whole file", "retry_later, fleet=None, faults", "`fleet=None`, server loses first answers"),
    ("fresh pace", "SumeSession() (a LocalFleet per process), retry_later, quota only",
     "`SumeSession()` (a pace per process), quota only"),
    ("fresh pace", "HostFleet (one file for the worker's processes), retry_later, quota only",
     "`HostFleet()` (one pace for the host's processes), quota only, a fresh pace"),
)


def celery_e2e(results: Results) -> str:
    """The guide's Celery task at 100 tasks per batch (tests/contrib/test_celery.py)."""
    doc = results["celery_e2e"]
    f = doc["figures"]
    batches = {(r["name"], b["batch"]): b for r in f["runs"] for b in r["batches"]}
    lines = [
        wrap(
            f"""{command(doc)} runs it twice with {f['tasks']} tasks per batch: the whole file on
            one worker (the guide's pace carried from batch to batch, as a deployed worker's
            is), then the quota-only batches alone (a fresh pace); {provenance(doc)}. The ideal
            is the fewest calls the quota must admit at 5/s: one per job, two when the first
            answer is lost."""
        ),
        "",
        "| batch | succeeded | ran twice | server calls (429s) | task retries (most) "
        "| last success (ideal) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for run, batch, label in _CELERY_ROWS:
        b = batches[(run, batch)]
        lines.append(
            f"| {label} | {b['succeeded']}/{b['tasks']} | {b['twice']} | {b['calls']} ({b['refused']}) "
            f"| {b['retries']} ({b['most_retries']}) | {b['last_success_s']:.1f} s ({b['ideal_s']:g} s): "
            f"{ratio(b['last_success_s'] / b['ideal_s'], 2)} |"
        )
    off = batches[("whole file", "retry_later, fleet=None, faults")]
    lines += [
        "",
        wrap(
            f"""Without a shared pace, a prefork worker's processes each learn the quota on their
            own and their requests collide; with no pacing at all, every collision costs the
            caller a whole second of `Retry-After` ({off['refused']} of {off['calls']} calls were
            429s). Share the pace between every process calling one API key: `HostFleet` for the
            processes of one host, `RedisFleet` (any Redis) across hosts."""
        ),
    ]
    return "\n".join(lines)


def herd(results: Results) -> str:
    """Pacing's real-socket herd: one process, many threads, one quota server."""
    doc = results["herd"]
    f = doc["figures"]
    q = f["quota"]
    plain, policy = f["runs"]["ratelimit"], f["runs"]["ratelimit_policy"]
    paced, unpaced = plain["paced"], plain["unpaced"]

    def both(cell: Callable[[Mapping[str, Any]], str]) -> str:
        return f"{cell(paced)} | {cell(unpaced)}"

    def ratio_of(c: Mapping[str, Any]) -> str:
        return f"{c['succeeded']}/{c['total']}"

    def yes(flag: bool) -> str:
        return "yes" if flag else "**no**"

    lines = [
        wrap(
            f"""{command(doc)} (real sockets: a quota server of {q['rate_per_s']:g} req/s, burst
            {q['burst']}, in its own process, answering 429 + Retry-After + RateLimit headers;
            {f['threads']} threads of one process post at once through one default `SumeSession`;
            {provenance(doc)}; `benchmarks/RESULTS-herd.md`):"""
        ),
        "",
        "| | paced (default) | unpaced (`fleet=None`) |",
        "|---|---:|---:|",
        "| succeeded | " + both(ratio_of) + " |",
        "| server calls per request | " + both(lambda c: f"{c['calls_per_request']:.2f}") + " |",
        "| 429s | " + both(lambda c: str(c["429s"])) + " |",
        "| last success | " + both(lambda c: f"{c['last_success_s']:.2f} s") + " |",
        "| every job executed once, same key on every attempt | "
        + both(lambda c: yes(c["executed_once"] and c["same_key_every_attempt"]))
        + " |",
        "",
        wrap(
            f"""With `RateLimit-Policy: {policy['policy_header']}` on the replies (the server states its
            quota up front) the paced column is {policy['paced']['calls_per_request']:.2f} calls per
            request and {policy['paced']['429s']} 429s ({ratio_of(policy['paced'])} succeeded, last at
            {policy['paced']['last_success_s']:.2f} s)."""
        ),
    ]
    return "\n".join(lines)


def fleet(results: Results) -> str:
    """Pacing's virtual-time fleet simulation: server calls per logical request, and success."""
    doc = results["fleet"]
    f = doc["figures"]
    scenarios = {scenario["key"]: scenario for scenario in f["scenarios"]}
    herd_, outage, flaky = scenarios["a"], scenarios["b"], scenarios["c"]

    def row(key: str, strategy: str) -> Mapping[str, Any]:
        return by_id(scenarios[key]["rows"], "strategy")[strategy]

    def cell(key: str, strategy: str, success: bool = True, last: bool = False) -> str:
        rows = by_id(scenarios[key]["rows"], "strategy")
        if strategy not in rows:
            return "-"
        r = rows[strategy]
        text = f"{r['calls_per_request']:.2f}" + (f", {percent(r['success_fraction'])}" if success else "")
        return f"**{text}**, last at {r['last_success_s']:.2f} s" if last else text

    server = herd_["server"]
    retry = f["urllib3_retry"]
    urllib3_args = (
        f"total={retry['total']}, backoff_factor={retry['backoff_factor']}, "
        f"status_forcelist=({', '.join(str(s) for s in retry['status_forcelist'])})"
    )
    spread_ = f["retry_after_spread"]
    strategies = [
        ("shared `LocalFleet`, pace learned from headers", "fleet_learned", True),
        (f'shared `LocalFleet(rate="{herd_["quota"]}")`', "fleet_configured", True),
        (f"every client alone, `Policy(retry_after_spread={spread_:g})`", "alone_spread", False),
        ("every client alone, defaults", "alone", False),
        ("no fleet, with the retry budget (before pacing)", "budget", False),
        (f"urllib3 `Retry({urllib3_args})`", "urllib3", False),
    ]
    lines = [
        wrap(
            f"""{command(doc)} drives the real `Policy`, `RetryBudget` and `LocalFleet` in virtual time
            (seed {f['seed']}; {provenance(doc)}; every scenario in `benchmarks/RESULTS-fleet.md`, plot
            in `benchmarks/fleet.png`). Server calls per logical request, and success:"""
        ),
        "",
        f"| strategy | herd: {herd_['logical_requests']} clients vs {server['rate_per_s']:g} req/s, 429 "
        f"Retry-After {server['retry_after']} | total outage, {outage['arrival_rate_per_s']:g} req/s "
        f"| {flaky['server']['error_probability'] * 100:g}% random 503s |",
        "|---|---:|---:|---:|",
    ]
    for label, strategy, fleet_row in strategies:
        lines.append(
            f"| {label} | {cell('a', strategy, last=fleet_row)} | {cell('b', strategy, success=False)} "
            f"| {cell('c', strategy)} |"
        )
    ideal = herd_["ideal"]
    jobs, multi = scenarios["e"], scenarios["f"]
    e = row("e", "fleet_configured")
    store, alone_full, divided = (
        row("f", strategy) for strategy in ("store_learned", "processes_configured", "processes_divided")
    )
    lines += [
        "",
        wrap(
            f"""The ideal for the herd is {ideal['last_success_s_without_burst']:g} s at
            {ideal['calls_per_request']} call each. In a total outage a lone client spends all its
            {f['policy_defaults']['max_retries']} retries, where a shared fleet holds the herd to
            {row('b', 'fleet_learned')['calls_per_request']:.2f} calls per request. A {jobs['quota']} quota
            shared by {jobs['workers']} workers submitting {jobs['logical_requests']} jobs (scenario (e))
            meets {e['responses_429']} 429s with the quota configured: {e['successes']} jobs go through
            within the {f['policy_defaults']['max_elapsed_s']:g} s `max_elapsed` and {e['refused_unsent']}
            are refused up front, nothing sent. {multi['processes']} processes of
            {multi['threads_per_process']} threads on one shared store (what `RedisFleet` keeps) pace as
            one: {store['calls_per_request']:.2f} calls per request, {percent(store['success_fraction'])}
            success, last at {store['last_success_s']:.2f} s; the same processes each pacing alone
            send {alone_full['calls_per_request']:.2f} calls per request for
            {percent(alone_full['success_fraction'])} success at the full quota, and
            {divided['calls_per_request']:.2f} for
            {percent(divided['success_fraction'])} with the quota divided among them (last at
            {divided['last_success_s']:.0f} s)."""
        ),
    ]
    return "\n".join(lines)


def fleet_redis(results: Results) -> str:
    """Many processes on one Redis: real processes, a real redis-server, one quota server."""
    doc = results["fleet_redis"]
    f = doc["figures"]
    q = f["quota"]
    scenarios = f["scenarios"]
    labels = {
        "none": "none",
        "local_learned": "`LocalFleet` per process, learned",
        "local_configured": f'`LocalFleet(rate="{q["rate_per_s"]:g}/s", burst={q["burst"]})` per process',
        "redis_configured": f'`RedisFleet(rate="{q["rate_per_s"]:g}/s", burst={q["burst"]})`',
        "redis_learned": "`RedisFleet`, learned",
        "host_learned": "`HostFleet`, learned (one file)",
    }
    lines = [
        wrap(
            f"""{command(doc)} ({f['processes']} worker processes x {f['threads']} threads posting at
            once against a quota server of {q['rate_per_s']:g} req/s, burst {q['burst']}; a real
            redis-server, a new host file for `HostFleet`; {provenance(doc)};
            `benchmarks/RESULTS-fleet-redis.md`, and [in pictures](guide/pacing.md#the-herd-in-pictures)):"""
        ),
        "",
        "| fleet | success | calls per request | 429s | last success |",
        "|---|---:|---:|---:|---:|",
    ]
    for scenario_id in f["scenario_order"]:
        r = scenarios[scenario_id]
        killed = r["redis_killed_at_s"]
        if scenario_id in labels:
            label = labels[scenario_id]
        else:
            kind = "learned" if "learned" in scenario_id else "rate=..."
            when = f"{killed * 1000:.0f} ms" if killed < 1 else f"{killed:g} s"
            label = (
                f"`RedisFleet`, {kind}, Redis killed at {when} ({r['failed_redis_calls']} Redis calls "
                f"failed, {r['fallbacks']} fell back to local pacing)"
            )
        calls = f"{r['calls_per_request']:.2f}"
        if r["fleet"].startswith(("redis", "host")) and killed is None:
            calls = f"**{calls}**"
        last = "-" if r["last_success_s"] is None else f"{r['last_success_s']:.2f} s"
        lines.append(f"| {label} | {r['succeeded']}/{r['total']} | {calls} | {r['429s']} | {last} |")
    trip, down = f["redis_round_trip"], f["redis_down"]
    twice = f["executed_twice_total"]
    lines += [
        "",
        wrap(
            f"""{'No job ran twice in any row' if twice == 0 else f'**{twice} jobs ran twice**'}. A Redis
            round trip on loopback costs p50 {trip['acquire_p50_ms']:.2f} ms, p99
            {trip['acquire_p99_ms']:.2f} ms ({thousands(trip['calls'])} calls); with Redis down,
            {down['sequential_requests']} sequential requests take
            {down['closed_port']['extra_s'] * 1000:.0f} ms longer in all
            ({down['stalled']['extra_s'] * 1000:.0f} ms when Redis hangs:
            {down['stalled']['timed_out_calls']} timeout of {down['redis_timeout_ms']:g} ms, then local
            pacing until the backoff ends)."""
        ),
    ]
    return "\n".join(lines)


def host_fleet(results: Results) -> str:
    """What a HostFleet turn costs beside a RedisFleet round trip, and the storages it was chosen from."""
    doc = results["host_fleet"]
    f = doc["figures"]
    n = f["processes"]
    host, redis, storage = f["host_fleet"], f["redis_fleet"], f["storage"]

    def row(label: str, q: Mapping[str, Any]) -> str:
        return f"| {label} | {q['p50_us']:.0f} µs | {q['p99_us']:.0f} µs |"

    lines = [
        wrap(
            f"""{command(doc)} ({provenance(doc)}; wall time per call,
            {thousands(host['acquire_paced']['calls'])} calls):"""
        ),
        "",
        "| call | p50 | p99 |",
        "|---|---:|---:|",
        row("`HostFleet` acquire, configured pace", host["acquire_paced"]),
        row("`HostFleet` acquire + release (rate-limit headers: both write)", host["acquire_release"]),
        row(f"the same, {n} processes at once on one key", host["acquire_release_4_processes"]),
        row("`HostFleet` acquire + release, a key with nothing to pace", host["open_key"]),
    ]
    if redis is not None:
        lines += [
            row("`RedisFleet` acquire, configured pace (loopback)", redis["acquire_paced"]),
            row("`RedisFleet` acquire + release (loopback)", redis["acquire_release"]),
        ]
    lines += [
        row("storage: SQLite WAL, one key's state read, paced and written", storage["sqlite_wal"]),
        row("storage: memory-mapped file under an `fcntl` lock, the same", storage["mmap_fcntl"]),
        row(f"storage: SQLite WAL, {n} processes at once", storage["sqlite_wal_4_processes"]),
        row(f"storage: memory-mapped file, {n} processes at once", storage["mmap_fcntl_4_processes"]),
    ]
    return "\n".join(lines)


def redis_round_trips(results: Results) -> str:
    """RedisFleet per attempt on loopback: Redis round trips and wall time of acquire + release."""
    doc = results["redis_round_trips"]
    f = doc["figures"]
    setups = f["setups"]

    def row(pace: str, release: str, q: Mapping[str, Any]) -> str:
        return (
            f"| {pace} | {release} | {q['evalsha_per_attempt']:.2f} | {q['p50_us']:.0f} µs "
            f"| {q['p99_us']:.0f} µs |"
        )

    lines = [
        wrap(
            f"""{command(doc)} ({provenance(doc)}): plain successes on one key, one after another,
            acquire + release per attempt, {thousands(setups['learned']['attempts'])} attempts of
            each set-up in {f['rounds']} alternating rounds; round trips are redis-server's own count
            of EVALSHA calls, the last lesson's flush included:"""
        ),
        "",
        "| pace | a plain success's release | round trips per attempt | p50 | p99 |",
        "|---|---|---:|---:|---:|",
        row("configured", "none", setups["configured"]),
        row("learned from 429s", "a call of its own, at once (before)", setups["learned_at_once"]),
        row("learned from 429s", "carried by the next acquire", setups["learned"]),
    ]
    return "\n".join(lines)


def _median_and_spread(s: Mapping[str, Any], fmt: str, unit: str = "") -> str:
    """``5.12 s (5.02-5.31)``: the median of the runs, then the lowest-highest run when they differ."""
    if s["median"] is None:
        return "-"
    text = f"{s['median']:{fmt}}{unit}"
    low, high = f"{s['low']:{fmt}}", f"{s['high']:{fmt}}"
    return text if low == high else f"{text} ({low}-{high})"


def deploy_table(figures: Mapping[str, Any]) -> str:
    """The deployment table (``benchmarks/deploy.py`` prints it too): a row per server, workers and fleet."""
    n = figures["requests"]
    lines = [
        '| server, workers | `SUME["FLEET"]` | success | calls per request | jobs executed twice | 429s '
        "| last success |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in figures["rows"]:
        s = row["summary"]
        lines.append(
            f"| {row['worker_class_label']} | {row['scenario_label']} "
            f"| {_median_and_spread(s['succeeded'], '.0f')}/{n} "
            f"| {_median_and_spread(s['calls_per_request'], '.2f')} | {s['executed_twice_total']} "
            f"| {_median_and_spread(s['throttled'], '.0f')} "
            f"| {_median_and_spread(s['last_success_s'], '.2f', ' s')} |"
        )
    return "\n".join(lines)


def _server_label(server: Mapping[str, Any]) -> str:
    """What kind of quota server a matrix row was measured against, as the docs name it."""
    kind = server["kind"]
    if server["algorithm"] == "token bucket":
        bucket = f"token bucket {server['rate_per_s']:g}/s burst {server['burst']}"
        return {
            "ratelimit": (
                f"{bucket}, `RateLimit-Limit/Remaining/Reset` (Reset whole seconds), 429 + `Retry-After`"
            ),
            "ratelimit-policy": f"{bucket}, the same headers plus `RateLimit-Policy`",
            "retry-after": f"{bucket}, 429 + `Retry-After` only (no RateLimit headers)",
            "bare": f"{bucket}, bare 429 (no `Retry-After`, no headers)",
        }[server["style"]]
    if server["algorithm"] == "fixed window":
        return (
            f"fixed window {server['limit']} per {server['window_s']} s, `X-RateLimit-*` (Reset epoch "
            "seconds), 429 without `Retry-After`"
        )
    if server["algorithm"] == "outage":
        return f"outage: 503 (no `Retry-After`) for {server['outage_s']:g} s, then 200"
    raise ValueError(f"no label for server {kind!r}")


def _shape_label(name: str, shape: Mapping[str, Any]) -> str:
    if shape["threads"] == 1 and shape["processes"] == 1:
        return f"lone client, {shape['requests']} in a row"
    redis = ", Redis" if shape["processes"] > 1 else ""
    return f"{shape['processes']} x {shape['threads']} threads at once{redis}"


#: the per-cell checks pacing_matrix.py records (any False: the cell missed a target)
_MATRIX_TARGETS = (
    "success_vs_unpaced", "calls_vs_unpaced", "all_succeeded", "calls_within_cap", "time_within_cap"
)


def pacing_matrix(results: Results) -> str:
    """Pacing against every kind of quota server, paced and unpaced side by side."""
    doc = results["pacing_matrix"]
    f = doc["figures"]
    cells = {(c["server"], c["shape"], c["client"]): c for c in f["cells"]}
    checks = {(c["server"], c["shape"], c["client"]): c for c in f["checks"]}
    clients = ["none"] + [c for c in f["clients"] if c != "none"]
    targets = f["targets"]
    conf, learned = targets["configured"], targets["learned"]
    repeats = ""
    if f.get("repeats", 1) > 1:
        repeats = f" each cell is the median run of {f['repeats']}, interleaved (by last success);"

    def cell(server: str, shape: str, client: str) -> str:
        c = cells.get((server, shape, client))
        if c is None:
            return "-"
        refused = c["503s"] if server.startswith("outage") else c["429s"]
        last = "-" if c["last_success_s"] is None else f"{c['last_success_s']:.1f} s"
        text = f"{c['succeeded']}/{c['requests']} · {c['calls_per_request']:.2f} · {refused} · {last}"
        verdict = checks.get((server, shape, client))
        missed = verdict is not None and any(verdict[k] is False for k in _MATRIX_TARGETS)
        return f"**{text}**" if missed else text

    lines = [
        wrap(
            f"""{command(doc)}: quota servers written apart from the library's test kit, each in its own
            process on real sockets, in real time;{repeats} every request has
            `Policy(max_elapsed={f['max_elapsed_s']:g})` and the other defaults; {provenance(doc)}. Each cell:
            succeeded · server calls per request · 429s (503s for the outage) · last success after the
            release. The ideal is the server's capacity (for `rate=` clients, the slower of that and
            their own pace). **Bold**: a paced cell missing a target (at least the unpaced success at
            no more calls per request; with a configured rate or `RateLimit-Policy`, all succeed within
            {conf['calls_per_request']:g} calls per request and {conf['vs_ideal']:g}x the ideal;
            learned, within {learned['calls_per_request']:g} and {learned['vs_ideal']:g}x)."""
        ),
        "",
        "| server | clients (ideal) | " + " | ".join(f"`{f['clients'][c]}`" for c in clients) + " |",
        "|---|---|" + "---:|" * len(clients),
    ]
    for server in f["servers"]:
        kind = server["kind"]
        for n, shape in enumerate(f["shape_order"]):
            label = _server_label(server) if n == 0 else ""
            ideal = next(c["ideal_s"] for c in f["cells"] if c["server"] == kind and c["shape"] == shape)
            who = f"{_shape_label(shape, f['shapes'][shape])} ({ideal:.1f} s)"
            lines.append(f"| {label} | {who} | " + " | ".join(cell(kind, shape, c) for c in clients) + " |")
    within = sum(1 for row in f["local_vs_redis"] if row["within"])
    fallbacks = ""
    if any("fleet_fallbacks" in c for c in f["cells"]):
        n = sum(c["fleet_fallbacks"] for c in f["cells"])
        fallbacks = (f" `RedisFleet` turns served by local pacing because Redis failed or answered"
                     f" after its 50 ms timeout: {n}.")
    processes, gap = f["shapes"]["6x10"]["processes"], targets["local_vs_redis"] * 100
    lines += [
        "",
        wrap(
            f"""Paced cells meeting every target: {f['cells_meeting_every_target']} of
            {f['paced_cells']}. `LocalFleet` and `RedisFleet` (the same settings, one process and
            {processes} processes) within {gap:g}% of each other in success, calls per request and
            last success: {within} of {len(f['local_vs_redis'])} comparisons.{fallbacks} Every cell,
            with the reasons requests gave up: `benchmarks/results/pacing_matrix.json`."""
        ),
    ]
    return "\n".join(lines)


def deploy(results: Results) -> str:
    """A real deployment: gunicorn or uWSGI workers behind a Django view; Redis, a host file, the default."""
    doc = results["deploy"]
    f = doc["figures"]
    q = f["quota"]
    # The default scenario's fleet is a host fleet too.
    fallbacks = {
        kind: sum(r["summary"]["redis_fallbacks_total"] for r in f["rows"]
                  if r["scenario"].startswith(kind) or (kind, r["scenario"]) == ("host", "default"))
        for kind in ("redis", "host")
    }
    twice = sum(row["summary"]["executed_twice_total"] for row in f["rows"])
    once = "No job was executed twice in any run" if twice == 0 else f"**{twice} jobs were executed twice**"
    lines = [
        wrap(
            f"""{command(doc)}: gunicorn `--preload` (sync, gthread and gevent workers) and uWSGI's
            default prefork (`--master
            --processes {f['workers']}`), {f['workers']} workers each, serve the minimal Django
            project in `benchmarks/deploy_project/`; except under `--lazy-apps`, its session is
            built and used once in the master before the fork (uWSGI forks from C: no at-fork hook
            runs in its workers). The view posts once through `get_session()`
            (gunicorn=={f['gunicorn']}, gevent=={f.get('gevent', '?')}, uWSGI=={f['uwsgi']},
            Django=={f['django']}, redis=={f['redis_py']}). A client of {f['requests']} threads releases
            {f['requests']} requests at once. The quota server, written apart from FakeSume:
            {q['summary']}. `SUME["FLEET"]` on a real redis-server, on a host file (`HostFleet`, a
            new file per run), or left out (the default in Django: the host fleet at its default path,
            new per run through `XDG_RUNTIME_DIR`).
            Ideal last success {f['ideal_last_success_s']:.1f} s.
            Median of {f['runs']} runs, lowest-highest run in brackets; jobs executed twice summed
            over the runs ({provenance(doc)}):"""
        ),
        "",
        deploy_table(f),
        "",
        wrap(
            f"""{once}; requests fell back to local pacing {fallbacks['redis']} times from Redis
            and {fallbacks['host']} times from the host file."""
        ),
    ]
    return "\n".join(lines)


def _version_key(version: str) -> List[int]:
    return [int(part) if part.isdigit() else 0 for part in version.split(".")]


def _versions(docs: Iterable[Document]) -> str:
    """``1.26.20 and 2.7.0``: the urllib3 versions of ``docs``, oldest first."""
    names = sorted({doc["stamp"]["urllib3"] for doc in docs}, key=_version_key)
    return " and ".join(names) if len(names) < 3 else ", ".join(names[:-1]) + " and " + names[-1]


def _peek_runs(results: Results) -> List[Document]:
    """The peek_memory runs, one per urllib3 version, oldest first."""
    runs = sorted(results.matching("peek_memory-urllib3-"), key=lambda d: _version_key(d["stamp"]["urllib3"]))
    if not runs:
        raise KeyError("no peek_memory-urllib3-*.json results")
    return runs


def _stock_drain(doc: Document) -> float:
    stock = doc["figures"]["scenarios"]["stock-503"]
    if stock["server_attempts"] < 2:
        raise ValueError(f"{doc['stamp']['command']}: the stock 503 was not retried, so nothing was drained")
    return float(stock["peak_over_baseline_at_response_mb"])


def _stock_groups(runs: Sequence[Document]) -> List[Tuple[bool, str, float]]:
    """(held whole, its urllib3 versions, the most it cost) for the versions whose drain holds the
    retried body whole, then for those that drain it in pieces; a group with no version is left out."""
    whole = [d for d in runs if _stock_drain(d) > d["figures"]["budget_mb"]]
    pieces = [d for d in runs if d not in whole]
    return [
        (held, _versions(group), max(_stock_drain(d) for d in group))
        for held, group in ((True, whole), (False, pieces))
        if group
    ]


def _peek_cost(runs: Iterable[Document], *scenarios: str) -> float:
    """The most any of ``scenarios`` added to peak RSS at the response, over ``runs``."""
    key = "peak_over_baseline_at_response_mb"
    return float(max(d["figures"]["scenarios"][s][key] for d in runs for s in scenarios))


def _mb(value: float) -> str:
    return f"+{value:.0f} MB" if value >= 1 else f"+{value:.2f} MB"


def comparison(results: Results) -> str:
    """The table comparing urllib3's ``Retry`` with ``SumeRetry``; its memory row is measured."""
    runs = _peek_runs(results)
    size_mb = runs[0]["figures"]["body_bytes"] / 1e6
    stock = "; ".join(
        f"{_mb(cost)} on urllib3 {versions}" + (" (holds it whole)" if held else "")
        for held, versions, cost in _stock_groups(runs)
    )
    return "\n".join(
        [
            "| | urllib3 `Retry(status_forcelist=…)` | `SumeRetry` |",
            "|---|---|---|",
            "| decide from the error code in the body | no: `is_retry` sees the status only "
            "| yes, body read bounded and left whole |",
            "| body of the last error after giving up | lost (`RetryError`, or 0 bytes) "
            "| intact on `SumeRetryError.response` |",
            "| `Retry-After: 1.5`, `soon`, empty | `InvalidHeader` mid-request "
            "| parsed or ignored, never raised |",
            "| total time cap across attempts | none (per-attempt timeouts only) "
            "| `max_elapsed`, checked before every wait |",
            "| POST retried | never (method allow-list) | only with the same `Idempotency-Key` |",
            f"| peak memory when a retried {size_mb:.0f} MB error body is drained "
            f"({command(runs[0])}) | {stock} "
            f"| {_mb(_peek_cost(runs, '503-gave-up'))} on {_versions(runs)} (64 KiB pieces) |",
            "| retry budget across threads | none | 20% of traffic, floor 10/s |",
        ]
    )


def reliability(results: Results) -> str:
    """The Reliability section's measured bullets: faults, fuzzing, the soak and memory."""
    fuzz_doc, soak_doc = results["fuzz"], results["soak"]
    fz, sk = fuzz_doc["figures"], soak_doc["figures"]
    targets = fz["targets"]
    outcomes = sk["outcomes"]
    order = ("ok", "retried_ok", "fix", "poll", "no_retry", "gave_up")
    counted = ", ".join(f"{thousands(outcomes[name])} {name}" for name in order if outcomes.get(name))
    gave_up = outcomes.get("gave_up", 0)
    one_key = sk["requests_with_more_than_one_key"] == 0 and sk["requests_missing_at_server"] == 0
    runs = _peek_runs(results)
    peeks = _peek_cost(runs, "402-plain", "402-gzip-chunked", "503-gave-up")
    stock = " and ".join(
        f"{'holds it whole' if held else 'drains it in pieces'} on {versions} ({_mb(cost)})"
        for held, versions, cost in _stock_groups(runs)
    )
    size_mb = runs[0]["figures"]["body_bytes"] / 1e6
    bullets = [
        faults_line(results),
        wrap(
            f"""- **Inputs fuzzed: {thousands(fz['inputs'])}** ({command(fuzz_doc)}, seed {fz['seed']})
            through the envelope parser ({thousands(targets['parse_envelope']['inputs'])}), the
            Retry-After parser ({thousands(targets['parse_retry_after']['inputs'])}) and the policy
            ({thousands(targets['Policy.decide / decide_error']['inputs'])}), plus hypothesis properties in
            every test run: {fz['exceptions']} exceptions, {fz['invariant_violations']} broken
            invariants.""",
            indent="  ",
        ),
        wrap(
            f"""- **Requests soaked: {thousands(sk['logical_requests'])}** logical POSTs from
            {sk['threads']} threads through one session against {percent(sk['failure_rate'])} 503s
            ({command(soak_doc)}): {"every request had exactly one key" if one_key else "**not**"},
            {sk['keys_shared_by_requests']} keys shared between requests, the outcome counts add up to
            {thousands(sum(outcomes.values()))} ({counted}), the server saw
            {thousands(sk['attempts_server_saw'])} attempts and the records report
            {thousands(sk['attempts_records_report'])}, and RSS moved {sk['rss_growth_25_to_100_mb']:+.1f} MB
            from 25% to 100% of the run. Lost: {sk['lost']}. The {thousands(gave_up)} give-ups
            ({gave_up / sk['logical_requests'] * 100:.1f}%) are the retry budget at work:
            {percent(sk['failure_rate'])} failures need about
            {percent(sk['retries_needed_without_budget'])} retries, the budget allows
            {percent(sk['retry_budget']['ratio'])}, and the run made
            {sk['retries_per_logical_request']:.3f} retries per request.""",
            indent="  ",
        ),
        wrap(
            f"""- **Memory** ({command(runs[0])} on urllib3 {_versions(runs)}): peeking a
            {size_mb:.0f} MB error body adds at most {_mb(peeks)} peak RSS, returned or retried;
            SumeRetry drains a retried body in 64 KiB pieces, where stock urllib3's drain {stock}.""",
            indent="  ",
        ),
    ]
    return "\n".join(bullets)


def peers(results: Results) -> str:
    """The Compatibility section's counts: urllib3's and requests' own suites, plain and swapped."""
    doc = results["peers"]
    f = doc["figures"]
    swap = {"urllib3": "`Retry` -> `SumeRetry`", "requests": "`requests.Session` -> `SumeSession`"}

    def passed(c: Mapping[str, Any]) -> str:
        return f"{c['passed']}/{c['tests']}"

    # Recorded since the second look (runs written before it had none to record).
    flaky = sum(len(run.get("flaky", ())) for run in f["runs"]) or "none"

    lines = [
        wrap(
            f"""{command(doc)} runs the peers' own tests from their sdists (the Retry-related urllib3
            files, requests' Session files), plainly and with the swap, on loopback only
            (Python {doc['stamp']['python']}, {doc['stamp']['machine']}, commit {doc['stamp']['commit']}).
            A difference is a test that passes plainly and fails swapped; every one is listed, with its
            reason, in `benchmarks/peers-expected.txt`. A failure the file does not list runs once
            more, alone, and counts as flaky if it passes then ({flaky} in this run):"""
        ),
        "",
        "| suite | swap | urllib3 | requests | passed plainly | passed swapped | differences (all listed) |",
        "|---|---|---|---|---:|---:|---:|",
    ]
    for run in f["runs"]:
        lines.append(
            f"| {run['suite']} | {swap[run['suite']]} | {run['urllib3']} | {run['requests']} "
            f"| {passed(run['plain'])} | {passed(run['swapped'])} "
            f"| {run['differences']} ({run['differences_listed']}) |"
        )
    return "\n".join(lines)


def state_memory(results: Results) -> str:
    """What a multi-tenant process keeps per key and origin: the fleet before and after, the counters."""
    doc = results["state_memory"]
    f = doc["figures"]
    fleet, before = f["fleet"], f["baseline"]

    def mb(value: float) -> str:
        return f"{value:.2f} MB" if value < 10 else f"{value:.1f} MB"

    def widest(part: str) -> str:
        sets = f[part]["label_sets"]
        name = max(sets, key=lambda metric: sets[metric])
        return f"{sets[name]} (`{name}`)"

    parts = ("metrics", "prometheus", "opentelemetry")
    labelled = sum(f[part]["labels_naming_an_origin_or_key"] for part in parts)
    lines = [
        wrap(
            f"""{command(doc)}: {thousands(f['keys'])} API keys over {thousands(f['origins'])}
            origins, one request each at {thousands(f['requests_per_second'])} a second (one in 100
            answered 429 with a 30 s Retry-After, one in 10 stating a pace), then an idle hour and
            one request of a new tenant; memory kept, as tracemalloc counts it, each part in a
            process of its own; {provenance(doc)}:"""
        ),
        "",
        "| what is kept | entries | retained |",
        "|---|---:|---:|",
        f"| `LocalFleet.default()` and the key-id cache, before ({before['commit']}), after the idle hour "
        f"| {thousands(before['entries_after_idle'])} | {mb(before['retained_after_idle_mb'])} |",
        f"| the same now, after the busy spell (at most {thousands(fleet['max_keys'])} entries) "
        f"| {thousands(fleet['entries_after_busy'])} | {mb(fleet['retained_after_busy_mb'])} |",
        f"| the same now, after the idle hour (target: at most {f['budget_mb']:g} MB) "
        f"| {thousands(fleet['entries_after_idle'])} | {mb(fleet['retained_after_idle_mb'])} |",
        "",
        "| counters | most label sets of one metric | retained |",
        "|---|---:|---:|",
    ]
    for part, label in (
        ("metrics", "`SumeMetrics`"),
        ("prometheus", "`PrometheusObserver`"),
        ("opentelemetry", "`OpenTelemetryObserver`"),
    ):
        lines.append(f"| {label} | {widest(part)} | {mb(f[part]['retained_mb'])} |")
    lines += [
        "",
        wrap(
            f"""The {thousands(f['codes'])} distinct server error codes among the retries count as
            50 reasons and `other`; label values naming an origin or a key: {labelled}."""
        ),
    ]
    return "\n".join(lines)


def pacing_ablation(results: Results) -> str:
    """What each pacing rule is for: the server matrix with one sub-rule turned off at a time."""
    doc = results["pacing_ablation"]
    f = doc["figures"]
    rows = [
        wrap(
            f"""{command(doc)} ({provenance(doc)}): every sub-rule of rules 3-5 turned off in turn,
            in `LocalFleet` and `RedisFleet` alike, on the servers where it can act and the clients
            that learn a pace, beside the rules as they stand ({f["baseline_repeats"]} runs of each
            baseline cell, {f["repeats"]} of each ablated one). A cell is worse when it misses a
            target the rules meet, or when its calls per request, 429s or last success leave the
            baseline's spread by more than {percent(f["noise"])}."""
        ),
        "",
        "| rule | turned off | cells worse (of those it acts on) | of which a target missed | cells worse |",
        "|---|---|---:|---:|---|",
    ]
    for row in f["ablations"]:
        cells = [c for c in f["cells"] if c["ablation"] == row["ablation"]]
        missed = sum(1 for c in cells if any(w.startswith("misses") for w in c["worse"]))
        changed = ", ".join(row["changed"]) or "none"
        worse = f"{len(row['changed'])}/{row['cells']}"
        rows.append(f"| {row['rule']} | {row['what']} | {worse} | {missed} | {changed} |")
    return "\n".join(rows)


# -- pictures -----------------------------------------------------------------------------

#: The herd picture's scenarios (``fleet_redis.json`` ids), their legend and colour: without a
#: shared pace first, then with one.
_HERD_LINES = (
    ("none", "no pacing (fleet=None)", "#7f7f7f", "-"),
    ("local_learned", "each process paces alone (LocalFleet, the default)", "#d62728", "-"),
    ("host_learned", "one shared pace: HostFleet (a file)", "#1f77b4", "-"),
    # Dashed: where both shared paces meet the quota exactly, the one drawn first shows through.
    ("redis_learned", "one shared pace: RedisFleet", "#2ca02c", "--"),
)
HERD_SVG = os.path.join(DOCS, "img", "herd.svg")


def herd_series(results: Results) -> Dict[str, Any]:
    """What the herd picture draws, from ``fleet_redis.json``: per scenario, at the end of each
    interval after the release, the requests succeeded so far, 429s per second and server calls
    so far per request. Every scenario runs to the longest one's last interval."""
    doc = results["fleet_redis"]
    f = doc["figures"]
    n = f["requests"]
    scenarios = {sid: f["scenarios"][sid] for sid, *_look in _HERD_LINES}
    step = {s["timeline"]["interval_s"] for s in scenarios.values()}
    if len(step) != 1:
        raise ValueError(f"fleet_redis.json: the herd's timelines use different intervals: {sorted(step)}")
    interval = step.pop()
    bins = max(len(s["timeline"]["calls"]) for s in scenarios.values())
    lines = []
    for sid, label, colour, dashes in _HERD_LINES:
        timeline = scenarios[sid]["timeline"]
        calls = timeline["calls"] + [0] * (bins - len(timeline["calls"]))
        throttled = timeline["429s"] + [0] * (bins - len(timeline["429s"]))
        done = called = 0
        succeeded, per_request = [], []
        for c, t in zip(calls, throttled):
            done, called = done + c - t, called + c
            succeeded.append(done)
            per_request.append(round(called / n, 4))
        lines.append(
            {
                "id": sid,
                "label": label,
                "colour": colour,
                "dashes": dashes,
                "succeeded": succeeded,
                "429s_per_s": [round(t / interval, 4) for t in throttled],
                "calls_per_request": per_request,
            }
        )
    return {
        "results": "benchmarks/results/fleet_redis.json",
        "command": doc["stamp"]["command"],
        "commit": doc["stamp"]["commit"],
        "requests": n,
        "processes": f["processes"],
        "rate_per_s": f["quota"]["rate_per_s"],
        "burst": f["quota"]["burst"],
        "interval_s": interval,
        "lines": lines,
    }


def digest(series: Mapping[str, Any]) -> str:
    """The SHA-256 of ``series`` as canonical JSON: what a picture's metadata names."""
    text = json.dumps(series, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def draw_herd(series: Mapping[str, Any]) -> bytes:
    """The herd picture as SVG: three panels over the seconds after the release, one line per scenario.

    The same series and the same matplotlib give the same bytes: matplotlib's defaults (not the
    user's matplotlibrc), no date, a fixed salt for the SVG's ids, text kept as text.
    """
    import matplotlib
    import matplotlib.style
    from matplotlib.figure import Figure

    dt, n = series["interval_s"], series["requests"]
    style = {"svg.hashsalt": "sume-urllib3 herd", "svg.fonttype": "none", "font.size": 9.0}
    with matplotlib.style.context("default"), matplotlib.rc_context(style):
        fig = Figure(figsize=(8.0, 7.6))
        axes = fig.subplots(3, 1, sharex=True)
        bins = len(series["lines"][0]["succeeded"])
        ends = [dt * (i + 1) for i in range(bins)]
        starts = [dt * i for i in range(bins)]
        capacity = [min(n, series["burst"] + series["rate_per_s"] * t) for t in [0.0, *ends]]
        axes[0].plot([0.0, *ends], capacity, color="black", linestyle=":", linewidth=1.0,
                     label="what the quota admits at most")
        axes[2].axhline(1.0, color="black", linestyle=":", linewidth=1.0)
        for line in series["lines"]:
            look = {"color": line["colour"], "linestyle": line["dashes"], "linewidth": 1.6}
            look["label"] = line["label"]
            axes[0].plot([0.0, *ends], [0, *line["succeeded"]], **look)
            axes[1].step([*starts, ends[-1]], [*line["429s_per_s"], 0.0], where="post", **look)
            axes[2].plot([0.0, *ends], [0.0, *line["calls_per_request"]], **look)
        axes[0].set_ylabel(f"requests succeeded\n(of {n})")
        axes[1].set_ylabel("429s per second")
        axes[2].set_ylabel("server calls so far,\nper request")
        axes[2].set_xlabel("seconds after the release")
        axes[0].set_title(
            f"{n} requests at once from {series['processes']} processes, against "
            f"{series['rate_per_s']:g} req/s, burst {series['burst']}",
            loc="left",
        )
        # The 429 panel's upper right stays empty once the first waves are over: the legend goes there.
        axes[1].legend(handles=axes[0].get_lines(), loc="upper right", framealpha=0.9)
        for ax in axes:
            ax.grid(True, color="#dddddd", linewidth=0.6)
            ax.set_xlim(0.0, ends[-1])
            ax.set_ylim(bottom=0.0)
        fig.align_ylabels(axes)
        fig.tight_layout()
        out = io.BytesIO()
        fig.savefig(
            out,
            format="svg",
            metadata={
                "Date": None,
                "Title": "The herd: requests, 429s and calls per request over time",
                "Description": f"python benchmarks/render.py --figures, from {series['results']}",
                "Source": f"{series['results']} sha256:{digest(series)}",
            },
        )
    return out.getvalue()


#: Every picture: its file, the data it draws from the results, and how it is drawn.
PICTURES: Dict[str, Tuple[Callable[[Results], Mapping[str, Any]], Callable[[Mapping[str, Any]], bytes]]] = {
    HERD_SVG: (herd_series, draw_herd),
}
_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")


def drawn_digest(picture: str) -> Optional[str]:
    """The SHA-256 a committed picture names for its data, or None (no file, no digest)."""
    if not os.path.exists(picture):
        return None
    with open(picture, encoding="utf-8") as f:
        found = _DIGEST.search(f.read())
    return found.group(1) if found else None


def stale_pictures(results: Results, redraw: bool = False) -> List[str]:
    """The pictures whose data differs from the results (and, with ``redraw``, whose bytes differ
    from what this matplotlib draws)."""
    stale = []
    for picture, (series_of, draw) in PICTURES.items():
        series = series_of(results)
        if drawn_digest(picture) != digest(series):
            stale.append(picture)
        elif redraw:
            with open(picture, "rb") as f:
                if f.read() != draw(series):
                    stale.append(picture)
    return stale


def herd_pictures(results: Results) -> str:
    """The pacing guide's herd picture and its caption: what each line ends at."""
    doc = results["fleet_redis"]
    f = doc["figures"]
    q = f["quota"]
    rows = f["scenarios"]

    def end(sid: str) -> str:
        r = rows[sid]
        return (
            f"{r['calls_per_request']:.2f} calls per request, {r['429s']} 429s, "
            f"{r['succeeded']}/{r['total']} succeeded, the last at {r['last_success_s']:.1f} s"
        )

    interval = rows["none"]["timeline"]["interval_s"]
    picture = os.path.relpath(HERD_SVG, os.path.join(DOCS, "guide")).replace(os.sep, "/")
    return "\n".join(
        [
            f"![The herd: requests succeeded, 429s per second and server calls per request over the "
            f"seconds after the release, for each process pacing alone and for one shared pace]({picture})",
            "",
            wrap(
                f"""{f['processes']} worker processes of {f['threads']} threads post {f['requests']}
                requests at once against a quota server of {q['rate_per_s']:g} req/s, burst
                {q['burst']}, which counts its calls and 429s per {interval:g} s ({command(doc)};
                {provenance(doc)}; drawn by `python benchmarks/render.py --figures` into
                `docs/img/herd.svg`). Each process pacing alone (a `LocalFleet` per process, what
                `SumeSession()` has by default): {end('local_learned')}. One pace shared through a
                `HostFleet` file: {end('host_learned')}; through a `RedisFleet`:
                {end('redis_learned')}. No pacing at all (`fleet=None`): {end('none')}."""
            ),
        ]
    )


RENDERERS: Dict[str, Callable[[Results], str]] = {
    "performance": performance,
    "job-polls": job_polls,
    "celery-e2e": celery_e2e,
    "herd": herd,
    "fleet": fleet,
    "fleet-redis": fleet_redis,
    "host-fleet": host_fleet,
    "redis-round-trips": redis_round_trips,
    "pacing-matrix": pacing_matrix,
    "deploy": deploy,
    "comparison": comparison,
    "reliability": reliability,
    "peers": peers,
    "state-memory": state_memory,
    "pacing-ablation": pacing_ablation,
    "herd-pictures": herd_pictures,
}


# -- the pages ----------------------------------------------------------------------------


def documents() -> List[str]:
    """Every page that may hold figure blocks: README.md, then docs/**/*.md in name order."""
    pages = [README]
    for folder, _dirs, files in sorted(os.walk(DOCS)):
        pages += [os.path.join(folder, name) for name in sorted(files) if name.endswith(".md")]
    return pages


def blocks(text: str) -> List[str]:
    """The names of the figure blocks in ``text``, in order."""
    return [match.group(2) for match in BLOCK.finditer(text)]


def render(text: str, results: Optional[Results] = None) -> str:
    """``text`` with every figure block rewritten from the results files."""
    results = results or Results()
    unknown = [name for name in blocks(text) if name not in RENDERERS]
    if unknown:
        raise KeyError(f"figure block(s) with no renderer: {', '.join(unknown)}")

    def replace(match: re.Match[str]) -> str:
        body = RENDERERS[match.group(2)](results)
        # Blank lines around the body: a table or list must not run into the markers.
        return match.group(1) + "\n" + body.strip("\n") + "\n\n" + match.group(4)

    return BLOCK.sub(replace, text)


def draw_pictures(results: Results) -> None:
    """Draw every picture again from the results (needs matplotlib)."""
    for picture, (series_of, draw) in PICTURES.items():
        data = draw(series_of(results))
        os.makedirs(os.path.dirname(picture), exist_ok=True)
        with open(picture, "wb") as f:
            f.write(data)
        print(f"drew {os.path.relpath(picture, ROOT)}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Rewrite every page's figure blocks, or with ``--check`` report whether they are current."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 and show the diff if a page differs")
    parser.add_argument(
        "--figures",
        action="store_true",
        help="draw the pictures too (matplotlib); with --check, compare them byte for byte",
    )
    parser.add_argument("--page", action="append", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    results = Results()
    if args.figures and not args.check:
        draw_pictures(results)
    stale: List[str] = []
    for page in args.page or documents():
        with open(page, encoding="utf-8") as f:
            text = f.read()
        new = render(text, results)
        if new == text:
            continue
        name = os.path.relpath(page, ROOT)
        stale.append(name)
        if args.check:
            diff = difflib.unified_diff(text.splitlines(True), new.splitlines(True), name, "rendered")
            sys.stdout.writelines(diff)
            continue
        with open(page, "w", encoding="utf-8") as f:
            f.write(new)
        print(f"rewrote the figure blocks of {name}: " + ", ".join(blocks(new)))
    if args.check and not args.page:
        for picture in stale_pictures(results, redraw=args.figures):
            name = os.path.relpath(picture, ROOT)
            stale.append(name)
            print(f"{name} is not what the results draw (python benchmarks/render.py --figures)")
    if not stale:
        print("figures are current")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
