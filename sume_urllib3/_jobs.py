"""Jobs: read, wait for, fetch and cancel Sume jobs through the session, never resubmitting."""

from __future__ import annotations

import functools
import logging
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Union
from urllib.parse import quote

import requests

from . import _sleeping
from ._config import check_rng, check_seconds
from ._deadline import timeout_limits
from ._envelope import (
    REQUEST_ID_HEADERS,
    RETRY_AFTER_CEILING,
    nests_too_deep,
    parse_retry_after,
    status_label,
)
from ._errors import ConfigurationError, SumeError, SumeRetryError
from ._record import Outcome, sume_record
from ._util import RandomSource, plural, uniform

logger = logging.getLogger("sume_urllib3")

#: Statuses that mean "finished, the result can be fetched" (compared lower-cased).
DONE_STATUSES = frozenset({"complete", "completed", "success", "succeeded", "ready"})
#: Statuses that mean "finished without a result" (compared lower-cased).
FAILED_STATUSES = frozenset({"failed", "error", "errored", "canceled", "cancelled", "expired", "nsfw"})
_CANCELED = frozenset({"canceled", "cancelled"})
#: Where a status body may keep the status, in order of preference.
STATUS_PATHS = ("data.status", "data.sume_status", "data.job.status", "status", "sume_status", "job.status")
#: Where a response body may name its job, in order of preference.
JOB_ID_PATHS = ("data.job.id", "data.id", "job_id", "data.job_id", "error.details.job_id", "error.job_id")
#: Answers to a cancel that mean "not in the job's state" rather than a broken call.
CANCEL_REFUSALS = frozenset({"job_not_cancelable", "job_already_finished", "job_generation_already_started"})
MAX_ID_LENGTH = 256

#: What every method accepts as "the job".
JobRef = Union[str, "Job", requests.Response]

_SAFE_TOKEN = re.compile(r"^[A-Za-z0-9_.:\-]{1,64}$")


@dataclass(frozen=True)
class Job:
    """One job as last seen: id, status, the job's JSON object and the request id that said so.

    ``data`` is the body's ``data`` object when it has one, else the body itself; it may
    hold signed URLs, so ``repr`` leaves it out. ``status`` is None when no readable status
    has been seen yet.
    """

    id: str
    status: Optional[str] = None
    data: Mapping[str, Any] = field(default_factory=dict, hash=False, repr=False)
    request_id: Optional[str] = None

    @classmethod
    def from_response(cls, response: requests.Response, job_id: Optional[str] = None) -> Job:
        """The job a response describes (a submit answer, a status, a poll outcome's error body),
        with id ``job_id`` or the one its body names (else ``ConfigurationError``); nothing is sent."""
        doc = _json(response)
        status = next(filter(None, (_clean_status(_dig(doc, path)) for path in STATUS_PATHS)), None)
        return cls(job_id or job_id_of(response), status, _data_of(doc), _request_id(response))

    @property
    def done(self) -> bool:
        """True when the job finished with a result (completed, succeeded, ready...)."""
        return self.status is not None and self.status.lower() in DONE_STATUSES

    @property
    def failed(self) -> bool:
        """True when the job ended without a result (failed, canceled, expired, nsfw...)."""
        return self.status is not None and self.status.lower() in FAILED_STATUSES

    @property
    def finished(self) -> bool:
        """True when the job will not change any more (done or failed)."""
        return self.done or self.failed

    @property
    def error_code(self) -> Optional[str]:
        """The job's own error code (``error.code``, ``error``, ``error_code``), if it is a safe token."""
        error = self.data.get("error")
        code = error.get("code") if isinstance(error, Mapping) else error
        return _token(code) or _token(self.data.get("error_code"))


@dataclass(frozen=True)
class JobEvent:
    """What observers' ``on_job(event)`` receive: one poll, or how a wait ended."""

    kind: str  # one of JOB_EVENT_KINDS: "poll", or how the wait ended
    job: Job  # the job as last seen (status None before any readable status)
    polls: int  # status reads so far in this wait (1 for a single get)
    elapsed: float  # seconds since the wait started


class JobError(SumeError):
    """A job did not give what was asked; ``job`` is the job as last seen."""

    def __init__(self, message: str, job: Job) -> None:
        super().__init__(message)
        self.job = job

    def __reduce__(self) -> Any:
        # Exceptions pickle their args only; keep the job (a Celery task may pickle this).
        return (type(self), (str(self), self.job))


class JobFailed(JobError):
    """The job ended without a result (failed, canceled, expired...); names its error code."""


class JobTimeout(JobError):
    """The wait's deadline came first; ``job`` holds the last status seen, so a later task can resume."""


class JobNotCompleted(JobError):
    """The result was asked for before the job finished; ``job.status`` says where it is."""


#: How a wait that raised ended, as observers and the log name it (anything else: "error").
_ENDINGS: Dict[type, str] = {JobFailed: "failed", JobTimeout: "timed_out"}


class Jobs:
    """Read, wait for, fetch and cancel jobs through a session (``session.jobs``).

    Every request is an ordinary call through the session, so its policy retries a 429
    or 503 on a poll and nothing is ever resubmitted. ``sleep``, ``clock`` and ``rng``
    default to the session's own (those it was built with, else real time and ``random``).
    """

    def __init__(
        self,
        session: Any,
        *,
        sleep: Optional[Callable[[float], None]] = None,
        clock: Optional[Callable[[], float]] = None,
        rng: RandomSource = None,
    ) -> None:
        retry = getattr(getattr(session, "adapter", None), "retry", None)
        if retry is None:
            raise ConfigurationError(f"Jobs needs a SumeSession, got {type(session).__name__}")
        self.session = session
        self.sleep: Callable[[float], None] = sleep or retry.sleep_function
        self.clock: Callable[[], float] = clock or retry.clock
        self.rng: RandomSource = check_rng(rng or retry.rng, "Jobs: rng")
        if not callable(self.sleep) or not callable(self.clock):
            raise ConfigurationError("Jobs: sleep and clock must be callable")

    def __repr__(self) -> str:
        return f"<Jobs of {self.session!r}>"

    def _job_id(self, job: JobRef) -> str:
        """``job_id_of(job)``, refusing the session's own API key: pasted where a job id goes,
        it would travel in the URL's path, where logs and records show it."""
        job_id = job_id_of(job)
        if job_id == self.session._api_key:
            raise ConfigurationError("that is the session's API key, not a job id")
        return job_id

    def get(self, job: JobRef) -> Job:
        """Read the job's status once (``GET /jobs/{id}/status``)."""
        job_id = self._job_id(job)
        response = self._send("GET", job_id, "status")
        seen = _seen(job_id, response)
        if seen is None:
            raise _unanswered(job_id, response, "status response has no readable status")
        self.session.observers.on_job(JobEvent("poll", seen, 1, 0.0))
        return seen

    def result(self, job: JobRef) -> Dict[str, Any]:
        """The finished job's result (``GET /jobs/{id}/result``): the body's ``data`` object, else the body.

        Raises ``JobNotCompleted`` (naming the status) while the job runs, and ``JobFailed`` when
        it ended without a result, naming the job's own error code (``nsfw``, from one more
        ``GET /jobs/{id}/status``), not the 409's.
        """
        job_id = self._job_id(job)
        response = self._send("GET", job_id, "result")
        if not _ok(response):
            seen = _seen(job_id, response)
            if seen is None:
                raise _error_for(response)
            if seen.failed:
                own = self._read(job_id)  # the job's own status names its error code
                raise _failed(own if own is not None and own.failed else seen)
            why = f"it is {_say(seen.status)}; wait for it first (session.jobs.wait)"
            raise JobNotCompleted(f"job {job_id} has no result yet: {why}", seen)
        doc = _json(response)
        if not isinstance(doc, dict):
            raise _unanswered(job_id, response, "result response is not a JSON object")
        return _data_of(doc)

    def cancel(self, job: JobRef) -> Job:
        """Ask the server to cancel the job (``POST /jobs/{id}/cancel``); returns what it answered.

        When the server refuses because of the job's state (409, ``job_not_cancelable``...),
        the job's status is read once: a job already canceled is returned as it is; any
        other state raises ``JobError`` naming it (``'completed'``, ``'failed'`` with its
        error code, or a running job the server will not stop), with the job in ``.job``.
        """
        job_id = self._job_id(job)
        response = self._send("POST", job_id, "cancel")
        if _ok(response):
            return Job.from_response(response, job_id)
        if response.status_code != 409 and _error_code(response) not in CANCEL_REFUSALS:
            raise _error_for(response)
        seen = self._read(job_id)
        if seen is None:
            why = "its status could not be read"
        elif (seen.status or "").lower() in _CANCELED:
            return seen  # already canceled: what the cancel asked for
        elif seen.done:
            why = f"it already ended {_say(seen.status)}; fetch its result with jobs.result"
        elif seen.failed:
            code = seen.error_code
            why = f"it already ended {_say(seen.status)}{f', error code {code}' if code else ''}"
        else:
            why = f"it is {_say(seen.status)} and the server will not stop it now"
        why += f" (the server answered {_label(response)})"
        raise JobError(f"job {job_id} cannot be canceled: {why}", seen or Job(job_id)) from _error_for(
            response
        )

    def wait(
        self,
        job: JobRef,
        *,
        timeout: float = 600.0,
        interval: float = 1.0,
        max_interval: float = 20.0,
        on_status: Optional[Callable[[Job], Any]] = None,
    ) -> Job:
        """Poll until the job finishes and return it; raise ``JobFailed`` or ``JobTimeout``.

        The first poll goes at once; then the server's hint (``Retry-After``, else
        ``recommended_poll_interval_seconds``; never under ``interval``) spaces the polls, else
        ``interval`` growing x1.5 up to ``max_interval``, jittered. ``timeout`` is the one
        deadline: no poll starts after it, the last goes as late as it can and still come back
        by then, and each poll's time limit, retries and wait for the API key's turn end by then.
        An unknown status, an unreadable body, or a 429/5xx the policy gave up on is no news;
        an answer polling cannot fix (401, 404...) raises ``SumeRetryError`` at once.
        ``on_status(job)`` is called on the first status seen and on each change.
        """
        job_id = self._job_id(job)
        timeout = check_seconds(timeout, "timeout", positive=True)
        interval = check_seconds(interval, "interval", positive=True)
        max_interval = check_seconds(max_interval, "max_interval", low=interval)
        if on_status is not None and not callable(on_status):
            raise ConfigurationError("on_status must be callable or None")
        # The job as known before any poll: a Job as given, what a submit response said, else the id.
        known = Job.from_response(job, job_id) if isinstance(job, requests.Response) else Job(job_id)
        waiting = _Waiting(self, job if isinstance(job, Job) else known, self._now(), timeout)
        plan = PollSchedule(waiting.start + timeout, interval, max_interval, waiting.start)
        jitter = functools.partial(uniform, self.rng, *JITTER)
        reported: Optional[str] = None
        try:
            while True:
                now = self._now()
                pause = plan.due_in(now)
                if pause > 0:
                    _sleeping.wait(pause, self.sleep)
                    now = self._now()
                if now >= plan.deadline:  # a late wake-up: no poll goes after the deadline
                    raise waiting.timed_out("no time is left for another poll")
                response = self._poll(waiting, plan.deadline - now, plan)
                if response is None:
                    continue  # the fleet held it back: it goes at the API key's turn
                plan.took(_round_trip(self._now() - now, response))
                seen = _seen(job_id, response)
                waiting.last = seen or waiting.last
                waiting.polled()
                if seen is None and not _ok(response) and not _no_news(response):
                    raise _error_for(response)  # 401, 404...: more polls would not fix it
                if on_status is not None and seen is not None and seen.status != reported:
                    reported = seen.status
                    on_status(seen)
                if seen is not None and seen.finished:
                    if seen.failed:
                        raise _failed(seen)
                    waiting.end("completed")
                    return seen
                next_pause, why = plan.next_poll(self._now(), _hint(response), jitter)
                if next_pause is None:
                    if seen is None:
                        got = " without a readable status" if _ok(response) else ""
                        why += f" (the last poll got {_label(response, with_id=False)}{got})"
                    raise waiting.timed_out(why, response)
        except Exception as exc:
            # Told once however the wait ended: failed, timed out, or anything else (an answer
            # polling cannot fix, a transport failure, the caller's on_status raising): an error.
            waiting.end(_ENDINGS.get(type(exc), "error"))
            raise

    def _poll(self, waiting: _Waiting, left: float, plan: PollSchedule) -> Optional[requests.Response]:
        """One status read within ``left`` seconds: its response (the policy's last, when it gave
        up on it), or None when the fleet held it back and ``plan`` now waits for the key's turn."""
        try:
            return self._send("GET", waiting.last.id, "status", left)
        except requests.exceptions.Timeout as exc:  # first: a timeout is a SumeRetryError too
            waiting.polled()  # it went: counted, as every poll sent is
            if cut_by_deadline(self.session.timeout, left):
                raise waiting.timed_out("the last poll ran out of time") from exc
            raise
        except SumeRetryError as exc:
            if exc.response is not None:
                return exc.response  # the policy gave up on this poll; the next one may do better
            if not exc.record.fleet_refused:  # the transport failed, after the policy's retries
                waiting.polled()
                raise
            # Nothing was sent: the API key's turn (a cooldown, the pace) comes later. The
            # poll's own time limit was shorter than the wait's: wait for the turn if it fits.
            turn = exc.record.retry_in
            if turn is not None and plan.hold(self._now(), turn):
                return None
            why = "the API key's pace or cooldown (the fleet) has no turn for a poll before the deadline"
            later = f" (a poll could go in {turn:.1f}s)" if turn is not None else ""
            raise waiting.timed_out(why + later) from exc

    def _send(self, method: str, job_id: str, action: str, left: Optional[float] = None) -> requests.Response:
        """One request about the job; a poll of a wait gets ``left`` seconds."""
        kwargs: Dict[str, Any] = {}
        if left is not None:
            left = max(left, 0.001)
            kwargs["timeout"] = poll_timeout(self.session.timeout, left)
            # A cooldown longer than the session's max_elapsed that ends before the deadline
            # is waited out, not refused.
            kwargs["policy"] = self.session.policy.replace(max_elapsed=left)
        response: requests.Response = self.session.request(
            method, f"jobs/{quote(job_id, safe='')}/{action}", **kwargs
        )
        return response

    def _read(self, job_id: str) -> Optional[Job]:
        """The job's status read once, or None when the read says nothing (it never raises)."""
        try:
            return _seen(job_id, self._send("GET", job_id, "status"))
        except (SumeError, requests.exceptions.RequestException):
            return None

    def _now(self) -> float:
        return _sleeping.now(self.clock)


@dataclass
class _Waiting:
    """One wait as it goes (the job as last seen, when the wait started, the polls sent), and
    what it tells the session's observers and the log."""

    jobs: Jobs
    last: Job
    start: float
    timeout: float
    polls: int = 0

    def event(self, kind: str) -> JobEvent:
        return JobEvent(kind, self.last, self.polls, self.jobs._now() - self.start)

    def polled(self) -> None:
        """A poll went: counted, and told to the observers."""
        self.polls += 1
        self.jobs.session.observers.on_job(self.event("poll"))

    def timed_out(self, why: str, answer: Optional[requests.Response] = None) -> JobTimeout:
        """The wait's end at its deadline, naming the request id of ``answer`` (the last poll's
        response, a 429 asking for a pause past the deadline say), else of the last status."""
        last = self.last
        request_id = (_request_id(answer) if answer is not None else None) or last.request_id
        said = f" (request id {request_id})" if request_id else ""
        return JobTimeout(
            f"job {last.id} is still {_say(last.status)} after {self.jobs._now() - self.start:.1f}s and "
            f"{plural(self.polls, 'poll', 'polls')} ({self.timeout:g}s timeout): {why}; it may "
            f"still finish, so wait again later with its id{said}",
            last,
        )

    def end(self, kind: str) -> None:
        """Tell the observers and the log how the wait ended."""
        event = self.event(kind)
        self.jobs.session.observers.on_job(event)
        job, code = event.job, event.job.error_code
        told = f", error code {code}" if kind == "failed" and code else ""
        fields = {
            "event": "job",
            "job_id": job.id,
            "job_status": _clean_status(job.status),
            "outcome": kind,
            "polls": event.polls,
            "elapsed": event.elapsed,
            "code": code,
            "request_id": job.request_id,
        }
        # One template for every wait, its values apart: handlers group lines by ``record.msg``.
        logger.info(
            "job %s %s after %s in %.1fs: status %s%s",
            job.id,
            kind.replace("_", " "),
            plural(event.polls, "poll", "polls"),
            event.elapsed,
            _say(job.status),
            told,
            extra={f"sume_{name}": value for name, value in fields.items()},
        )


def job_id_of(job: Any) -> str:
    """The job id named by ``job`` (an id, a Job or a Response), checked; nothing is sent."""
    if isinstance(job, (Job, str)):
        return check_job_id(job.id if isinstance(job, Job) else job)
    if not isinstance(job, requests.Response):
        raise ConfigurationError(
            f"job must be a job id (str), a Job or a requests.Response, got {type(job).__name__}"
        )
    doc = _json(job)
    for path in JOB_ID_PATHS:  # the first there, in order
        value = _dig(doc, path)
        if isinstance(value, (int, str)) and not isinstance(value, bool) and value != "":
            return check_job_id(str(value))
    request_id = _dig(doc, "data.request_id")
    if isinstance(request_id, str) and request_id.startswith("job_"):
        return check_job_id(request_id)
    raise ConfigurationError(
        f"this response ({_label(job)}) names no job: looked for "
        f"{', '.join(JOB_ID_PATHS)} and a data.request_id starting with job_"
    )


def check_job_id(job_id: Any) -> str:
    """A job id safe to put in a path once quoted: 1-256 visible characters, not "." or ".."."""
    if not isinstance(job_id, str):
        raise ConfigurationError(f"job id must be a str, got {type(job_id).__name__}")
    if not 1 <= len(job_id) <= MAX_ID_LENGTH or job_id in (".", ".."):
        # Never echo what was refused: a key pasted in the wrong place is still a key.
        raise ConfigurationError(
            f"job id must be 1-{MAX_ID_LENGTH} characters and not '.' or '..', "
            f"got a str of {len(job_id)} characters"
        )
    if any(ch.isspace() or not ch.isprintable() for ch in job_id):
        raise ConfigurationError("job id must not contain spaces or control characters")
    return job_id


def _seen(job_id: str, response: requests.Response) -> Optional[Job]:
    """The job a response describes: a 2xx with a readable status, or a 409 ``job_not_completed``
    whose ``error.details`` is the job's object (its own code is about the request, never the
    job's); else None."""
    if _ok(response):
        seen = Job.from_response(response, job_id)
        return seen if seen.status is not None else None
    if response.status_code != 409 or _error_code(response) != "job_not_completed":
        return None
    details = _dig(_json(response), "error.details")
    data = details if isinstance(details, dict) else {}
    return Job(job_id, _clean_status(data.get("status")), data, _request_id(response))


def _clean_status(value: Any) -> Optional[str]:
    """A status fit to compare and to print: printable, trimmed, at most 64 characters."""
    text = value.strip()[:64] if isinstance(value, str) else ""
    return text if text and text.isprintable() else None


def _data_of(doc: Any) -> Dict[str, Any]:
    data = _dig(doc, "data")
    return data if isinstance(data, dict) else doc if isinstance(doc, dict) else {}


def _dig(doc: Any, path: str) -> Any:
    """The value at a dotted ``path`` of a JSON document, or None."""
    for name in path.split("."):
        doc = doc.get(name) if isinstance(doc, dict) else None
    return doc


def _json(response: requests.Response) -> Any:
    """The body's one JSON value as requests reads it (a job's result keeps its numbers whole), or None."""
    try:
        if nests_too_deep(response.content or b""):
            return None  # not a job document, and nesting that deep can crash json's scanner
        return response.json()
    except (ValueError, RuntimeError):  # not JSON, or a consumed stream
        return None


def _ok(response: requests.Response) -> bool:
    return 200 <= response.status_code < 300


def _no_news(response: requests.Response) -> bool:
    """An answer that says nothing about the job: try again at the next poll (a 429 or 5xx, or
    an error whose body says to poll: the policy's POLL, trusting the body over the status)."""
    if response.status_code == 429 or response.status_code >= 500:
        return True
    record = sume_record(response)
    return record is not None and record.outcome is Outcome.POLL


def _error_code(response: requests.Response) -> Optional[str]:
    code = _dig(_json(response), "error.code")
    return code if isinstance(code, str) else None


def _token(value: Any) -> Optional[str]:
    """``value`` when it is a short plain token (a code, a request id), safe to print."""
    return value if isinstance(value, str) and _SAFE_TOKEN.match(value) else None


def _request_id(response: requests.Response) -> Optional[str]:
    """The body's ``request_id``, else the headers', when it is a plain token."""
    value = _dig(_json(response), "request_id")
    if not isinstance(value, str):
        value = next(filter(None, map(response.headers.get, REQUEST_ID_HEADERS)), None)
    return _token(value)


def _label(response: requests.Response, with_id: bool = True) -> str:
    """ "HTTP 409 job_not_cancelable, request id req_1": the status, then the error code and the
    request id (unless not ``with_id``) when they are plain tokens."""
    label = "HTTP " + status_label(response.status_code, _token(_error_code(response)))
    request_id = _request_id(response) if with_id else None
    return f"{label}, request id {request_id}" if request_id else label


def _say(status: Optional[str]) -> str:
    return f"{status!r}" if status is not None else "of unknown status (no readable status yet)"


def _failed(job: Job) -> JobFailed:
    code = job.error_code
    what = f"error code {code}" if code else "no error code given"
    said = f" (request id {job.request_id})" if job.request_id else ""
    return JobFailed(f"job {job.id} ended {_say(job.status)}: {what}{said}", job)


def _unanswered(job_id: str, response: requests.Response, what: str) -> Exception:
    """The error for an answer that does not say what was asked: a 2xx missing ``what``, else
    the error the answer is (:func:`_error_for`)."""
    if not _ok(response):
        return _error_for(response)
    return JobError(
        f"job {job_id}: the {what} ({_label(response)})",
        Job(job_id, request_id=_request_id(response)),
    )


def _hint(response: requests.Response) -> Optional[float]:
    """The server's poll spacing: Retry-After, else recommended_poll_interval_seconds."""
    seconds = parse_retry_after(response.headers.get("Retry-After"), date=response.headers.get("Date"))
    if seconds is not None:
        return seconds
    doc = _json(response)
    for path in ("data.recommended_poll_interval_seconds", "recommended_poll_interval_seconds"):
        value = _dig(doc, path)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return min(max(float(value), 0.0), RETRY_AFTER_CEILING)
    return None


def _error_for(response: requests.Response) -> Exception:
    """The library's error for an answer the caller must act on; the record names it."""
    record = sume_record(response)
    if record is not None:
        return SumeRetryError(record, response)
    try:
        response.raise_for_status()
    except requests.exceptions.HTTPError as exc:
        return exc
    return SumeError(f"unexpected {_label(response)}")


def _round_trip(seconds: float, response: requests.Response) -> float:
    """How long one request of a poll took on the wire: its time less the waits between attempts."""
    record = sume_record(response)
    if record is None:
        return max(seconds, 0.0)
    held = sum(record.waits) + record.paced
    return max(seconds - held, 0.0) / max(record.attempts, 1)


# -- when the polls of a wait go, and how long each may take: times in, times out ---------

#: Without a server hint, each wait is the previous one times this, up to ``max_interval``.
GROWTH = 1.5
#: Each unhinted wait is multiplied by U(low, high): spreads pollers, never exceeds max_interval.
JITTER = (0.95, 1.0)
#: The least time the last poll is given to come back before the deadline; polls that took
#: longer raise it to twice the slowest round trip seen in the wait, up to MAX_LAST_POLL_MARGIN
#: (a slower server has its last poll cut by the deadline rather than the wait end early).
LAST_POLL_MARGIN = 0.05
MAX_LAST_POLL_MARGIN = 1.0


class PollSchedule:
    """When the polls of one wait go (``Jobs.wait`` says the rules): the one place that decides,
    from clock times and hints. The last poll goes ``margin`` before the deadline; an unhinted
    poll after which no other could fit is that last poll, so it moves there. Nothing here
    sends, sleeps or reads a clock.
    """

    def __init__(self, deadline: float, interval: float, max_interval: float, start: float = 0.0) -> None:
        self.deadline = deadline
        self.interval = interval
        self.max_interval = max_interval
        self.delay = interval  # the next unhinted pause, before jitter
        self.margin = LAST_POLL_MARGIN
        self.decided, self.pause = start, 0.0  # the next poll goes ``pause`` after ``decided``

    @property
    def latest(self) -> float:
        """The last moment a poll may start and still come back by the deadline."""
        return self.deadline - self.margin

    def due_in(self, now: float) -> float:
        """Seconds from ``now`` until the next poll goes (0 or less: now)."""
        return self.pause - (now - self.decided)

    def took(self, round_trip: float) -> None:
        """Note how long a poll took on the wire: the last one gets twice the slowest."""
        self.margin = min(max(self.margin, 2.0 * round_trip), MAX_LAST_POLL_MARGIN)

    def next_poll(
        self, now: float, hint: Optional[float], jitter: Callable[[], float]
    ) -> Tuple[Optional[float], str]:
        """Seconds from ``now`` to the next poll, or None and why no poll fits before the deadline."""
        if hint is not None:  # the server knows best, but never a tight loop
            if self.hold(now, hint):
                return self.pause, ""
            return None, f"the server asked to wait {max(hint, self.interval):.1f}s more, past the deadline"
        pause = self.delay * jitter()
        self.delay = min(self.delay * GROWTH, self.max_interval)
        last = self.latest - now  # the longest pause after which a poll still comes back in time
        # Two polls closer than this would be a tight loop at the end of a short wait.
        gap = min(self.interval, self.margin)
        if pause > last - gap - self.margin / 2:  # no other poll could follow this one
            if last < gap:
                return None, "no time is left for another poll"
            pause = last  # the last poll: as late as it can go
        self.decided, self.pause = now, pause
        return pause, ""

    def hold(self, now: float, turn: float) -> bool:
        """Put the next poll ``turn`` seconds (at least ``interval``) from ``now`` if it still comes
        back by the deadline; True when it does."""
        pause = max(turn, self.interval)
        if now + pause > self.latest:
            return False
        self.decided, self.pause = now, pause
        return True


def poll_timeout(base: Any, left: float) -> Tuple[float, float]:
    """The session's (connect, read) timeout, neither part longer than ``left``."""
    connect, read = timeout_limits(base)
    return min(connect, left), min(read, left)


def cut_by_deadline(base: Any, left: float) -> bool:
    """True when the time left, not the session's own timeout ``base``, limited the poll."""
    return any(left < part for part in timeout_limits(base))
