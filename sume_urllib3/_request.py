"""One logical request's state, from the session's call to the record it ends with.

Its life, step by step (session, adapter, urllib3, the decision, the record, the observers),
is told once, in the docs' "How it works" page (docs/how-it-works.md).
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence, Tuple

from ._envelope import REQUEST_ID_HEADERS, short_text
from ._idempotency import KEYED_METHODS, body_is_replayable, new_key, validate_idempotency_key
from ._policy import Decision, Policy, Verdict
from ._record import Outcome, SumeRecord, status_label
from ._redact import redact_url
from ._util import RandomSource, uniform
from .pacing._fleet import ANONYMOUS

# A fleet's wait longer than the policy's by less than this is the same wait (float noise).
HELD = 1e-6


class Attempt(NamedTuple):
    """One consulted attempt: what came back, what the policy said, and when."""

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


class RetryTurn(NamedTuple):
    """The retry's turn: the wait before it, or why it may not go (and when it might)."""

    wait: float
    refused: Optional[str] = None
    retry_in: Optional[float] = None


class RequestContext:
    """Mutable state of one logical request; owned by the thread that sends it.

    Its attributes are written here, by its own operations; everything but the start has a
    class-level default, so a request sets only what its path needs.
    """

    #: A per-call policy (``session.post(..., policy=...)``), else None for the retry's own.
    policy: Optional[Policy] = None
    #: True when a SumeSession made it: the session reports the outcome, not the adapter.
    owned = False
    #: The fleet's name for the API key (a hash, never the key).
    key_id: Optional[str] = None
    method = ""
    url = ""
    shown_url = ""  # the URL as records and events show it: no query, userinfo or fragment
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
    stream: Any = None  # a _body.StreamWatch: a stream=True body decides the outcome when it ends
    watch: Any = None  # a _deadline.Watch: cuts the attempt's socket when the deadline passes
    answered: Any = None  # a weakref to a session hop's error response (see SumeAdapter._refuse)

    def __init__(
        self,
        start: float,
        *,
        now: Callable[[], float] = time.monotonic,
        policy: Optional[Policy] = None,
        owned: bool = False,
        fleet: Any = None,
        method: str = "",
        url: str = "",
    ) -> None:
        self.start = start
        self.now = now  # the request's clock, chosen as it starts (see SumeRetry.timer)
        if policy is not None:
            self.policy = policy
        if owned:
            self.owned = owned
        if fleet is not None:
            self.fleet = fleet
        if method:
            self.method = method
        if url:
            self.url, self.shown_url = url, _shown(url)

    def deadline(self, policy: Policy) -> float:
        """Clock time after which no attempt may start."""
        return self.start + policy.max_elapsed

    def join(self, adapter: Any, method: str, url: str, key: Optional[str], body: Any) -> Optional[str]:
        """The first hop: who serves it, what it asks for, whether its body can be sent again.

        ``key`` is the request's own Idempotency-Key header (checked), else a POST or PATCH gets
        a new one; returns the key to send (None: none).
        """
        self.adapter, self.method, self.url, self.shown_url = adapter, method, url, _shown(url)
        if not self.owned:
            self.fleet = adapter.fleet
        if key is not None:
            key = validate_idempotency_key(key)
        elif method in KEYED_METHODS:
            key = new_key()
        self.key, self.replayable = key, body_is_replayable(body)
        if self.replayable and hasattr(body, "tell"):
            try:
                self.body_pos = body.tell()  # where a file body starts, to send it whole again
            except Exception:
                self.replayable = False
        return key

    def pace_as(self, key_id: Optional[str]) -> None:
        """The fleet's name for the key this request sends (a session decides it before the first hop)."""
        self.key_id = key_id

    def add(self, attempt: Attempt) -> None:
        """Note one consulted attempt (a retry when its verdict is RETRY)."""
        self.attempts = [*self.attempts, attempt]
        if attempt.decision.verdict is Verdict.RETRY:
            self.retries += 1

    def refuse(self, by: Any, *, raise_now: bool) -> None:
        """Note that the retry ``by`` refused the response, and whether urllib3 must raise.

        urllib3 asks ``by.raise_on_status`` next, and other threads may share ``by`` (a
        template): the answer waits here, made current for a lone retry's request (an
        adapter's is current already).
        """
        if self.adapter is None:
            current.set(self)
        self.raised_by, self.raise_now = by, raise_now

    # -- the fleet's turns -------------------------------------------------------------

    def granted(self, grant: Any, key_id: Optional[str] = None) -> None:
        """The fleet let the attempt go: its grant is released when the attempt ends."""
        self.grant = grant
        if key_id is not None:
            self.key_id = key_id

    def held(self, grant: Any, beyond: float) -> None:
        """Count what a grant says: a fallback, a refusal, ``beyond`` seconds held past the policy."""
        if grant.fallback:
            self.fallbacks += 1
        if grant.refused:
            self.fleet_refused = True
        self.paced += beyond

    def leave_fleet(self) -> None:
        """Another host's answers must not pace this key: no more turns for this request."""
        self.fleet = None

    def retry_turn(
        self,
        policy: Policy,
        wait: float,
        *,
        throttled: bool,
        budget: Any,
        rng: RandomSource,
        now: float,
    ) -> RetryTurn:
        """Spend the retry budget and take the fleet's turn for a retry the policy allowed.

        A retry the server paced (a 429, or a Retry-After) waits its turn without spending the
        budget: the server, not an outage, asked for it. Any other waits, when the budget is
        spent, until a unit of it is free, and is refused only when that comes after the
        deadline. The fleet may make the wait longer (the pace of every sender of this key) or
        refuse the turn when it would cross the deadline.
        """
        if budget is not None and not throttled:
            hold = budget.reserve(self.deadline(policy) - now)
            if hold is None:
                return RetryTurn(wait, "retry budget exhausted")
            wait = max(wait, hold)
        fleet = self.fleet
        if fleet is None:
            return RetryTurn(wait)
        grant = fleet.acquire(
            self.key_id or ANONYMOUS,
            time_left=self.deadline(policy) - now,
            retry="throttle" if throttled else "error",
            not_before=wait,
        )
        if grant.refused:
            self.held(grant, 0.0)
            return RetryTurn(wait, grant.refused, refused_retry_in(max(grant.wait, wait), rng))
        longer = grant.wait > wait + HELD
        if longer or grant.fallback:
            self.held(grant, grant.wait - wait if longer else 0.0)
        self.grant = grant
        return RetryTurn(grant.wait if longer else wait)

    def end_turn(self, status: Optional[int], headers: Optional[Mapping[str, str]]) -> None:
        """Tell the fleet what the attempt in flight got (None: no response), once."""
        grant, self.grant = self.grant, None
        if grant is not None:
            self.fleet.release(self.key_id, grant, status, headers)

    # -- the end -----------------------------------------------------------------------

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
        """The record of this request, ending with ``status`` (None: no response); kept as ``record``.

        ``error`` names a failure after the last decision (a body that broke mid-read);
        ``auth_conflict`` adds the "send only one auth header" hint to a 401; ``retry_in``
        is used when nothing the request met says when to try again.
        """
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
            reason = (
                f"succeeded after {retries} {'retry' if retries == 1 else 'retries'}"
                if retries
                else "succeeded"
            )
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
        self.record = SumeRecord(
            idempotency_key=self.key,
            attempts=retries + self.hops,
            outcome=outcome,
            status=status,
            code=code,
            request_id=request_id,
            request_ids=ids,
            waits=tuple(a.decision.wait or 0.0 for a in self.attempts if a.decision.verdict is Verdict.RETRY),
            elapsed=max(now - self.start, 0.0),
            reason=reason,
            next_action=next_action,
            method=self.method,
            url=self.shown_url,
            paced=self.paced,
            fleet_fallbacks=self.fallbacks,
            fleet_refused=self.fleet_refused,
            retry_in=retry_in,
            error=error,
        )
        return self.record


def refused_retry_in(wait: float, rng: RandomSource) -> float:
    """``retry_in`` after the fleet refused a turn: the next turn, spread over one more of it.

    Every caller refused at one moment hears the same "next turn in X s". Told X, a queue
    of refused tasks would come back at one instant and be refused together again; drawn
    from [X, 2X] they come back over a window as long as the backlog ahead of them, which
    the pace then serves one by one.
    """
    return wait * uniform(rng, 1.0, 2.0)


def _shown(url: str) -> str:
    # Redacted only when there is something to take out: nearly every URL has none.
    return redact_url(url) if ("?" in url or "@" in url or "#" in url) else url


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
        value = short_text(headers.get(name))
        if value:
            return value
    return None


#: The context of the logical request this thread is sending, if any.
current: ContextVar[Optional[RequestContext]] = ContextVar("sume_request", default=None)
