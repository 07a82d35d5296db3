"""FakeSume job lifecycles: a status that advances per poll (or with time), a result, a cancel.

``fake.job(...)`` returns a :class:`ScriptedJob`; FakeSume asks its jobs for the answer to
any route that has no script of its own::

    job = fake.job("job_1", ["queued", "processing", ("completed", {"video_url": "https://..."})])
    fake.script("POST", "/v1/avatar-videos", job.submitted())
"""

from __future__ import annotations

import math
import threading
import time
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Callable, Dict, List, Optional, Tuple, Union
from urllib.parse import quote

from .. import Job
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
        self._lock = threading.Lock()
        self._polls = 0
        self._canceled = False
        self._history: List[str] = []
        self.id = job_id
        self._steps: Tuple[Step, ...] = tuple(_check_step(step) for step in steps)
        if all(isinstance(step, Reply) for step in self._steps):
            raise ValueError("steps must hold at least one status")
        if every is not None and (isinstance(every, bool) or not _finite(every) or every <= 0):
            raise ValueError(f"every must be seconds > 0 or None, got {every!r}")
        if poll_interval is not None and (not _finite(poll_interval) or poll_interval < 0):
            raise ValueError(f"poll_interval must be seconds >= 0 or None, got {poll_interval!r}")
        if (prefix and not prefix.startswith("/")) or prefix.endswith("/"):
            raise ValueError(f"prefix must be '' or start with '/' and not end with one, got {prefix!r}")
        self.every = every
        self.clock = clock
        self.retry_after = None if retry_after is None else str(retry_after)
        self.poll_interval = poll_interval
        self.route = f"{prefix}/jobs/{quote(job_id, safe='')}"
        self._created = clock()

    def __repr__(self) -> str:
        return f"<ScriptedJob {self.id!r} status={self.status!r} polls={self.polls}>"

    @property
    def polls(self) -> int:
        """Status requests answered so far."""
        with self._lock:
            return self._polls

    @property
    def status(self) -> str:
        """The status the next result or cancel request would see (no poll is counted)."""
        with self._lock:
            return self._state(self._index(self._polls))[0]

    @property
    def history(self) -> List[str]:
        """What each status poll was answered, in order: a status, or "HTTP 503" for a verbatim reply."""
        with self._lock:
            return list(self._history)

    def submitted(self, status: int = 202) -> Reply:
        """A reply for the submit route that names this job (``data.job.id``, first status)."""
        first = self._state(0)[0]
        return Reply(
            status,
            json={"data": {"job": {"id": self.id, "status": first}}, "request_id": AUTO_REQUEST_ID},
        )

    # -- served by FakeSume (under its lock) ---------------------------------------------

    def answer(self, method: str, action: str) -> Optional[Reply]:
        """The reply to ``METHOD {route}/{action}``, or None for a route this job does not serve."""
        if action not in ("status", "result", "cancel"):
            return None
        wanted = "POST" if action == "cancel" else "GET"
        if method != wanted:
            return Reply.error(405, "method_not_allowed", message=f"use {wanted} for /{action}")
        with self._lock:
            if action == "status":
                index = self._index(self._polls)
                self._polls += 1
                step = self._steps[index]
                if isinstance(step, Reply) and not self._canceled:
                    self._history.append(f"HTTP {step.status}")
                    return step
                status, fields = self._state(index)
                self._history.append(status)
                return self._job_reply(status, fields, hints=True)
            status, fields = self._state(self._index(self._polls))
            if action == "result":
                if not Job(self.id, status).done:
                    return Reply.error(
                        409,
                        "job_not_completed",
                        message="the job has no result yet",
                        details={"status": status},
                    )
                return self._job_reply(status, fields, hints=False)
            if Job(self.id, status).finished:
                return Reply.error(
                    409,
                    "job_already_finished",
                    message="a finished job cannot be canceled",
                    details={"status": status},
                )
            self._canceled = True
            return self._job_reply("canceled", fields, hints=False)

    def _index(self, polls: int) -> int:
        elapsed = 0.0 if self.every is None else max(self.clock() - self._created, 0.0)
        position = polls if self.every is None else int(elapsed // self.every)
        return min(position, len(self._steps) - 1)

    def _state(self, index: int) -> Tuple[str, Dict[str, Any]]:
        """Status and accumulated fields at step ``index`` (verbatim replies keep the status).

        Before its first status step, a job has the first status it will show.
        """
        status: str = next(
            step if isinstance(step, str) else step[0] for step in self._steps if not isinstance(step, Reply)
        )
        fields: Dict[str, Any] = {}
        for step in self._steps[: index + 1]:
            if isinstance(step, str):
                status = step
            elif isinstance(step, tuple):
                status = step[0]
                fields.update(step[1])
        if self._canceled:
            status = "canceled"
        return status, fields

    def _job_reply(self, status: str, fields: Mapping[str, Any], *, hints: bool) -> Reply:
        data: Dict[str, Any] = {"id": self.id, **fields, "status": status}
        headers: Dict[str, str] = {}
        if hints and self.poll_interval is not None:
            data["recommended_poll_interval_seconds"] = self.poll_interval
        if hints and self.retry_after is not None:
            headers["Retry-After"] = self.retry_after
        return Reply(200, json={"data": data, "request_id": AUTO_REQUEST_ID}, headers=headers)


def _check_step(step: Any) -> Step:
    if isinstance(step, (str, Reply)):
        if isinstance(step, str) and not step:
            raise ValueError("a status step must be a non-empty str")
        return step
    if (
        isinstance(step, tuple)
        and len(step) == 2
        and isinstance(step[0], str)
        and step[0]
        and isinstance(step[1], Mapping)
    ):
        return (step[0], dict(step[1]))
    raise ValueError(f"a step must be a status str, a (status, fields) pair or a Reply, got {step!r}")


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
