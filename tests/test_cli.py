"""``python -m sume_urllib3``: table, explain and demo; bad arguments exit 2 with one line."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from sume_urllib3._cli import main, render_table, run
from sume_urllib3._policy import ANY, IN_USE_WAIT, Policy, Rule, Verdict
from sume_urllib3._version import __version__

ROOT = Path(__file__).resolve().parent.parent

TABLE = """\
status  code                    verdict  wait
429     any                     retry    Retry-After, else backoff
503     any                     retry    Retry-After, else backoff
409     idempotency_key_in_use  retry    in_use_wait (1.0 s; larger Retry-After wins)
409     any                     fix      -
400     any                     fix      -
401     any                     fix      -
402     any                     fix      -
404     any                     fix      -

anything else >= 400: no_retry
max_retries: 6 (at most 7 requests)
max_elapsed: 120.0 s
backoff: base 1.0 s, max 60.0 s, jitter 0.5..1.0
in_use_wait: 1.0 s
trust_body: true
peek_limit: 65536 bytes
"""


def explain(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run ``explain`` with these arguments, check it succeeded, and return stdout."""
    assert 0 == main(["explain", *argv])
    captured = capsys.readouterr()
    assert "" == captured.err
    return captured.out


# --- table --------------------------------------------------------------------------------


def test_table_prints_the_default_policy(capsys: pytest.CaptureFixture[str]) -> None:
    """``table`` prints every default row, the fallback and the caps."""
    assert 0 == main(["table"])
    captured = capsys.readouterr()
    assert (TABLE, "") == (captured.out, captured.err)


def test_table_shows_a_custom_policy() -> None:
    """The table reflects the policy it is given: fixed waits, ANY codes and changed caps."""
    policy = Policy(
        rules=[
            Rule(500, ANY, Verdict.RETRY, 2.0),
            Rule(423, "locked", Verdict.RETRY, IN_USE_WAIT),
            Rule(429, ANY, Verdict.NO_RETRY),
        ],
        max_retries=3,
        max_elapsed=30,
        backoff_base=0.25,
        backoff_max=8,
        jitter=(0.0, 1.0),
        in_use_wait=0.5,
        trust_body=False,
        peek_limit=1024,
    )
    expected = """\
status  code    verdict   wait
500     any     retry     2.0 s (larger Retry-After wins)
423     locked  retry     in_use_wait (0.5 s; larger Retry-After wins)
429     any     no_retry  -

anything else >= 400: no_retry
max_retries: 3 (at most 4 requests)
max_elapsed: 30.0 s
backoff: base 0.25 s, max 8.0 s, jitter 0.0..1.0
in_use_wait: 0.5 s
trust_body: false
peek_limit: 1024 bytes
"""
    assert expected == render_table(policy)


def test_run_uses_the_policy_it_is_given() -> None:
    """run() takes the policy and the output stream, so callers can inspect another policy."""
    out, err = io.StringIO(), io.StringIO()
    assert 0 == run(["table"], Policy(max_retries=2), out, err)
    assert "max_retries: 2 (at most 3 requests)" in out.getvalue().splitlines()
    assert "" == err.getvalue()


def run_module(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m sume_urllib3 ARGS`` in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-m", "sume_urllib3", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        cwd=str(ROOT),
        timeout=60,
        check=False,
    )


def test_module_entry_point_prints_the_table() -> None:
    """``python -m sume_urllib3 table`` works from a fresh interpreter and exits 0."""
    result = run_module("table")

    assert (0, TABLE, "") == (result.returncode, result.stdout, result.stderr)


def test_module_entry_point_exits_2_on_bad_arguments() -> None:
    """``python -m sume_urllib3 bogus`` exits 2 with one line on stderr and no traceback."""
    result = run_module("bogus")

    assert (2, "") == (result.returncode, result.stdout)
    assert 1 == len(result.stderr.splitlines())
    assert "Traceback" not in result.stderr


# --- explain ------------------------------------------------------------------------------


def test_explain_402_is_fix(capsys: pytest.CaptureFixture[str]) -> None:
    """402 insufficient_credits: the caller must fix it, no wait."""
    expected = (
        "verdict: fix\n"
        "wait: none\n"
        "reason: 402 insufficient_credits: the caller must fix the request; not retried\n"
    )
    assert expected == explain(capsys, "402", "insufficient_credits")


def test_explain_409_in_use_waits_one_second(capsys: pytest.CaptureFixture[str]) -> None:
    """409 idempotency_key_in_use retries after the fixed 1.0 s."""
    expected = (
        "verdict: retry\nwait: 1.0 s (fixed)\nreason: 409 idempotency_key_in_use: retry in 1.0s (fixed)\n"
    )
    assert expected == explain(capsys, "409", "idempotency_key_in_use")


def test_explain_409_conflict_is_fix(capsys: pytest.CaptureFixture[str]) -> None:
    """409 idempotency_conflict is the caller's to fix."""
    assert "verdict: fix\n" == explain(capsys, "409", "idempotency_conflict").splitlines(keepends=True)[0]


def test_explain_429_with_retry_after(capsys: pytest.CaptureFixture[str]) -> None:
    """429 queue_full with --retry-after 12 waits exactly 12 s, from Retry-After."""
    expected = (
        "verdict: retry\nwait: 12.0 s (retry_after)\nreason: 429 queue_full: retry in 12.0s (retry_after)\n"
    )
    assert expected == explain(capsys, "429", "queue_full", "--retry-after", "12")


def test_explain_429_accepts_an_http_date(capsys: pytest.CaptureFixture[str]) -> None:
    """--retry-after takes an HTTP-date too; a past one means retry now."""
    out = explain(capsys, "429", "--retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")
    assert "wait: 0.0 s (retry_after)" == out.splitlines()[1]


def test_explain_negative_retry_after_means_now(capsys: pytest.CaptureFixture[str]) -> None:
    """--retry-after -5 is parsed as a value (not an option) and means 0 s."""
    assert "wait: 0.0 s (retry_after)" == explain(capsys, "429", "--retry-after", "-5").splitlines()[1]


def test_explain_503_backoff_with_seed_is_reproducible(capsys: pytest.CaptureFixture[str]) -> None:
    """With --seed the backoff draw is exact and the line names the jitter range it came from."""
    first = explain(capsys, "503", "--attempt", "2", "--seed", "1")
    second = explain(capsys, "503", "--attempt", "2", "--seed", "1")
    assert first == second
    assert "wait: 2.3 s (backoff, jitter range 2.0..4.0 s)" == first.splitlines()[1]
    assert "reason: 503: retry in 2.3s (backoff)" == first.splitlines()[2]


def test_explain_attempt_6_stops(capsys: pytest.CaptureFixture[str]) -> None:
    """--attempt 6 reaches the cap: stop."""
    expected = "verdict: stop\nwait: none\nreason: 503: attempt cap reached (6 retries)\n"
    assert expected == explain(capsys, "503", "--attempt", "6")


def test_explain_retry_after_past_the_budget_stops(capsys: pytest.CaptureFixture[str]) -> None:
    """A Retry-After that ends past the elapsed budget is a stop with the numbers in the reason."""
    out = explain(capsys, "429", "--retry-after", "100", "--elapsed", "30")
    expected = [
        "verdict: stop",
        "wait: none",
        "reason: 429: server asked to wait 100.0s (retry_after) but only 90.0s of the 120.0s budget is left",
    ]
    assert expected == out.splitlines()


def test_explain_body_hints(capsys: pytest.CaptureFixture[str]) -> None:
    """--retryable and --next-action act like the error body's fields."""
    assert "verdict: no_retry" == explain(capsys, "429", "--retryable", "false").splitlines()[0]
    assert "verdict: retry" == explain(capsys, "500", "--retryable", "TRUE", "--seed", "0").splitlines()[0]
    assert "verdict: fix" == explain(capsys, "402", "--retryable", "true").splitlines()[0]
    assert "verdict: poll" == explain(capsys, "503", "--next-action", "poll_job").splitlines()[0]


def test_explain_other_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    """A status outside the table is no_retry; below 400 it is not an error."""
    assert "verdict: no_retry" == explain(capsys, "500").splitlines()[0]
    assert "reason: 200 is not an error" == explain(capsys, "200").splitlines()[2]


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    """--help prints usage naming the four commands and returns 0."""
    assert 0 == main(["--help"])
    assert "{table,explain,demo,status}" in capsys.readouterr().out


# --- bad arguments ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "mentions"),
    [
        ([], "command"),
        (["bogus"], "bogus"),
        (["explain"], "status"),
        (["explain", "abc"], "'abc'"),
        (["explain", "4.5"], "'4.5'"),
        (["explain", "99"], "100..599"),
        (["explain", "600"], "100..599"),
        (["explain", "-1"], "status"),
        (["explain", "429", "--attempt", "-1"], "--attempt"),
        (["explain", "429", "--attempt", "two"], "--attempt"),
        (["explain", "429", "--elapsed", "-3"], "--elapsed"),
        (["explain", "429", "--elapsed", "nan"], "--elapsed"),
        (["explain", "429", "--elapsed", "inf"], "--elapsed"),
        (["explain", "429", "--retryable", "yes"], "--retryable"),
        (["explain", "429", "--seed", "x"], "--seed"),
        (["explain", "429", "--frobnicate"], "--frobnicate"),
        (["explain", "429", "queue_full", "extra"], "extra"),
        (["table", "--wide"], "--wide"),
        (["--frob", "table"], "--frob"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], argv: List[str], mentions: str
) -> None:
    """Bad arguments return 2 with a single error line on stderr that names the problem."""
    assert 2 == main(argv)
    captured = capsys.readouterr()
    assert "" == captured.out
    lines = captured.err.splitlines()
    assert 1 == len(lines)
    assert "error:" in lines[0]
    assert mentions in lines[0]


# --- demo ---------------------------------------------------------------------------------


def a_checkout(root: Path, demo: str) -> Path:
    """A source checkout's shape under ``root``: setup.cfg and ``examples/demo.py`` holding ``demo``."""
    (root / "examples").mkdir()
    (root / "setup.cfg").write_text("[metadata]\nname = sume-urllib3\n", encoding="utf-8")
    script = root / "examples" / "demo.py"
    script.write_text(demo, encoding="utf-8")
    return script


def test_demo_options_reach_the_demo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``demo --scale 0`` runs the checkout's demo script with that scale and the CLI's output stream."""
    script = a_checkout(
        tmp_path, "def run(out, *, scale):\n    out.write(f'scale {scale!r}\\n')\n    return 0\n"
    )
    monkeypatch.setattr("sume_urllib3._cli.DEMO", script)
    out, err = io.StringIO(), io.StringIO()

    assert 0 == run(["demo", "--scale", "0"], Policy(), out, err)
    assert "scale 0.0\n" == out.getvalue()
    assert "" == err.getvalue()


def test_demo_exit_status_is_returned(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The demo's own exit status becomes main's return value."""
    monkeypatch.setattr(
        "sume_urllib3._cli.DEMO", a_checkout(tmp_path, "def run(out, scale):\n    return 1\n")
    )
    assert 1 == main(["demo"])


def test_demo_outside_a_checkout_says_where_the_demo_is(tmp_path: Path) -> None:
    """An installed package has no demo: exit 2, one line naming the repository and the script to run.

    A site-packages folder may hold another project's ``examples/demo.py``: it is not run.
    """
    site = tmp_path / "site-packages"
    shutil.copytree(
        ROOT / "sume_urllib3", site / "sume_urllib3", ignore=shutil.ignore_patterns("__pycache__")
    )
    (site / "examples").mkdir()
    (site / "examples" / "demo.py").write_text("print('another project')\n", encoding="utf-8")

    done = subprocess.run(
        [sys.executable, "-m", "sume_urllib3", "demo"],
        cwd=site,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert 2 == done.returncode
    assert "" == done.stdout
    (line,) = done.stderr.splitlines()
    assert line.startswith("python -m sume_urllib3 demo: ")
    assert "https://github.com/sume/sume-urllib3" in line
    assert "`python examples/demo.py`" in line


def test_demo_refuses_unknown_options() -> None:
    """``demo --fast`` is a usage error: exit 2 with one line on stderr."""
    out, err = io.StringIO(), io.StringIO()

    assert 2 == run(["demo", "--fast"], Policy(), out, err)
    assert 1 == len(err.getvalue().splitlines())
    assert "--fast" in err.getvalue()


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    """``--version`` prints "sume-urllib3 X.Y.Z" and exits 0."""
    assert 0 == main(["--version"])
    assert f"sume-urllib3 {__version__}" == capsys.readouterr().out.strip()


def test_explain_says_when_it_ignored_a_retry_after() -> None:
    """A Retry-After that is not a header value is named as ignored, not silently dropped."""
    out, err = io.StringIO(), io.StringIO()

    assert 0 == run(["explain", "429", "--retry-after", "1e9"], Policy(), out, err)
    assert "note: Retry-After '1e9' is neither delta-seconds nor an HTTP-date; ignored" in out.getvalue()


def test_demo_argument_errors_are_one_line() -> None:
    """`demo --scale 5` exits 2 with a single line on stderr."""
    out, err = io.StringIO(), io.StringIO()

    assert 2 == run(["demo", "--scale", "5"], Policy(), out, err)
    assert 1 == len(err.getvalue().splitlines())


def test_table_names_the_retry_after_spread_when_set() -> None:
    """A policy with retry_after_spread shows it under the caps; the default shows no such line."""
    assert "retry_after_spread" not in render_table(Policy())
    assert "retry_after_spread: up to +4.0 s x 2**attempt on a Retry-After" in render_table(
        Policy(retry_after_spread=4)
    )


def test_the_cli_prints_its_version() -> None:
    """python -m sume_urllib3 --version prints the package version and exits 0."""
    done = subprocess.run(
        [sys.executable, "-m", "sume_urllib3", "--version"], capture_output=True, text=True, timeout=30
    )

    assert 0 == done.returncode
    assert __version__ in done.stdout
