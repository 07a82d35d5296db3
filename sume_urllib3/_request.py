"""One logical request's state, from the session's call to the record it ends with.

Its life, step by step (session, adapter, urllib3, the decision, the record, the observers),
is told once, in the docs' "How it works" page (docs/how-it-works.md).
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from ._envelope import REQUEST_ID_HEADERS, short_text
from ._policy import Decision, Policy, Verdict
from ._record import Outcome, SumeRecord, status_label
from ._redact import redact_url
from ._util import frozen, header_value, plural


class Attempt(NamedTuple):
    """One consulted attempt: what came back, what the policy said, and when.

    A tuple, not a frozen dataclass: one is made on every decision, and a frozen dataclass's
    ``__init__`` sets each of its eight fields through ``object.__setattr__``."""

    status: Optional[int]
    code: Optional[str]
    request_id: Optional[str]
    next_action: Optional[str]
    decision: Decision
    error: Optional[str] = None  # transport error class name when there was no response
    at: float = 0.0  # clock time of the decision
    retry_in: Optional[float] = None  # on a give-up: seconds until trying again could succeed

    @property
    def label(self) -> str:
        """ "503 queue_full", "402", or "no response" for a transport error."""
        return status_label(self.status, self.code)


class RequestContext:
    """Mutable state of one logical request; owned by the thread that sends it.

    Everything but the start has a class-level default, so a request sets only the
    attributes its path needs (about a dozen for a session's success), not all of them.
    """

    #: A per-call policy (``session.post(..., policy=...)``), else None for the retry's own.
    policy: Optional[Policy] = None
    #: True when a SumeSession made it: the session reports the outcome, not the adapter.
    owned = False
    #: The fleet's name for the API key (a hash, never the key).
    key_id: Optional[str] = None
    method = ""
    url = ""
    key: Optional[str] = None
    replayable = True
    attempts: Sequence[Attempt] = ()
    retries = 0
    hops = 0  # requests sent without a retry: the first, and one per redirect
    adapter: Any = None  # the SumeAdapter that joined first
    record: Optional[SumeRecord] = None
    next_wait: Optional[float] = None  # decided by SumeRetry.increment, slept by sleep
    raise_now = False  # a SumeRetry refused: urllib3 must raise, not return (see raise_on_status)
    raised_by: Any = None  # the SumeRetry whose refusal raise_now answers for
    fleet: Any = None  # the Fleet consulted before every attempt, or None for no pacing
    grant: Any = None  # the fleet's grant for the attempt in flight, until released
    paced = 0.0  # seconds the fleet held this request beyond the policy's waits
    fallbacks = 0  # grants that came from local pacing because the shared store failed
    fleet_refused = False  # the fleet refused a turn: the pace would cross the deadline
    body_pos: Optional[int] = None  # where a file body started, to send it whole again
    stream: Any = None  # a _stream.StreamWatch: a stream=True body decides the outcome when it ends
    watch: Any = None  # a _deadline.Watch: cuts the attempt's socket when the deadline passes
    answered: Any = None  # a weakref to a session hop's error response (see SumeAdapter._refuse)

    def __init__(
        self,
        start: float,
        *,
        policy: Optional[Policy] = None,
        owned: bool = False,
        key_id: Optional[str] = None,
        method: str = "",
        url: str = "",
    ) -> None:
        self.start = start
        if policy is not None:
            self.policy = policy
        if owned:
            self.owned = owned
        if key_id is not None:
            self.key_id = key_id
        if method:
            self.method = method
        if url:
            self.url = url

    @property
    def waits(self) -> List[float]:
        """The waits decided so far, in order."""
        return [a.decision.wait or 0.0 for a in self.attempts if a.decision.verdict is Verdict.RETRY]

    def deadline(self, policy: Policy) -> float:
        """Clock time after which no attempt may start."""
        return self.start + policy.max_elapsed

    def add(self, attempt: Attempt) -> None:
        """Note one consulted attempt (a retry when its verdict is RETRY)."""
        self.attempts = [*self.attempts, attempt]
        if attempt.decision.verdict is Verdict.RETRY:
            self.retries += 1

    def finish(
        self,
        status: Optional[int],
        headers: Optional[Mapping[str, str]],
        now: float,
        *,
        error: Optional[str] = None,
        auth_conflict: bool = False,
        retry_in: Optional[float] = None,
    ) -> SumeRecord:
        """The record of this request, ending with ``status`` (None: no response).

        ``error`` names a failure after the last decision (a body that broke mid-read);
        ``auth_conflict`` adds the "send only one auth header" hint to a 401; ``retry_in``
        is used when nothing the request met says when to try again.
        """
        if not self.attempts and error is None and status is not None and status < 400:
            return self._succeeded(status, headers, now)
        given_retry_in = retry_in
        retries = self.retries
        last = self.attempts[-1] if self.attempts else None
        if last is not None and (last.decision.verdict is Verdict.RETRY or last.status != status):
            last = None  # the final response was not consulted (e.g. a success)
        code = request_id = next_action = None
        retry_in = None
        if error is not None:
            outcome = Outcome.NO_RETRY if retries == 0 else Outcome.GAVE_UP
            reason = (
                f"{status_label(status)}: the body failed mid-read ({error})"
                if status is not None
                else f"no response: stopped by {error} before the request ended"
            )
            if last is not None:
                code, request_id, next_action = last.code, last.request_id, last.next_action
            else:
                request_id = _request_id(headers)
            tail = self.attempts[-1] if self.attempts else None
            if tail is not None and tail.decision.verdict is Verdict.STOP and tail.retry_in is not None:
                # The body broke and the policy stopped (deadline, counters): a later try may do.
                retry_in = max(tail.retry_in - (now - tail.at), 0.0)
        elif status is not None and status < 400:
            request_id = _request_id(headers)
            outcome = Outcome.OK if retries == 0 else Outcome.RETRIED_OK
            reason = "succeeded" if retries == 0 else f"succeeded after {plural(retries, 'retry', 'retries')}"
        elif last is not None:
            code, request_id, next_action = last.code, last.request_id, last.next_action
            outcome = _outcome(last.decision.verdict, retries)
            reason = last.decision.reason
            if outcome is Outcome.GAVE_UP and last.retry_in is not None:
                retry_in = max(last.retry_in - (now - last.at), 0.0)
        else:
            outcome = Outcome.NO_RETRY if retries == 0 else Outcome.GAVE_UP
            reason = "transport error before any response" if status is None else status_label(status)
            request_id = _request_id(headers)
        if retry_in is None and outcome is not Outcome.OK and outcome is not Outcome.RETRIED_OK:
            retry_in = given_retry_in
        if auth_conflict and status == 401:
            reason += "; the request carried both x-api-key and Authorization: send only one"
        ids: Tuple[str, ...] = ()
        if self.attempts:
            ids = tuple(a.request_id for a in self.attempts if a.request_id)
            if error is None:
                error = next((a.error for a in reversed(self.attempts) if a.error), None)
        if request_id and (not ids or ids[-1] != request_id):
            ids += (request_id,)
        return frozen(
            SumeRecord,
            idempotency_key=self.key,
            attempts=retries + self.hops,
            outcome=outcome,
            status=status,
            code=code,
            request_id=request_id,
            request_ids=ids,
            waits=tuple(self.waits) if retries else (),
            elapsed=max(now - self.start, 0.0),
            reason=reason,
            next_action=next_action,
            method=self.method,
            url=redact_url(self.url),
            paced=self.paced,
            fleet_fallbacks=self.fallbacks,
            fleet_refused=self.fleet_refused,
            retry_in=retry_in,
            error=error,
        )

    def _succeeded(self, status: int, headers: Optional[Mapping[str, str]], now: float) -> SumeRecord:
        """The record of a request whose first response of each hop was a success: what
        ``finish`` makes then, without the branches only a retry or a give-up reads."""
        request_id = _request_id(headers)
        # Made on every request: the fields every success shares are copied in at once, the
        # rest set one by one (what frozen() does, without a keyword dict of nineteen).
        record: SumeRecord = object.__new__(SumeRecord)
        fields = record.__dict__
        fields.update(_SUCCEEDED)
        fields["idempotency_key"] = self.key
        fields["attempts"] = self.hops
        fields["status"] = status
        fields["request_id"] = request_id
        fields["request_ids"] = (request_id,) if request_id else ()
        fields["elapsed"] = max(now - self.start, 0.0)
        fields["method"] = self.method
        fields["url"] = redact_url(self.url)
        fields["paced"] = self.paced
        fields["fleet_fallbacks"] = self.fallbacks
        fields["fleet_refused"] = self.fleet_refused
        return record


#: What every first-try success's record says, whatever the request.
_SUCCEEDED = {
    "outcome": Outcome.OK,
    "code": None,
    "waits": (),
    "reason": "succeeded",
    "next_action": None,
    "retry_in": None,
    "error": None,
}


def _outcome(verdict: Verdict, retries: int) -> Outcome:
    if verdict is Verdict.FIX:
        return Outcome.FIX
    if verdict is Verdict.POLL:
        return Outcome.POLL
    if verdict is Verdict.NO_RETRY and retries == 0:
        return Outcome.NO_RETRY
    return Outcome.GAVE_UP


def _request_id(headers: Optional[Mapping[str, str]]) -> Optional[str]:
    if headers is None:
        return None
    for name in REQUEST_ID_HEADERS:
        value = short_text(header_value(headers, name))
        if value:
            return value
    return None


#: The context of the logical request this thread is sending, if any.
current: ContextVar[Optional[RequestContext]] = ContextVar("sume_request", default=None)
