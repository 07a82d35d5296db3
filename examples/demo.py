"""The retry policy at work against a fake Sume API on 127.0.0.1: no network, no key.

Six scripted requests, a job polled to the end, and a herd of threads with and without pacing,
each told as it happens, then the counters. From a clone of the repository:

    python -m sume_urllib3 demo          # runs this script
    python examples/demo.py --scale 0    # the same, directly; --scale F multiplies every wait

It uses only the public API: ``SumeSession``, the observers, ``LocalFleet``, and
``sume_urllib3.testing.FakeSume`` for the server.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, TextIO, Tuple

from sume_urllib3 import Job, Policy, SumeRetryError, SumeSession, sume_record
from sume_urllib3.observe import JobEvent, RetryEvent, SumeMetrics
from sume_urllib3.pacing import LocalFleet
from sume_urllib3.testing import FakeSume, Reply

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

    def on_retry(self, event: RetryEvent) -> None:
        what = f"{event.status} {event.code or ''}".strip() if event.status else (event.error or "error")
        self.out.write(
            f"   attempt {event.attempt}  {what:<34} {event.request_id or '-':<8} "
            f"wait {event.wait:5.2f}s ({event.wait_source})  key {event.key_prefix or '-'}\n"
        )


@dataclass
class Demo:
    """What every story shares: the fake server, the output, the scaled clock and the counters."""

    fake: FakeSume
    out: TextIO
    scale: float
    metrics: SumeMetrics = field(default_factory=SumeMetrics)

    def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` scaled down, so the demo takes seconds, not minutes."""
        time.sleep(seconds * self.scale)

    def session(
        self, policy: Optional[Policy] = None, *observers: Any, metrics: Optional[SumeMetrics] = None
    ) -> SumeSession:
        """A session on the fake server that prints each retry, and counts into ``metrics`` (by
        default the demo's one). Its fleet runs on the demo's scaled time, so a cooldown lasts as
        long as the scaled sleeps (none at scale 0: time does not pass at all)."""
        scale = self.scale
        timeline: Any = _Timeline(self.out)  # observers with only the hooks they need
        return SumeSession(
            DEMO_KEY,
            base_url=self.fake.url + "/v1",
            policy=policy,
            sleep=self.sleep,
            observers=[timeline, *observers],
            fleet=LocalFleet(clock=lambda: time.monotonic() / scale) if scale > 0 else None,
            metrics=self.metrics if metrics is None else metrics,
        )


def submit_then_wait(demo: Demo) -> None:
    """Submit a generation, then let the session poll the job: one line per status change."""
    out, fake = demo.out, demo.fake
    job = fake.job(
        "job_demo",
        [
            "queued",
            "queued",
            "processing",
            Reply.error(503, "service_unavailable", retry_after="2"),
            "processing",
            ("completed", {"video_url": "https://cdn.example/videos/job_demo.mp4"}),
        ],
    )
    submit = "/v1/models/sume/avatar-video/v1.0/runs"
    fake.script("POST", submit, job.submitted())
    out.write(
        "\nSubmit, then wait for the job: polls spaced x1.5 (a 503 on a poll is retried, "
        f"never resubmitted)\n   POST {submit}, then GET /v1/jobs/job_demo/status\n"
    )
    polls: List[JobEvent] = []

    class _Polls:
        def on_job(self, event: JobEvent) -> None:
            polls.append(event)

    # Counted apart: the counters printed at the end are the scenarios'.
    with demo.session(None, _Polls(), metrics=SumeMetrics()) as session:
        started = time.monotonic()
        submitted = session.post(submit[len("/v1") :], json={"script": "Hello!", "avatar_id": "av_1"})

        def progress(seen: Job) -> None:
            out.write(f"   {time.monotonic() - started:5.2f}s  job {seen.id}: {seen.status}\n")

        done = session.jobs.wait(submitted, on_status=progress)
        result = session.jobs.result(done)
    sent = len(fake.requests_for("POST", submit))
    waited = sum(event.kind == "poll" for event in polls)
    out.write(
        f"   -> {done.status} after {waited} polls ({job.polls} status requests, {sent} submit): "
        f"{result['video_url']}\n"
    )


def herd(demo: Demo, threads: int = 30, quota: str = "20/s", burst: int = 5) -> None:
    """Many threads post at once against a quota, with the fleet pacing them and without."""
    demo.out.write(
        f"\nA herd: {threads} threads post at once against a quota of {quota} (burst {burst}); "
        "real time, not scaled\n"
    )
    for label, fleet in (("paced (a LocalFleet)", LocalFleet()), ("unpaced (fleet=None)", None)):
        with FakeSume(quota=quota, burst=burst) as fake:
            fake.script("POST", "/v1/jobs", Reply(201, json={"id": "job_herd"}))
            accepted = _herd_once(fake, fleet, threads)
            calls, refused = len(fake.requests), fake.quota_state.refused
        demo.out.write(
            f"   {label:<22} {len(accepted)}/{threads} accepted, {calls / threads:.2f} calls per request, "
            f"{refused} 429s, last accepted at {max(accepted, default=0.0):.2f}s\n"
        )


def _herd_once(fake: FakeSume, fleet: Any, threads: int) -> List[float]:
    """Post once from each thread at the same instant; when each accepted post came back."""
    start = threading.Barrier(threads + 1)
    session = SumeSession(DEMO_KEY, base_url=fake.url + "/v1", fleet=fleet, raise_on_give_up=False)
    with session, ThreadPoolExecutor(threads) as pool:

        def post() -> Optional[float]:
            start.wait()
            response = session.post("/jobs", json={"script": "Hello!"})
            return time.monotonic() - began if response.status_code < 400 else None

        posts = [pool.submit(post) for _ in range(threads)]
        began = time.monotonic()
        start.wait()
        return [took for took in (future.result() for future in posts) if took is not None]


def run(out: TextIO, *, scale: float = 0.1) -> int:
    """Tell every scenario and story against a fresh embedded FakeSume; print the counters."""
    out.write(
        f"sume_urllib3 demo: a fake Sume API on 127.0.0.1; waits are scaled x{scale:g} "
        "(waits shown are the policy's, elapsed times are real)\n"
    )
    started = time.monotonic()
    with FakeSume() as fake:
        demo = Demo(fake, out, scale)
        by_policy: Dict[Optional[Policy], SumeSession] = {}
        for number, scenario in enumerate(SCENARIOS, 1):
            if scenario.policy not in by_policy:
                by_policy[scenario.policy] = demo.session(scenario.policy)
            _tell(demo, number, scenario, by_policy[scenario.policy])
        for session in by_policy.values():
            session.close()
        submit_then_wait(demo)  # the longer stories
        herd(demo)
    totals = demo.metrics.snapshot()
    out.write("\ncounters (session.metrics.snapshot()):\n")
    for group in ("outcomes", "retries", "attempts"):
        shown = ", ".join(f"{k}={v}" for k, v in totals[group].items())
        out.write(f"   {group}: {shown}\n")
    out.write(f"\ndone in {time.monotonic() - started:.1f}s\n")
    return 0


def _tell(demo: Demo, number: int, scenario: Scenario, session: SumeSession) -> None:
    """Send one scripted scenario's request and print its attempts and outcome."""
    out, fake = demo.out, demo.fake
    fake.script(scenario.method, scenario.path, *scenario.replies)
    out.write(f"\n{number}. {scenario.title}\n   {scenario.method} {scenario.path}\n")
    started = time.monotonic()
    raised = ""
    try:
        record = sume_record(
            session.request(
                scenario.method,
                scenario.path[len("/v1") :],
                json={} if scenario.method == "POST" else None,
            )
        )
    except SumeRetryError as error:
        record, raised = error.record, f"      raised SumeRetryError: {error}\n"
    assert record is not None  # every response a SumeSession returns carries its record
    took = time.monotonic() - started
    final = f"{record.status} {record.code or ''}".strip()
    out.write(f"   attempt {record.attempts}  {final:<34} {record.request_id or '-':<8}\n")
    keys = {r.headers.get("Idempotency-Key") for r in fake.requests_for(scenario.method, scenario.path)}
    same = "n/a (GET)" if scenario.method == "GET" else ("yes" if len(keys) == 1 else "NO")
    out.write(
        f"   => {record.outcome.value}: {record.reason}\n"
        f"      attempts {record.attempts}, policy waits {sum(record.waits):.2f}s "
        f"(slept {sum(record.waits) * demo.scale:.2f}s, call took {took:.2f}s), "
        f"same Idempotency-Key on every attempt: {same}\n{raised}"
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python examples/demo.py [--scale F]``: the demo on standard output."""
    parser = argparse.ArgumentParser(
        prog="python examples/demo.py", description="The Sume retry policy against a fake Sume API."
    )
    parser.add_argument(
        "--scale", metavar="F", type=float, default=0.1, help="multiply every wait by F, 0..1 (default 0.1)"
    )
    scale: float = parser.parse_args(argv).scale
    if not 0 <= scale <= 1:
        parser.error(f"argument --scale: must be a number between 0 and 1, got {scale!r}")
    return run(sys.stdout, scale=scale)


if __name__ == "__main__":
    sys.exit(main())
