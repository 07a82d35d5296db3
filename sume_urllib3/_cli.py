"""``python -m sume_urllib3``: print the policy table, explain one decision, run the demo, show the pace."""

from __future__ import annotations

import argparse
import math
import os
import random
import runpy
import sys
import time
from pathlib import Path
from typing import Any, Callable, NoReturn, Optional, Sequence, TextIO

from ._envelope import ErrorEnvelope, parse_retry_after
from ._policy import IN_USE_WAIT, Policy, Rule, Verdict, seconds
from ._util import columns
from ._version import __version__

PROG = "python -m sume_urllib3"
REPOSITORY = "https://github.com/sume/sume-urllib3"
#: ``python -m sume_urllib3 demo`` runs this script of a source checkout.
DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo.py"


class UsageError(Exception):
    """A bad command line; the message is one line for stderr."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that reports errors to its caller instead of exiting."""

    def error(self, message: str) -> NoReturn:
        # argparse would print the whole usage and exit; main() prints one line and returns 2.
        raise UsageError(f"{self.prog}: error: {message}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line and return the exit status (0 ok, 1 a store unreadable, 2 bad arguments)."""
    return run(sys.argv[1:] if argv is None else list(argv), Policy())


def run(
    argv: Sequence[str], policy: Policy, out: Optional[TextIO] = None, err: Optional[TextIO] = None
) -> int:
    """``main`` with the policy and the streams given, so tests can use their own."""
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    try:
        args = _parser().parse_args(list(argv))
        if args.command == "table":
            out.write(render_table(policy))
            return 0
        if args.command == "demo":
            # The demo is an example script of a source checkout (the folder with setup.cfg): an
            # installed package has none, and its site-packages may hold another project's examples/.
            if not (DEMO.is_file() and (DEMO.parents[1] / "setup.cfg").is_file()):
                err.write(
                    f"{PROG} demo: the demo is examples/demo.py in the source repository, not in the "
                    f"installed package: clone {REPOSITORY} and run `python examples/demo.py` there\n"
                )
                return 2
            demo_run: Callable[..., int] = runpy.run_path(str(DEMO), run_name="sume_urllib3_demo")["run"]
            return demo_run(out, scale=args.scale)
        if args.command == "status":
            return show_status(_status_fleet(args), out, err, as_json=args.json, watch=args.watch)
        return explain(args, policy, out)
    except UsageError as exc:
        err.write(f"{exc}\n")
        return 2
    except SystemExit as exc:  # --help prints and exits through argparse
        return exc.code if isinstance(exc.code, int) else 0


def _status_fleet(args: argparse.Namespace) -> Any:
    """The fleet whose store ``status`` reads: only built, so nothing is opened or written yet."""
    from ._errors import ConfigurationError
    from .pacing import HostFleet

    try:
        if args.redis is None:
            return HostFleet(args.file, rate=args.rate)
        from .contrib.redis import RedisFleet

        return RedisFleet(args.redis, rate=args.rate, prefix=args.prefix, timeout=5.0)
    except (ConfigurationError, ImportError) as exc:
        raise UsageError(f"{PROG} status: error: {exc}") from None


def show_status(
    fleet: Any, out: TextIO, err: TextIO, *, as_json: bool, watch: Optional[float],
    base_url: Optional[str] = None, api_key: Optional[str] = None,
) -> int:
    """Print every key's pace ``fleet`` holds, again every ``watch`` seconds until interrupted (1: the
    store unreadable); the origin is named for ``api_key`` at ``base_url`` (None: the environment's)."""
    from .pacing import status

    if base_url is None:
        from ._session import DEFAULT_BASE_URL

        base_url = os.environ.get("SUME_API_BASE_URL") or DEFAULT_BASE_URL
        api_key = os.environ.get("SUME_API_KEY") or None
    try:
        while True:
            try:
                rows = status.read_status(fleet, base_url=base_url, api_key=api_key)
            except Exception as exc:  # the store's own errors (sqlite3, redis, OSError)
                err.write(f"{PROG} status: cannot read {fleet!r}: {type(exc).__name__}: {exc}\n")
                return 1
            if as_json:
                out.write(status.render_json(rows))
            else:
                clear = watch is not None and out.isatty()
                out.write(("\x1b[H\x1b[2J" if clear else "") + f"{fleet!r}, {time.strftime('%H:%M:%S')}\n")
                out.write(status.render_table(rows) + ("\n" if watch is not None and not clear else ""))
            out.flush()
            if watch is None:
                return 0
            time.sleep(watch)
    except KeyboardInterrupt:
        return 0


def render_table(policy: Policy) -> str:
    """The policy's rules as an aligned text table, with the fallback row and the caps."""
    rows = [("status", "code", "verdict", "wait")]
    rows.extend(
        (str(r.status), "any" if r.code is None else r.code, r.verdict.value, _wait_text(r, policy))
        for r in policy.rules
    )
    lines = columns(rows)
    low, high = policy.jitter
    lines += [
        "",
        f"anything else >= 400: {Verdict.NO_RETRY.value}",
        f"max_retries: {policy.max_retries} (at most {policy.max_retries + 1} requests)",
        f"max_elapsed: {_num(policy.max_elapsed)} s",
        f"backoff: base {_num(policy.backoff_base)} s, max {_num(policy.backoff_max)} s, "
        f"jitter {_num(low)}..{_num(high)}",
        f"in_use_wait: {_num(policy.in_use_wait)} s",
        f"trust_body: {str(policy.trust_body).lower()}",
        f"peek_limit: {policy.peek_limit} bytes",
    ]
    if policy.retry_after_jitter:
        lines.append(f"retry_after_jitter: up to +{policy.retry_after_jitter:.0%} on a Retry-After")
    if policy.retry_after_spread:
        lines.append(
            f"retry_after_spread: up to +{_num(policy.retry_after_spread)} s x 2**attempt on a Retry-After"
        )
    return "\n".join(line.rstrip() for line in lines) + "\n"


def explain(args: argparse.Namespace, policy: Policy, out: TextIO) -> int:
    """Print the policy's decision for an ``explain`` command line: verdict, wait (with its source)
    and reason, one per line. A backoff wait is one random draw, so the range it came from is named."""
    hints = None
    if args.retryable is not None or args.next_action is not None:
        hints = ErrorEnvelope(code=args.code, retryable=args.retryable, next_action=args.next_action)
    rng = random.Random(args.seed) if args.seed is not None else None
    decision = policy.decide(
        args.status, args.code, args.retry_after, args.attempt, args.elapsed, hints, rng=rng
    )
    low, high = policy.backoff(args.attempt, lambda: 0.0), policy.backoff(args.attempt, lambda: 1.0)
    drawn = f"{seconds(low, '')}..{seconds(high, '')} s"
    wait = "none"
    if decision.retry and decision.wait is not None:
        jitter = f", jitter range {drawn}" if decision.source == "backoff" else ""
        wait = f"{seconds(decision.wait, '')} s ({decision.source}{jitter})"
    out.write(f"verdict: {decision.verdict.value}\nwait: {wait}\nreason: {decision.reason}\n")
    if args.retry_after is not None and parse_retry_after(args.retry_after) is None:
        out.write(
            f"note: Retry-After {args.retry_after!r} is neither delta-seconds nor an HTTP-date; ignored\n"
        )
    left = policy.max_elapsed - args.elapsed
    varies = decision.verdict in (Verdict.RETRY, Verdict.STOP) and decision.source != "retry_after"
    if args.seed is None and varies and low <= left < high:
        out.write(
            f"note: the backoff is drawn from {drawn} and only "
            f"{seconds(max(left, 0.0), '')} s are left, so the verdict varies; pass --seed N to fix it\n"
        )
    return 0


def _parser() -> _Parser:
    parser = _Parser(prog=PROG, description="Inspect the Sume retry policy.")
    parser.add_argument("--version", action="version", version=f"sume-urllib3 {__version__}")
    commands = parser.add_subparsers(dest="command")
    commands.required = True
    commands.add_parser("table", help="print the active policy table")
    explain = commands.add_parser("explain", help="explain the decision for one error response")
    explain.add_argument("status", type=_status, help="HTTP status, 100..599")
    explain.add_argument("code", nargs="?", default=None, help="error code from the body, e.g. queue_full")
    explain.add_argument("--retry-after", metavar="S", help="Retry-After header value (seconds or HTTP-date)")
    explain.add_argument(
        "--attempt", metavar="N", type=_count, default=0, help="retries already made (default 0)"
    )
    explain.add_argument(
        "--elapsed", metavar="S", type=_elapsed, default=0.0, help="seconds since the first attempt"
    )
    explain.add_argument("--retryable", type=_bool, metavar="true|false", help="the body's retryable field")
    explain.add_argument("--next-action", metavar="X", help="the body's next_action field")
    explain.add_argument("--seed", metavar="N", type=int, help="seed the jitter for a reproducible wait")
    demo = commands.add_parser("demo", help="run scripted scenarios against the embedded fake server")
    demo.add_argument(
        "--scale", metavar="F", type=_scale, default=0.1, help="multiply every wait by F, 0..1 (default 0.1)"
    )
    status = commands.add_parser("status", help="show the pace a host file or Redis fleet holds per API key")
    store = status.add_mutually_exclusive_group()
    store.add_argument("--file", metavar="PATH", help="a HostFleet's file (default: its default path)")
    store.add_argument("--redis", metavar="URL", help="a RedisFleet's Redis, e.g. redis://localhost:6379/0")
    status.add_argument("--prefix", default="sume", help="the RedisFleet's key prefix (default sume)")
    status.add_argument("--rate", help="the rate the fleet is configured with, e.g. 10/s (default: none)")
    status.add_argument("--json", action="store_true", help="one line of JSON per reading")
    status.add_argument(
        "--watch", metavar="S", type=_interval, nargs="?", const=2.0,
        help="read again every S seconds (default 2) until interrupted",
    )
    return parser


def _number(kind: Callable[[str], float], low: float, high: float, what: str) -> Callable[[str], float]:
    """An argparse type: a number of ``kind`` from ``low`` to ``high``, with one clear message otherwise."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            value = math.nan  # fails the test below
        if not (low <= value <= high and (kind is int or math.isfinite(value))):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return value

    return parse


_status = _number(int, 100, 599, "an HTTP status 100..599")
_count = _number(int, 0, math.inf, "an integer >= 0")
_elapsed = _number(float, 0, math.inf, "a number of seconds >= 0")
_scale = _number(float, 0, 1, "a number between 0 and 1")
_interval = _number(float, 0.1, 3600, "a number of seconds from 0.1 to 3600")


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"must be true or false, got {text!r}")
    return lowered == "true"


def _wait_text(rule: Rule, policy: Policy) -> str:
    if rule.verdict is not Verdict.RETRY:
        return "-"
    if rule.wait is None:
        return "Retry-After, else backoff"
    if rule.wait == IN_USE_WAIT:
        return f"in_use_wait ({_num(policy.in_use_wait)} s; larger Retry-After wins)"
    return f"{_num(float(rule.wait))} s (larger Retry-After wins)"


def _num(value: float) -> str:
    # repr keeps "1.0" and "0.25" exact where a fixed precision would round config values.
    return repr(float(value))
