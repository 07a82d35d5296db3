"""``python -m sume_urllib3 demo``: the policy at work against an embedded fake Sume API."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, TextIO, Tuple

from ._cli import _Parser
from ._errors import SumeRetryError
from ._policy import Policy
from ._record import RetryEvent, SumeRecord
from ._session import SumeSession
from .testing._server import FakeSume, Reply

DEMO_KEY = "sk_demo_not_a_real_key"


@dataclass(frozen=True)
class Scenario:
    """One scripted story: a route, what the fake server answers, and what it shows."""

    title: str
    method: str
    path: str
    replies: Tuple[Reply, ...]
    policy: Optional[Policy] = None


SCENARIOS = (
    Scenario(
        "Rate limited: Retry-After is waited exactly, then the job is accepted",
        "POST",
        "/v1/avatars",
        (Reply.error(429, "rate_limit_exceeded", retry_after="2"), Reply(201, json={"id": "av_1"})),
    ),
    Scenario(
        "Service unavailable twice: jittered backoff, the same Idempotency-Key each time",
        "POST",
        "/v1/avatar-videos",
        (
            Reply.error(503, "service_unavailable"),
            Reply.error(503, "service_unavailable"),
            Reply(201, json={"id": "vid_1"}),
        ),
    ),
    Scenario(
        "Insufficient credits: the caller must fix it, so nothing is resent",
        "POST",
        "/v1/models/sume/avatar/v1.0/runs",
        (Reply.error(402, "insufficient_credits", message="top up your credits"),),
    ),
    Scenario(
        "Same key still in use: wait in_use_wait (1 s), then the original result",
        "POST",
        "/v1/jobs",
        (Reply.error(409, "idempotency_key_in_use"), Reply(201, json={"id": "job_1"})),
    ),
    Scenario(
        "Queue full on every attempt: give up at the cap, naming every request id",
        "POST",
        "/v1/runs",
        (Reply.error(503, "queue_full"),),
        Policy(max_retries=3),
    ),
    Scenario(
        "The body says poll: stop and poll the job, never resubmit",
        "GET",
        "/v1/jobs/job_1/result",
        (Reply.error(409, "job_not_completed", next_action="poll_status"),),
    ),
)


class _Timeline:
    """An observer that prints each retry as it happens."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.events: List[RetryEvent] = []

    def on_retry(self, event: RetryEvent) -> None:
        self.events.append(event)
        what = f"{event.status} {event.code or ''}".strip() if event.status else (event.error or "error")
        self.out.write(
            f"   attempt {event.attempt}  {what:<34} {event.request_id or '-':<8} "
            f"wait {event.wait:5.2f}s ({event.wait_source})  key {event.key_prefix or '-'}\n"
        )


def main(argv: Optional[Sequence[str]] = None, out: Optional[TextIO] = None) -> int:
    """Run every scenario against a fresh embedded FakeSume and print what happened."""
    import sys

    stream = out or sys.stdout
    parser = _Parser(prog="python -m sume_urllib3 demo")
    parser.add_argument("--scale", type=float, default=0.1, help="multiply every wait by this (default 0.1)")
    args = parser.parse_args(list(argv or []))
    if not 0 <= args.scale <= 1:  # also refuses nan
        parser.error("--scale must be between 0 and 1")

    def scaled_sleep(seconds: float) -> None:
        time.sleep(seconds * args.scale)

    stream.write(
        f"sume_urllib3 demo: a fake Sume API on 127.0.0.1; waits are scaled x{args.scale:g} "
        "(the numbers shown are the real ones)\n"
    )
    started = time.monotonic()
    timeline = _Timeline(stream)
    with FakeSume() as fake:
        sessions: Dict[Policy, SumeSession] = {}
        for number, scenario in enumerate(SCENARIOS, 1):
            fake.script(scenario.method, scenario.path, *scenario.replies)
            policy = scenario.policy or Policy()
            session = sessions.get(policy)
            if session is None:
                session = SumeSession(
                    DEMO_KEY,
                    base_url=fake.url + "/v1",
                    policy=policy,
                    observers=[timeline],
                    sleep=scaled_sleep,
                )
                sessions[policy] = session
            stream.write(f"\n{number}. {scenario.title}\n   {scenario.method} {scenario.path}\n")
            try:
                response = session.request(
                    scenario.method,
                    scenario.path[len("/v1") :],
                    json={} if scenario.method == "POST" else None,
                )
                record: SumeRecord = getattr(response, "sume")  # noqa: B009 - set by SumeAdapter
                raised = ""
            except SumeRetryError as error:
                record, raised = error.record, f"      raised SumeRetryError: {error}\n"
            final = f"{record.status} {record.code or ''}".strip()
            stream.write(f"   attempt {record.attempts}  {final:<34} {record.request_id or '-':<8}\n")
            keys = {
                r.headers.get("Idempotency-Key") for r in fake.requests_for(scenario.method, scenario.path)
            }
            same = "n/a (GET)" if scenario.method == "GET" else ("yes" if len(keys) == 1 else "NO")
            stream.write(
                f"   => {record.outcome.value}: {record.reason}\n"
                f"      attempts {record.attempts}, waited {sum(record.waits):.2f}s, "
                f"same Idempotency-Key on every attempt: {same}\n{raised}"
            )
        totals = _merge([s.metrics.snapshot() for s in sessions.values()])
        for session in sessions.values():
            session.close()
    stream.write("\ncounters (session.metrics.snapshot()):\n")
    for group in ("outcomes", "retries", "attempts"):
        shown = ", ".join(f"{k}={v}" for k, v in totals[group].items())
        stream.write(f"   {group}: {shown}\n")
    stream.write(f"\ndone in {time.monotonic() - started:.1f}s\n")
    return 0


def _merge(snapshots: List[dict]) -> dict:  # type: ignore[type-arg]
    merged: dict = {"outcomes": {}, "retries": {}, "attempts": {}}  # type: ignore[type-arg]
    for snap in snapshots:
        for group in merged:
            for key, value in snap[group].items():
                merged[group][key] = merged[group].get(key, 0) + value
    return merged
