"""Issue 25, symptom by symptom, against a job server written apart from FakeSume (tests/job_server.py).

A wait ends on time: the last poll goes as late as it can and still comes back by the
deadline, a cooldown that ends before the deadline is waited out, any timeout form the
session takes works, and every error names the job's own state. Short waits run in real
time; long ones on a virtual clock that the session's sleeps advance.
"""

from __future__ import annotations

import random
import time
from typing import Any, Callable, Iterator, List, Optional, Tuple

import pytest
import requests
from urllib3.util.timeout import Timeout

from sume_urllib3 import Job, JobFailed, JobTimeout, Policy, SumeRetryError, SumeSession
from sume_urllib3._jobs import LAST_POLL_MARGIN
from sume_urllib3.exceptions import JobError, JobNotCompleted
from sume_urllib3.pacing import Grant
from sume_urllib3.testing import FakeSume, Reply

from .conftest import API_KEY, VirtualTime
from .job_server import JobServer

#: The bottom of the jitter range: every unhinted pause is 0.95 x its delay.
LOWEST: Callable[[], float] = lambda: 0.0  # noqa: E731


@pytest.fixture
def server() -> Iterator[JobServer]:
    """A job server on real time."""
    with JobServer() as running:
        yield running


@pytest.fixture
def vserver(vtime: VirtualTime) -> Iterator[JobServer]:
    """A job server that stamps requests with the test's virtual clock."""
    with JobServer(clock=vtime.clock) as running:
        yield running


def virtual_session(server: JobServer, vtime: VirtualTime, **kwargs: Any) -> SumeSession:
    """A session on the virtual clock (its sleeps advance it), lowest jitter unless given."""
    kwargs.setdefault("rng", LOWEST)
    return SumeSession(API_KEY, base_url=server.url, sleep=vtime.sleep, clock=vtime.clock, **kwargs)


def timed_out(session: SumeSession, clock: Callable[[], float], **wait: Any) -> Tuple[float, JobTimeout]:
    """Wait for job_1 until JobTimeout: (seconds it took on ``clock``, the error)."""
    start = clock()
    with pytest.raises(JobTimeout) as caught:
        session.jobs.wait("job_1", **wait)
    return clock() - start, caught.value


# -- 1. a wait uses its time: the last poll goes as late as it can --------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("timeout", "interval"), [(1.0, 0.3), (2.0, 0.3), (1.0, 1.0)])
def test_a_short_wait_on_real_time_ends_at_its_deadline_and_polls_until_then(
    server: JobServer, timeout: float, interval: float
) -> None:
    """Issue: timeout=2, interval=0.3 ended after 0.75 s. Now JobTimeout comes in [T - interval, T + 0.5]."""
    server.add("job_1", ["processing"])
    with SumeSession(API_KEY, base_url=server.url, rng=LOWEST) as session:
        start = time.monotonic()
        took, error = timed_out(session, time.monotonic, timeout=timeout, interval=interval)

    polls = [at - start for at in server.polls("job_1")]
    assert timeout - max(interval, 0.1) <= took <= timeout + 0.5
    assert polls[-1] >= timeout - max(interval, 0.1)
    assert all(at < timeout for at in polls)  # no poll after the deadline
    assert "processing" == error.job.status
    assert f"and {len(polls)} polls ({timeout:g}s timeout)" in str(error)


def test_the_issues_wait_polls_at_the_growing_pauses_then_once_more_just_before_its_deadline(
    vserver: JobServer, vtime: VirtualTime
) -> None:
    """timeout=2, interval=0.3: polls at 0, 0.285, 0.7125, 1.35375 (x1.5, lowest jitter), then 2 - margin."""
    vserver.add("job_1", ["processing"])
    start = vtime.now

    took, error = timed_out(virtual_session(vserver, vtime), vtime.clock, timeout=2.0, interval=0.3)

    polls = [at - start for at in vserver.polls("job_1")]
    assert [0.0, 0.285, 0.7125, 1.35375, 2.0 - LAST_POLL_MARGIN] == pytest.approx(polls)
    assert took == pytest.approx(2.0 - LAST_POLL_MARGIN)
    assert "after 2.0s and 5 polls (2s timeout): no time is left for another poll" in str(error)


@pytest.mark.parametrize("timeout", [1.0, 2.0, 10.0, 60.0])
@pytest.mark.parametrize("interval", [0.05, 0.3, 1.0, 5.0])
@pytest.mark.parametrize("seed", [None, 7, 2024])
def test_a_never_finishing_job_times_out_within_the_target_and_never_polls_after_it(
    vserver: JobServer, vtime: VirtualTime, timeout: float, interval: float, seed: Optional[int]
) -> None:
    """The issue's target, virtual time: JobTimeout in [T - max(interval, 0.1), T + 0.5], no poll after T."""
    vserver.add("job_1", ["processing"])
    rng = LOWEST if seed is None else random.Random(seed)
    start = vtime.now

    took, _ = timed_out(
        virtual_session(vserver, vtime, rng=rng), vtime.clock, timeout=timeout, interval=interval
    )

    polls = [at - start for at in vserver.polls("job_1")]
    assert timeout - max(interval, 0.1) <= took <= timeout + 0.5
    assert polls[-1] >= timeout - max(interval, 0.1)
    assert all(at < timeout for at in polls)
    gaps = [b - a for a, b in zip(polls, polls[1:])]
    # Never a tight loop: pauses are at least 0.95 x interval (jitter), the last one at least the margin.
    assert all(gap >= min(0.95 * interval, LAST_POLL_MARGIN) - 1e-9 for gap in gaps)


@pytest.mark.slow
def test_a_slow_server_gets_its_last_poll_earlier_so_it_comes_back_in_time(server: JobServer) -> None:
    """Answers take 0.15 s: the last poll starts twice that before the deadline and comes back by it."""
    server.add("job_1", ["processing"], delay=0.15)
    with SumeSession(API_KEY, base_url=server.url, rng=LOWEST) as session:
        start = time.monotonic()
        took, error = timed_out(session, time.monotonic, timeout=1.5, interval=0.3)

    last = server.polls("job_1")[-1] - start
    assert 1.5 - 0.3 - 0.1 <= last <= 1.5 - 0.3 + 0.1
    assert "ran out of time" not in str(error)
    assert 1.5 - 0.3 <= took <= 1.5 + 0.1


# -- 2. a cooldown that ends before the deadline is waited out -------------------------------------


class CooldownFleet:
    """A Fleet (the public protocol only) whose API key is held until ``until`` on ``clock``."""

    def __init__(self, clock: Callable[[], float], until: float) -> None:
        self.clock = clock
        self.until = until
        self.asked: List[float] = []  # time_left of every acquire

    def acquire(
        self, key_id: str, *, time_left: float, retry: Optional[str] = None, not_before: float = 0.0
    ) -> Grant:
        self.asked.append(time_left)
        wait = max(self.until - self.clock(), not_before, 0.0)
        if wait > time_left:
            return Grant(wait=wait, refused=f"cooldown: next turn in {wait:.1f}s")
        return Grant(wait=wait, source="cooldown" if wait else None)

    def release(self, key_id: str, grant: Grant, status: Optional[int], headers: Any) -> None:
        pass


def test_a_cooldown_longer_than_max_elapsed_is_waited_out_when_it_ends_before_the_deadline(
    vserver: JobServer, vtime: VirtualTime
) -> None:
    """Issue: a 130 s cooldown (max_elapsed: 120) ended a 1800 s wait at once. Now the first poll waits."""
    vserver.add("job_1", ["processing", "completed"])
    start = vtime.now
    fleet = CooldownFleet(vtime.clock, until=start + 130)
    session = virtual_session(vserver, vtime, fleet=fleet)
    assert 120 == session.policy.max_elapsed

    job = session.jobs.wait("job_1", timeout=1800)

    polls = [at - start for at in vserver.polls("job_1")]
    assert job.done
    assert [130.0, 130.95] == pytest.approx(polls)
    assert fleet.asked[0] == pytest.approx(1800)  # the poll asked for a turn within the wait's deadline


def test_a_cooldown_after_a_real_429_holds_the_first_poll_not_the_wait(
    vserver: JobServer, vtime: VirtualTime
) -> None:
    """The issue end to end on the session's own fleet: a submit answered 429 Retry-After 130, then a wait."""
    vserver.canned(
        "POST",
        "/v1/runs",
        (429, {"error": {"code": "rate_limit_exceeded", "message": "slow down"}}, {"Retry-After": "130"}),
    )
    vserver.add("job_1", ["processing", "completed"])
    session = virtual_session(vserver, vtime)
    with pytest.raises(SumeRetryError):
        session.post("/runs", json={"script": "hi"})  # 130 s is past max_elapsed: given up, cooldown on
    refused_at = vserver.seen[0].at

    job = session.jobs.wait("job_1", timeout=1800)

    first = vserver.polls("job_1")[0] - refused_at
    assert job.done
    assert 130.0 <= first <= 131.0  # held by the cooldown, released within its spread


def test_a_cooldown_past_the_deadline_ends_the_wait_at_once_and_says_so(
    vserver: JobServer, vtime: VirtualTime
) -> None:
    """No poll can go before the deadline: JobTimeout at once, 0 polls, the message names the turn."""
    vserver.add("job_1", ["processing"])
    start = vtime.now
    session = virtual_session(vserver, vtime, fleet=CooldownFleet(vtime.clock, until=start + 130))

    took, error = timed_out(session, vtime.clock, timeout=100)

    message = str(error)
    assert (0.0, []) == (took, vserver.polls("job_1"))
    assert "0 polls (100s timeout)" in message
    assert "no turn for a poll before the deadline (a poll could go in 130.0s)" in message
    assert "gave up" not in message


def test_a_session_without_per_call_policies_still_waits_out_the_cooldown(
    vserver: JobServer, vtime: VirtualTime
) -> None:
    """A poll not given the wait's deadline is refused with the turn's time; the wait sleeps till then."""

    class NoPerCallPolicy(SumeSession):
        def request(self, method: Any, url: Any, *args: Any, **kwargs: Any) -> requests.Response:
            return super().request(method, url, *args, **kwargs)

    vserver.add("job_1", ["completed"])
    start = vtime.now
    session = NoPerCallPolicy(
        API_KEY,
        base_url=vserver.url,
        sleep=vtime.sleep,
        clock=vtime.clock,
        rng=LOWEST,
        fleet=CooldownFleet(vtime.clock, until=start + 130),
    )

    job = session.jobs.wait("job_1", timeout=1800)

    assert job.done
    assert [130.0] == pytest.approx([at - start for at in vserver.polls("job_1")])


# -- 3. any timeout form the session takes ----------------------------------------------------------


@pytest.mark.parametrize(
    "session_timeout",
    [Timeout(connect=2, read=5), Timeout(total=3), Timeout(connect=2), (2, None), 4, None],
    ids=["Timeout(connect,read)", "Timeout(total)", "Timeout(connect)", "(2, None)", "4", "None"],
)
def test_wait_works_with_every_session_timeout_form(server: JobServer, session_timeout: Any) -> None:
    """Issue: a urllib3.Timeout (which docs/guide/timeouts.md documents) made wait() raise TypeError."""
    server.add("job_1", ["processing", "completed"])
    with SumeSession(API_KEY, base_url=server.url, timeout=session_timeout, rng=LOWEST) as session:
        job = session.jobs.wait("job_1", interval=0.05)

    assert (True, 2) == (job.done, len(server.polls("job_1")))


def test_a_last_poll_cut_by_the_deadline_under_a_urllib3_timeout_is_job_timeout(server: JobServer) -> None:
    """A status answer slower than the time left: JobTimeout naming it, by the deadline, not a 5 s read."""
    server.add("job_1", ["processing"], delay=2.0)
    with SumeSession(
        API_KEY, base_url=server.url, timeout=Timeout(connect=2, read=5), policy=Policy(max_retries=0)
    ) as session:
        took, error = timed_out(session, time.monotonic, timeout=0.3)

    assert took <= 0.3 + 0.5
    assert "the last poll ran out of time" in str(error)
    assert isinstance(error.__cause__, requests.exceptions.Timeout)


# -- 4. result() of a failed job names the job's own code -------------------------------------------


def test_result_of_a_job_that_failed_nsfw_raises_job_failed_with_its_own_code(server: JobServer) -> None:
    """Issue: result() said job_not_completed (the 409's code) where wait() said nsfw. Both say nsfw now."""
    server.add("job_1", ["failed"], error_code="nsfw")
    with SumeSession(API_KEY, base_url=server.url) as session:
        with pytest.raises(JobFailed) as by_result:
            session.jobs.result("job_1")
        with pytest.raises(JobFailed) as by_wait:
            session.jobs.wait("job_1")

    assert ("nsfw", "failed") == (by_result.value.job.error_code, by_result.value.job.status)
    assert "job job_1 ended 'failed': error code nsfw" in str(by_result.value)
    assert "job_not_completed" not in str(by_result.value)
    assert by_wait.value.job.error_code == by_result.value.job.error_code
    assert [("GET", "/v1/jobs/job_1/result"), ("GET", "/v1/jobs/job_1/status")] == [
        (seen.method, seen.path) for seen in server.seen[:2]
    ]


def test_result_of_a_running_job_has_no_error_code(server: JobServer) -> None:
    """The 409 job_not_completed is about the request: the running job carries no error code from it."""
    server.add("job_1", ["processing"])
    with SumeSession(API_KEY, base_url=server.url) as session, pytest.raises(
        JobNotCompleted, match="it is 'processing'"
    ) as caught:
        session.jobs.result("job_1")

    assert (None, "processing") == (caught.value.job.error_code, caught.value.job.status)


# -- 5. cancel() of a finished job names the job's state ---------------------------------------------


@pytest.mark.parametrize(
    ("statuses", "code", "says"),
    [
        (["completed"], None, "it already ended 'completed'; fetch its result with jobs.result"),
        (["failed"], "nsfw", "it already ended 'failed', error code nsfw"),
        (["expired"], None, "it already ended 'expired'"),
    ],
)
def test_cancel_of_a_finished_job_raises_job_error_naming_its_state(
    server: JobServer, statuses: List[str], code: Optional[str], says: str
) -> None:
    """Issue: a SumeRetryError "gave up". Now JobError naming the job's status and the server's answer."""
    server.add("job_1", statuses, error_code=code)
    with SumeSession(API_KEY, base_url=server.url) as session, pytest.raises(JobError) as caught:
        session.jobs.cancel("job_1")

    message = str(caught.value)
    assert not isinstance(caught.value, SumeRetryError)
    assert message.startswith(f"job job_1 cannot be canceled: {says}")
    assert "the server answered HTTP 409 job_not_cancelable" in message
    assert "gave up" not in message
    assert statuses[0] == caught.value.job.status
    assert 1 == sum(seen.method == "POST" for seen in server.seen)  # the cancel is never resent


def test_cancel_stops_a_running_job_and_a_second_cancel_returns_it_canceled(server: JobServer) -> None:
    """A running job is canceled; canceling it again is no error: the job is what the cancel asked for."""
    server.add("job_1", ["processing"])
    with SumeSession(API_KEY, base_url=server.url) as session:
        first = session.jobs.cancel("job_1")
        again = session.jobs.cancel("job_1")

    assert ("canceled", "canceled") == (first.status, again.status)


def test_a_job_wait_the_fleet_cannot_serve_in_time_is_a_job_timeout(
    fake: FakeSume, vtime: VirtualTime
) -> None:
    """A cooldown past the wait's deadline ends the wait with JobTimeout and the last job seen."""
    fake.script("GET", "/v1/other", Reply.error(429, retry_after="120"))
    session = SumeSession(
        API_KEY, base_url=fake.url + "/v1", sleep=vtime.sleep, clock=vtime.clock, rng=random.Random(3),
        raise_on_give_up=False, policy=Policy(max_elapsed=30),
    )
    session.get("/other")

    with pytest.raises(JobTimeout) as info:
        session.jobs.wait(Job("job_1", "processing"), timeout=30)

    assert ("job_1", "processing") == (info.value.job.id, info.value.job.status)
    assert [] == fake.requests_for("GET", "/v1/jobs/job_1/status")
