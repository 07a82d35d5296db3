"""SumeAdapter: idempotency keys, per-request state and records around urllib3's retries."""

from __future__ import annotations

import functools
import os
import time
import weakref
from typing import Any, Callable, Dict, FrozenSet, Iterable, Mapping, NoReturn, Optional, Tuple, Union, cast

import requests
import urllib3
from requests.adapters import HTTPAdapter
from requests.models import REDIRECT_STATI

from . import _deadline, _fork, _sleeping
from ._body import BODY_ERRORS, DRAIN_LIMIT, StreamWatch, hold_whole
from ._config import check_flag, check_pool_arguments
from ._deadline import DeadlineTimeout, TimeoutSpec, Watch, check_timeout, timeout_for
from ._errors import ConfigurationError, SumeRetryError, raisable, redact, throw
from ._idempotency import IDEMPOTENCY_HEADER
from ._policy import Decision, Policy, Verdict
from ._record import Outcome, SumeRecord
from ._redirects import (
    TAKEN_BEFORE,
    answered,
    followed_from,
    left_behind,
    spent_body_refusal,
    strip,
    taken_before,
)
from ._request import Attempt, RequestContext, current
from ._retry import COUNTERS_OUT, SumeRetry, stopped
from ._util import RandomSource, leaves_origin
from .observe import Observers, RequestStart, SumeObserver, in_own_context
from .pacing._fleet import Fleet, LocalFleet, RetryBudget
from .pacing._signals import key_ids


class Default:
    """Marker for a default made when it is used (the process-wide fleet, a session's budget)."""

    def __repr__(self) -> str:
        return "<default>"


#: The ``fleet=`` default: ``LocalFleet.default()``, shared by the whole process.
DEFAULT_FLEET: Any = Default()


# urllib3 2 enforces Content-Length by default; 1.26 only when asked (see _transmit).
_ENFORCE_LENGTH = not hasattr(urllib3, "BaseHTTPResponse")  # added in urllib3 2.0


class SumeAdapter(HTTPAdapter):
    """An ``HTTPAdapter`` that makes every request follow the Sume retry policy.

    It adds one ``Idempotency-Key`` per logical POST/PATCH (a caller's own key is kept
    and validated), gives ``SumeRetry`` the request's start time, key and whether its
    body can be replayed, reads the body of a non-streamed response (a body that breaks
    mid-read is recorded, and retried when the request may be sent again), attaches
    ``response.sume`` (a :class:`SumeRecord`), tells the observers how each request
    ended, and raises :class:`SumeRetryError` on giving up unless ``raise_on_give_up``
    is False. It strips ``x-api-key`` and ``Authorization`` from a redirect that leaves
    the host.

    :param policy: the :class:`Policy` (default ``Policy()``).
    :param raise_on_give_up: raise :class:`SumeRetryError` on a give-up (default), else
        return the last response with ``response.sume.outcome == "gave_up"``.
    :param observers: objects with ``on_retry``/``on_outcome`` hooks.
    :param retry_budget: a shared :class:`RetryBudget`, or None (default) for none.
    :param timeout: the timeout of a request sent without one, in requests' forms; None (the
        default here) leaves it without one, as requests does.
    :param fleet: the :class:`Fleet` asked for a turn before every attempt; by default
        the process-wide ``LocalFleet.default()`` (one entry per origin and key sent, by
        a hash of the pair); None for no pacing.
    :param sleep: how to wait; :param clock: a monotonic clock; :param rng: the jitter source
        (a ``random.Random`` or a callable returning [0, 1)): all three as for SumeSession.
    :param max_retries: a ready :class:`SumeRetry` instead of the arguments above.
    :param adapter_kwargs: ``HTTPAdapter`` arguments (``pool_connections``, ...).
    """

    __attrs__ = [*HTTPAdapter.__attrs__, "raise_on_give_up", "observers", "timeout", "fleet"]  # noqa: RUF012

    #: The retry template every request starts from (never changed by a request): ``max_retries``,
    #: typed (see ``__setattr__``).
    retry: SumeRetry

    def __init__(
        self,
        policy: Optional[Policy] = None,
        *,
        raise_on_give_up: bool = True,
        observers: Iterable[SumeObserver] = (),
        retry_budget: Optional[RetryBudget] = None,
        timeout: TimeoutSpec = None,
        fleet: Optional[Fleet] = DEFAULT_FLEET,
        sleep: Optional[Callable[[float], None]] = None,
        clock: Optional[Callable[[], float]] = None,
        rng: RandomSource = None,
        max_retries: Optional[SumeRetry] = None,
        **adapter_kwargs: Any,
    ) -> None:
        # What this adapter was given itself: mounted on a SumeSession, it keeps these and
        # takes the session's for the rest (see serve_as). An iterator of observers is not consumed.
        retry_given = not (isinstance(observers, (tuple, list)) and not observers) or any(
            value is not None for value in (policy, max_retries, retry_budget, sleep, clock, rng)
        )
        own = {"retry": retry_given, "timeout": timeout is not None, "fleet": fleet is not DEFAULT_FLEET}
        own["raise_on_give_up"] = raise_on_give_up is not True
        self._own_settings = frozenset(name for name, given in own.items() if given)
        self.timeout = check_timeout(timeout)
        self.fleet = _checked_fleet(fleet, clock, rng)
        if max_retries is None:
            max_retries = SumeRetry(
                policy=policy,  # by name: SumeRetry(5) would be urllib3's total=5
                sleep=sleep,
                clock=clock,
                rng=rng,
                retry_budget=retry_budget,
                observers=observers,
                raise_on_status=False,
            )
        elif not isinstance(max_retries, SumeRetry):
            raise ConfigurationError("max_retries must be a SumeRetry (or None for the default)")
        elif any(v is not None for v in (policy, retry_budget, sleep, clock, rng)) or tuple(observers):
            raise ConfigurationError(
                "give policy, retry_budget, observers, sleep, clock and rng to the SumeRetry "
                "passed as max_retries, not to the adapter as well"
            )
        else:
            # The adapter raises SumeRetryError itself; urllib3 must hand responses back.
            max_retries = max_retries.new(raise_on_status=False)
        self.raise_on_give_up = check_flag(raise_on_give_up, "raise_on_give_up")
        check_pool_arguments(adapter_kwargs)
        super().__init__(max_retries=max_retries, **adapter_kwargs)

    def __setattr__(self, name: str, value: Any) -> None:
        # A library reconfiguring a mounted adapter (requests-futures sets max_retries to a urllib3
        # Retry) is refused by name, rather than failing every later request deep in a retry.
        if name == "max_retries":
            if not isinstance(value, SumeRetry):
                raise ConfigurationError(
                    f"SumeAdapter.max_retries must be a SumeRetry, got {type(value).__name__}: cap "
                    "retries with Policy(max_retries=...) (and leave max_retries out of what a "
                    "library such as requests-futures sets on mounted adapters)"
                )
            super().__setattr__("retry", value)
        super().__setattr__(name, value)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        """requests' pools, whose connections the request's deadline can interrupt."""
        super().init_poolmanager(*args, **kwargs)  # in __init__ and when unpickled
        self.poolmanager.pool_classes_by_scheme = _deadline.POOL_CLASSES
        _fork.track(self)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        """requests' proxy pools, with the same deadline as :meth:`init_poolmanager`'s."""
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        classes = getattr(manager, "pool_classes_by_scheme", None)
        if classes is not None:
            # A SOCKS manager's pools have connection classes of their own: each kept, watched.
            manager.pool_classes_by_scheme = _deadline.watched_pools(classes)
        return manager

    def serve_as(self, other: SumeAdapter) -> None:
        """Serve with ``other``'s settings wherever this adapter was given none of its own
        (see ``SumeSession.mount``; ``SumeAdapter(Policy(...))`` keeps its policy)."""
        own: FrozenSet[str] = getattr(self, "_own_settings", frozenset())  # unpickled: gave none
        for name in {"retry", "timeout", "fleet", "raise_on_give_up"} - own:
            setattr(self, "max_retries" if name == "retry" else name, getattr(other, name))

    @property
    def policy(self) -> Policy:
        """The policy the retry carries out."""
        return self.retry.policy

    @property
    def observers(self) -> Observers:
        """Who is told about retries and outcomes."""
        return self.retry.observers

    @observers.setter
    def observers(self, value: Iterable[SumeObserver]) -> None:
        # HTTPAdapter.__setstate__ sets every __attrs__ entry back; the retry owns them.
        if tuple(value) != tuple(self.retry.observers):
            self.retry.observers = Observers(value)

    @property
    def retry_budget(self) -> Optional[RetryBudget]:
        """The retry budget the retry spends from, if any."""
        return self.retry.retry_budget

    def __repr__(self) -> str:
        return f"<SumeAdapter {self.retry!r}>"

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: Union[float, Tuple[float, float], Tuple[float, None], Any, None] = None,
        verify: Union[bool, str] = True,
        cert: Union[bytes, str, Tuple[Union[bytes, str], Union[bytes, str]], None] = None,
        proxies: Optional[Mapping[str, str]] = None,
    ) -> requests.Response:
        """Send with the policy; see the class docstring for what is added."""
        if os.getpid() != _fork.pid:
            _fork.check()  # a worker forked without at-fork hooks must not send on the parent's sockets
        sent = {"stream": stream, "timeout": timeout, "verify": verify, "cert": cert, "proxies": proxies}
        context = current.get()
        # Join only a session's request that no other adapter serves; a context a lone
        # SumeRetry left behind on this thread, or another adapter's, is not ours.
        if context is not None and context.owned and (context.adapter is None or context.adapter is self):
            return self._serve(context, request, sent)
        if self.retry.observers.starts:  # this call is the logical request, and is announced
            return in_own_context(self._serve, None, request, sent)
        return self._serve(None, request, sent)

    def _serve(
        self, joined: Optional[RequestContext], request: requests.PreparedRequest, sent: Dict[str, Any]
    ) -> requests.Response:
        """One hop of a session's request (``joined``), else of a logical request of its own, sent
        in the fleet's turn with the deadline's timeouts, and recorded."""
        retry = self.retry
        context = joined
        if context is None:
            context = RequestContext(clock=retry.clock)
            token = current.set(context)
        try:
            self._hop(context, request)
            policy = context.policy or retry.policy
            if context.hops and context.now() >= context.deadline:  # requests read a redirect's body
                why = f"not sent: the deadline (max_elapsed={policy.max_elapsed:g}s) passed before this hop"
                self._refuse(context, request, why, Verdict.STOP)
            if context.hops and context.fleet is not None and leaves_origin(context.url, request.url or ""):
                context.leave_fleet()  # another host's answers must not pace this key
            while context.fleet is not None:  # slow start may ask a first attempt to come back
                key_id = context.key_id or key_ids.for_request(request.url or "", request.headers)
                turn = context.take_turn(context.now(), key_id=key_id, rng=retry.rng)
                if turn.refused is not None:  # the turn would cross the deadline: nothing is sent
                    self._refuse(context, request, f"not sent: {turn.refused}", Verdict.STOP, turn.retry_in)
                if turn.wait > 0 and turn.grant.source == "slow_start":
                    time.sleep(turn.wait)  # for responses in flight, in real time even in a test
                elif turn.wait > 0:
                    _sleeping.wait(turn.wait, retry.sleep_function)
                if not turn.grant.again:
                    break
            context.hops += 1
            timeout = check_timeout(sent["timeout"]) if sent["timeout"] is not None else self.timeout
            if context.now is time.monotonic:  # a test's clock measures time that did not pass
                sent["timeout"] = DeadlineTimeout(timeout, context.deadline)
                if context.watch is None:  # the read timeout restarts with every byte: this bounds a trickle
                    context.watch = Watch(context.deadline, policy.max_elapsed)
            else:
                sent["timeout"] = timeout
            response = self._transmit(context, request, policy, sent)
            return self._conclude(context, request, response, sent["stream"])
        except BaseException as exc:
            if not isinstance(exc, Exception):  # an interrupt is the caller's: no record, no outcome
                context.record = context.stream = None
            elif context.record is None and context.adapter is self:
                # Something other than the transport broke: the record still ends the request.
                context.finish(None, None, context.now(), error=type(exc).__name__)
            raise
        finally:
            if context.grant is not None:  # None after a response: end_turn released it there
                context.end_turn(None, None)
            if context.watch is not None and context.stream is None:
                context.watch.end()  # a stream stays watched while the caller reads it
                context.watch = None
            if joined is None:
                current.reset(token)
                if context.stream is not None:
                    context.stream.report_with(retry.observers.outcome)
                elif context.record is not None:
                    retry.observers.outcome(context.record)

    def _hop(self, context: RequestContext, request: requests.PreparedRequest) -> None:
        """The first hop joins the request (its key, its body; the budget counts it, ``on_start``
        hears of it); a redirect's hop leaves behind what must not go on. Either refuses a body
        that a send already took and that cannot be sent again."""
        if context.hops:
            strip(request.headers, left_behind(context.url, request.url or "", request.method))
            if context.owned and _has_both_auth(request.headers):
                # SumeSession refuses both before the first send; an auth handler may add one later.
                raise ConfigurationError(
                    "both x-api-key and Authorization are set on this request (an auth handler "
                    "added Authorization to a resend): send only one"
                )
            answered = context.record
            status = None if answered is None else answered.status
        else:
            followed = None if context.owned else followed_from(request.url)
            if followed is not None:  # a plain requests.Session following our last redirect
                strip(request.headers, left_behind(followed[0], request.url or "", request.method))
            method = (request.method or "GET").upper()
            key = context.join(
                self, method, request.url or "", request.headers.get(IDEMPOTENCY_HEADER), request.body
            )
            if key is not None:
                # On the prepared request itself (as str), so redirects and resends reuse it.
                request.headers[IDEMPOTENCY_HEADER] = key
            retry = self.retry
            if retry.retry_budget is not None:
                retry.retry_budget.record_request()
            if retry.observers.starts:
                retry.observers.start(RequestStart(method, context.shown_url, key))
            if followed is None:
                if not context.replayable and taken_before(request.body):  # a resend outside a session
                    self._refuse(context, request, TAKEN_BEFORE)
                return
            status = followed[1]
        why = spent_body_refusal(status, request.body, request.method, context.replayable)
        if why is not None:
            self._refuse(context, request, why)

    def _transmit(
        self, context: RequestContext, request: requests.PreparedRequest, policy: Policy, sent: Dict[str, Any]
    ) -> requests.Response:
        """Send through requests and urllib3 (whose loop the retry drives) until a response is
        in hand: a body that breaks mid-read is a read failure, resent when the request may be."""
        broken: Optional[Exception] = None  # a body that broke mid-read, being resent
        while True:
            try:
                response = super().send(request, **sent)
            except requests.exceptions.RequestException as exc:
                if broken is not None:
                    # The resend failed too: the caller hears of the first body's error (as requests
                    # reports it), the resend's failure its cause, its attempts in the record.
                    record = self._finish(context, request, None, None, error=type(broken).__name__)
                    raise raisable(broken, record) from redact(exc)
                # A give-up that is also requests' own class: its except clauses still work.
                throw(timeout_for(context.watch, exc), self._finish(context, request, None, None))
            if _ENFORCE_LENGTH:  # 1.26 hands back a body cut short as if whole, unless told
                response.raw.enforce_content_length = True
            if context.grant is not None:
                context.end_turn(response.status_code, response.headers)
            watch = context.watch
            if watch is not None and watch.fired:
                self._broke(context, request, response)
            status = response.status_code
            if sent["stream"] or status >= 400 or (status in REDIRECT_STATI and response.is_redirect):
                return response  # a redirect's body is requests' to read (it forgives a bad one)
            try:
                response.content  # noqa: B018 - requests reads it next; read it where we can act
            except BODY_ERRORS as exc:
                # A body that cannot be decoded comes the same way again: recorded, not resent.
                undecodable = isinstance(exc, requests.exceptions.ContentDecodingError)
                rewind = functools.partial(_rewind, request.body, context.body_pos)
                if undecodable or not _resend_broken_body(self.retry, context, exc, rewind):
                    self._broke(context, request, response, exc)
                response.close()
                broken = exc
                self.retry.sleep()
                continue
            if watch is not None and watch.fired:
                self._broke(context, request, response)
            return response

    def _conclude(
        self,
        context: RequestContext,
        request: requests.PreparedRequest,
        response: requests.Response,
        stream: bool,
    ) -> requests.Response:
        """Record how the hop ended (``response.sume``); raise the give-up unless told not to."""
        status = response.status_code
        last = context.attempts[-1] if context.attempts else None
        if status >= 400 and (last is None or last.decision.retry or last.status != status):
            # urllib3 never showed this response to the retry (requests < 2.29 streams
            # chunked bodies around urllib3): decide once here, but nothing was resent.
            seen = self.retry.decide_response(context, response.raw)
            if seen.decision.retry:
                why = f"{seen.label}: not retried: the transport did not consult the retry"
                seen = seen._replace(decision=Decision(Verdict.NO_RETRY, reason=why))
            context.add(seen)
        if status in REDIRECT_STATI or not context.owned:
            answered(request, response, context.url, note=not context.owned)
        if context.owned and status >= 400:
            # What a refused resend (an auth handler's answer to a 401) leaves the caller with:
            # held weakly, as only the caller may hold a streamed response.
            context.answered = weakref.ref(response)
        record = self._finish(context, request, status, response.headers)
        response.sume = record  # type: ignore[attr-defined]
        if stream and record.outcome is not Outcome.GAVE_UP:
            on_break = functools.partial(self._broken, context, request)  # not the response: see StreamWatch
            context.stream = StreamWatch(response, record, on_break, context.watch)
        if record.outcome is Outcome.GAVE_UP and self.raise_on_give_up:
            if not stream:
                # As requests reads every body it returns: the caller reads error.response.content
                # and the connection goes back to the pool whether or not they do.
                try:
                    response.content  # noqa: B018
                except BODY_ERRORS as exc:  # no body came whole: the give-up stands, this its cause
                    response.close()
                    raise SumeRetryError(record) from redact(exc)
            else:
                # A streamed body handed over on an exception is easily dropped unread, its
                # connection lost to a blocking pool: one within the drain's limit is read now.
                hold_whole(response.raw, DRAIN_LIMIT, lambda: context.now() >= context.deadline)
            raise SumeRetryError(record, response)
        if not stream and status >= 400:
            try:
                response.content  # noqa: B018 - requests reads it next; read it where we can record
            except BODY_ERRORS as exc:
                self._broke(context, request, response, exc)
        return response

    def _refuse(
        self,
        context: RequestContext,
        request: requests.PreparedRequest,
        reason: str,
        verdict: Verdict = Verdict.NO_RETRY,
        retry_in: Optional[float] = None,
    ) -> NoReturn:
        """End the request unsent for ``reason``, with the response a hop got before, if any."""
        previous = context.answered() if context.answered is not None else None
        status = None if previous is None else previous.status_code
        decision = Decision(verdict, reason=reason)
        context.add(Attempt(status, None, None, None, decision, at=context.now(), retry_in=retry_in))
        headers = None if previous is None else previous.headers
        raise SumeRetryError(self._finish(context, request, status, headers), previous)

    def _broke(
        self,
        context: RequestContext,
        request: requests.PreparedRequest,
        response: requests.Response,
        error: Optional[Exception] = None,
    ) -> NoReturn:
        """The body broke mid-read (``error``) and is not resent, or the deadline cut the response
        (None: headers or a body without a length end at the cut as if complete, and must not pass
        for a success): raise the error (a ReadTimeout when the deadline cut it) with the record."""
        if error is None:
            response.close()
            error = requests.exceptions.ConnectionError("cut at the deadline")
        cut = timeout_for(context.watch, error)
        throw(
            cut,
            self._finish(context, request, response.status_code, response.headers, error=type(cut).__name__),
        )

    def _broken(
        self,
        context: RequestContext,
        request: requests.PreparedRequest,
        response: requests.Response,
        error: str,
    ) -> SumeRecord:
        """The record of a streamed body that broke while the caller read it."""
        record = self._finish(context, request, response.status_code, response.headers, error=error)
        response.sume = record  # type: ignore[attr-defined]
        return record

    def _finish(
        self,
        context: RequestContext,
        request: requests.PreparedRequest,
        status: Optional[int],
        headers: Optional[Mapping[str, str]],
        *,
        error: Optional[str] = None,
    ) -> SumeRecord:
        retry_in = None
        if context.watch is not None and context.watch.fired:
            # The caller's deadline ended it, not the server: another try may go after a backoff.
            retry_in = (context.policy or self.policy).backoff(context.retries, self.retry.rng)
        conflict = status == 401 and _has_both_auth(request.headers)
        return context.finish(
            status, headers, context.now(), error=error, auth_conflict=conflict, retry_in=retry_in
        )

    def _after_fork(self) -> None:
        """In a forked child: the parent's pooled sockets are dropped (both processes would read
        each other's responses on them)."""
        self.poolmanager.clear()
        for proxy_manager in self.proxy_manager.values():
            proxy_manager.clear()


def _checked_fleet(fleet: Any, clock: Optional[Callable[[], float]], rng: RandomSource) -> Optional[Fleet]:
    """The fleet an adapter paces with: the given one (checked), or None, or by default the
    process-wide ``LocalFleet.default()``, on the adapter's own clock when it was given one (as
    SumeSession does: a fleet on real time would hold requests that a test's virtual clock has
    long let through)."""
    if fleet is DEFAULT_FLEET:
        return LocalFleet.default() if clock is None else LocalFleet(clock=clock, rng=rng)
    if fleet is not None and (
        isinstance(fleet, type)  # LocalFleet rather than LocalFleet(): its methods need an instance
        or not (callable(getattr(fleet, "acquire", None)) and callable(getattr(fleet, "release", None)))
    ):
        raise ConfigurationError(
            f"fleet must be a Fleet (LocalFleet, RedisFleet) or None, got {type(fleet).__name__}"
        )
    return cast("Optional[Fleet]", fleet)


def _resend_broken_body(
    retry: SumeRetry, context: RequestContext, error: Exception, rewind: Callable[[], bool]
) -> bool:
    """A body that broke mid-read after urllib3 handed the response back: resend it?

    Decided by ``retry`` as a read failure inside urllib3's loop, within urllib3's counters
    (``total``, ``read``: the resend starts urllib3 afresh), the body (``rewind`` puts a file
    body back, False when it cannot), the retry budget and the fleet's turn. Records the
    attempt; on a resend the wait is in ``context.next_wait`` for :meth:`SumeRetry.sleep`.
    """
    attempt = retry.decide_error(context, context.method, error)
    resend = attempt.decision.retry
    if resend and any(
        c is False or (type(c) is int and context.retries >= c) for c in (retry.total, retry.read)
    ):
        attempt, resend = stopped(attempt, COUNTERS_OUT), False
    elif resend and not rewind():
        why = f"{attempt.decision.reason}; the request body cannot be rewound"
        attempt, resend = attempt._replace(decision=Decision(Verdict.NO_RETRY, reason=why)), False
    if resend:
        wait = attempt.decision.wait or 0.0
        turn = context.take_turn(attempt.at, wait, retry="error", budget=retry.retry_budget, rng=retry.rng)
        if turn.refused is not None:
            attempt, resend = stopped(attempt, turn.refused, turn.retry_in), False
        context.next_wait = turn.wait
    context.add(attempt)
    if resend:
        retry.announce_retry(context, attempt, context.method)
    return resend


def _rewind(body: Any, position: Optional[int]) -> bool:
    """Put a file body back where the first attempt started it; False when that fails."""
    if position is None or not hasattr(body, "seek"):
        return True  # bytes and str are sent whole every time
    try:
        body.seek(position)
    except Exception:
        return False
    return True


def _has_both_auth(headers: Optional[Mapping[str, Any]]) -> bool:
    return headers is not None and "x-api-key" in headers and "Authorization" in headers
