"""A herd on real sockets: 60 threads of one process post at once against a 10 req/s quota.

The quota server runs in a process of its own (``--serve``): GCRA per API key, 10 req/s
with a burst of 10; every reply carries ``RateLimit-Limit/-Remaining/-Reset`` (and, with
``--policy``, ``RateLimit-Policy: 10;w=1``); a request over the quota gets 429 with
``Retry-After`` (whole seconds to the next turn) and no work is done. It writes status
line, headers and body in one send, counts every call and executes each admitted
``Idempotency-Key`` (counting executions per key, so a job run twice would show).

Each column runs a fresh server and a fresh client process (``--client``), so the
process-wide fleet starts knowing nothing: 60 threads share one default
``SumeSession`` (its retry budget, the process-wide ``LocalFleet``) and post once each
at the same instant. "paced" is ``SumeSession(key)``; "unpaced" is
``SumeSession(key, fleet=None)``.

Run ``python benchmarks/herd.py`` (``--write`` to regenerate ``benchmarks/RESULTS-herd.md``
and ``benchmarks/results/herd.json``, both header sets in one file). Bounded: every process
is killed after 150 s.
"""

from __future__ import annotations

import argparse
import hashlib
import http.server
import json
import math
import os
import socketserver
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import _results  # noqa: E402

THREADS = 60
RATE, BURST = 10.0, 10
TARGETS = {"succeeded": THREADS, "max_calls_per_request": 1.5, "max_last_success_s": 9.0}
API_KEY = "sk_herd_benchmark_key"
LIMIT = 150.0  # seconds any child process may live
PACED, UNPACED = "paced (default SumeSession)", "unpaced (fleet=None)"

# ------------------------------------------------------------------------------- server


class QuotaState:
    """GCRA per API key plus the counts the report needs; one lock, the server is tiny."""

    def __init__(self, rate: float, burst: int, policy: bool) -> None:
        self.step, self.burst, self.policy = 1.0 / rate, burst, policy
        self.lock = threading.Lock()
        self.tat: Dict[str, float] = {}
        self.calls = self.throttled = 0
        self.attempts: Dict[str, int] = {}  # per Idempotency-Key
        self.executions: Dict[str, int] = {}
        self.first: Optional[float] = None
        self.last_success = 0.0

    def admit(self, key: str, idem: str) -> Dict[str, Any]:
        """Spend a turn of ``key`` for one call carrying ``idem``; the reply's status and headers."""
        with self.lock:
            now = time.monotonic()
            if self.first is None:
                self.first = now
            self.calls += 1
            self.attempts[idem] = self.attempts.get(idem, 0) + 1
            tat = max(self.tat.get(key, now), now)
            ok = tat - now <= (self.burst - 1) * self.step + 1e-9
            if ok:
                tat += self.step
                self.tat[key] = tat
                self.executions[idem] = self.executions.get(idem, 0) + 1
                self.last_success = now - self.first
            else:
                self.throttled += 1
        ahead = tat - now
        headers = {
            "RateLimit-Limit": str(self.burst),
            "RateLimit-Remaining": str(max(0, math.floor(self.burst - ahead / self.step + 1e-9))),
            "RateLimit-Reset": str(max(0, math.ceil(ahead - 1e-9))),
        }
        if self.policy:
            headers["RateLimit-Policy"] = f"{self.burst};w={self.burst * self.step:g}"
        if not ok:
            headers["Retry-After"] = str(max(1, math.ceil(ahead - (self.burst - 1) * self.step - 1e-9)))
        return {"status": 201 if ok else 429, "headers": headers}

    def stats(self) -> Dict[str, Any]:
        """What the server saw, as JSON."""
        with self.lock:
            return {
                "calls": self.calls,
                "throttled": self.throttled,
                "attempts": dict(self.attempts),
                "executions": dict(self.executions),
                "last_success": self.last_success,
            }


class Handler(http.server.BaseHTTPRequestHandler):
    """POST /v1/jobs under the quota; GET /stats for the report."""

    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        key = hashlib.sha256((self.headers.get("x-api-key") or "").encode()).hexdigest()
        answer = self.server.state.admit(key, self.headers.get("Idempotency-Key") or "-")
        if answer["status"] == 201:
            body = json.dumps({"id": "job_" + (self.headers.get("Idempotency-Key") or "")[:8]})
        else:
            body = json.dumps(
                {
                    "error": {"code": "rate_limit_exceeded", "message": "10 per second", "details": {}},
                    "request_id": "req_herd",
                }
            )
        self._send(answer["status"], answer["headers"], body.encode())

    def do_GET(self) -> None:
        self._send(200, {}, json.dumps(self.server.state.stats()).encode())

    def _send(self, status: int, headers: Dict[str, str], body: bytes) -> None:
        reason = "Created" if status == 201 else "Too Many Requests" if status == 429 else "OK"
        head = [
            f"HTTP/1.1 {status} {reason}",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
        ]
        head += [f"{name}: {value}" for name, value in headers.items()]
        # Status line, headers and body in one send: no Nagle/delayed-ACK stall between them.
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    request_queue_size = 128


def serve(policy: bool) -> None:
    """Serve on a free loopback port; print it; stop when stdin closes or after LIMIT seconds."""
    server = Server(("127.0.0.1", 0), Handler)
    server.state = QuotaState(RATE, BURST, policy)  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(server.server_address[1], flush=True)
    stopper = threading.Thread(target=sys.stdin.read, daemon=True)
    stopper.start()
    stopper.join(LIMIT)
    server.shutdown()


# ------------------------------------------------------------------------------- client


def client(port: int, paced: bool) -> None:
    """Post once from each of THREADS threads at the same instant; print one JSON result."""
    sys.path.insert(0, ROOT)
    from sume_urllib3 import SumeSession

    base = f"http://127.0.0.1:{port}/v1"
    session = (
        SumeSession(API_KEY, base_url=base, raise_on_give_up=False)
        if paced
        else SumeSession(API_KEY, base_url=base, raise_on_give_up=False, fleet=None)
    )
    results: List[Dict[str, Any]] = []
    lock = threading.Lock()
    start = threading.Barrier(THREADS + 1)
    began = [0.0]

    def post() -> None:
        start.wait()
        response = session.post("/jobs", json={"prompt": "herd"})
        record = response.sume  # type: ignore[attr-defined]
        with lock:
            results.append(
                {
                    "status": response.status_code,
                    "outcome": str(record.outcome),
                    "attempts": record.attempts,
                    "key": record.idempotency_key,
                    "elapsed": time.monotonic() - began[0],
                    "reason": record.reason,
                }
            )

    threads = [threading.Thread(target=post) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    began[0] = time.monotonic()
    start.wait()
    for thread in threads:
        thread.join(LIMIT)
    print(json.dumps(results))


# ------------------------------------------------------------------------------- driver


def run(paced: bool, policy: bool) -> Dict[str, Any]:
    """One column: a fresh server process and a fresh client process."""
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve"] + (["--policy"] if policy else []),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        out = subprocess.run(
            [sys.executable, __file__, "--client", str(port)] + (["--paced"] if paced else []),
            capture_output=True,
            text=True,
            timeout=LIMIT,
            check=True,
        )
        results = json.loads(out.stdout)
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5) as reply:
            stats = json.loads(reply.read())
    finally:
        server.kill()
        server.wait()
    return summarize(results, stats)


def summarize(results: List[Dict[str, Any]], stats: Dict[str, Any]) -> Dict[str, Any]:
    """The report's numbers for one column."""
    ok = [r for r in results if r["status"] < 400]
    keys = [r["key"] for r in results]
    attempts = stats["attempts"]
    executions = stats["executions"]
    same_key = all(attempts.get(r["key"], 0) == r["attempts"] for r in results)
    gave_up = [r for r in results if r["status"] >= 400]
    return {
        "requests": len(results),
        "succeeded": len(ok),
        "calls": stats["calls"],
        "calls_per_request": stats["calls"] / max(len(results), 1),
        "throttled": stats["throttled"],
        "last_success": max((r["elapsed"] for r in ok), default=0.0),
        "server_last_success": stats["last_success"],
        "end": max((r["elapsed"] for r in results), default=0.0),
        "distinct_keys": len(set(keys)) == len(keys),
        "executed_once": all(n == 1 for n in executions.values()) and len(executions) == len(ok),
        "same_key_every_attempt": same_key and set(attempts) == set(keys),
        "gave_up_reason": gave_up[0]["reason"] if gave_up else "",
    }


ROWS = (
    ("succeeded", "succeeded (of 60)", "{}"),
    ("calls_per_request", "server calls per request", "{:.2f}"),
    ("throttled", "429s", "{}"),
    ("last_success", "last success (s, client)", "{:.2f}"),
    ("end", "last request ended (s)", "{:.2f}"),
    ("executed_once", "every job executed exactly once", "{}"),
    ("same_key_every_attempt", "same Idempotency-Key on every attempt", "{}"),
)


def table(columns: Dict[str, Dict[str, Any]]) -> str:
    """The columns side by side."""
    names = list(columns)
    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for key, label, fmt in ROWS:
        lines.append(f"| {label} | " + " | ".join(fmt.format(columns[n][key]) for n in names) + " |")
    return "\n".join(lines)


def checks(paced: Dict[str, Any]) -> List[Tuple[bool, str]]:
    """The issue's targets for the paced column: (met, what) each."""
    return [
        (
            paced["succeeded"] == TARGETS["succeeded"],
            f"{paced['succeeded']}/{THREADS} succeed (target {TARGETS['succeeded']}/{THREADS})",
        ),
        (
            paced["calls_per_request"] <= TARGETS["max_calls_per_request"],
            f"{paced['calls_per_request']:.2f} calls per request"
            f" (target <= {TARGETS['max_calls_per_request']:g})",
        ),
        (
            paced["last_success"] <= TARGETS["max_last_success_s"],
            f"last success {paced['last_success']:.2f} s (target <= {TARGETS['max_last_success_s']:g} s)",
        ),
        (
            paced["executed_once"] and paced["same_key_every_attempt"],
            "every job executed exactly once, same key",
        ),
    ]


def targets(paced: Dict[str, Any]) -> List[str]:
    """The issue's targets for the paced column, as the report's lines."""
    return [f"- {'PASS' if ok else 'FAIL'}: {text}" for ok, text in checks(paced)]


def column_figures(column: Dict[str, Any]) -> Dict[str, Any]:
    """One column for ``results/herd.json``: counts as counted, seconds and ratios to 4 digits."""
    return {
        "succeeded": column["succeeded"],
        "total": column["requests"],
        "calls": column["calls"],
        "calls_per_request": column["calls_per_request"],
        "429s": column["throttled"],
        "last_success_s": column["last_success"],
        "server_last_success_s": column["server_last_success"],
        "last_request_ended_s": column["end"],
        "executed_once": column["executed_once"],
        "same_key_every_attempt": column["same_key_every_attempt"],
        "distinct_keys": column["distinct_keys"],
        "gave_up_reason": column["gave_up_reason"],
    }


def figures(runs: Dict[bool, Dict[str, Dict[str, Any]]]) -> Dict[str, Any]:
    """Everything ``--write`` records: the scenario, then both header sets with both columns each."""
    window = BURST / RATE
    out: Dict[str, Any] = {
        "processes": 1,
        "threads": THREADS,
        "quota": {"rate_per_s": RATE, "burst": BURST, "window_s": window},
        "targets": dict(TARGETS),
        "runs": {},
    }
    for policy, columns in runs.items():
        out["runs"]["ratelimit_policy" if policy else "ratelimit"] = {
            "policy_sent": policy,
            "policy_header": f"{BURST};w={window:g}" if policy else None,
            "paced": column_figures(columns[PACED]),
            "unpaced": column_figures(columns[UNPACED]),
            "paced_targets_met": all(ok for ok, _ in checks(columns[PACED])),
        }
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Serve, run a client, or drive both columns and print the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--paced", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--policy", action="store_true", help=argparse.SUPPRESS)  # server: RateLimit-Policy
    parser.add_argument(
        "--write",
        action="store_true",
        help="write benchmarks/RESULTS-herd.md and benchmarks/results/herd.json",
    )
    args = parser.parse_args(argv)
    internal = args.serve or args.client is not None or args.paced
    if args.write and internal:
        parser.error("--write is for the full report, not a --serve or --client process")
    if args.policy and not args.serve:
        # The report always runs both header sets; an ignored flag would look like a partial run.
        parser.error("--policy is for the --serve process; the report runs with and without it")
    if args.serve:
        serve(args.policy)
        return 0
    if args.client is not None:
        client(args.client, args.paced)
        return 0

    sections = []
    runs: Dict[bool, Dict[str, Dict[str, Any]]] = {}
    for policy in (False, True):
        headers = "RateLimit-Limit/Remaining/Reset" + (" + RateLimit-Policy: 10;w=1" if policy else "")
        columns = {
            PACED: run(paced=True, policy=policy),
            UNPACED: run(paced=False, policy=policy),
        }
        runs[policy] = columns
        report = table(columns)
        lines = "\n".join(targets(columns[PACED]))
        reason = columns[UNPACED]["gave_up_reason"]
        section = f"### Replies carry {headers}\n\n{report}\n\nTargets (paced):\n\n{lines}\n"
        if reason:
            section += f'\nAn unpaced request that gave up: "{reason}"\n'
        print(section)
        sections.append(section)
    if args.write:
        with open(os.path.join(HERE, "RESULTS-herd.md"), "w", encoding="utf-8") as f:
            f.write(_page("\n".join(sections)))
        print("wrote benchmarks/RESULTS-herd.md")
        _results.write("herd", figures(runs))
    return 0


def _page(body: str) -> str:
    return f"""# A herd on real sockets

Generated by `python benchmarks/herd.py --write` (real time on loopback; numbers move a
little between runs). A quota server in its own process admits 10 requests per second per
API key (GCRA, burst 10) and answers 429 with `Retry-After` and RateLimit headers otherwise;
{THREADS} threads of one client process share one default `SumeSession` and post a job each
at the same instant. Each column is a fresh server and a fresh client process. "Exactly once"
is the server's count of executions per `Idempotency-Key`; "same key" compares its count of
attempts per key with each request's record.

{body}"""


if __name__ == "__main__":
    sys.exit(main())
