"""FakeSume job lifecycles: a status that advances per poll (or with time), a result, a cancel.

Scripted with ``fake.job``, named in a submit reply::

    job = fake.job("job_1", ["queued", "processing", ("completed", {"video_url": "https://..."})])
    fake.script("POST", "/v1/avatar-videos", job.submitted())
"""

from __future__ import annotations

import threading
import time
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Callable, Dict, List, Optional, Tuple, Union
from urllib.parse import quote

from .. import Job
from .._config import check_seconds
from ._reply import AUTO_REQUEST_ID, Reply

__all__ = ["ScriptedJob"]

#: One step of a lifecycle: a status, a status with fields for the job object, or a verbatim reply.
Step = Union[str, Tuple[str, typing.Mapping[str, Any]], Reply]


class ScriptedJob:
    """One job's scripted life at ``{prefix}/jobs/{quoted id}/status``, ``/result`` and ``/cancel``.

    ``steps`` are what successive status polls see:

    - ``"processing"``: the job object says that status;
    - ``("completed", {"video_url": ...})`` or ``("failed", {"error": {"code": "nsfw"}})``:
      the status, with the fields merged into the job object from then on (status and result);
    - a :class:`Reply`: served verbatim for that poll (a 503 with Retry-After, a body that is
      not JSON...), the status staying what it was (before any status: the first one to come).

    By default the job moves one step per status poll and stays on the last step, so a test
    knows exactly what each poll sees. With ``every=seconds`` it moves with ``clock`` instead:
    step ``(clock() - created) // every``, for demos and for tests that share a virtual clock.
    ``retry_after`` adds a ``Retry-After`` header and ``poll_interval`` a
    ``recommended_poll_interval_seconds`` field to every status answer.

    ``/result`` answers 409 ``job_not_completed`` (``details.status``) until a done status,
    then 200 with the job object. ``POST /cancel`` makes a running job ``canceled`` (every
    later poll says so); a finished one answers 409 ``job_already_finished``.
    The id is matched in its quoted form: ``"a/b"`` lives at ``/v1/jobs/a%2Fb/status``.
    """

    def __init__(
        self,
        job_id: str,
        steps: Iterable[Step],
        *,
        every: Optional[float] = None,
        clock: Callable[[], float] = time.monotonic,
        retry_after: Union[str, float, None] = None,
        poll_interval: Optional[float] = None,
        prefix: str = "/v1",
    ) -> None:
        if not isinstance(job_id, str) or not job_id:
            raise ValueError(f"job_id must be a non-empty str, got {job_id!r}")
        if (prefix and not prefix.startswith("/")) or prefix.endswith("/"):
            raise ValueError(f"prefix must be '' or start with '/' and not end with one, got {prefix!r}")
        self._lock = threading.Lock()
        self._canceled = False
        self._history: List[str] = []  # what each status poll was answered
        self._steps: Tuple[Step, ...] = tuple(steps)
        # The status and the fields merged so far at each step (a verbatim reply keeps them).
        states: List[Tuple[Optional[str], Dict[str, Any]]] = []
        status: Optional[str] = None
        fields: Dict[str, Any] = {}
        for step in self._steps:
            said: Any = step
            if isinstance(step, tuple) and len(step) == 2 and isinstance(step[1], Mapping):
                said, fields = step[0], {**fields, **step[1]}
            if isinstance(said, str) and said:
                status = said
            elif not isinstance(step, Reply):
                raise ValueError(f"a step must be a status, a (status, fields) pair or a Reply, got {step!r}")
            states.append((status, fields))
        # Before its first status step, a job has the first status it will show.
        first = next((status for status, _ in states if status is not None), None)
        if first is None:
            raise ValueError("steps must hold at least one status")
        self._states = [(status or first, fields) for status, fields in states]
        self.id = job_id
        self.every = None if every is None else check_seconds(every, "every", positive=True)
        self.clock = clock
        self.retry_after = None if retry_after is None else str(retry_after)
        if poll_interval is not None:
            check_seconds(poll_interval, "poll_interval")  # checked, then sent as given: 2 stays 2
        self.poll_interval = poll_interval
        self.route = f"{prefix}/jobs/{quote(job_id, safe='')}"
        self._created = clock()

    def __repr__(self) -> str:
        return f"<ScriptedJob {self.id!r} status={self.status!r} polls={self.polls}>"

    @property
    def polls(self) -> int:
        """Status requests answered so far."""
        with self._lock:
            return len(self._history)

    @property
    def status(self) -> str:
        """The status the next result or cancel request would see (no poll is counted)."""
        with self._lock:
            return self._states[self._index()][0]

    @property
    def history(self) -> List[str]:
        """What each status poll was answered, in order: a status, or "HTTP 503" for a verbatim reply."""
        with self._lock:
            return list(self._history)

    def submitted(self, status: int = 202) -> Reply:
        """A reply for the submit route that names this job (``data.job.id``, first status)."""
        data = {"job": {"id": self.id, "status": self._states[0][0]}}
        return Reply(status, json={"data": data, "request_id": AUTO_REQUEST_ID})

    # -- served by FakeSume (under its lock) ---------------------------------------------

    def answer(self, method: str, action: str) -> Optional[Reply]:
        """The reply to ``METHOD {route}/{action}``, or None for a route this job does not serve."""
        if action not in ("status", "result", "cancel"):
            return None
        wanted = "POST" if action == "cancel" else "GET"
        if method != wanted:
            return Reply.error(405, "method_not_allowed", message=f"use {wanted} for /{action}")
        with self._lock:
            index = self._index()
            step, (status, fields) = self._steps[index], self._states[index]
            job, details = Job(self.id, status), {"status": status}
            if action == "status":
                if isinstance(step, Reply) and not self._canceled:
                    self._history.append(f"HTTP {step.status}")
                    return step
                self._history.append(status)
            elif action == "result" and not job.done:
                message = "the job has no result yet"
                return Reply.error(409, "job_not_completed", message=message, details=details)
            elif action == "cancel" and job.finished:
                message = "a finished job cannot be canceled"
                return Reply.error(409, "job_already_finished", message=message, details=details)
            elif action == "cancel":
                # For good: every later poll says so, and verbatim replies are no longer served.
                self._canceled = True
                self._states = [("canceled", kept) for _, kept in self._states]
                status = "canceled"
            data: Dict[str, Any] = {"id": self.id, **fields, "status": status}
            headers: Dict[str, str] = {}
            if action == "status" and self.poll_interval is not None:
                data["recommended_poll_interval_seconds"] = self.poll_interval
            if action == "status" and self.retry_after is not None:
                headers["Retry-After"] = self.retry_after
            return Reply(200, json={"data": data, "request_id": AUTO_REQUEST_ID}, headers=headers)

    def _index(self) -> int:
        """The step the job is at: one per status poll, or one per ``every`` seconds of ``clock``."""
        elapsed = max(self.clock() - self._created, 0.0)
        position = len(self._history) if self.every is None else int(elapsed // self.every)
        return min(position, len(self._steps) - 1)
