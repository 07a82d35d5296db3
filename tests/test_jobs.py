"""Jobs: get, wait, result and cancel through a session, against FakeSume with virtual time."""

from __future__ import annotations

import contextlib
import logging
import math
import pickle
import random
import time
from typing import Any, Callable, Dict, List, Tuple

import pytest
import requests

from sume_urllib3 import ConfigurationError, Policy, SumeError, SumeRetryError, SumeSession
from sume_urllib3._jobs import (
    LAST_POLL_MARGIN,
    Job,
    JobError,
    JobEvent,
    JobFailed,
    JobNotCompleted,
    Jobs,
    JobTimeout,
    check_job_id,
)
from sume_urllib3.testing import FakeSume, Reply, no_sleep

from .conftest import API_KEY, VirtualTime

MakeSession = Callable[..., SumeSession]
#: rng for Jobs that always picks the bottom of the jitter range: pauses are 0.95 x the delay.
LOWEST: Callable[[], float] = lambda: 0.0  # noqa: E731


class JobRecorder:
    """An observer that keeps every on_job event with the virtual time it arrived."""

    def __init__(self, vtime: VirtualTime) -> None:
        self.vtime = vtime
        self.events: List[Tuple[float, JobEvent]] = []

    def on_job(self, event: JobEvent) -> None:
        self.events.append((self.vtime.now, event))

    @property
    def kinds(self) -> List[str]:
        return [event.kind for _, event in self.events]

    @property
    def poll_times(self) -> List[float]:
        return [at for at, event in self.events if event.kind == "poll"]


@pytest.fixture
def make_session(make_session: MakeSession) -> MakeSession:
    """conftest's sessions, with the jitter source at its lowest unless a test gives one."""

    def make(**kwargs: Any) -> SumeSession:
        kwargs.setdefault("rng", LOWEST)
        return make_session(**kwargs)

    return make


def jobs_for(session: SumeSession, **kwargs: Any) -> Jobs:
    """``session.jobs`` once the core has it; ``Jobs(session, **kwargs)`` when a test overrides a part."""
    if not kwargs and hasattr(type(session), "jobs"):
        jobs: Jobs = session.jobs  # type: ignore[attr-defined]
        return jobs
    return Jobs(session, **kwargs)


# -- wait: the happy path ---------------------------------------------------------------------


def test_wait_polls_until_done_and_returns_the_finished_job(
    fake: FakeSume, make_session: MakeSession, vtime: VirtualTime
) -> None:
    """The job is polled at once, then after 0.95 s and 1.425 s (x1.5, lowest jitter), and returned done."""
    fake.job("job_1", ["queued", "processing", ("completed", {"video_url": "https://cdn/v.mp4"})])

    job = jobs_for(make_session()).wait("job_1")

    assert ("job_1", "completed", True, False) == (job.id, job.status, job.done, job.failed)
    assert "https://cdn/v.mp4" == job.data["video_url"]
    assert "req_3" == job.request_id
    assert [0.95, pytest.approx(1.425)] == vtime.sleeps
    assert ["/v1/jobs/job_1/status"] * 3 == [r.path for r in fake.requests]


def test_request_id_is_the_one_the_server_gave_the_last_poll(
    fake: FakeSume, make_session: MakeSession
) -> None:
    """Job.request_id is the body's request_id of the poll that saw the status."""
    fake.job("job_1", ["completed"])

    job = jobs_for(make_session()).get("job_1")

    assert "req_1" == job.request_id


def test_on_status_is_called_on_the_first_status_and_on_each_change(
    fake: FakeSume, make_session: MakeSession
) -> None:
    """Repeated statuses are reported once; unreadable polls in between report nothing."""
    fake.job(
        "job_1",
        ["queued", "queued", Reply(200, body=b"oops"), "processing", "processing", "completed"],
    )
    seen: List[str] = []

    jobs_for(make_session()).wait("job_1", on_status=lambda job: seen.append(str(job.status)))

    assert ["queued", "processing", "completed"] == seen


def test_pauses_grow_by_half_up_to_max_interval(
    fake: FakeSume, make_session: MakeSession, vtime: VirtualTime
) -> None:
    """Without a server hint the pause is interval x1.5 per poll, capped at max_interval, times the jitter."""
    fake.job("job_1", ["processing"] * 8 + ["completed"])

    jobs_for(make_session()).wait("job_1", interval=2.0, max_interval=10.0)

    delays = [2.0, 3.0, 4.5, 6.75, 10.0, 10.0, 10.0, 10.0]
    assert [pytest.approx(0.95 * d) for d in delays] == vtime.sleeps


def test_jitter_stays_within_a_tenth_below_the_delay(
    fake: FakeSume, make_session: MakeSession, vtime: VirtualTime
) -> None:
    """With a seeded random source, each pause lies in [0.95, 1.0] x its delay and they differ."""
    fake.job("job_1", ["processing"] * 6 + ["completed"])

    jobs_for(make_session(), rng=random.Random(7)).wait("job_1", interval=1.0, max_interval=3.0)

    delays = [1.0, 1.5, 2.25, 3.0, 3.0, 3.0]
    assert all(0.95 * d <= s <= d for s, d in zip(vtime.sleeps, delays))
    assert len({round(s / d, 6) for s, d in zip(vtime.sleeps, delays)}) > 1


# -- server hints -------------------------------------------------------------------------------


def test_retry_after_on_the_status_response_spaces_the_polls(
    fake: FakeSume, make_session: MakeSession, vtime: VirtualTime
) -> None:
    """A Retry-After on a 200 status answer is the next pause, exactly (no jitter, no growth)."""
    fake.job("job_1", ["processing", "processing", "completed"], retry_after=7)

    jobs_for(make_session()).wait("job_1")

    assert [7.0, 7.0] == vtime.sleeps


def test_recommended_poll_interval_in_the_body_spaces_the_polls(
    fake: FakeSume, make_session: MakeSession, vtime: VirtualTime
) -> None:
    """recommended_poll_interval_seconds is used when there is no Retry-After."""
    fake.job("job_1", ["processing", "processing", "completed"], poll_interval=4.5)

    jobs_for(make_session()).wait("job_1")

    assert [4.5, 4.5] == vtime.sleeps


def test_a_hint_below_interval_never_makes_a_tight_loop(
    fake: FakeSume, make_session: MakeSession, vtime: VirtualTime
) -> None:
    """Retry-After: 0 is raised to interval."""
    fake.job("job_1", ["processing", "processing", "completed"], retry_after=0)

    jobs_for(make_session()).wait("job_1", interval=2.0)

    assert [2.0, 2.0] == vtime.sleeps


def test_a_hint_past_the_deadline_ends_the_wait_at_once(
    fake: FakeSume, make_session: MakeSession, vtime: VirtualTime
) -> None:
    """When the server asks for more time than is left, JobTimeout comes now, without sleeping."""
    fake.job("job_1", ["processing"], retry_after=120)

    with pytest.raises(JobTimeout, match=r"server asked to wait 120\.0s more") as caught:
        jobs_for(make_session()).wait("job_1", timeout=60)

    assert [] == vtime.sleeps
    assert ("job_1", "processing") == (caught.value.job.id, caught.value.job.status)


# -- deadline -------------------------------------------------------------------------------------


def test_no_poll_after_the_deadline_and_the_last_one_just_before_it(
    fake: FakeSume, make_session: MakeSession, vtime: VirtualTime
) -> None:
    """A job that never ends: polls stop before timeout, the last one LAST_POLL_MARGIN before it."""
    fake.job("job_1", ["processing"])
    recorder = JobRecorder(vtime)
    session = make_session(observers=[recorder])
    start = vtime.now

    with pytest.raises(JobTimeout) as caught:
        jobs_for(session).wait("job_1", timeout=30)

    times = [t - start for t in recorder.poll_times]
    assert max(times) == pytest.approx(30 - LAST_POLL_MARGIN)
    assert all(t < 30 for t in times)
    assert len(times) == len(fake.requests)
    assert caught.value.job.status == "processing"
    assert "timed_out" == recorder.kinds[-1]


def test_job_timeout_carries_the_last_status_seen_and_says_what_to_do(
    fake: FakeSume, make_session: MakeSession
) -> None:
    """The message names the job, its status, the timeout and that it may still finish."""
    fake.job("job_1", ["queued", "processing"])

    with pytest.raises(JobTimeout) as caught:
        jobs_for(make_session()).wait("job_1", timeout=10)

    message = str(caught.value)
    assert isinstance(caught.value, SumeError)
    assert "job job_1 is still 'processing'" in message
    assert "10s timeout" in message
    assert "wait again later" in message
    assert "processing" == caught.value.job.status


def test_an_unknown_status_keeps_polling_until_the_deadline(
    fake: FakeSume, make_session: MakeSession
) -> None:
    """A status outside the known sets is "still running": JobTimeout carries it."""
    fake.job("job_1", ["warming_up"])

    with pytest.raises(JobTimeout) as caught:
        jobs_for(make_session()).wait("job_1", timeout=20)

    assert ("warming_up", False, False) == (
        caught.value.job.status,
        caught.value.job.done,
        caught.value.job.failed,
    )
    assert len(fake.requests) > 3


@pytest.mark.parametrize(
    "reply",
    [
        Reply(200, body=b"<html>proxy</html>"),
        Reply(200, json={"data": {"id": "job_1"}}),
        Reply(200, json=["processing"]),
        Reply(200, json={"data": {"status": 42}}),
        Reply(200, json={"data": {"status": "\x00\x01"}}),
    ],
    ids=["not-json", "no-status", "not-an-object", "status-not-a-str", "status-not-printable"],
)
def test_a_status_body_without_a_readable_status_is_no_news(
    fake: FakeSume, make_session: MakeSession, reply: Reply
) -> None:
    """Wait polls on through unreadable bodies; the next readable status counts."""
    fake.job("job_1", [reply, reply, "completed"])

    job = jobs_for(make_session()).wait("job_1")

    assert ("completed", 3) == (job.status, len(fake.requests))


def test_a_job_never_readable_times_out_with_status_none_and_says_why(
    fake: FakeSume, make_session: MakeSession
) -> None:
    """JobTimeout after only unreadable answers: status None, and the message says what the polls got."""
    fake.job("job_1", ["queued", Reply(200, body=b"<html>")])
    # The first step is the submit-time status; skip it by reading once.
    session = make_session()
    jobs = jobs_for(session)
    jobs.get("job_1")

    with pytest.raises(JobTimeout, match="without a readable status") as caught:
        jobs.wait("job_1", timeout=8)

    assert caught.value.job.status is None
    assert "of unknown status" in str(caught.value)


def test_get_refuses_a_status_body_it_cannot_read(fake: FakeSume, make_session: MakeSession) -> None:
    """A single read has no later poll to wait for: a clear JobError-family SumeError."""
    fake.script("GET", "/v1/jobs/job_1/status", Reply(200, body=b"<html>"))

    with pytest.raises(SumeError, match="no readable status"):
        jobs_for(make_session()).get("job_1")


def test_the_poll_timeout_is_capped_by_the_time_left(fake: FakeSume, make_session: MakeSession) -> None:
    """A poll that would outlive the deadline is cut by it: JobTimeout, not a 60 s read."""
    fake.job("job_1", [Reply(200, json={"data": {"status": "processing"}}, delay=2.0), "processing"])
    session = make_session(policy=Policy(max_retries=0))
    started = time.monotonic()

    with pytest.raises(JobTimeout, match="ran out of time") as caught:
        jobs_for(session).wait("job_1", timeout=0.05)

    assert time.monotonic() - started < 1.5
    assert isinstance(caught.value.__cause__, requests.exceptions.Timeout)


def test_a_polls_own_retries_end_by_the_deadline(
    fake: FakeSume, make_session: MakeSession, vtime: VirtualTime
) -> None:
    """A 503 asking for 30 s near the end: the policy is not allowed to retry past the deadline."""
    session = make_session()
    fake.job("job_1", ["processing", Reply.error(503, retry_after=30), "completed"])
    start = vtime.now

    with pytest.raises(JobTimeout, match=r"server asked to wait 30\.0s more"):
        jobs_for(session).wait("job_1", timeout=10)

    assert 2 == len(fake.requests)
    assert vtime.now - start < 10


# -- a poll's own errors --------------------------------------------------------------------------


def test_a_503_on_a_poll_is_retried_by_the_policy_not_resubmitted(
    fake: FakeSume, make_session: MakeSession, vtime: VirtualTime
) -> None:
    """The 503 with Retry-After 3 is waited inside the poll; only GET /status is ever sent."""
    fake.job("job_1", ["processing", Reply.error(503, retry_after=3), "completed"])
    session = make_session()

    job = jobs_for(session).wait("job_1")

    assert "completed" == job.status
    assert {("GET", "/v1/jobs/job_1/status")} == {(r.method, r.path) for r in fake.requests}
    assert [0.95, 3.0] == vtime.sleeps
    assert 3 == len(fake.requests)


def test_a_429_on_a_poll_is_retried_after_its_retry_after(
    fake: FakeSume, make_session: MakeSession, vtime: VirtualTime
) -> None:
    """429 rate_limit_exceeded on a poll: the policy waits Retry-After, then the poll goes on."""
    fake.job("job_1", [Reply.error(429, retry_after=5), "completed"])

    job = jobs_for(make_session()).wait("job_1")

    assert ("completed", [5.0]) == (job.status, vtime.sleeps)


def test_a_poll_the_policy_gave_up_on_is_no_news(fake: FakeSume, make_session: MakeSession) -> None:
    """When the policy gives up on a 503 poll, wait does not raise SumeRetryError: it polls on."""
    fake.job("job_1", [Reply.error(503), "completed"])
    session = make_session(policy=Policy(max_retries=0))

    job = jobs_for(session).wait("job_1")

    assert "completed" == job.status
    assert 2 == len(fake.requests)


def test_a_500_answer_is_no_news_and_named_if_the_wait_times_out(
    fake: FakeSume, make_session: MakeSession
) -> None:
    """A 5xx the policy does not retry keeps the wait polling; the timeout names the last answer."""
    fake.job("job_1", ["processing", Reply.error(500)])

    with pytest.raises(JobTimeout, match=r"the last poll got HTTP 500 internal_error") as caught:
        jobs_for(make_session()).wait("job_1", timeout=5)

    assert "processing" == caught.value.job.status


@pytest.mark.parametrize("status", [401, 403, 404])
def test_an_error_polling_cannot_fix_raises_at_once(
    fake: FakeSume, make_session: MakeSession, status: int
) -> None:
    """401/403/404 on a poll: SumeRetryError with the record, after a single request."""
    fake.script("GET", "/v1/jobs/job_1/status", Reply.error(status))

    with pytest.raises(SumeRetryError) as caught:
        jobs_for(make_session()).wait("job_1")

    assert status == caught.value.record.status
    assert 1 == len(fake.requests)


def test_a_409_job_not_completed_on_a_poll_means_keep_waiting(
    fake: FakeSume, make_session: MakeSession
) -> None:
    """A status poll answered 409 job_not_completed is read as "still running" with details.status."""
    fake.script(
        "GET",
        "/v1/jobs/job_1/status",
        Reply.error(409, "job_not_completed", details={"status": "processing"}),
        Reply(200, json={"data": {"status": "succeeded"}}),
    )
    seen: List[Any] = []

    job = jobs_for(make_session()).wait("job_1", on_status=lambda j: seen.append(j.status))

    assert ["processing", "succeeded"] == seen
    assert job.done


# -- failure --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "status", ["failed", "error", "errored", "canceled", "cancelled", "expired", "nsfw", "FAILED"]
)
def test_every_failed_status_raises_job_failed(
    fake: FakeSume, make_session: MakeSession, status: str
) -> None:
    """Failed statuses (any case) end the wait with JobFailed carrying the job."""
    fake.job("job_1", ["processing", status])

    with pytest.raises(JobFailed) as caught:
        jobs_for(make_session()).wait("job_1")

    assert caught.value.job.failed
    assert status == caught.value.job.status


@pytest.mark.parametrize("status", ["complete", "completed", "success", "succeeded", "ready", "Completed"])
def test_every_done_status_returns(fake: FakeSume, make_session: MakeSession, status: str) -> None:
    """Done statuses (any case) end the wait with the job."""
    fake.job("job_1", [status])

    assert jobs_for(make_session()).wait("job_1").done


@pytest.mark.parametrize(
    ("path", "doc"),
    [
        ("data.status", {"data": {"status": "ready"}}),
        ("data.sume_status", {"data": {"sume_status": "ready"}}),
        ("data.job.status", {"data": {"job": {"status": "ready"}}}),
        ("status", {"status": "ready"}),
        ("sume_status", {"sume_status": "ready"}),
        ("job.status", {"job": {"status": "ready"}}),
        ("first wins", {"data": {"status": "processing"}, "status": "ready"}),
    ],
)
def test_the_status_is_read_from_every_place_the_api_puts_it(
    fake: FakeSume, make_session: MakeSession, path: str, doc: Dict[str, Any]
) -> None:
    """The status is read from the first of the places the API's job shapes put it that has one."""
    fake.script("GET", "/v1/jobs/job_1/status", Reply(200, json=doc))

    job = jobs_for(make_session()).get("job_1")

    assert ("processing" if path == "first wins" else "ready") == job.status


def test_job_failed_names_the_sanitized_error_code_and_nothing_else(
    fake: FakeSume, make_session: MakeSession
) -> None:
    """The message names the code; the server's free-text message and URLs stay out of it."""
    error = {"code": "nsfw", "message": f"provider said no, see https://signed.example/x?sig=abc {API_KEY}"}
    fake.job("job_1", ["processing", ("failed", {"error": error})])

    with pytest.raises(JobFailed) as caught:
        jobs_for(make_session()).wait("job_1")

    message = str(caught.value)
    assert "job job_1 ended 'failed': error code nsfw" in message
    assert "signed" not in message
    assert API_KEY not in message
    assert "nsfw" == caught.value.job.error_code


def test_an_error_code_that_is_not_a_plain_token_is_not_echoed(
    fake: FakeSume, make_session: MakeSession
) -> None:
    """A code with spaces or a URL in it is reported as "no error code given"."""
    fake.job("job_1", [("failed", {"error": {"code": f"bad {API_KEY} https://x"}})])

    with pytest.raises(JobFailed, match="no error code given") as caught:
        jobs_for(make_session()).wait("job_1")

    assert API_KEY not in str(caught.value)
    assert caught.value.job.error_code is None


@pytest.mark.parametrize(
    "fields",
    [{"error": "expired_input"}, {"error_code": "expired_input"}, {"error": {"code": "expired_input"}}],
)
def test_the_error_code_is_found_where_jobs_keep_it(
    fake: FakeSume, make_session: MakeSession, fields: Dict[str, Any]
) -> None:
    """error.code, a bare error string and error_code are all read."""
    fake.job("job_1", [("failed", fields)])

    with pytest.raises(JobFailed, match="error code expired_input"):
        jobs_for(make_session()).wait("job_1")


# -- what names the job --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"data": {"job": {"id": "job_7", "status": "queued"}}},
        {"data": {"id": "job_7"}},
        {"job_id": "job_7"},
        {"data": {"job_id": "job_7"}},
        {"error": {"code": "queue_full", "details": {"job_id": "job_7"}}},
        {"error": {"code": "queue_full", "job_id": "job_7"}},
        {"data": {"request_id": "job_7"}},
    ],
    ids=[
        "data.job.id",
        "data.id",
        "job_id",
        "data.job_id",
        "error.details.job_id",
        "error.job_id",
        "request_id",
    ],
)
def test_a_response_names_its_job_in_every_place_design_lists(
    fake: FakeSume, make_session: MakeSession, body: Dict[str, Any]
) -> None:
    """wait(response) polls the job the submit response names."""
    fake.script("POST", "/v1/avatar-videos", Reply(202, json=body))
    fake.job("job_7", ["completed"])
    session = make_session()
    submitted = session.post("/avatar-videos", json={})

    job = jobs_for(session).wait(submitted)

    assert "job_7" == job.id
    assert "/v1/jobs/job_7/status" == fake.requests[-1].path


def test_the_error_body_of_a_poll_outcome_names_the_job(fake: FakeSume, make_session: MakeSession) -> None:
    """A submit the policy ended with "poll, do not resubmit" hands its job to wait: no second POST."""
    fake.script(
        "POST",
        "/v1/avatar-videos",
        Reply.error(409, "request_in_progress", next_action="poll_job", details={"job_id": "job_3"}),
    )
    fake.job("job_3", ["processing", "completed"])
    session = make_session()
    submitted = session.post("/avatar-videos", json={})

    job = jobs_for(session).wait(submitted)

    assert "poll" == submitted.sume.outcome.value
    assert "completed" == job.status
    assert 1 == len(fake.requests_for("POST", "/v1/avatar-videos"))


def test_job_made_by_the_fake_submit_reply_round_trips(fake: FakeSume, make_session: MakeSession) -> None:
    """ScriptedJob.submitted() is a submit answer wait() understands."""
    job = fake.job("job_5", ["queued", "completed"])
    fake.script("POST", "/v1/models/sume/avatar/v1.0/runs", job.submitted())
    session = make_session()

    done = jobs_for(session).wait(session.post("/models/sume/avatar/v1.0/runs", json={}))

    assert ("job_5", "completed") == (done.id, done.status)


@pytest.mark.parametrize(
    "body",
    [
        {"data": {"request_id": "req_1"}},
        {"data": {"video_url": "x"}},
        {"data": {"job": {"id": ""}}},
        {"id": "job_1"},
        None,
    ],
    ids=["request-id-not-a-job", "no-id", "empty-id", "top-level-id", "not-json"],
)
def test_a_response_that_names_no_job_is_refused_before_anything_is_sent(
    fake: FakeSume, make_session: MakeSession, body: Any
) -> None:
    """ConfigurationError naming the places looked at; only the submit was ever sent."""
    reply = Reply(200, json=body) if body is not None else Reply(200, body=b"<html>")
    fake.script("POST", "/v1/avatars", reply)
    session = make_session()
    submitted = session.post("/avatars", json={})

    for method in ("get", "wait", "result", "cancel"):
        with pytest.raises(ConfigurationError, match=r"names no job: looked for data\.job\.id"):
            getattr(jobs_for(session), method)(submitted)

    assert 1 == len(fake.requests)


def test_job_from_response_reads_the_submit_answer_without_sending(
    fake: FakeSume, make_session: MakeSession
) -> None:
    """Job.from_response gives the id (a plain str for a task queue) and the submitted status."""
    fake.script(
        "POST", "/v1/avatar-videos", Reply(202, json={"data": {"job": {"id": "job_4", "status": "queued"}}})
    )
    submitted = make_session().post("/avatar-videos", json={})

    job = Job.from_response(submitted)

    assert ("job_4", "queued", "req_1") == (job.id, job.status, job.request_id)
    assert 1 == len(fake.requests)


def test_a_timeout_before_any_readable_poll_keeps_the_submitted_status(
    fake: FakeSume, make_session: MakeSession
) -> None:
    """wait(response): until a poll is readable, the last status seen is the submit's."""
    fake.script(
        "POST", "/v1/avatar-videos", Reply(202, json={"data": {"job": {"id": "job_4", "status": "queued"}}})
    )
    fake.script("GET", "/v1/jobs/job_4/status", Reply.error(500))
    session = make_session()

    with pytest.raises(JobTimeout) as caught:
        jobs_for(session).wait(session.post("/avatar-videos", json={}), timeout=5)

    assert ("job_4", "queued") == (caught.value.job.id, caught.value.job.status)


def test_a_job_object_is_accepted(fake: FakeSume, make_session: MakeSession) -> None:
    """A Job (say, from get or from a JobTimeout) can be waited on again."""
    fake.job("job_1", ["processing", "completed"])
    jobs = jobs_for(make_session())

    job = jobs.wait(jobs.get("job_1"))

    assert "completed" == job.status


# -- ids and paths --------------------------------------------------------------------------------


def test_path_characters_in_an_id_are_quoted(fake: FakeSume, make_session: MakeSession) -> None:
    """ "a/b?c#d%" is sent as one percent-encoded path segment, never as a path."""
    fake.job("a/b?c#d%", ["completed"])

    job = jobs_for(make_session()).wait("a/b?c#d%")

    assert "a/b?c#d%" == job.id
    assert "/v1/jobs/a%2Fb%3Fc%23d%25/status" == fake.requests[0].path


@pytest.mark.parametrize(
    "bad", ["", ".", "..", "job 1", "job\n1", "\x00", "x" * 257, 42, None, b"job_1"], ids=repr
)
def test_ids_that_cannot_be_a_path_segment_are_refused_before_anything_is_sent(
    fake: FakeSume, make_session: MakeSession, bad: Any
) -> None:
    """Empty, dot segments, whitespace, control characters, too long or not a str: ConfigurationError."""
    jobs = jobs_for(make_session())

    for method in ("get", "wait", "result", "cancel"):
        with pytest.raises(ConfigurationError, match=r"^job"):
            getattr(jobs, method)(bad)

    assert [] == fake.requests


def test_a_refused_id_is_not_echoed() -> None:
    """The error names the length, not the value (a key pasted as an id stays secret)."""
    with pytest.raises(ConfigurationError) as caught:
        check_job_id(API_KEY + " ")

    assert API_KEY not in str(caught.value)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"timeout": 0}, "timeout"),
        ({"timeout": -1}, "timeout"),
        ({"timeout": math.inf}, "timeout"),
        ({"timeout": math.nan}, "timeout"),
        ({"timeout": None}, "timeout"),
        ({"timeout": True}, "timeout"),
        ({"interval": 0}, "interval"),
        ({"max_interval": "20"}, "max_interval"),
        ({"interval": 5, "max_interval": 2}, "max_interval"),
        ({"on_status": "print"}, "on_status"),
    ],
)
def test_bad_wait_arguments_are_refused_before_anything_is_sent(
    fake: FakeSume, make_session: MakeSession, kwargs: Dict[str, Any], field: str
) -> None:
    """Each bad argument gives a ConfigurationError naming it."""
    with pytest.raises(ConfigurationError, match=field):
        jobs_for(make_session()).wait("job_1", **kwargs)

    assert [] == fake.requests


# -- result and cancel ----------------------------------------------------------------------------


def test_result_of_a_done_job_is_its_data_object(fake: FakeSume, make_session: MakeSession) -> None:
    """GET /jobs/{id}/result: the body's data object."""
    fake.job("job_1", [("completed", {"video_url": "https://cdn/v.mp4"})])

    result = jobs_for(make_session()).result("job_1")

    assert {"id": "job_1", "status": "completed", "video_url": "https://cdn/v.mp4"} == result


def test_result_before_the_job_is_done_names_its_status(fake: FakeSume, make_session: MakeSession) -> None:
    """409 job_not_completed becomes JobNotCompleted with the status from details."""
    fake.job("job_1", ["processing"])

    with pytest.raises(JobNotCompleted, match="it is 'processing'; wait for it first") as caught:
        jobs_for(make_session()).result("job_1")

    assert "processing" == caught.value.job.status
    assert 1 == len(fake.requests)


def test_result_of_a_failed_job_raises_job_failed(fake: FakeSume, make_session: MakeSession) -> None:
    """A 409 whose details say the job failed is JobFailed, not "not yet"."""
    fake.script(
        "GET", "/v1/jobs/job_1/result", Reply.error(409, "job_not_completed", details={"status": "expired"})
    )

    with pytest.raises(JobFailed, match="ended 'expired'"):
        jobs_for(make_session()).result("job_1")


def test_result_after_wait(fake: FakeSume, make_session: MakeSession) -> None:
    """The usual pair: wait, then result, with the Job wait returned."""
    fake.job("job_1", ["processing", ("completed", {"url": "u"})])
    jobs = jobs_for(make_session())

    assert "u" == jobs.result(jobs.wait("job_1"))["url"]


def test_a_result_of_many_objects_and_brackets_is_read(fake: FakeSume, make_session: MakeSession) -> None:
    """A transcript of 1,500 segments, its text full of "[laughs]": a wide body, not a deep one.
    The wait sees it complete and the result is every segment (over 1,000 "[" / "{" it was once
    taken for no JSON at all, and the wait polled on until its timeout)."""
    segments = [{"start": i, "text": "[laughs] [music] ok"} for i in range(1_500)]
    fake.job("job_1", ["processing", ("completed", {"segments": segments})])
    jobs = jobs_for(make_session())

    assert segments == jobs.result(jobs.wait("job_1"))["segments"]


def test_a_result_keeps_its_numbers_whole(fake: FakeSume, make_session: MakeSession) -> None:
    """A result is the caller's data: a 40-digit id and a float stay as the server sent them
    (an error body's reader caps long integers; a result must not)."""
    fake.job("job_1", [("completed", {"ledger_id": 10**40 + 1, "ratio": 0.1})])

    result = jobs_for(make_session()).result("job_1")

    assert (10**40 + 1, 0.1) == (result["ledger_id"], result["ratio"])


def test_result_that_is_not_a_json_object_is_a_clear_error(fake: FakeSume, make_session: MakeSession) -> None:
    """A 200 result body that is not a JSON object raises a SumeError naming the job."""
    fake.script("GET", "/v1/jobs/job_1/result", Reply(200, body=b"binary"))

    with pytest.raises(SumeError, match="job job_1: the result response is not a JSON object"):
        jobs_for(make_session()).result("job_1")


def test_cancel_posts_once_with_an_idempotency_key_and_wait_then_fails(
    fake: FakeSume, make_session: MakeSession
) -> None:
    """cancel returns the canceled job; a wait afterwards ends JobFailed 'canceled'."""
    fake.job("job_1", ["processing"])
    jobs = jobs_for(make_session())

    canceled = jobs.cancel("job_1")
    with pytest.raises(JobFailed, match="ended 'canceled'"):
        jobs.wait("job_1")

    cancels = fake.requests_for("POST", "/v1/jobs/job_1/cancel")
    assert ("canceled", True) == (canceled.status, canceled.failed)
    assert 1 == len(cancels)
    assert cancels[0].headers.get("Idempotency-Key")


def test_cancel_of_a_finished_job_names_its_state(fake: FakeSume, make_session: MakeSession) -> None:
    """409 job_already_finished: JobError naming the job's status, read once; the cancel is not resent."""
    fake.job("job_1", ["completed"])

    with pytest.raises(JobError, match="cannot be canceled: it already ended 'completed'") as caught:
        jobs_for(make_session()).cancel("job_1")

    assert "HTTP 409 job_already_finished" in str(caught.value)
    assert isinstance(caught.value.__cause__, SumeRetryError)
    cancels = fake.requests_for("POST", "/v1/jobs/job_1/cancel")
    assert ("completed", 1) == (caught.value.job.status, len(cancels))


# -- targets: poll counts ---------------------------------------------------------------------------


def _polls_for(
    fake: FakeSume, make_session: MakeSession, vtime: VirtualTime, length: float
) -> Tuple[int, float]:
    """Polls and detection delay for a job that completes after `length` s, with default settings."""
    fake.job("job_1", ["processing", "completed"], every=length, clock=vtime.clock)
    recorder = JobRecorder(vtime)
    session = make_session(observers=[recorder], rng=random.Random(1234))
    start = vtime.now
    jobs_for(session).wait("job_1", timeout=length + 120)
    return len(recorder.poll_times), recorder.poll_times[-1] - start - length


@pytest.mark.parametrize("length", [30.0, 600.0, 1800.0])
def test_poll_counts_with_default_settings(
    fake: FakeSume, make_session: MakeSession, vtime: VirtualTime, length: float
) -> None:
    """Eight polls ramp up to max_interval, then one per 19-20 s; the end is seen within one interval."""
    polls, late = _polls_for(fake, make_session, vtime, length)

    assert polls <= 8 + length / (0.95 * 20.0)
    assert 0 <= late <= 20.0


def test_a_ten_minute_job_costs_at_most_40_polls(
    fake: FakeSume, make_session: MakeSession, vtime: VirtualTime
) -> None:
    """The issue's target, for the worst jitter (every pause at its shortest)."""
    fake.job("job_1", ["processing", "completed"], every=600.0, clock=vtime.clock)
    recorder = JobRecorder(vtime)

    jobs_for(make_session(observers=[recorder])).wait("job_1", timeout=720)

    assert len(recorder.poll_times) <= 40


# -- time, metrics and logs -----------------------------------------------------------------------


def test_no_sleep_mode_works_with_real_time_defaults(fake: FakeSume) -> None:
    """Under no_sleep(), a session with real sleep and clock waits instantly; deadlines still hold."""
    fake.job("job_1", ["processing"])
    with SumeSession(API_KEY, base_url=fake.url + "/v1") as session, no_sleep() as recorder:
        started = time.monotonic()
        with pytest.raises(JobTimeout):
            Jobs(session, rng=LOWEST).wait("job_1", timeout=120)

    assert time.monotonic() - started < 5
    assert 110 < recorder.total <= 120
    assert len(recorder.waits) == len(fake.requests) - 1


def test_sleep_clock_and_rng_come_from_the_session_unless_given(
    make_session: MakeSession, vtime: VirtualTime
) -> None:
    """Jobs uses the session's injected parts; explicit arguments win."""
    session = make_session()
    own: Callable[[float], None] = lambda seconds: None  # noqa: E731

    inherited, explicit = Jobs(session), Jobs(session, sleep=own)

    assert (inherited.sleep, inherited.clock) == (vtime.sleep, vtime.clock)
    assert explicit.sleep is own


def test_jobs_refuses_what_is_not_a_session() -> None:
    """Jobs("https://...") is a ConfigurationError naming what it got."""
    with pytest.raises(ConfigurationError, match="Jobs needs a SumeSession, got str"):
        Jobs("https://api.sume.com")  # type: ignore[arg-type]


def test_observers_get_one_event_per_poll_and_one_at_the_end(
    fake: FakeSume, make_session: MakeSession, vtime: VirtualTime
) -> None:
    """on_job(JobEvent): kind "poll" per status read, then "completed" with the poll count."""
    fake.job("job_1", ["queued", "processing", "completed"])
    recorder = JobRecorder(vtime)

    jobs_for(make_session(observers=[recorder])).wait("job_1")

    assert ["poll", "poll", "poll", "completed"] == recorder.kinds
    end = recorder.events[-1][1]
    assert (3, "completed") == (end.polls, end.job.status)
    assert end.elapsed == pytest.approx(0.95 + 1.425)


@pytest.mark.parametrize(
    ("status", "kind", "raised"),
    [("failed", "failed", JobFailed), ("processing", "timed_out", JobTimeout), ("ready", "completed", None)],
)
def test_each_way_a_wait_ends_is_one_event(
    fake: FakeSume, make_session: MakeSession, vtime: VirtualTime, status: str, kind: str, raised: Any
) -> None:
    """Exactly one end event per wait: completed, failed or timed_out."""
    fake.job("job_1", [status])
    recorder = JobRecorder(vtime)

    with pytest.raises(raised) if raised else contextlib.nullcontext():
        jobs_for(make_session(observers=[recorder])).wait("job_1", timeout=10)

    assert [kind] == [k for k in recorder.kinds if k != "poll"]


@pytest.mark.parametrize(
    "ending",
    [Reply.error(404, "job_not_found"), Reply(200, drop="before_headers"), "on_status raises"],
    ids=["404", "connection dropped", "on_status raises"],
)
def test_a_wait_an_error_ends_is_one_error_event_with_every_poll_counted(
    fake: FakeSume, make_session: MakeSession, vtime: VirtualTime, ending: Any
) -> None:
    """An answer polling cannot fix, a poll whose connection failed after the policy's retries, or
    the caller's on_status raising: the wait ends with one "error" event and its INFO line, and
    the poll that ended it is counted like every other."""
    if ending == "on_status raises":
        fake.job("job_1", ["queued"])
    else:
        fake.job("job_1", ["queued", *[ending] * 8])
    recorder = JobRecorder(vtime)
    session = make_session(observers=[recorder], policy=Policy(max_retries=1))

    def on_status(job: Job) -> None:
        if ending == "on_status raises":
            raise RuntimeError("the caller's own bug")

    with pytest.raises((SumeRetryError, RuntimeError)):
        jobs_for(session).wait("job_1", on_status=on_status)

    polls = 1 if ending == "on_status raises" else 2
    assert ["poll"] * polls + ["error"] == recorder.kinds
    counted = session.metrics.snapshot()["jobs"]
    assert (polls, 1) == (counted["polls"], counted["error"])


def test_an_error_whose_body_says_poll_is_no_news(fake: FakeSume, make_session: MakeSession) -> None:
    """A status poll answered by an error whose body says to poll (not job_not_completed): the body
    is trusted over the status, and the wait polls on to the job's end."""
    busy = Reply.error(409, "job_in_progress", next_action="poll")
    fake.job("job_1", ["queued", busy, "completed"])

    assert "completed" == jobs_for(make_session()).wait("job_1").status


def test_a_broken_observer_never_breaks_the_wait(
    fake: FakeSume, make_session: MakeSession, caplog: pytest.LogCaptureFixture
) -> None:
    """An on_job that raises is logged once and ignored."""

    class Broken:
        def on_job(self, event: JobEvent) -> None:
            raise RuntimeError("observer bug")

    fake.job("job_1", ["processing", "processing", "completed"])
    caplog.set_level(logging.WARNING, logger="sume_urllib3")

    job = jobs_for(make_session(observers=[Broken()])).wait("job_1")

    assert job.done
    assert 1 == sum("raised in on_job" in r.getMessage() for r in caplog.records)


def test_one_info_line_per_job_end_never_per_poll(
    fake: FakeSume, make_session: MakeSession, caplog: pytest.LogCaptureFixture
) -> None:
    """Ten polls, one INFO line: job id, outcome, polls, time and status, with sume_* fields."""
    fake.job("job_1", ["processing"] * 9 + [("completed", {"url": "https://signed/?sig=1"})])
    caplog.set_level(logging.DEBUG, logger="sume_urllib3")

    jobs_for(make_session()).wait("job_1")

    lines = [r for r in caplog.records if getattr(r, "sume_event", None) == "job"]
    assert 1 == len(lines)
    assert logging.INFO == lines[0].levelno
    assert lines[0].getMessage().startswith("job job_1 completed after 10 polls in ")
    assert ("job_1", "completed", 10) == (lines[0].sume_job_id, lines[0].sume_outcome, lines[0].sume_polls)  # type: ignore[attr-defined]
    assert all("signed" not in r.getMessage() and API_KEY not in r.getMessage() for r in caplog.records)


def test_a_failed_job_log_line_names_its_code(
    fake: FakeSume, make_session: MakeSession, caplog: pytest.LogCaptureFixture
) -> None:
    """The end line of a failed job carries its sanitized error code."""
    fake.job("job_1", [("failed", {"error": {"code": "nsfw", "message": "details"}})])
    caplog.set_level(logging.INFO, logger="sume_urllib3")

    with pytest.raises(JobFailed):
        jobs_for(make_session()).wait("job_1")

    (line,) = [r for r in caplog.records if getattr(r, "sume_event", None) == "job"]
    assert "job job_1 failed after 1 poll in 0.0s: status 'failed', error code nsfw" == line.getMessage()
    # The template is every wait's, the values apart, so handlers group job lines as one message.
    assert ("job %s %s after %s in %.1fs: status %s%s", "job_1") == (line.msg, line.args[0])  # type: ignore[index]


# -- the objects ----------------------------------------------------------------------------------


def test_job_is_frozen_and_its_repr_leaves_data_out() -> None:
    """Job cannot be changed; repr shows id, status and request id but never data (signed URLs)."""
    job = Job("job_1", "completed", {"url": "https://signed/?sig=1"}, "req_1")

    with pytest.raises(AttributeError):
        job.status = "failed"  # type: ignore[misc]
    assert "Job(id='job_1', status='completed', request_id='req_1')" == repr(job)
    assert hash(job) == hash(Job("job_1", "completed", {}, "req_1"))


@pytest.mark.parametrize("error", [JobFailed, JobTimeout, JobNotCompleted])
def test_job_errors_pickle_with_their_job(error: Any) -> None:
    """A Celery task can pickle the error: message and job survive."""
    original = error("job job_1 is still 'processing'", Job("job_1", "processing", {"a": 1}, "req_1"))

    copy = pickle.loads(pickle.dumps(original))

    assert (str(original), original.job) == (str(copy), copy.job)
    assert isinstance(copy, SumeError)


def test_the_api_key_is_never_taken_for_a_job_id(fake: FakeSume, make_session: MakeSession) -> None:
    """The key pasted where a job id goes would travel in the path (and so into logs): refused,
    without being echoed, and nothing is sent."""
    jobs = jobs_for(make_session())
    with pytest.raises(ConfigurationError, match="the session's API key, not a job id") as caught:
        jobs.wait(API_KEY)
    assert API_KEY not in str(caught.value)
    assert [] == fake.requests


def test_a_timeout_names_the_request_id_of_the_poll_that_ended_the_wait(
    fake: FakeSume, make_session: MakeSession
) -> None:
    """A 429 asking for a pause past the deadline ends the wait: the JobTimeout names that poll's
    request id (the one to give support), not the last readable status's."""
    late = Reply.error(429, "rate_limit_exceeded", retry_after="900", request_id="req_late")
    fake.job("job_1", ["processing", late])
    with pytest.raises(JobTimeout, match=r"request id req_late\)") as caught:
        jobs_for(make_session(policy=Policy(max_retries=0))).wait("job_1", timeout=60)
    assert "processing" == caught.value.job.status
