"""A herd held at a known state, for the pace readers' tests (``status``, ``sume_status``, the admin page).

Through one shared fleet: HOLD_KEY's first request takes WARM seconds (a response time the fleet
learns: an attempt in flight counts for 8 of them, rule 6, past the readings); then its herd of
four threads sends to a loopback FakeSume that holds each request HOLD seconds (four in flight);
BUSY_KEY's one request
meets a 429 with ``Retry-After: 30`` and the server's stated pace (``RateLimit-Policy: 10;w=1``,
9.9/s paced) and gives up (a two-second deadline): a cooldown of 30 s from then, and the stated
pace halved by the 429 (4.95/s learned).
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, List, Optional

from sume_urllib3 import Policy, SumeRetryError, SumeSession
from sume_urllib3.pacing._signals import fleet_key, origin_name
from sume_urllib3.testing import FakeSume, Reply

HOLD_KEY = "sk_test_herd_SECRET_0123456789abcdef"
BUSY_KEY = "sk_test_busy_SECRET_0123456789abcdef"
HERD, HOLD, WARM, RETRY_AFTER = 4, 3.0, 1.5, 30


class HeldHerd:
    """Start with ``with HeldHerd(fleet) as herd``: on entry the state is held as the docstring says."""

    def __init__(self, fleet: Any, hold: float = HOLD) -> None:
        self.fleet, self.hold = fleet, hold
        self.fake = FakeSume()
        self.fake.script("POST", "/v1/held", Reply(201, delay=WARM), Reply(201, delay=hold))
        busy = Reply.error(429, retry_after=RETRY_AFTER, headers={"RateLimit-Policy": "10;w=1"})
        self.fake.script("POST", "/v1/busy", busy)
        self.threads: List[threading.Thread] = []
        self.refused_at: Optional[float] = None  # time.monotonic() when the 429 came
        self.errors: List[BaseException] = []

    @property
    def base_url(self) -> str:
        return self.fake.url + "/v1"

    def key_id(self, api_key: str) -> str:
        return fleet_key(api_key, origin_name(self.base_url))

    def session(self, api_key: str, deadline: float = 120.0) -> SumeSession:
        policy = Policy(max_elapsed=deadline)
        return SumeSession(api_key=api_key, base_url=self.base_url, fleet=self.fleet, policy=policy)

    def _send(self) -> None:
        try:
            with self.session(HOLD_KEY) as session:
                session.post("/held", json={})
        except BaseException as exc:  # pragma: no cover - reported by the test
            self.errors.append(exc)

    def __enter__(self) -> HeldHerd:
        self.fake.start()
        self._send()
        self.threads = [threading.Thread(target=self._send) for _ in range(HERD)]
        for thread in self.threads:
            thread.start()
        deadline = time.monotonic() + 10
        while len(self.fake.requests_for("POST", "/v1/held")) < HERD + 1:
            assert time.monotonic() < deadline, "the herd never reached the server"
            time.sleep(0.01)
        # It gives up at once: 30 s is past its deadline.
        with self.session(BUSY_KEY, deadline=2.0) as session, contextlib.suppress(SumeRetryError):
            session.post("/busy", json={})
        self.refused_at = time.monotonic()
        return self

    def __exit__(self, *exc_info: object) -> None:
        for thread in self.threads:
            thread.join(30)
        self.fake.stop()
