"""Never run, only type-checked by mypy --strict: the public API as a user would write it."""

from __future__ import annotations

import random
from typing import List, Optional

import requests
import urllib3

from sume_urllib3 import (
    ANY,
    ConfigurationError,
    Decision,
    Outcome,
    Policy,
    Rule,
    SumeAdapter,
    SumeRecord,
    SumeRetry,
    SumeRetryError,
    SumeSession,
    Verdict,
)
from sume_urllib3.observe import RetryEvent, SumeMetrics
from sume_urllib3.pacing import RetryBudget
from sume_urllib3.testing import FakeSume, Reply, SleepRecorder, no_sleep


class Collect:
    """An observer: any object with on_retry and/or on_outcome."""

    def __init__(self) -> None:
        self.events: List[RetryEvent] = []

    def on_retry(self, event: RetryEvent) -> None:
        self.events.append(event)

    def on_outcome(self, record: SumeRecord) -> None:
        print(record.outcome.value, record.attempts, record.request_ids)


def policy_use() -> Optional[float]:
    policy = Policy(rules=(Rule(429, ANY, Verdict.RETRY),), max_retries=3, jitter=(0.0, 1.0))
    decision: Decision = policy.decide(503, "queue_full", "2", 0, 0.0, rng=random.Random(1))
    assert decision.verdict in (Verdict.RETRY, Verdict.STOP)
    return policy.decide(429, None, "12", 1).wait


def session_use() -> None:
    try:
        session = SumeSession(
            "sk_x",
            base_url="https://api.sume.com/v1",
            auth_header="bearer",
            policy=Policy(max_elapsed=30.0),
            timeout=(3, 30),
            observers=[Collect()],
            retry_budget=RetryBudget.shared(),
        )
    except ConfigurationError as error:
        raise SystemExit(str(error)) from error
    try:
        response = session.post("/avatars", json={"name": "Ada"})
    except SumeRetryError as error:
        record: SumeRecord = error.record
        assert record.outcome is Outcome.GAVE_UP
        return
    metrics: SumeMetrics = session.metrics
    counts: int = metrics.snapshot()["outcomes"]["ok"]
    print(response.status_code, counts)


def verbs_use(session: SumeSession) -> None:
    """requests' arguments, typed as requests types them, and policy= on every verb."""
    brief = session.policy.replace(max_elapsed=10)
    session.get("/jobs", {"page": 2}, headers={"X-Tenant": "acme"}, timeout=urllib3.Timeout(read=5))
    session.post("/avatars", None, {"name": "Ada"}, params={"dry": "1"}, timeout=(5, None), policy=brief)
    session.put("/avatars/1", b"x", json=None, stream=True, policy=None)
    session.patch("/avatars/1", data={"a": "b"}, cookies={"c": "d"}, allow_redirects=False)
    session.delete("/avatars/1", auth=("user", "secret"), policy=brief)
    session.head("/jobs", verify="/etc/ssl/ca.pem", proxies={"https": "http://127.0.0.1:3128"})
    session.options("/jobs", hooks={"response": lambda r, *a, **k: None}, cert=("c.pem", "k.pem"))
    session.request("GET", "/jobs", {"page": 2}, json=[1], files={"f": b"x"}, policy=brief)


def transport_use() -> None:
    http = urllib3.PoolManager(retries=SumeRetry(Policy(max_retries=2), total=5))
    plain = requests.Session()
    plain.mount("https://", SumeAdapter(raise_on_give_up=False))
    print(http, plain)


def testing_use() -> None:
    with FakeSume() as fake, no_sleep() as recorder:
        fake.script("GET", "/v1/me", Reply.error(503, "queue_full", retry_after="1"), 200)
        SumeSession("sk", base_url=fake.url + "/v1").get("/me")
        waits: List[float] = recorder.waits
        assert isinstance(recorder, SleepRecorder)
        print(waits, fake.requests[0].headers["x-api-key"])
