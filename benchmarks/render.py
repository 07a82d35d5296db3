"""Write the README's measured figures from the committed results files.

Every figure the README states about speed, memory, pacing or reliability sits between a pair
of markers, ``<!-- figures: NAME -->`` and ``<!-- /figures: NAME -->``, and is generated here
from ``benchmarks/results/*.json`` (written by each benchmark's ``--write``). Each block names
the command that produced its figures. ``tests/test_readme_figures.py`` renders the blocks
again and fails when the README differs, so a figure edited by hand, or left behind by a new
measurement, fails the test run.

    python benchmarks/render.py           # rewrite the README's blocks
    python benchmarks/render.py --check   # exit 1 and show the difference instead
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
import textwrap
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _results  # noqa: E402

README = os.path.join(os.path.dirname(HERE), "README.md")
BLOCK = re.compile(r"(<!-- figures: ([a-z0-9-]+) -->\n)(.*?)(<!-- /figures: \2 -->)", re.S)

Document = Dict[str, Any]


class Results:
    """The committed results files, loaded on first use; remembers which were read."""

    def __init__(self, loader: Callable[[str], Document] = _results.load) -> None:
        self._loader = loader
        self._cache: Dict[str, Document] = {}
        self.used: Set[str] = set()

    def __getitem__(self, name: str) -> Document:
        if name not in self._cache:
            self._cache[name] = self._loader(name)
        self.used.add(name)
        return self._cache[name]

    def figures(self, name: str) -> Dict[str, Any]:
        """The ``figures`` of results ``name``."""
        figures: Dict[str, Any] = self[name]["figures"]
        return figures


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


_MARKDOWN_START = re.compile(r"^([-+*>#|]|\d+[.)])( |$)")


def wrap(text: str, indent: str = "") -> str:
    """``text`` filled to the README's width; no line may start like a Markdown list, quote or table."""
    for width in range(95, 120):
        lines = textwrap.wrap(
            " ".join(text.split()),
            width,
            subsequent_indent=indent,
            break_long_words=False,
            break_on_hyphens=False,
        )
        if not any(_MARKDOWN_START.match(line.strip()) for line in lines[1:]):
            return "\n".join(lines)
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
        f"{command(doc)} (a loopback HTTP/1.1 server in its own process writing each response in one",
        "send; every variant sends the same request, one request per variant per round in a shuffled",
        f"order, {thousands(f['requests_per_run'])} rounds per run, {f['runs']} runs; ratio = the variant's "
        "total time over plain",
        "`requests.Session` in the same run, median over the runs, spread = the lowest and highest run;",
        f"{provenance(doc)}; full tables, the method and profiles in `benchmarks/RESULTS-retry.md`):",
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
    if "mem-sume-get" in rows:
        mem = [rows["mem-sume-get"], rows["mem-sume-post"]]
        lines.append(
            "| `SumeSession` GET / POST in memory (no socket) | "
            + " / ".join(f"{r['us_per_request']:.0f}" for r in mem)
            + " | "
            + " / ".join(ratio(r["ratio"]) for r in mem)
            + " | |"
        )
    alone, session = canned["alone"], canned["session"]
    lines += [
        f"| one 503 decision (1 KiB JSON body), `SumeRetry()` vs stock `Retry` | {alone['us']:.1f} vs "
        f"{canned['stock_us']:.1f} µs | {ratio(alone['ratio'], 1)} "
        f"| {spread(alone['ratio_low'], alone['ratio_high'], 1)} |",
        f"| the same with the session's metrics, logging and budget | {session['us']:.1f} µs "
        f"| {ratio(session['ratio'], 1)} | {spread(session['ratio_low'], session['ratio_high'], 1)} |",
        f"| a GET meeting one 503 then a 200, `SumeSession` vs stock `Retry` (no sleeping) "
        f"| {one['us_per_request']:.0f} | {ratio(one['ratio'])} "
        f"| {spread(one['ratio_low'], one['ratio_high'])} |",
    ]
    return "\n".join(lines)


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


RENDERERS: Dict[str, Callable[[Results], str]] = {
    "performance": performance,
}


# -- the README ---------------------------------------------------------------------------


def blocks(text: str) -> List[str]:
    """The names of the figure blocks in ``text``, in order."""
    return [match.group(2) for match in BLOCK.finditer(text)]


def render(text: str, results: Optional[Results] = None) -> str:
    """``text`` with every figure block rewritten from the results files."""
    results = results or Results()
    unknown = [name for name in blocks(text) if name not in RENDERERS]
    if unknown:
        raise KeyError(f"README figure block(s) with no renderer: {', '.join(unknown)}")

    def replace(match: re.Match[str]) -> str:
        body = RENDERERS[match.group(2)](results)
        return match.group(1) + body.rstrip("\n") + "\n" + match.group(4)

    return BLOCK.sub(replace, text)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Rewrite the README's figure blocks, or with ``--check`` report whether they are current."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 and show the diff if the README differs")
    parser.add_argument("--readme", default=README, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    with open(args.readme, encoding="utf-8") as f:
        text = f.read()
    new = render(text)
    if new == text:
        print("README figures are current")
        return 0
    if args.check:
        sys.stdout.writelines(
            difflib.unified_diff(text.splitlines(True), new.splitlines(True), "README.md", "rendered")
        )
        return 1
    with open(args.readme, "w", encoding="utf-8") as f:
        f.write(new)
    print("rewrote the README's figure blocks: " + ", ".join(blocks(new)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
