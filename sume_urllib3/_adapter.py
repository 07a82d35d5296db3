"""SumeAdapter: idempotency keys, per-request state and records around urllib3's retries."""

from __future__ import annotations

import functools
import threading
import time
import weakref
from typing import Any, Callable, FrozenSet, Iterable, Mapping, NoReturn, Optional, Tuple, Union
from urllib.parse import urldefrag, urljoin

import requests
import urllib3
from requests.adapters import HTTPAdapter
from requests.models import REDIRECT_STATI
from requests.structures import CaseInsensitiveDict
from requests.utils import requote_uri

from . import _deadline, _fork, _sleeping
from ._body import BODY_ERRORS, hold_whole, watch_stream
from ._config import check_flag, check_pool_arguments
from ._deadline import TimeoutSpec, capped, check_timeout, on_real_time
from ._errors import ConfigurationError, SumeRetryError, raisable, redact, throw
from ._idempotency import (
    IDEMPOTENCY_HEADER,
    KEYED_METHODS,
    body_is_replayable,
    new_key,
    validate_idempotency_key,
)
from ._policy import Decision, Policy, Verdict
from ._record import Outcome, SumeRecord, status_label
from ._redact import redact_url
from ._request import Attempt, RequestContext, current
from ._retry import (
    DRAIN_LIMIT,
    SumeRetry,
    body_refusal,
    decide_response,
    end_turn,
    refused_retry_in,
    renamed_budget,
    resend_broken_body,
)
from ._util import RandomSource, header_value, leaves_origin
from .observe import Observers, RequestStart, SumeObserver, in_own_context
from .pacing._fleet import GRANT_NOW, Fleet, Grant, LocalFleet, RetryBudget
from .pacing._signals import key_ids


class _DefaultFleet:
    """Marker for "the process-wide LocalFleet"."""

    def __repr__(self) -> str:
        return "<default>"


#: The ``fleet=`` default: ``LocalFleet.default()``, shared by the whole process.
DEFAULT_FLEET: Any = _DefaultFleet()


def check_fleet(fleet: Any) -> Optional[Fleet]:
    """The fleet to use: the process-wide one for the default, None for no pacing."""
    if fleet is DEFAULT_FLEET:
        return LocalFleet.default()
    if fleet is not None and (
        isinstance(fleet, type)  # LocalFleet rather than LocalFleet(): its methods need an instance
        or not (callable(getattr(fleet, "acquire", None)) and callable(getattr(fleet, "release", None)))
    ):
        raise ConfigurationError(
            f"fleet must be a Fleet (LocalFleet, RedisFleet) or None, got {type(fleet).__name__}"
        )
    return fleet


#: Auth headers that never leave the origin they were meant for.
AUTH_HEADER_NAMES = ("x-api-key", "Authorization")
# urllib3 2 enforces Content-Length by default; 1.26 only when asked (see _send).
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
    :param timeout: the timeout of a request sent without one (requests' forms: seconds,
        ``(connect, read)`` with None for no limit, or a urllib3 ``Timeout``); None (the
        default here) leaves such a request without a timeout, as requests does.
    :param fleet: the :class:`Fleet` asked for a turn before every attempt; by default
        the process-wide ``LocalFleet.default()`` (one entry per origin and key sent, by
        a hash of the pair); None for no pacing.
    :param sleep: how to wait (default ``time.sleep``), for tests.
    :param clock: a monotonic clock (default ``time.monotonic``), for tests.
    :param rng: the jitter source, a ``random.Random`` or a callable returning [0, 1).
    :param max_retries: a ready :class:`SumeRetry` instead of the arguments above.
    :param adapter_kwargs: ``HTTPAdapter`` arguments (``pool_connections``, ...).
    """

    __attrs__ = [*HTTPAdapter.__attrs__, "raise_on_give_up", "observers", "timeout", "fleet"]  # noqa: RUF012

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
        if "budget" in adapter_kwargs:  # the older name, warned of as SumeRetry does
            retry_budget = renamed_budget(adapter_kwargs.pop("budget"), retry_budget, "SumeAdapter")
        # What this adapter was given itself: mounted on a SumeSession, it keeps these and
        # takes the session's for the rest (see serve_as).
        no_observers = isinstance(observers, (tuple, list)) and not observers  # never consume an iterator
        retry_given = not no_observers or any(
            value is not None for value in (policy, max_retries, retry_budget, sleep, clock, rng)
        )
        self._own_settings = frozenset(
            name
            for name, given in (
                ("retry", retry_given),
                ("timeout", timeout is not None),
                ("fleet", fleet is not DEFAULT_FLEET),
                ("raise_on_give_up", raise_on_give_up is not True),
            )
            if given
        )
        self.timeout = check_timeout(timeout)
        if fleet is DEFAULT_FLEET and clock is not None:
            # Paced on the adapter's own clock, as SumeSession does: a fleet on real time would
            # hold requests that a test's virtual clock has long let through.
            fleet = LocalFleet(clock=clock, rng=rng)
        self.fleet = check_fleet(fleet)
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
        _after_fork.add(self)

    def __setattr__(self, name: str, value: Any) -> None:
        # Libraries reconfigure mounted adapters in place (requests-futures' adapter_kwargs sets
        # max_retries to a urllib3 Retry): refused here, by name, rather than failing every
        # later request with an AttributeError deep in a retry.
        if name == "max_retries" and not isinstance(value, SumeRetry):
            raise ConfigurationError(
                f"SumeAdapter.max_retries must be a SumeRetry, got {type(value).__name__}: cap "
                "retries with Policy(max_retries=...) (and leave max_retries out of what a library "
                "such as requests-futures sets on mounted adapters)"
            )
        super().__setattr__(name, value)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        """requests' pools, whose connections the request's deadline can interrupt."""
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _deadline.POOL_CLASSES

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        """requests' proxy pools, with the same deadline as :meth:`init_poolmanager`'s."""
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        classes = getattr(manager, "pool_classes_by_scheme", None)
        if classes is not None:
            # A SOCKS manager's pools have connection classes of their own: each kept, watched.
            manager.pool_classes_by_scheme = _deadline.watched_pools(classes)
        return manager

    def serve_as(self, other: SumeAdapter) -> None:
        """Serve with ``other``'s settings wherever this adapter was given none of its own:
        how a SumeSession adopts an adapter mounted on it (``SumeAdapter(pool_maxsize=32)``
        serves with the session's policy, observers, budget, timeout, fleet and
        ``raise_on_give_up``; ``SumeAdapter(Policy(...))`` keeps its policy)."""
        own: FrozenSet[str] = getattr(self, "_own_settings", frozenset())  # unpickled: gave none
        if "retry" not in own:
            self.max_retries = other.max_retries
        if "timeout" not in own:
            self.timeout = other.timeout
        if "fleet" not in own:
            self.fleet = other.fleet
        if "raise_on_give_up" not in own:
            self.raise_on_give_up = other.raise_on_give_up

    @property
    def retry(self) -> SumeRetry:
        """The retry template every request starts from (never changed by a request)."""
        return self.max_retries  # type: ignore[return-value]  # always a SumeRetry, see __init__

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
        if isinstance(self.max_retries, SumeRetry) and tuple(value) != tuple(self.retry.observers):
            self.max_retries.observers = Observers(value)

    @property
    def retry_budget(self) -> Optional[RetryBudget]:
        """The retry budget the retry spends from, if any."""
        return self.retry.retry_budget

    budget = retry_budget  # the older name

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
        _fork.check()  # a worker forked without at-fork hooks must not send on the parent's sockets
        context = current.get()
        # Join only a session's request that no other adapter serves; a context a lone
        # SumeRetry left behind on this thread, or another adapter's, is not ours.
        if context is not None and context.owned and (context.adapter is None or context.adapter is self):
            return self._serve(context, request, stream, timeout, verify, cert, proxies)
        if self.retry.observers.starts:  # this call is the logical request, and is announced
            return in_own_context(self._serve, None, request, stream, timeout, verify, cert, proxies)
        return self._serve(None, request, stream, timeout, verify, cert, proxies)

    def _serve(
        self,
        joined: Optional[RequestContext],
        request: requests.PreparedRequest,
        stream: bool,
        timeout: Any,
        verify: Union[bool, str],
        cert: Any,
        proxies: Optional[Mapping[str, str]],
    ) -> requests.Response:
        """One call: a session's request (``joined``), else a logical request of its own."""
        own = joined is None
        context = RequestContext(_sleeping.now(self.retry.clock)) if joined is None else joined
        if own:
            token = current.set(context)
        try:
            return self._send(context, request, stream, timeout, verify, cert, proxies)
        except BaseException as exc:
            if context.record is None and context.adapter is self:
                # Something other than the transport broke: the record still ends the request.
                context.record = context.finish(
                    None, None, _sleeping.now(self.retry.clock), error=type(exc).__name__
                )
            raise
        finally:
            if context.grant is not None:  # None after a response: end_turn released it there
                end_turn(context, None, None)
            if context.watch is not None and context.stream is None:
                _deadline.disarm(context.watch)  # a stream stays watched while the caller reads it
                context.watch = None
            if own:
                current.reset(token)
                if context.stream is not None:
                    context.stream.report_with(self.observers.outcome)
                elif context.record is not None:
                    self.observers.outcome(context.record)

    def _send(
        self,
        context: RequestContext,
        request: requests.PreparedRequest,
        stream: bool,
        timeout: Any,
        verify: Union[bool, str],
        cert: Any,
        proxies: Optional[Mapping[str, str]],
    ) -> requests.Response:
        if context.hops:
            self._redirected(context.url, request)
            if context.owned and _has_both_auth(request.headers):
                # SumeSession refuses both before the first send; an auth handler (requests'
                # HTTPDigestAuth answering a 401 challenge) may add Authorization to a resend.
                raise ConfigurationError(
                    "both x-api-key and Authorization are set on this request (an auth handler "
                    "added Authorization to a resend): send only one"
                )
            answered = context.record
            self._refuse_a_spent_body(context, request, None if answered is None else answered.status)
        else:
            followed = None if context.owned else self._followed_from(request)
            if followed is not None:  # a plain requests.Session following our last redirect
                self._redirected(followed[0], request)
            self._join(context, request)
            if followed is not None:
                self._refuse_a_spent_body(context, request, followed[1])
            elif not context.replayable and _taken_before(request.body):
                # An auth handler's resend outside a SumeSession (or a caller's own): a new
                # request here, with a body an earlier send took.
                self._refuse(context, request, _TAKEN_BEFORE)
        retry: SumeRetry = self.max_retries  # type: ignore[assignment]  # self.retry, one call fewer
        policy = context.policy or retry.policy
        deadline = context.deadline(policy)
        fleet = context.fleet
        if fleet is not None and context.hops and leaves_origin(context.url, request.url or ""):
            fleet = context.fleet = None  # another host's answers must not pace this key
        if fleet is not None:
            key_id = context.key_id or self._key_id(request)
            grant = fleet.acquire(key_id, time_left=deadline - _sleeping.now(retry.clock))
            if grant is GRANT_NOW:  # the usual answer: nothing known, nothing held
                context.grant, context.key_id = grant, key_id
            else:
                self._take_turn(context, policy, request, key_id, grant)
        context.hops += 1
        timeout = check_timeout(timeout) if timeout is not None else self.timeout
        if on_real_time(retry.clock):
            timeout = capped(timeout, deadline, retry.clock)
            if context.watch is None:
                # The read timeout restarts with every byte: this bounds what a trickle can take.
                context.watch = _deadline.arm(deadline - time.monotonic(), policy.max_elapsed)
        broken: Optional[Exception] = None  # a body that broke mid-read, being resent
        while True:
            try:
                response = super().send(
                    request,
                    stream=stream,
                    timeout=timeout,
                    verify=verify,
                    cert=cert,
                    proxies=proxies,  # type: ignore[arg-type,unused-ignore]  # a Mapping is enough
                )
            except requests.exceptions.RequestException as exc:
                if broken is not None:  # the resend failed too: the caller hears of the body
                    raise self._body_failed(context, request, broken) from redact(exc)
                # A give-up that is also requests' own class: its except clauses still work.
                throw(self._cut_by_deadline(context, exc), self._finish(context, request, None, None))
            if _ENFORCE_LENGTH:
                # 1.26 hands back a body cut short as if whole (an error body, a gzip one, a
                # stream): told to, it raises at the cut, as 2.x does, on every read of it.
                response.raw.enforce_content_length = True
            if context.grant is not None:
                end_turn(context, response.status_code, response.headers)
            watch = context.watch
            if watch is not None and watch.fired:
                self._not_cut(context, request, response)
            status = response.status_code
            # is_redirect looks for Location in a CaseInsensitiveDict (a KeyError raised and
            # caught when it is absent): asked only of a redirect status.
            if stream or status >= 400 or (status in REDIRECT_STATI and response.is_redirect):
                break  # a redirect's body is requests' to read (it forgives a bad one)
            try:
                response.content  # noqa: B018 - requests reads it next; read it where we can act
                if watch is not None and watch.fired:
                    self._not_cut(context, request, response)
                break
            except BODY_ERRORS as exc:
                # A body that cannot be decoded comes the same way again: recorded, not resent.
                undecodable = isinstance(exc, requests.exceptions.ContentDecodingError)
                if undecodable or not self._retry_body(context, policy, exc, request):
                    cut = self._cut_by_deadline(context, exc)
                    record = self._finish(
                        context, request, response.status_code, response.headers, error=type(cut).__name__
                    )
                    throw(cut, record)
                response.close()
                broken = exc
                self.retry.sleep()
        last = context.attempts[-1] if context.attempts else None
        if response.status_code >= 400 and (
            last is None or last.decision.retry or last.status != response.status_code
        ):
            # urllib3 never showed this response to the retry (requests < 2.29 streams
            # chunked bodies around urllib3): decide once here, but nothing was resent.
            self._consult_late(context, response)
        if response.status_code in REDIRECT_STATI or not context.owned:
            self._answered_redirect(context, request, response)
        if context.owned and response.status_code >= 400:
            # The answer a refused resend leaves the caller with (a 401 challenge an auth handler
            # answers): held weakly, as only the caller may hold a streamed response (StreamWatch).
            context.answered = weakref.ref(response)
        record = self._finish(context, request, response.status_code, response.headers)
        response.sume = record  # type: ignore[attr-defined]
        if stream and record.outcome is not Outcome.GAVE_UP:
            on_break = functools.partial(self._broken, context, request)  # not the response: see StreamWatch
            context.stream = watch_stream(response, record, on_break, context.watch)
        if record.outcome is Outcome.GAVE_UP and self.raise_on_give_up:
            if not stream:
                # As requests reads every body it returns: the caller reads error.response.content
                # and the connection goes back to the pool whether or not they do.
                try:
                    response.content  # noqa: B018
                except BODY_ERRORS as exc:
                    # The give-up stands, without a body to hand over (none came whole): a body
                    # that broke or stalled frees its slot, and is the give-up's cause.
                    response.close()
                    raise SumeRetryError(record) from redact(exc)
            else:
                # Handed over on an exception, a streamed body is easily dropped unread, and a
                # blocking pool would never see its connection again: one that ends within the
                # drain's limit is read into memory now (the caller reads it as before), and its
                # connection goes back. A longer one is the caller's to read or close.
                hold_whole(response.raw, DRAIN_LIMIT, lambda: _sleeping.now(retry.clock) >= deadline)
            raise SumeRetryError(record, response)
        if not stream and response.status_code >= 400:
            try:
                response.content  # noqa: B018 - requests reads it next; read it where we can record
            except BODY_ERRORS as exc:
                cut = self._cut_by_deadline(context, exc)
                record = self._finish(
                    context, request, response.status_code, response.headers, error=type(cut).__name__
                )
                throw(cut, record)
        return response

    def _take_turn(
        self,
        context: RequestContext,
        policy: Policy,
        request: requests.PreparedRequest,
        key_id: str,
        grant: Grant,
    ) -> None:
        """Wait for the fleet's turn before sending; a turn past the deadline sends nothing."""
        fleet, clock = context.fleet, self.retry.clock
        deadline = context.deadline(policy)
        while True:  # slow start may ask a first attempt to come back (grant.again)
            if grant.fallback:
                context.fallbacks += 1
            if grant.refused:
                context.fleet_refused = True
                decision = Decision(Verdict.STOP, reason=f"not sent: {grant.refused}")
                # Spread: every caller refused now heard the same next turn.
                retry_in = refused_retry_in(grant.wait, self.retry.rng)
                now = _sleeping.now(clock)
                context.add(Attempt(None, None, None, None, decision, at=now, retry_in=retry_in))
                raise SumeRetryError(self._finish(context, request, None, None))
            if grant.wait > 0:
                context.paced += grant.wait
                if grant.source == "slow_start":
                    # Waiting for responses in flight, which arrive in real time even when
                    # a test's sleep and clock are virtual: this pause must really pass.
                    time.sleep(grant.wait)
                else:
                    _sleeping.wait(grant.wait, self.retry.sleep_function)
            if not grant.again:
                context.grant, context.key_id = grant, key_id
                return
            grant = fleet.acquire(key_id, time_left=deadline - _sleeping.now(clock))

    def _key_id(self, request: requests.PreparedRequest) -> str:
        """The fleet's name for (this request's origin, the key it carries), used without a
        SumeSession; hashed once per pair (see ``_keyid``)."""
        return key_ids.for_request(request.url or "", request.headers)

    def _join(self, context: RequestContext, request: requests.PreparedRequest) -> None:
        """The first hop: fix the key, the method, whether the body replays; count the request."""
        context.adapter = self
        method = (request.method or "GET").upper()
        context.method, context.url = method, request.url or ""  # before anything can fail
        key = header_value(request.headers, "idempotency-key")
        if key is not None:
            key = validate_idempotency_key(key)
        elif method in KEYED_METHODS:
            key = new_key()
        if key is not None:
            # On the prepared request itself (as str), so redirects and resends reuse it.
            request.headers[IDEMPOTENCY_HEADER] = key
        context.key = key
        context.replayable = body_is_replayable(request.body)
        if context.replayable and hasattr(request.body, "tell"):
            try:
                context.body_pos = request.body.tell()  # type: ignore[union-attr]
            except Exception:
                context.replayable = False
        if not context.owned:
            context.fleet = self.fleet
        retry = self.retry
        budget = retry.retry_budget
        if budget is not None:
            budget.record_request()
        observers = retry.observers
        if observers.starts:
            observers.start(RequestStart(method, redact_url(context.url), key))

    def _refuse_a_spent_body(
        self, context: RequestContext, request: requests.PreparedRequest, status: Optional[int]
    ) -> None:
        """A send after ``status`` would send the first send's body again: refuse one spent.

        requests sends the body again after a 307/308 (rewinding a file it can), and so does an
        auth handler answering a 401 challenge (requests' ``HTTPDigestAuth``): a generator or a
        stream without seek would go out empty, under the same Idempotency-Key.
        """
        why = None if request.body is None else body_refusal(context, request.method)
        if why is None:
            return
        if status in REDIRECT_STATI:
            reason = f"{status} redirect not followed: {why}"
        else:
            reason = f"not sent again after the {status_label(status)}: {why}"
        self._refuse(context, request, reason)

    def _refuse(self, context: RequestContext, request: requests.PreparedRequest, reason: str) -> NoReturn:
        """End the request unsent for ``reason``, with the response a hop got before, if any."""
        previous = context.answered() if context.answered is not None else None
        status = None if previous is None else previous.status_code
        decision = Decision(Verdict.NO_RETRY, reason=reason)
        context.add(Attempt(status, None, None, None, decision, at=_sleeping.now(self.retry.clock)))
        headers = None if previous is None else previous.headers
        raise SumeRetryError(self._finish(context, request, status, headers), previous)

    def _redirected(self, first: str, request: requests.PreparedRequest) -> None:
        """A redirect hop: keep the keys only where they still mean the same request."""
        headers = request.headers
        if (request.method or "GET").upper() not in KEYED_METHODS:
            headers.pop(IDEMPOTENCY_HEADER, None)  # a 303 made the POST a GET: nothing to dedupe
        if first and leaves_origin(first, request.url or ""):
            for name in AUTH_HEADER_NAMES:  # requests strips Authorization only
                headers.pop(name, None)

    def _answered_redirect(
        self, context: RequestContext, request: requests.PreparedRequest, response: requests.Response
    ) -> None:
        """Before requests follows a redirect, leave behind what must not go with the next hop.

        requests sends the next hop as a copy of this request, stripping only Authorization,
        and the adapter sending it may not be this one (a plain ``HTTPAdapter`` on ``http://``,
        or for another origin, strips nothing): the request's headers become ones whose copy
        leaves both auth headers behind when the redirect leaves the origin, and the
        Idempotency-Key when requests makes the next hop another method (a 303's GET), here,
        where every way through requests passes. The request itself still shows what it sent
        (``response.history[0].request.headers``), as in requests.
        Outside a SumeSession the thread also notes where the redirect leads, for the next send
        (see ``_followed_from``); any other response clears that note.
        """
        target = None
        location = response.headers.get("location") if response.status_code in REDIRECT_STATI else None
        if location and response.is_redirect:
            target = requote_uri(urldefrag(urljoin(response.url or context.url, location))[0])
            leaving = leaves_origin(request.url or context.url, target)
            left_behind: Tuple[str, ...] = AUTH_HEADER_NAMES if leaving else ()
            if IDEMPOTENCY_HEADER in request.headers and (
                _next_method(request.method, response.status_code) not in KEYED_METHODS
            ):
                left_behind += (IDEMPOTENCY_HEADER,)  # a 303 makes the POST a GET: nothing to dedupe
            if left_behind:
                request.headers = _HeadersLeftBehind(request.headers, left_behind)
        if not context.owned:
            first = getattr(_hops, "first", None) or context.url
            _hops.next = None if target is None else (target, first, response.status_code)

    def _followed_from(self, request: requests.PreparedRequest) -> Optional[Tuple[str, int]]:
        """The first URL of a redirect chain this send continues, and the redirect's status
        (whichever SumeAdapter on this thread answered it)."""
        pending = getattr(_hops, "next", None)
        _hops.next = _hops.first = None
        if pending is None or pending[0] != urldefrag(request.url or "")[0]:
            return None
        first: str = pending[1]
        _hops.first = first
        return first, pending[2]

    def _retry_body(
        self, context: RequestContext, policy: Policy, error: Exception, request: requests.PreparedRequest
    ) -> bool:
        """A body that broke mid-read is a read failure after sending: may it be resent?"""
        return resend_broken_body(
            self.retry, context, policy, error, lambda: _rewind(request.body, context.body_pos)
        )

    def _not_cut(
        self, context: RequestContext, request: requests.PreparedRequest, response: requests.Response
    ) -> None:
        """Raise the deadline's give-up if it cut this response: headers or a body without a
        length end at the cut as if complete, and must not pass for a success."""
        watch = context.watch
        if watch is not None and watch.fired:
            response.close()
            cut = _deadline.timeout_for(watch, requests.exceptions.ConnectionError("cut at the deadline"))
            status, headers = response.status_code, response.headers
            throw(cut, self._finish(context, request, status, headers, error="ReadTimeout"))

    def _cut_by_deadline(self, context: RequestContext, error: Exception) -> Exception:
        """``error``, or a ReadTimeout (caused by it) when the deadline cut the attempt short."""
        return _deadline.timeout_for(context.watch, error)

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

    def _body_failed(
        self, context: RequestContext, request: requests.PreparedRequest, broken: Exception
    ) -> Exception:
        """A body broke mid-read and its resend failed at the transport: the body's error.

        The caller asked for one response and its body broke, as requests would report it
        (``ChunkedEncodingError``); the resend's own failure is its cause, and its attempts
        are in the record.
        """
        return raisable(broken, self._finish(context, request, None, None, error=type(broken).__name__))

    def _consult_late(self, context: RequestContext, response: requests.Response) -> None:
        seen = decide_response(self.retry, context, response.raw)
        if seen.decision.retry:
            decision = Decision(
                Verdict.NO_RETRY, reason=f"{seen.label}: not retried: the transport did not consult the retry"
            )
            seen = Attempt(seen.status, seen.code, seen.request_id, seen.next_action, decision, at=seen.at)
        context.add(seen)

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
        record = context.finish(
            status,
            headers,
            _sleeping.now(self.retry.clock),
            error=error,
            auth_conflict=status == 401 and _has_both_auth(request.headers),
            retry_in=retry_in,
        )
        context.record = record
        return record


def _rewind(body: Any, position: Optional[int]) -> bool:
    """Put a file body back where the first attempt started it; False when that fails."""
    if position is None or not hasattr(body, "seek"):
        return True  # bytes and str are sent whole every time
    try:
        body.seek(position)
    except Exception:
        return False
    return True


class _HeadersLeftBehind(CaseInsensitiveDict):  # type: ignore[type-arg]
    """A request's headers whose copy (requests' next hop after a redirect) leaves some behind:
    ``x-api-key`` and ``Authorization`` when the redirect leaves the origin, the
    ``Idempotency-Key`` when the next hop is no longer the keyed request."""

    def __init__(self, headers: Mapping[str, Any], left_behind: Tuple[str, ...]) -> None:
        super().__init__(headers)
        self.left_behind = left_behind

    def copy(self) -> CaseInsensitiveDict:  # type: ignore[type-arg]
        copied = super().copy()
        for name in self.left_behind:
            copied.pop(name, None)
        return copied


def _next_method(method: Optional[str], status: int) -> str:
    """The method requests sends a redirect's next hop with (its ``rebuild_method``)."""
    method = (method or "GET").upper()
    if (status in (302, 303) and method != "HEAD") or (status == 301 and method == "POST"):
        return "GET"
    return method


def _taken_before(body: Any) -> bool:
    """Whether a send already took this body that cannot be sent twice; notes it taken now.

    Only a body seen here can be told again: one that cannot be weakly referenced is let go.
    """
    try:
        if body in _TAKEN:
            return True
        _TAKEN.add(body)
    except TypeError:
        pass
    return False


_TAKEN_BEFORE = (
    "not sent: an earlier send took its body, which cannot be sent again (a generator or a "
    "stream without seek): pass a new one"
)
#: Bodies that can be sent once (generators, streams without seek) that a send has taken: an
#: auth handler's resend (requests' ``HTTPDigestAuth``) or a caller's own would send them empty.
_TAKEN: weakref.WeakSet[Any] = weakref.WeakSet()


def _has_both_auth(headers: Optional[Mapping[str, Any]]) -> bool:
    return headers is not None and "x-api-key" in headers and "Authorization" in headers


# Outside a SumeSession each redirect hop is a separate send: the thread notes where the
# last redirect it received leads (target URL, the chain's first URL, the redirect's status).
_hops = threading.local()

# Adapters made in this process: after os.fork() the child must not reuse the parent's
# pooled sockets (both would read each other's responses), so it drops them.
_after_fork: weakref.WeakSet[SumeAdapter] = weakref.WeakSet()


def _drop_inherited_pools() -> None:
    for adapter in list(_after_fork):
        adapter.poolmanager.clear()
        for proxy_manager in adapter.proxy_manager.values():
            proxy_manager.clear()


_fork.in_child(_drop_inherited_pools)
