"""One logical request's state, from the session's call to the record it ends with.

Its life, step by step (session, adapter, urllib3, the decision, the record, the observers),
is told once, in the docs' "How it works" page (docs/how-it-works.md).
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import time
from contextvars import ContextVar
from typing import Any, Callable, List, Mapping, NamedTuple, Optional, Sequence, Union

from . import _sleeping
from ._envelope import REQUEST_ID_HEADERS, short_text, status_label
from ._idempotency import BODY_METHODS, KEYED_METHODS, validate_idempotency_key
from ._policy import Decision, Policy, Verdict
from ._record import Outcome, SumeRecord
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
        return status_label(self.status, self.code)


class Turn(NamedTuple):
    """The next attempt's turn: the wait before it, or why it may not go (and when it might)."""

    wait: float
    refused: Optional[str] = None
    retry_in: Optional[float] = None
    grant: Any = None  # the fleet's grant (its ``source`` and ``again``), when a fleet paces the request


class RequestContext:
    """Mutable state of one logical request, owned by the thread that sends it and written by
    its own operations; every attribute but the start has a class-level default."""

    #: The request's policy: a per-call one (``session.post(..., policy=...)``), else the
    #: retry's own from the first hop on.
    policy: Optional[Policy] = None
    #: Clock time after which no attempt may start: the start plus the policy's ``max_elapsed``.
    deadline = math.inf
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
        start: Optional[float] = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        policy: Optional[Policy] = None,
        owned: bool = False,
        fleet: Any = None,
        method: str = "",
        url: str = "",
    ) -> None:
        if clock is not time.monotonic or _sleeping._virtual is not None:  # the one test switch, read
            # A test's time: an injected clock, or the virtual time of ``testing.no_sleep`` (which
            # socket timeouts and the deadline's watch do not follow).
            clock = functools.partial(_sleeping.now, clock)
        self.now = clock  # the request's clock, chosen as it starts
        self.start = clock() if start is None else start
        self.owned, self.fleet, self.method = owned, fleet, method
        if policy is not None:
            self.policy, self.deadline = policy, self.start + policy.max_elapsed
        if url:
            self.url, self.shown_url = url, redact_url(url)

    def join(
        self, adapter: Any, method: str, url: str, key: Union[str, bytes, None], body: Any
    ) -> Optional[str]:
        """The first hop: who serves it, under which policy, whether its body can be sent again
        (bytes, text or a seekable file can; a generator cannot), and the key it sends (returned):
        its own Idempotency-Key header (checked), else for a POST or PATCH a new random UUID."""
        self.adapter, self.method, self.url = adapter, method, url
        # Redacted only when there is something to take out: nearly every URL has none.
        self.shown_url = redact_url(url) if ("?" in url or "@" in url or "#" in url) else url
        if self.policy is None:
            self.policy = adapter.retry.policy
            self.deadline = self.start + self.policy.max_elapsed
        if not self.owned:
            self.fleet = adapter.fleet
        if key is not None:
            key = validate_idempotency_key(key)
        elif method in KEYED_METHODS:
            import uuid  # loaded by the first request that needs a key

            key = str(uuid.uuid4())
        self.key = key
        if body is None or isinstance(body, (bytes, bytearray, str)):
            return key  # sent whole every time
        self.replayable = False  # until a file shows it can: generators are consumed by the first send
        if isinstance(body, io.IOBase) or hasattr(body, "read"):
            with contextlib.suppress(Exception):  # a file that fails to say is not sent twice
                if hasattr(body, "seekable"):
                    replayable = bool(body.seekable())
                else:
                    replayable = hasattr(body, "tell") and hasattr(body, "seek")
                if replayable and hasattr(body, "tell"):
                    self.body_pos = body.tell()  # where a file body starts, to send it whole again
                self.replayable = replayable
        return key

    def add(self, attempt: Attempt) -> None:
        """Note one consulted attempt (a retry when its verdict is RETRY)."""
        self.attempts = [*self.attempts, attempt]
        if attempt.decision.verdict is Verdict.RETRY:
            self.retries += 1

    def refuse(self, by: Any, *, raise_now: bool) -> None:
        """Note that the retry ``by`` refused the response, and whether ``by.raise_on_status`` is
        to say raise; made current for a lone retry's request (an adapter's is current already)."""
        if self.adapter is None:
            current.set(self)
        self.raised_by, self.raise_now = by, raise_now

    # -- the fleet's turns -------------------------------------------------------------

    def take_turn(
        self,
        now: float,
        wait: float = 0.0,
        *,
        key_id: Optional[str] = None,
        retry: Optional[str] = None,
        budget: Any = None,
        rng: RandomSource = None,
    ) -> Turn:
        """The fleet's turn for the next attempt, at least ``wait`` (the policy's) from ``now``.

        A "throttle" retry (the server paced it: a 429, a Retry-After) does not spend the retry
        ``budget``; an "error" retry waits, when the budget is spent, until a unit of it is
        free, refused only when that comes after the deadline. The fleet may make the wait
        longer (the pace of every sender of this key) or refuse a turn that would cross the
        deadline; its grant is held until :meth:`end_turn`.
        """
        if budget is not None and retry == "error":
            hold = budget.reserve(self.deadline - now)
            if hold is None:
                return Turn(wait, "retry budget exhausted")
            wait = max(wait, hold)
        if key_id is not None:
            self.key_id = key_id
        if self.fleet is None:
            return Turn(wait)
        grant = self.fleet.acquire(
            self.key_id or ANONYMOUS, time_left=self.deadline - now, retry=retry, not_before=wait
        )
        if grant.fallback:
            self.fallbacks += 1
        if grant.refused:
            # Every caller refused at one moment hears of the same next turn X; told X, a queue
            # of refused tasks would come back at one instant and be refused together again:
            # drawn from [X, 2X], they come back over a window the pace then serves one by one.
            self.fleet_refused = True
            return Turn(wait, grant.refused, max(grant.wait, wait) * uniform(rng, 1.0, 2.0))
        if grant.wait > wait + HELD:
            self.paced += grant.wait - wait
            wait = grant.wait
        self.grant = grant
        return Turn(wait, grant=grant)

    def end_turn(self, status: Optional[int], headers: Optional[Mapping[str, str]]) -> None:
        """Tell the fleet what the attempt in flight got (None: no response), once."""
        grant, self.grant = self.grant, None
        if grant is not None:
            self.fleet.release(self.key_id, grant, status, headers)

    def leave_fleet(self) -> None:
        """Another host's answers must not pace this key: no more turns for this request."""
        self.fleet = None

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
        ``auth_conflict`` adds the "send only one auth header" hint to a 401; ``retry_in`` is
        used when nothing the request met says when to try again.
        """
        retries, tail = self.retries, self.attempts[-1] if self.attempts else None
        # The attempt that decided this status (None: the final response was not consulted).
        last = tail if tail is not None and tail.decision.verdict is not Verdict.RETRY else None
        if last is not None and last.status != status:
            last = None
        ok = error is None and status is not None and status < 400
        code = request_id = next_action = None
        if last is not None and not ok:
            code, request_id, next_action = last.code, last.request_id, last.next_action
        elif headers is not None:
            for name in REQUEST_ID_HEADERS:
                request_id = short_text(headers.get(name))
                if request_id:
                    break
        stopped = None  # the attempt whose retry_in stands
        outcome = Outcome.GAVE_UP if retries else Outcome.NO_RETRY
        if ok:
            outcome = Outcome.RETRIED_OK if retries else Outcome.OK
            word = "retry" if retries == 1 else "retries"
            reason = f"succeeded after {retries} {word}" if retries else "succeeded"
            retry_in = None
        elif error is not None:
            reason = (
                f"{status_label(status)}: the body failed mid-read ({error})"
                if status is not None
                else f"no response: stopped by {error} before the request ended"
            )
            # The body broke and the policy had stopped (deadline, counters): a later try may do.
            stopped = tail if tail is not None and tail.decision.verdict is Verdict.STOP else None
        elif last is not None:
            verdict, reason = last.decision.verdict, last.decision.reason
            if verdict is Verdict.FIX or verdict is Verdict.POLL:
                outcome = Outcome(verdict.value)
            elif verdict is Verdict.STOP:
                outcome = Outcome.GAVE_UP  # the policy stopped even the first retry (deadline, cap)
            stopped = last if outcome is Outcome.GAVE_UP else None
        else:
            reason = "transport error before any response" if status is None else status_label(status)
        if stopped is not None and stopped.retry_in is not None:
            retry_in = max(stopped.retry_in - (now - stopped.at), 0.0)
        if auth_conflict and status == 401:
            reason += "; the request carried both x-api-key and Authorization: send only one"
        ids: List[str] = []
        waits: List[float] = []
        met = None  # the last transport error an attempt met
        for attempt in self.attempts:
            if attempt.request_id:
                ids.append(attempt.request_id)
            if attempt.decision.verdict is Verdict.RETRY:
                waits.append(attempt.decision.wait or 0.0)
            met = attempt.error or met
        if request_id and (not ids or ids[-1] != request_id):
            ids.append(request_id)
        self.record = SumeRecord(
            idempotency_key=self.key,
            attempts=retries + self.hops,
            outcome=outcome,
            status=status,
            code=code,
            request_id=request_id,
            request_ids=tuple(ids),
            waits=tuple(waits),
            elapsed=max(now - self.start, 0.0),
            reason=reason,
            next_action=next_action,
            method=self.method,
            url=self.shown_url,
            paced=self.paced,
            fleet_fallbacks=self.fallbacks,
            fleet_refused=self.fleet_refused,
            retry_in=retry_in,
            error=met if error is None else error,
        )
        return self.record


def body_refusal(method: Optional[str], replayable: bool, lone: bool = False) -> Optional[str]:
    """Why this request's body may not be sent again (a retry, a 307/308, a resend), or None.

    ``replayable`` is what :meth:`RequestContext.join` saw; a ``lone`` ``SumeRetry`` never sees
    the body (urllib3 hands a Retry the method and URL only), so it resends no method with one.
    """
    if lone and (method or "").upper() in BODY_METHODS:
        return "a lone SumeRetry cannot see the request body, so it never sends it twice"
    if not replayable:
        return "the request body cannot be replayed (a generator or a stream without seek)"
    return None


#: The context of the logical request this thread is sending, if any.
current: ContextVar[Optional[RequestContext]] = ContextVar("sume_request", default=None)
