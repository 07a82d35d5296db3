"""Fuzz the parsers and the policy with generated and mutated inputs; count every exception.

Targets and what counts as a failure:

* ``parse_envelope(headers, body, limit=..., decoded=...)``: any exception, or an envelope whose
  fields are not short printable strings / booleans.
* ``parse_retry_after(value, now)``: any exception, or a result that is not None or a finite
  number between 0 and ``RETRY_AFTER_CEILING``.
* ``Policy.decide`` / ``Policy.decide_error`` on random valid policies: any exception, a RETRY
  whose wait is not finite, negative or ends past ``max_elapsed``, or a FIX row retried.

Inputs come from ``random.Random(seed)``: raw random bytes and text, random JSON documents,
and mutations (bit flips, splices, truncations, token insertions) of valid envelopes,
Retry-After values and gzip/deflate bodies, including decompression bombs. With
``--atheris SECONDS`` and atheris installed, parse_envelope is also fuzzed coverage-guided.

Run ``python benchmarks/fuzz.py`` (``--inputs`` to scale, ``--seed``); ``--write`` records the
default run in ``benchmarks/results/fuzz.json``. Exits 1 (and writes nothing) on any failure.
"""

from __future__ import annotations

import argparse
import email.utils
import gzip
import importlib
import json
import math
import os
import random
import sys
import time
import traceback
import zlib
from collections import Counter
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the shared _results

import _results

from sume_urllib3._envelope import RETRY_AFTER_CEILING, ErrorEnvelope, parse_envelope, parse_retry_after
from sume_urllib3._policy import Policy, Rule, Verdict

CODES = [
    "rate_limit_exceeded",
    "queue_full",
    "service_unavailable",
    "idempotency_key_in_use",
    "idempotency_conflict",
    "insufficient_credits",
    "bad_request",
    "unauthorized",
    "not_found",
    "job_not_completed",
    "maintenance",
]
NEXT_ACTIONS = ["poll", "poll_job", "poll_status", "resubmit", "wait", "contact_support"]
STATUSES = [400, 401, 402, 404, 409, 429, 500, 502, 503, 504]
TOKENS = [
    b'"',
    b"{",
    b"}",
    b"[",
    b"]",
    b":",
    b",",
    b"\\",
    b"\\u0000",
    b"\\ud800",
    b"1e999",
    b"-",
    b"null",
    b"true",
    b"false",
    b"NaN",
    b"Infinity",
    b"\xff",
    b"\x00",
    b"\x1f\x8b",
    b"9" * 40,
    b'"error"',
    b'"code"',
    b'"retryable"',
    b'"next_action"',
    b'"request_id"',
    b"\n",
    b"\r\n",
    b"\xe2\x80\xae",
]
INPUTS = 120_000
SEED = 20240611
TEXT_ALPHABET = "0123456789+-. ,:;GMTWedSunJanOctxyz\t\u00a0\u0663\uff15\u2003e_"


# -- generators -----------------------------------------------------------------------------------


def random_text(rng: random.Random, longest: int = 40) -> str:
    alphabet = (
        TEXT_ALPHABET if rng.random() < 0.7 else "".join(chr(rng.randrange(0x20, 0x3000)) for _ in range(20))
    )
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, longest)))


def random_json(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 4 or roll < 0.45:
        return rng.choice(
            [
                None,
                True,
                False,
                rng.randrange(-(10**6), 10**6),
                rng.random() * 10 ** rng.randrange(-5, 300),
                random_text(rng),
                rng.choice(CODES),
                10 ** rng.randrange(20, 400),
            ]
        )
    if roll < 0.7:
        return [random_json(rng, depth + 1) for _ in range(rng.randrange(0, 4))]
    keys = ["error", "code", "request_id", "retryable", "next_action", "message", "details"]
    return {
        rng.choice(keys) if rng.random() < 0.8 else random_text(rng, 8): random_json(rng, depth + 1)
        for _ in range(rng.randrange(0, 6))
    }


def valid_envelope(rng: random.Random) -> bytes:
    error: Dict[str, Any] = {"code": rng.choice(CODES), "message": random_text(rng, 60), "details": {}}
    if rng.random() < 0.5:
        error["retryable"] = rng.random() < 0.5
    if rng.random() < 0.3:
        error["next_action"] = rng.choice(NEXT_ACTIONS)
    doc: Dict[str, Any] = {"error": error, "request_id": f"req_{rng.randrange(10**9)}"}
    if rng.random() < 0.3:  # the flat shape some surfaces use
        doc = {**error, "request_id": doc["request_id"]}
    if rng.random() < 0.1:
        doc["_padding"] = " " * rng.randrange(0, 70_000)
    return json.dumps(doc).encode()


def mutate(data: bytes, rng: random.Random, others: List[bytes]) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randrange(1, 5)):
        op = rng.randrange(8)
        at = rng.randrange(len(buf) + 1)
        if op == 0 and buf:
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        elif op == 2:
            buf[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8)))
        elif op == 3 and buf:
            end = min(len(buf), at + rng.randrange(1, 32))
            del buf[at:end]
        elif op == 4:
            buf[at:at] = rng.choice(TOKENS)
        elif op == 5:
            del buf[at:]
        elif op == 6 and others:
            other = rng.choice(others)
            cut = rng.randrange(len(other) + 1)
            buf = buf[:at] + bytearray(other[cut:])
        elif op == 7 and buf:
            end = min(len(buf), at + rng.randrange(1, 16))
            buf[at:at] = buf[at:end] * rng.randrange(1, 50)
    return bytes(buf)


def compress(data: bytes, coding: str, rng: random.Random) -> bytes:
    if coding in ("gzip", "x-gzip"):
        return gzip.compress(data, compresslevel=rng.choice([1, 6, 9]), mtime=0)
    if coding == "deflate":
        if rng.random() < 0.5:
            return zlib.compress(data)
        squeeze = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
        return squeeze.compress(data) + squeeze.flush()
    return data


BOMB = gzip.compress(b"\0" * 20_000_000, compresslevel=9, mtime=0)


def envelope_input(rng: random.Random, corpus: List[bytes]) -> Tuple[Mapping[Any, Any], bytes, int, bool]:
    headers: Dict[Any, Any] = {}
    roll = rng.random()
    if roll < 0.2:
        body = bytes(rng.randrange(256) for _ in range(int(rng.expovariate(1 / 200))))
    elif roll < 0.55:
        body = mutate(valid_envelope(rng), rng, corpus)
    elif roll < 0.75:
        coding = rng.choice(["gzip", "x-gzip", "deflate"])
        plain = valid_envelope(rng) if rng.random() < 0.7 else mutate(valid_envelope(rng), rng, corpus)
        body = compress(plain, coding, rng)
        if rng.random() < 0.4:
            body = mutate(body, rng, corpus)
        headers["Content-Encoding"] = (
            coding if rng.random() < 0.9 else rng.choice(["br", "zstd", "gzip, br", "x"])
        )
    elif roll < 0.9:
        body = json.dumps(random_json(rng), default=str).encode()
    else:
        body = rng.choice(
            [
                b"[" * rng.randrange(1000, 70_000),
                b'{"error": {"code": ' + b"9" * rng.randrange(10, 5000) + b"}}",
                BOMB[: rng.randrange(10, len(BOMB))],
                b'{"error": {"code": "' + b"\\u0041" * rng.randrange(1, 20_000) + b'"}}',
                b'{"request_id": "' + bytes(rng.randrange(0x80, 0x100) for _ in range(40)) + b'"}',
            ]
        )
        if body.startswith(b"\x1f\x8b"):
            headers["Content-Encoding"] = "gzip"
    for name in ("x-sume-request-id", "x-request-id", "Content-Type"):
        if rng.random() < 0.3:
            headers[name] = rng.choice([random_text(rng), random_text(rng).encode("utf-8"), 42, None])
    if rng.random() < 0.05:
        headers[rng.randrange(100)] = random_text(rng)
    limit = 65536 if rng.random() < 0.8 else rng.randrange(0, 4096)
    return headers, body, limit, rng.random() < 0.1


def retry_after_input(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.3:
        return random_text(rng, 30)
    if roll < 0.5:
        sign = rng.choice(["", "", "+", "-"])
        number = str(rng.randrange(0, 10 ** rng.randrange(1, 40)))
        if rng.random() < 0.3:
            number += "." + str(rng.randrange(1000))
        pad = rng.choice(["", " ", "  ", "\t"])
        value = pad + sign + number + pad
    elif roll < 0.75:
        value = email.utils.formatdate(rng.uniform(-3e9, 2.5e11), usegmt=rng.random() < 0.8)
    else:
        value = rng.choice(["soon", "", "1.5", "-5", "+3", "1e999", "Wed, 21 Oct 2015 07:28:00 GMT", "120"])
    if rng.random() < 0.5:
        value = mutate(value.encode("latin-1", "replace"), rng, []).decode("latin-1")
    if rng.random() < 0.05:
        value = value * rng.randrange(2, 200)
    return value.encode("latin-1", "replace") if rng.random() < 0.1 else value


def random_policy(rng: random.Random) -> Policy:
    rules: Any = Policy().rules
    if rng.random() < 0.3:
        rules = tuple(
            Rule(
                rng.choice(STATUSES),
                rng.choice([None, *CODES[:5]]),
                rng.choice(list(Verdict)),
                rng.choice([None, rng.uniform(0, 100), "in_use_wait"]),
            )
            for _ in range(rng.randrange(0, 8))
        )
    low = rng.uniform(0, 1)
    return Policy(
        rules=rules,
        max_retries=rng.randrange(0, 12),
        max_elapsed=rng.choice([rng.uniform(0.001, 10), 120.0, rng.uniform(10, 1e6)]),
        backoff_base=rng.uniform(0, 50),
        backoff_max=rng.uniform(0, 1000),
        jitter=(low, rng.uniform(max(low, 1e-6), 1.0)),
        in_use_wait=rng.uniform(0, 60),
        trust_body=rng.random() < 0.8,
    )


def decide_input(rng: random.Random, corpus: List[bytes]) -> Dict[str, Any]:
    retry_after: Any
    roll = rng.random()
    if roll < 0.3:
        retry_after = None
    elif roll < 0.7:
        retry_after = retry_after_input(rng)
    elif roll < 0.85:
        retry_after = rng.choice([rng.uniform(-100, 1e4), math.inf, -math.inf, math.nan, 0.0, 1e308])
    else:
        retry_after = rng.choice([rng.randrange(-100, 10**6), 10 ** rng.randrange(1, 30)])
        if rng.random() < 0.01:
            retry_after = 10**400  # an int beyond float range
    headers, body, limit, decoded = envelope_input(rng, corpus)
    hints: Optional[ErrorEnvelope] = parse_envelope(headers, body, limit=limit, decoded=decoded)
    if rng.random() < 0.3:
        hints = ErrorEnvelope(
            code=rng.choice([None, *CODES]),
            retryable=rng.choice([None, True, False]),
            next_action=rng.choice([None, *NEXT_ACTIONS]),
        )
    elif rng.random() < 0.1:
        hints = None
    return {
        "status": rng.choice(STATUSES) if rng.random() < 0.8 else rng.randrange(-1000, 10**6),
        "code": rng.choice([None, *CODES]) if rng.random() < 0.8 else random_text(rng),
        "retry_after": retry_after,
        "attempt": rng.randrange(0, 15) if rng.random() < 0.95 else rng.randrange(-10, 10**6),
        "elapsed": rng.uniform(0, 300) if rng.random() < 0.9 else rng.choice([0.0, 1e9, rng.uniform(0, 1e6)]),
        "hints": hints,
        "seed": rng.randrange(2**32),
    }


# -- checks -------------------------------------------------------------------------------------------


def check_envelope(envelope: ErrorEnvelope) -> Optional[str]:
    for name, longest in (("code", 200), ("request_id", 200), ("next_action", 200), ("message", 500)):
        value = getattr(envelope, name)
        if value is not None and not (
            isinstance(value, str) and 0 < len(value) <= longest and value.isprintable()
        ):
            return f"{name}={value!r:.80}"
    if envelope.retryable not in (None, True, False):
        return f"retryable={envelope.retryable!r}"
    return None


def check_decision(policy: Policy, decision: Any, elapsed: float, status: int, code: Any) -> Optional[str]:
    if decision.retry:
        wait = decision.wait
        if wait is None or not math.isfinite(wait) or wait < 0 or elapsed + wait > policy.max_elapsed + 1e-9:
            return f"RETRY wait={wait!r} elapsed={elapsed!r} max_elapsed={policy.max_elapsed!r}"
        rule = policy.match(status, code)
        if rule is not None and rule.verdict is Verdict.FIX:
            return f"FIX row {status} {code!r} retried"
    return None


def check_parse_envelope(headers: Mapping[Any, Any], body: bytes, limit: int, decoded: bool) -> Optional[str]:
    return check_envelope(parse_envelope(headers, body, limit=limit, decoded=decoded))


def check_retry_after(value: Any, now: float) -> Optional[str]:
    seconds = parse_retry_after(value, lambda: now)
    if seconds is None or (math.isfinite(seconds) and 0.0 <= seconds <= RETRY_AFTER_CEILING):
        return None
    return f"seconds={seconds!r}"


def check_decide_error(
    policy: Policy, kind: str, attempt: int, elapsed: float, safe: bool, seed: int
) -> Optional[str]:
    decision = policy.decide_error(kind, attempt, elapsed, replay_safe=safe, rng=random.Random(seed))
    if decision.retry and (kind not in ("connect", "read") or (kind == "read" and not safe)):
        return f"unsafe={kind} retried"
    return check_decision(policy, decision, elapsed, 0, None)


def check_decide(policy: Policy, args: Dict[str, Any]) -> Optional[str]:
    decision = policy.decide(
        args["status"],
        args["code"],
        args["retry_after"],
        args["attempt"],
        args["elapsed"],
        args["hints"],
        rng=random.Random(args["seed"]),
    )
    return check_decision(policy, decision, args["elapsed"], args["status"], args["code"])


class Target:
    """Counts inputs, exceptions and invariant violations for one function under test."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.inputs = 0
        self.seconds = 0.0
        self.exceptions: Counter[str] = Counter()
        self.violations: Counter[str] = Counter()
        self.examples: Dict[str, str] = {}

    def run(self, check: Callable[..., Optional[str]], *args: Any) -> None:
        """Call ``check(*args)``; count an exception or a returned problem, keep the first example."""
        self.inputs += 1
        started = time.perf_counter()
        try:
            problem = check(*args)
        except Exception as exc:
            self.seconds += time.perf_counter() - started
            kind = f"{type(exc).__name__}: {str(exc)[:80]}"
            self.exceptions[kind] += 1
            if kind not in self.examples:
                where = traceback.extract_tb(exc.__traceback__)[-1]
                place = f"{os.path.basename(where.filename)}:{where.lineno}"
                self.examples[kind] = f"{check.__name__}{_short(args)} raised at {place}"
            return
        self.seconds += time.perf_counter() - started
        if problem is not None:
            kind = problem.split("=")[0]
            self.violations[kind] += 1
            self.examples.setdefault(kind, f"{problem} for {check.__name__}{_short(args)}")


def _short(args: Tuple[Any, ...]) -> str:
    def compact(arg: Any) -> Any:
        if isinstance(arg, Policy):
            return _Raw(f"Policy(max_retries={arg.max_retries}, max_elapsed={arg.max_elapsed:g}, ...)")
        if isinstance(arg, dict):
            return {k: v for k, v in arg.items() if k != "hints"}
        return arg

    text = repr(tuple(compact(a) for a in args))
    return text if len(text) <= 300 else text[:300] + "..."


class _Raw(str):
    def __repr__(self) -> str:
        return str(self)


def fuzz(inputs: int, seed: int) -> List[Target]:
    rng = random.Random(seed)
    corpus = [valid_envelope(rng) for _ in range(50)]
    corpus += [compress(valid_envelope(rng), "gzip", rng) for _ in range(10)]
    share = {"parse_envelope": 0.4, "parse_retry_after": 0.3, "Policy.decide / decide_error": 0.3}
    targets = {name: Target(name) for name in share}
    policies = [Policy()] + [random_policy(rng) for _ in range(60)]

    envelope = targets["parse_envelope"]
    for _ in range(int(inputs * share["parse_envelope"])):
        headers, body, limit, decoded = envelope_input(rng, corpus)
        envelope.run(check_parse_envelope, headers, body, limit, decoded)
        if rng.random() < 0.05 and len(body) < 4096:
            corpus[rng.randrange(len(corpus))] = body  # successful inputs seed later mutations

    retry_after = targets["parse_retry_after"]
    for _ in range(int(inputs * share["parse_retry_after"])):
        now = rng.choice([time.time(), 0.0, rng.uniform(0, 4e9)])
        retry_after.run(check_retry_after, retry_after_input(rng), now)

    decide = targets["Policy.decide / decide_error"]
    for i in range(int(inputs * share["Policy.decide / decide_error"])):
        policy = rng.choice(policies)
        if i % 4 == 3:
            kind = rng.choice(["connect", "read", "other", random_text(rng, 8)])
            decide.run(
                check_decide_error,
                policy,
                kind,
                rng.randrange(0, 15),
                rng.uniform(0, 300),
                rng.random() < 0.5,
                rng.randrange(2**32),
            )
        else:
            decide.run(check_decide, policy, decide_input(rng, corpus))
    return list(targets.values())


def run_atheris(seconds: int) -> str:
    try:
        atheris: Any = importlib.import_module("atheris")
    except ImportError:
        return "atheris is not installed: coverage-guided run skipped"

    def one(data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        coding = fdp.PickValueInList(["", "gzip", "deflate", "br"])
        body = fdp.ConsumeBytes(fdp.remaining_bytes())
        problem = check_envelope(parse_envelope({"Content-Encoding": coding}, body))
        if problem:
            raise AssertionError(problem)

    atheris.Setup([sys.argv[0], f"-max_total_time={seconds}"], one)
    atheris.Fuzz()
    return f"atheris ran {seconds} s"  # pragma: no cover - Fuzz() exits the process


def figures(targets: List[Target], seed: int, wall: float) -> Dict[str, Any]:
    """The results file's figures: totals, then inputs, exceptions and violations per target."""
    return {
        "seed": seed,
        "inputs": sum(t.inputs for t in targets),
        "exceptions": sum(sum(t.exceptions.values()) for t in targets),
        "invariant_violations": sum(sum(t.violations.values()) for t in targets),
        "wall_seconds": wall,
        "targets": {
            t.name: {
                "inputs": t.inputs,
                "exceptions": sum(t.exceptions.values()),
                "invariant_violations": sum(t.violations.values()),
                "call_seconds": t.seconds,
            }
            for t in targets
        },
    }


def main() -> int:
    """Fuzz every target, print the counts, write them with ``--write``."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--inputs", type=int, default=INPUTS, help="total generated inputs (>= 100,000)")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument(
        "--atheris", type=int, default=0, metavar="SECONDS", help="also run atheris this long"
    )
    parser.add_argument("--write", action="store_true", help="write benchmarks/results/fuzz.json")
    args = parser.parse_args()
    _results.refuse_partial(parser, args, "inputs", "seed", "atheris")

    started = time.perf_counter()
    targets = fuzz(args.inputs, args.seed)
    wall = time.perf_counter() - started
    total = sum(t.inputs for t in targets)
    failures = sum(sum(t.exceptions.values()) + sum(t.violations.values()) for t in targets)

    print(f"### Fuzz: {total:,} generated inputs (seed {args.seed})\n")
    rate = total / wall
    print(f"Python {sys.version.split()[0]}; {wall:.1f} s wall, {rate:,.0f} inputs/s including generation.\n")
    print("| target | inputs | exceptions | invariant violations | inputs/s (call only) |")
    print("|---|---:|---:|---:|---:|")
    for t in targets:
        calls = t.inputs / t.seconds if t.seconds else float("inf")
        raised, broken = sum(t.exceptions.values()), sum(t.violations.values())
        print(f"| {t.name} | {t.inputs:,} | {raised} | {broken} | {calls:,.0f} |")
    for t in targets:
        for kind, count in list(t.exceptions.items()) + list(t.violations.items()):
            print(f"\n- **{t.name}**: {count} x `{kind}`; first: `{t.examples[kind]}`")
    if args.atheris:
        print("\n" + run_atheris(args.atheris))
    print(f"\n**result:** {'FAIL' if failures else 'pass'}: {failures} failing inputs")
    if failures:
        if args.write:
            print("nothing written: a failed run is not a figure")
        return 1
    if args.write:
        _results.write("fuzz", figures(targets, args.seed, wall))
    return 0


if __name__ == "__main__":
    sys.exit(main())
