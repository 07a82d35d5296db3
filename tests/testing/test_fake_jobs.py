"""FakeSume.job: scripted job lifecycles on a real loopback socket, read with plain requests."""

from __future__ import annotations

from typing import Any, Dict, Iterator

import pytest
import requests

from sume_urllib3.testing import FakeSume, Reply

from ..conftest import VirtualTime


@pytest.fixture
def http() -> Iterator[requests.Session]:
    """A plain requests session (no retries), so the fake's answers are seen as sent."""
    with requests.Session() as session:
        yield session


def _status(http: requests.Session, fake: FakeSume, job_id: str = "job_1") -> Any:
    response = http.get(f"{fake.url}/v1/jobs/{job_id}/status")
    return response.json()["data"]["status"]


def test_status_advances_one_step_per_poll_and_stays_on_the_last(
    fake: FakeSume, http: requests.Session
) -> None:
    """Each status poll sees the next step; the last one repeats."""
    job = fake.job("job_1", ["queued", "processing", "completed"])

    seen = [_status(http, fake) for _ in range(5)]

    assert ["queued", "processing", "completed", "completed", "completed"] == seen
    assert 5 == job.polls
    assert seen == job.history


def test_the_status_body_names_the_job_and_carries_a_request_id(
    fake: FakeSume, http: requests.Session
) -> None:
    """The status answer is {"data": {"id", "status", ...fields}, "request_id"}, matching the header."""
    fake.job("job_1", [("processing", {"progress": 40})])

    response = http.get(f"{fake.url}/v1/jobs/job_1/status")

    body = response.json()
    assert {"id": "job_1", "status": "processing", "progress": 40} == body["data"]
    assert body["request_id"] == response.headers["x-sume-request-id"]


def test_fields_of_a_step_stay_on_the_job_object_from_then_on(fake: FakeSume, http: requests.Session) -> None:
    """Fields given with a status are merged into every later status and into the result."""
    fake.job("job_1", [("processing", {"progress": 10}), ("completed", {"video_url": "https://v/1.mp4"})])
    http.get(f"{fake.url}/v1/jobs/job_1/status")

    last = http.get(f"{fake.url}/v1/jobs/job_1/status").json()["data"]
    result = http.get(f"{fake.url}/v1/jobs/job_1/result").json()["data"]

    assert {"id": "job_1", "status": "completed", "progress": 10, "video_url": "https://v/1.mp4"} == last
    assert last == result


def test_result_is_409_job_not_completed_naming_the_status_until_done(
    fake: FakeSume, http: requests.Session
) -> None:
    """Before a done status, /result answers 409 job_not_completed with details.status."""
    fake.job("job_1", ["queued", ("completed", {"url": "u"})])

    early = http.get(f"{fake.url}/v1/jobs/job_1/result")
    http.get(f"{fake.url}/v1/jobs/job_1/status")  # sees "queued"; the next step is now current
    done = http.get(f"{fake.url}/v1/jobs/job_1/result")

    assert 409 == early.status_code
    assert "job_not_completed" == early.json()["error"]["code"]
    assert {"status": "queued"} == early.json()["error"]["details"]
    assert (200, "u") == (done.status_code, done.json()["data"]["url"])


def test_reading_the_result_or_the_status_property_does_not_count_as_a_poll(
    fake: FakeSume, http: requests.Session
) -> None:
    """Only status requests advance a per-poll job."""
    job = fake.job("job_1", ["queued", "processing"])

    http.get(f"{fake.url}/v1/jobs/job_1/result")
    http.get(f"{fake.url}/v1/jobs/job_1/result")

    assert ("queued", 0) == (job.status, job.polls)


def test_a_reply_step_is_served_verbatim_and_keeps_the_status(fake: FakeSume, http: requests.Session) -> None:
    """A Reply in the lifecycle answers that one poll (a 503, a broken body) without changing the status."""
    job = fake.job(
        "job_1", ["processing", Reply.error(503, retry_after=4), Reply(200, body=b"<html>"), "completed"]
    )

    answers = [http.get(f"{fake.url}/v1/jobs/job_1/status") for _ in range(4)]

    assert [200, 503, 200, 200] == [r.status_code for r in answers]
    assert "4" == answers[1].headers["Retry-After"]
    assert b"<html>" == answers[2].content
    assert ["processing", "HTTP 503", "HTTP 200", "completed"] == job.history


def test_retry_after_and_poll_interval_hints_ride_on_every_status_answer(
    fake: FakeSume, http: requests.Session
) -> None:
    """retry_after= sets the Retry-After header, poll_interval= the body's recommended interval."""
    fake.job("job_1", ["processing"], retry_after=7, poll_interval=2.5)

    response = http.get(f"{fake.url}/v1/jobs/job_1/status")

    assert "7" == response.headers["Retry-After"]
    assert 2.5 == response.json()["data"]["recommended_poll_interval_seconds"]


def test_cancel_makes_a_running_job_canceled_for_good(fake: FakeSume, http: requests.Session) -> None:
    """POST /cancel answers the canceled job, and every later poll says canceled."""
    fake.job("job_1", ["processing", "completed"])

    canceled = http.post(f"{fake.url}/v1/jobs/job_1/cancel")

    assert {"id": "job_1", "status": "canceled"} == canceled.json()["data"]
    assert ["canceled", "canceled"] == [_status(http, fake), _status(http, fake)]


def test_cancel_of_a_finished_job_is_409(fake: FakeSume, http: requests.Session) -> None:
    """A job that already ended cannot be canceled: 409 job_already_finished naming its status."""
    fake.job("job_1", ["completed"])

    response = http.post(f"{fake.url}/v1/jobs/job_1/cancel")

    assert 409 == response.status_code
    assert "job_already_finished" == response.json()["error"]["code"]
    assert {"status": "completed"} == response.json()["error"]["details"]


def test_time_based_jobs_advance_with_the_given_clock(
    fake: FakeSume, http: requests.Session, vtime: VirtualTime
) -> None:
    """With every=, the step is (clock - created) // every, however often it is polled."""
    fake.job("job_1", ["queued", "processing", "completed"], every=10, clock=vtime.clock)

    first, second = _status(http, fake), _status(http, fake)
    vtime.sleep(10)
    third = _status(http, fake)
    vtime.sleep(25)
    fourth = _status(http, fake)

    assert ["queued", "queued", "processing", "completed"] == [first, second, third, fourth]


def test_ids_are_matched_in_their_quoted_form(fake: FakeSume, http: requests.Session) -> None:
    """A job id with path characters lives at its percent-encoded route, never at the raw one."""
    fake.job("a/b?c", ["processing"])

    quoted = http.get(f"{fake.url}/v1/jobs/a%2Fb%3Fc/status")
    raw = http.get(f"{fake.url}/v1/jobs/a/b/status")

    assert (200, 404) == (quoted.status_code, raw.status_code)


def test_submitted_names_the_job_as_a_submit_response_does(fake: FakeSume, http: requests.Session) -> None:
    """job.submitted() answers a submit route with data.job.id and the first status."""
    job = fake.job("job_9", ["queued", "completed"])
    fake.script("POST", "/v1/avatar-videos", job.submitted())

    body: Dict[str, Any] = http.post(f"{fake.url}/v1/avatar-videos", json={}).json()

    assert {"job": {"id": "job_9", "status": "queued"}} == body["data"]
    assert body["request_id"].startswith("req_")


def test_a_script_for_the_same_route_wins(fake: FakeSume, http: requests.Session) -> None:
    """An explicit script on a job route overrides the lifecycle for that route only."""
    fake.job("job_1", ["processing"])
    fake.script("GET", "/v1/jobs/job_1/status", Reply.error(500))

    assert 500 == http.get(f"{fake.url}/v1/jobs/job_1/status").status_code
    assert 409 == http.get(f"{fake.url}/v1/jobs/job_1/result").status_code


def test_wrong_methods_and_unknown_actions(fake: FakeSume, http: requests.Session) -> None:
    """POST /status is 405; an action the job does not serve is the fake's usual 404."""
    fake.job("job_1", ["processing"])

    assert 405 == http.post(f"{fake.url}/v1/jobs/job_1/status").status_code
    assert 404 == http.get(f"{fake.url}/v1/jobs/job_1/events").status_code


def test_reset_forgets_scripted_jobs(fake: FakeSume, http: requests.Session) -> None:
    """After reset(), a job route answers 404 like any unscripted route."""
    fake.job("job_1", ["processing"])
    fake.reset()

    assert 404 == http.get(f"{fake.url}/v1/jobs/job_1/status").status_code


def test_prefix_moves_the_routes(fake: FakeSume, http: requests.Session) -> None:
    """prefix="/api/v1" serves the job under that base path."""
    fake.job("job_1", ["ready"], prefix="/api/v1")

    assert "ready" == http.get(f"{fake.url}/api/v1/jobs/job_1/status").json()["data"]["status"]


@pytest.mark.parametrize(
    ("steps", "options"),
    [
        ([], {}),
        ([Reply(503)], {}),
        ([Reply(503), Reply(500)], {}),
        ([""], {}),
        ([("done", "not a mapping")], {}),
        ([42], {}),
        (["queued"], {"every": 0}),
        (["queued"], {"every": float("nan")}),
        (["queued"], {"poll_interval": -1}),
        (["queued"], {"prefix": "v1"}),
        (["queued"], {"prefix": "/v1/"}),
    ],
)
def test_bad_lifecycles_are_refused(fake: FakeSume, steps: Any, options: Dict[str, Any]) -> None:
    """A lifecycle the fake could not serve fails when scripted, with a ValueError."""
    with pytest.raises(ValueError):  # noqa: PT011 - each case has its own message
        fake.job("job_1", steps, **options)
