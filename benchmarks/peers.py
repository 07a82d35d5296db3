"""urllib3's and requests' own test suites, run plainly and with SumeRetry / SumeSession swapped in.

A user switching ``Retry`` for ``SumeRetry`` (or ``requests.Session`` for ``SumeSession``) keeps
every behaviour the Sume policy does not decide. This runs the peers' own tests to prove it:

1. per urllib3 line (latest 2.x, and 1.26) a venv under ``.peers/`` with that urllib3, the latest
   requests it allows and the peers' test dependencies, all from the package index;
2. the sdists of the urllib3 and requests installed there (``pip download --no-deps
   --no-binary :all:``), unpacked under ``.peers/src/``;
3. the Retry-related test files of urllib3 (on each line) and the Session tests of requests (on
   the 2.x line), each run twice by the same pytest: plainly, then with the swap
   (``benchmarks/_peer_swap.py``, which also keeps every connection on loopback and, with
   SumeSession, records the waits between retries instead of sleeping them);
4. a comparison: a test that passes plainly and fails swapped is a *difference*; every one must
   be listed, with its reason, in ``benchmarks/peers-expected.txt``. A plain failure must be
   listed too (an environment the suite cannot fully run in), and so must nothing else: a listed
   line that no longer matches any test fails the run as well, so the file stays true;
5. a second look at what is not listed: those tests run once more, alone, the same way (plainly,
   or swapped), and one that passes then is reported as *flaky* (a socket race on a loaded
   machine: the two urllib3 lines run side by side in CI) instead of failing the run. One that
   fails again fails the run.

    python benchmarks/peers.py                     # both lines, both suites; exit 1 on a surprise
    python benchmarks/peers.py --line 2 --suite urllib3 --show   # one run, every failure shown
    python benchmarks/peers.py --write             # also record benchmarks/results/peers.json

Nothing here runs in the default ``pytest -q``; ``.ci/run`` runs it as its own step.
"""

from __future__ import annotations

import argparse
import collections
import fnmatch
import json
import os
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _results  # noqa: E402

ROOT = _results.ROOT
CACHE = os.path.join(ROOT, ".peers")
EXPECTED = os.path.join(HERE, "peers-expected.txt")

#: urllib3 lines: how pip spells each, and the test dependencies its suite imports.
LINES: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "2": (
        "urllib3>=2,<3",
        (
            "trustme",
            "pytest-timeout",
            "pysocks",
            "hypercorn",
            "quart",
            "quart-trio",
            "trio",
            "anyio[trio]",
            "h2",
            "httpx",
            "cryptography",
        ),
    ),
    "1.26": (
        "urllib3>=1.26,<1.27",
        # tornado as urllib3 1.26's dev-requirements pin it: its dummy server breaks on 6.5.
        (
            "trustme",
            "pytest-timeout",
            "pysocks",
            "tornado==6.4.1",
            "mock",
            # As urllib3 1.26's dev-requirements pin it; its tests also import six, which
            # python-dateutil 4 no longer brings along.
            "python-dateutil==2.9.0.post0",
            "six",
            "pytest-freezegun",
            # cryptography 51 refuses the empty SubjectAlternativeName that trustme writes for
            # urllib3 1.26's common-name-only certificate ("general_names must be a non-empty
            # list"): test_https_proxy_common_name_warning then fails without the swap.
            "cryptography<51",
            "flaky",
        ),
    ),
}
#: requests' own test dependencies (httpbin serves test_requests.py on loopback).
REQUESTS_DEPS = ("pytest-httpbin", "httpbin", "trustme", "pysocks", "pytest-mock")

#: urllib3's files that drive a Retry: the retry tests, and the pool, manager, proxy, response,
#: chunked and socket-level files whose tests pass ``retries=`` (all of each file runs).
URLLIB3_FILES = (
    "test/test_retry.py",
    "test/test_connectionpool.py",
    "test/test_poolmanager.py",
    "test/test_proxymanager.py",
    "test/test_response.py",
    "test/with_dummyserver/test_connectionpool.py",
    "test/with_dummyserver/test_poolmanager.py",
    "test/with_dummyserver/test_proxy_poolmanager.py",
    "test/with_dummyserver/test_chunked_transfer.py",
    "test/with_dummyserver/test_socketlevel.py",
)
URLLIB3_126_ONLY = ("test/test_retry_deprecated.py",)
#: requests' files that send through a Session (test_utils, test_structures... never do).
REQUESTS_FILES = (
    "tests/test_requests.py",
    "tests/test_lowlevel.py",
    "tests/test_adapters.py",
    "tests/test_hooks.py",
    "tests/test_testserver.py",
)
#: requests' suite runs once, on the newest urllib3 line (it tests requests, not urllib3's line).
REQUESTS_LINES = ("2",)
#: Left out in both runs, with why (none today).
DESELECTED: Dict[str, Tuple[str, ...]] = {}
#: --tb=native: pytest's own traceback formatting parses source with ast, which CPython 3.11 can
#: fail at while urllib3's server threads run ("AST constructor recursion depth mismatch"), and an
#: INTERNALERROR there ends the session with the rest of the tests unrun.
PYTEST_ARGS = (
    "-q",
    "-p",
    "_peer_swap",
    "-p",
    "no:cacheprovider",
    "--continue-on-collection-errors",
    "--tb=native",
)


@dataclass
class Run:
    """One suite under one urllib3 line: every test's outcome, plain and swapped."""

    suite: str  # "urllib3" or "requests"
    line: str  # "2" or "1.26"
    versions: Dict[str, str]
    plain: Dict[str, str]
    swapped: Dict[str, str]
    seconds: float = 0.0
    files: Tuple[str, ...] = ()
    cwd: str = ""
    #: Tests that failed once and passed when run again alone: (test, "plain" or "swapped").
    flaky: List[Tuple[str, str]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.suite}@urllib3-{self.line}"

    def differences(self) -> List[str]:
        """Tests that pass (or skip) plainly and fail, or never ran, swapped."""
        return sorted(
            test
            for test, outcome in self.plain.items()
            if outcome != "failed" and self.swapped.get(test, "failed") == "failed"
        ) + sorted(t for t, o in self.swapped.items() if o == "failed" and t not in self.plain)

    def plain_failures(self) -> List[str]:
        return sorted(t for t, o in self.plain.items() if o == "failed")


@dataclass
class Expected:
    """One line of ``peers-expected.txt``: where it applies, which tests, and why."""

    suite: str  # urllib3, requests, optionally @urllib3-2 / @urllib3-1.26
    kind: str  # "swapped" (a design difference) or "plain" (the environment)
    pattern: str
    reason: str
    lineno: int
    matched: List[str] = field(default_factory=list)

    def applies(self, run: Run) -> bool:
        suite, _, line = self.suite.partition("@")
        return suite == run.suite and (not line or line == f"urllib3-{run.line}")


def read_expected(path: str = EXPECTED) -> List[Expected]:
    """The committed list; a line without a reason, or of an unknown kind, is an error."""
    entries = []
    with open(path, encoding="utf-8") as f:
        for lineno, text in enumerate(f, 1):
            text = text.strip()
            if not text or text.startswith("#"):
                continue
            head, sep, reason = text.partition(" -- ")
            parts = head.split()
            if not sep or not reason.strip() or len(parts) != 3 or parts[1] not in ("swapped", "plain"):
                raise SystemExit(
                    f"{os.path.relpath(path, ROOT)}:{lineno}: want 'SUITE[@urllib3-LINE] swapped|plain "
                    f"TEST-GLOB -- reason', got {text!r}"
                )
            suite = parts[0]
            if suite.partition("@")[0] not in ("urllib3", "requests"):
                raise SystemExit(f"{os.path.relpath(path, ROOT)}:{lineno}: unknown suite {suite!r}")
            entries.append(Expected(suite, parts[1], parts[2], reason.strip(), lineno))
    return entries


# -- environments ---------------------------------------------------------------------------


def _pip(python: str, *args: str) -> None:
    subprocess.run([python, "-m", "pip", "-q", "--disable-pip-version-check", *args], check=True)


def venv(line: str, suites: Sequence[str]) -> str:
    """The Python of ``.peers/venv-<line>``, made (or brought up to date) on first use."""
    spec, deps = LINES[line]
    wanted = [spec, "requests", "pytest", *deps, *(REQUESTS_DEPS if "requests" in suites else ())]
    home = os.path.join(CACHE, f"venv-{line}")
    python = os.path.join(home, "bin", "python")
    marker = os.path.join(home, "sume-peers.json")
    try:
        with open(marker, encoding="utf-8") as f:
            if set(wanted) <= set(json.load(f)):
                return python
    except (OSError, ValueError):
        pass
    if not os.path.exists(python):
        subprocess.run([sys.executable, "-m", "venv", home], check=True)
    _pip(python, "install", *wanted)
    with open(marker, "w", encoding="utf-8") as f:
        json.dump(sorted(wanted), f)
    return python


def installed(python: str) -> Dict[str, str]:
    code = (
        "import json, platform, urllib3, requests; print(json.dumps({'python': platform.python_version(), "
        "'urllib3': urllib3.__version__, 'requests': requests.__version__}))"
    )
    done = subprocess.run([python, "-c", code], check=True, capture_output=True, text=True)
    found: Dict[str, str] = json.loads(done.stdout)
    return found


def sources(python: str, project: str, version: str) -> str:
    """The unpacked sdist of ``project==version`` (downloaded once into ``.peers/sdist``)."""
    target = os.path.join(CACHE, "src", f"{project}-{version}")
    if os.path.isdir(target):
        return target
    sdists = os.path.join(CACHE, "sdist")
    _pip(python, "download", "--no-deps", "--no-binary", ":all:", f"{project}=={version}", "-d", sdists)
    archive = next(
        os.path.join(sdists, name)
        for name in sorted(os.listdir(sdists))
        if name.lower().startswith(f"{project}-{version}.")
    )
    unpack = os.path.join(CACHE, "src", ".unpack")
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(unpack, filter="data")
        else:  # Python < 3.12 without the backport: the archive comes from the index, by name
            tar.extractall(unpack)
    os.replace(os.path.join(unpack, f"{project}-{version}"), target)
    return target


# -- runs -----------------------------------------------------------------------------------


def pytest(
    python: str, cwd: str, files: Sequence[str], swap: str, show: bool, deselected: Sequence[str] = ()
) -> Dict[str, str]:
    """Run ``files`` in ``cwd``; every test's outcome (``_peer_swap`` records them)."""
    out = os.path.join(CACHE, f"outcomes-{os.getpid()}.jsonl")
    # Bytecode is written (under .peers/): the swapped run reuses what the plain run compiled.
    env = dict(os.environ, SUME_PEERS_OUT=out, SUME_PEERS_SWAP=swap)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = os.pathsep.join([ROOT, HERE, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env.pop(name, None)
    report = ["-rf"] if show else ["--no-summary"]
    deselect = [f"--deselect={test}" for test in deselected]
    subprocess.run(
        [python, "-m", "pytest", *PYTEST_ARGS, *report, *deselect, *files],
        cwd=cwd,
        env=env,
        stdout=None if show else subprocess.DEVNULL,
        stderr=None if show else subprocess.DEVNULL,
        check=False,
    )
    outcomes: Dict[str, str] = {}
    with open(out, encoding="utf-8") as f:
        for text in f:
            row = json.loads(text)
            outcomes[row["id"]] = row["outcome"]
    os.remove(out)
    return outcomes


def run_suite(python: str, suite: str, line: str, show: bool) -> Run:
    versions = installed(python)
    cwd = sources(python, suite, versions[suite])
    if suite == "urllib3":
        files = URLLIB3_FILES + (URLLIB3_126_ONLY if line == "1.26" else ())
    else:
        files = REQUESTS_FILES
    started = time.monotonic()
    deselected = DESELECTED.get(suite, ())
    plain = pytest(python, cwd, files, "", show, deselected)
    # The swap is named after the suite (_peer_swap): SumeRetry into urllib3's, SumeSession into requests'.
    swapped = pytest(python, cwd, files, suite, show, deselected)
    run = Run(suite, line, versions, plain, swapped, time.monotonic() - started, tuple(files), cwd)
    # Every outcome of the last run, for a closer look: .peers/last-<suite>-<line>.json.
    with open(os.path.join(CACHE, f"last-{suite}-{line}.json"), "w", encoding="utf-8") as f:
        json.dump({"plain": plain, "swapped": swapped}, f, indent=1, sort_keys=True)
    return run


def counts(outcomes: Dict[str, str]) -> Dict[str, int]:
    c = collections.Counter("skipped" if o == "xfailed" else o for o in outcomes.values())
    return {"tests": len(outcomes), "passed": c["passed"], "failed": c["failed"], "skipped": c["skipped"]}


def _matches(test: str, pattern: str) -> bool:
    """``*`` and ``?`` are wildcards; brackets are literal (parametrized ids are full of them)."""
    return fnmatch.fnmatchcase(test, pattern.replace("[", "[[]"))


def _failures(run: Run, kind: str, expected: Sequence[Expected]) -> Tuple[List[str], List[Expected]]:
    """A run's failures of one kind (plain failures, or differences) and the lines that may list them."""
    failures = run.plain_failures() if kind == "plain" else run.differences()
    return failures, [e for e in expected if e.kind == kind and e.applies(run)]


def second_look(python: str, run: Run, expected: Sequence[Expected], show: bool) -> None:
    """Run each unlisted failure once more, alone; one that passes now is flaky, not a finding.

    Only a test both runs collected is run again (a module that failed to import is not a race).
    A failure that repeats stays a failure; a pass replaces the outcome and is listed in
    ``run.flaky``, printed with the results.
    """
    for kind in ("plain", "swapped"):  # plain first: a plain flake that passes may be a difference
        failures, entries = _failures(run, kind, expected)
        outcomes = run.plain if kind == "plain" else run.swapped
        unlisted = [t for t in failures if not any(_matches(t, e.pattern) for e in entries)]
        again = [t for t in unlisted if "::" in t and t in outcomes][:20]  # more than 20 is not a flake
        if not again:
            continue
        seen = pytest(python, run.cwd, again, "" if kind == "plain" else run.suite, show)
        for test in again:
            if seen.get(test) in ("passed", "skipped", "xfailed"):
                outcomes[test] = seen[test]
                run.flaky.append((test, kind))


def judge(runs: Sequence[Run], expected: Sequence[Expected]) -> List[str]:
    """Every problem, as a sentence: an unlisted failure, or a listed line that matched nothing."""
    problems = []
    for run in runs:
        for kind in ("plain", "swapped"):
            failures, entries = _failures(run, kind, expected)
            for test in failures:
                hits = [e for e in entries if _matches(test, e.pattern)]
                for entry in hits:
                    entry.matched.append(f"{run.name} {test}")
                if not hits:
                    what = "fails plainly" if kind == "plain" else "fails only swapped"
                    problems.append(f"{run.name}: {test} {what} and is not listed")
    ran = {run.suite for run in runs} | {f"{run.suite}@urllib3-{run.line}" for run in runs}
    for entry in expected:
        # A plain line names what may fail on some machines; a swapped line must still be true.
        if entry.kind == "swapped" and entry.suite in ran and not entry.matched and _could_match(entry, runs):
            problems.append(
                f"peers-expected.txt:{entry.lineno}: {entry.suite} {entry.kind} {entry.pattern} matched "
                "no failure (fixed? remove the line)"
            )
    return problems


def _could_match(entry: Expected, runs: Sequence[Run]) -> bool:
    """Whether a run this entry applies to ran a test the pattern names (else it is not stale)."""
    return any(_matches(test, entry.pattern) for run in runs if entry.applies(run) for test in run.plain)


def figures(runs: Sequence[Run], expected: Sequence[Expected]) -> Dict[str, object]:
    rows = []
    for run in runs:
        differences = run.differences()
        rows.append(
            {
                "suite": run.suite,
                "line": run.line,
                "python": run.versions["python"],
                "urllib3": run.versions["urllib3"],
                "requests": run.versions["requests"],
                "files": list(run.files),
                "plain": counts(run.plain),
                "swapped": counts(run.swapped),
                "differences": len(differences),
                "differences_listed": sum(
                    1
                    for test in differences
                    if any(
                        e.kind == "swapped" and e.applies(run) and _matches(test, e.pattern) for e in expected
                    )
                ),
                "seconds": run.seconds,
                "flaky": [f"{kind} {test}" for test, kind in run.flaky],
            }
        )
    return {"runs": rows, "expected_lines": len(expected)}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--line", action="append", choices=sorted(LINES), help="urllib3 line (default: all)")
    parser.add_argument("--suite", action="append", choices=("urllib3", "requests"), help="default: both")
    parser.add_argument("--show", action="store_true", help="show pytest's output and every failure")
    parser.add_argument("--write", action="store_true", help="record benchmarks/results/peers.json")
    parser.add_argument(
        "--prepare", action="store_true", help="make the venvs and fetch the sources only (run nothing)"
    )
    args = parser.parse_args(argv)
    _results.refuse_partial(parser, args, "line", "suite")
    lines = args.line or ["2", "1.26"]
    suites = args.suite or ["urllib3", "requests"]
    expected = read_expected()
    os.makedirs(CACHE, exist_ok=True)
    runs = []
    for line in lines:
        here = [suite for suite in suites if suite != "requests" or line in REQUESTS_LINES]
        if not here:
            continue
        python = venv(line, here)
        if args.prepare:  # several runs of one line may then share its venv side by side
            for suite in here:
                sources(python, suite, installed(python)[suite])
            continue
        for suite in here:
            run = run_suite(python, suite, line, args.show)
            second_look(python, run, expected, args.show)
            runs.append(run)
            p, s = counts(run.plain), counts(run.swapped)
            print(
                f"{run.name} (urllib3 {run.versions['urllib3']}, requests {run.versions['requests']}, "
                f"Python {run.versions['python']}): plain {p['passed']}/{p['tests']} passed, "
                f"swapped {s['passed']}/{s['tests']} passed; {len(run.differences())} differences "
                f"({run.seconds:.0f} s)",
                flush=True,
            )
            for test, kind in run.flaky:
                how = "plainly" if kind == "plain" else "swapped"
                print(f"  flaky: {test} failed {how}, then passed run again alone", flush=True)
    if args.prepare:
        return 0
    problems = judge(runs, expected)
    for problem in problems:
        print("  " + problem)
    if args.write:
        if problems:
            parser.error("not writing results: the run has unlisted failures or stale lines")
        _results.write("peers", figures(runs, expected))
    print("peers: " + ("FAILED" if problems else "every difference is a listed design choice"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
