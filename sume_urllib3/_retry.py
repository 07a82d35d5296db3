"""SumeRetry: urllib3's own retry loop carrying out the Sume policy."""

from __future__ import annotations

import functools
import logging
import math
import re
import ssl
import time
from typing import Any, Callable, Collection, Dict, Iterable, Optional, Tuple

import requests
from urllib3.exceptions import MaxRetryError, ResponseError
from urllib3.response import HTTPResponse
from urllib3.util.retry import Retry

from . import _sleeping
from ._body import let_go, peek_body
from ._config import check_rng
from ._envelope import ErrorEnvelope, key_prefix, parse_envelope, parse_retry_after, status_label
from ._errors import ConfigurationError
from ._idempotency import BODY_METHODS, KEYED_METHODS, SAFE_METHODS
from ._policy import ANY, DEFAULT_POLICY, Decision, Policy, Rule, Verdict
from ._redact import redact_url, redact_urllib3_logs
from ._redirects import redirect_refusal, redirect_wait
from ._request import HELD, Attempt, RequestContext, body_refusal, current
from ._util import RandomSource, cause_chain
from .observe import Observers, RetryEvent
from .pacing._fleet import RetryBudget

log = logging.getLogger("sume_urllib3")

# Retry arguments that only some urllib3 versions accept; kept as attributes elsewhere.
_PORTABLE_EXTRAS = ("backoff_max", "backoff_jitter", "retry_after_max")
# urllib3 arguments the Policy replaces: name -> (urllib3's default, the Policy field to use).
_REPLACED = {
    "backoff_factor": (0, "backoff_base"),
    "backoff_max": (getattr(Retry, "DEFAULT_BACKOFF_MAX", 120), "backoff_max"),
    "backoff_jitter": (0.0, "jitter"),
}


class SumeRetry(Retry):
    """A urllib3 ``Retry`` whose every decision comes from a :class:`Policy`.

    Use it through ``SumeAdapter``/``SumeSession`` (which give it the request's start
    time, idempotency key and whether its body can be replayed), or alone on any
    ``HTTPAdapter`` or ``PoolManager``, where a method with a body (POST, PUT, PATCH) is
    never resent and the deadline counts from the first failure. Error responses not retried
    are returned; giving up after at least one retry, or on urllib3's counters, raises
    ``MaxRetryError`` when ``raise_on_status`` (the default, as in urllib3), but a 413/429/503
    with Retry-After out of retries is returned, as urllib3 returns it.

    :param args: by position, as urllib3 takes them: ``SumeRetry(3)`` is ``total=3`` and
        the rest follow urllib3's order; a :class:`Policy` may come first instead
        (``SumeRetry(Policy(...), 3)``).
    :param policy: the :class:`Policy` to carry out (default: ``Policy()``).
    :param sleep: how to wait, ``time.sleep`` by default; tests pass their own.
    :param clock: a monotonic clock in seconds, ``time.monotonic`` by default.
    :param rng: the jitter source, a ``random.Random`` or a callable returning [0, 1).
    :param retry_budget: a :class:`RetryBudget` shared by the requests that use this
        retry, or None (the default here) for no budget.
    :param observers: objects with ``on_retry(RetryEvent)``, told before each wait.
    :param retry_kwargs: urllib3 ``Retry`` arguments. The counters (``total``,
        ``connect``, ``read``, ``status``, ``other``, ``redirect``) cap retries as in
        urllib3, on top of ``Policy.max_retries``. ``status_forcelist`` adds a retry row
        (Retry-After, else backoff) for each status the policy has no row for;
        ``allowed_methods`` narrows the methods that may be resent (POST and PATCH
        still need an Idempotency-Key); ``respect_retry_after_header=False`` ignores
        Retry-After; ``remove_headers_on_redirect`` always also strips ``x-api-key``.
        ``backoff_factor``, ``backoff_max`` and ``backoff_jitter`` are refused with the
        ``Policy`` field to use instead, and ``allowed_methods=None``, ``False`` or empty
        (resend every method, POST without a key included) is refused.
    """

    # urllib3's predicates ``_is_connection_error`` and ``_is_read_error`` are used, and
    # ``_is_method_retryable`` overridden, as a subclass uses them: alike on 1.26.x and 2.0-2.8.

    #: The wait ``increment`` decided for the retry this object was made for (None: none).
    _sume_wait: Optional[float] = None
    #: A lone retry's request (no adapter joined), on the objects its increments returned.
    _sume_request: Optional[RequestContext] = None

    def __init__(
        self,
        *args: Any,
        policy: Optional[Policy] = None,
        sleep: Optional[Callable[[float], None]] = None,
        clock: Optional[Callable[[], float]] = None,
        rng: RandomSource = None,
        retry_budget: Optional[RetryBudget] = None,
        observers: Iterable[Any] = (),
        **retry_kwargs: Any,
    ) -> None:
        policy = _checked_arguments(args, policy, retry_kwargs)
        for name, given in (("sleep", sleep), ("clock", clock)):
            if given is not None and not callable(given):
                raise ConfigurationError(f"{name} must be callable")
        if retry_budget is not None and not callable(getattr(retry_budget, "reserve", None)):
            raise ConfigurationError("retry_budget must be a RetryBudget or None")
        check_rng(rng)
        redact_urllib3_logs()  # urllib3 logs the URLs of the requests it retries
        retry_kwargs.setdefault("total", None)
        retry_kwargs.setdefault("redirect", 10)
        extras = {name: retry_kwargs.pop(name) for name in _PORTABLE_EXTRAS if name in retry_kwargs}
        super().__init__(**retry_kwargs)
        self.__dict__.update(extras)
        # urllib3 strips Authorization by default; a caller who takes it off the list keeps it.
        self.remove_headers_on_redirect = self.remove_headers_on_redirect | {"x-api-key"}
        self.policy = policy
        self.sleep_function = sleep or _sleeping.default_sleep
        self.clock = clock or time.monotonic
        self.rng = rng
        self.retry_budget = retry_budget
        self.observers = observers if isinstance(observers, Observers) else Observers(observers)

    @property
    def raise_on_status(self) -> bool:
        """Whether giving up raises ``MaxRetryError`` (else the last response is returned), as set.

        urllib3 reads it on the object whose ``increment`` just refused, which may be a shared
        template: the answer for that refusal sits in this thread's request.
        """
        if not self._raise_on_give_up:
            return False  # an adapter's retry: the adapter raises the give-up itself
        context = current.get()
        return context is None or context.raised_by is not self or context.raise_now

    @raise_on_status.setter
    def raise_on_status(self, value: bool) -> None:
        self._raise_on_give_up = bool(value)

    def new(self, **kw: Any) -> SumeRetry:
        """A copy carrying the policy and the injected parts (urllib3 calls it per retry).

        urllib3's ``increment`` passes the counters and the history only: the copy takes them as
        ``Retry.__init__`` would, the rest as checked when this retry was made. A subclass with
        an ``__init__`` of its own, and any other change, is built through ``__init__``.
        """
        if kw.keys() <= _COUNTERS and type(self).__init__ is SumeRetry.__init__:
            state = self.__dict__.copy()
            state.update(kw)
            state.pop("_sume_wait", None)  # the decision's, and its request's, not the copy's
            state.pop("_sume_request", None)
            if state["total"] is False or state["redirect"] is False:
                state["redirect"], state["raise_on_redirect"] = 0, False
            state["history"] = state["history"] or ()
            new = object.__new__(type(self))
            new.__dict__ = state
            return new
        kw.setdefault("raise_on_status", self._raise_on_give_up)
        kw.setdefault("policy", self.policy)
        kw.setdefault("sleep", self.sleep_function)
        kw.setdefault("clock", self.clock)
        kw.setdefault("rng", self.rng)
        kw.setdefault("retry_budget", self.retry_budget)
        kw.setdefault("observers", self.observers)
        for name in _PORTABLE_EXTRAS:
            if name not in _retry_parameters() and hasattr(self, name):
                kw.setdefault(name, getattr(self, name))
        return super().new(**kw)

    def __repr__(self) -> str:
        """urllib3's repr (its five counters, in its order), then ``other`` and the policy's caps."""
        return (
            f"{type(self).__name__}(total={self.total}, connect={self.connect}, read={self.read}, "
            f"redirect={self.redirect}, status={self.status}, other={self.other}, "
            f"max_retries={self.policy.max_retries}, max_elapsed={self.policy.max_elapsed})"
        )

    def is_retry(self, method: str, status_code: int, has_retry_after: bool = False) -> bool:
        """Whether ``increment`` should see this response: urllib3's rule, the policy's rows added.

        As urllib3: never for a method that may not be resent; always for a status in
        ``status_forcelist``; for 413, 429 and 503 with Retry-After while ``total`` is left.
        Added: a status the policy has a retry row for, and, without a ``status_forcelist``
        and with ``Policy.trust_body``, every error status (its body may make it a retry).
        """
        forcelist = self.status_forcelist
        forced = status_code in forcelist if forcelist else False
        if status_code in (307, 308) and self._joined() is None and (method or "").upper() in BODY_METHODS:
            # requests follows redirects itself (urllib3's redirect=False) and would resend a
            # body this retry cannot see: increment refuses it (see redirect_refusal).
            return True
        if status_code < 400 and not forced and status_code not in self.RETRY_AFTER_STATUS_CODES:
            return False  # a success or redirect: asked on every response, answered first
        if self.refusal(self._joined() or _FRESH, method) is not None:
            return False  # a method that may not be resent
        if forced or (status_code >= 400 and not forcelist and self.policy.trust_body):
            return True
        if any(rule.status == status_code and rule.verdict is Verdict.RETRY for rule in self.policy.rules):
            return True
        return bool(
            (self.total is None or self.total)  # None: no limit; False or 0: none left
            and self.respect_retry_after_header
            and has_retry_after
            and status_code in self.RETRY_AFTER_STATUS_CODES
        )

    def _is_method_retryable(self, method: str) -> bool:
        return self.refusal(self._joined() or _FRESH, method) is None

    def _joined(self) -> Optional[RequestContext]:
        """The request this retry serves: the adapter's, or a lone retry's own once it began (on
        the object its first ``increment`` returned, which urllib3 carries on: not on the thread)."""
        context = current.get()
        if context is not None and context.adapter is not None:
            return context
        return self._sume_request

    def get_backoff_time(self) -> float:
        """The wait ``increment`` decided (backoff, Retry-After or the fleet's pace) for the retry
        this object was made for (0.0 for any other object)."""
        return self._sume_wait or 0.0

    def get_retry_after(self, response: Any) -> Optional[float]:
        """Retry-After in seconds (from the response's own Date for an HTTP-date), or None; never
        raises on garbage (urllib3 does)."""
        headers: Any = getattr(response, "headers", None)
        value = headers.get("Retry-After") if headers is not None else None
        if not isinstance(value, str):
            return None
        return parse_retry_after(value, date=headers.get("Date"))

    def sleep_for_retry(self, response: Any = None) -> bool:
        """Honour Retry-After on the redirect path, never past the deadline, never raising."""
        asked = self.get_retry_after(response) if self.respect_retry_after_header else None
        context = self._joined()
        # Outside a request (a caller's own sleep(response)) nothing bounds it, as in urllib3.
        left = context.deadline - context.now() if context else math.inf
        seconds = redirect_wait(asked, left)
        if seconds:
            _sleeping.wait(seconds, self.sleep_function)
            return True
        return False

    def sleep(self, response: Any = None) -> None:
        """Wait what the policy (and the fleet) decided, but never past the deadline."""
        context = self._joined()
        wait = self._sume_wait
        if wait is None and context is not None:
            wait = context.next_wait  # the adapter's resend of a body that broke mid-read
        if wait is None:
            self.sleep_for_retry(response)
            return
        self.__dict__.pop("_sume_wait", None)
        if context is not None:
            # The decision refused waits that cross the deadline: this keeps a late one short of it.
            context.next_wait = None
            wait = min(wait, max(context.deadline - context.now(), 0.0))
        if wait > 0 or context is None or context.now is not time.monotonic:
            _sleeping.wait(wait, self.sleep_function)  # a test's time: no_sleep records even 0 s

    def increment(
        self,
        method: Optional[str] = None,
        url: Optional[str] = None,
        response: Any = None,
        error: Optional[Exception] = None,
        _pool: Any = None,
        _stacktrace: Any = None,
    ) -> SumeRetry:
        """Decide with the policy, then let urllib3 count; refuse with ``MaxRetryError``.

        A retry the policy allows must also pass urllib3's counters, the retry budget and the
        fleet's turn (:meth:`RequestContext.take_turn`), and still fit before the deadline once
        the rest of the old body is read.
        """
        raw = response.raw if isinstance(response, requests.Response) else response  # responses 0.21's
        if error is None and raw is None:  # a bare count: urllib3's own rules apply
            return Retry.increment(self, method, url, raw, None, _pool, _stacktrace)
        if error is not None and self.total is False:
            raise error.with_traceback(_stacktrace)
        context = self._joined()
        if context is None:  # a lone retry's request, at its first failure: the deadline counts from now
            verb = (method or "").upper()
            context = RequestContext(clock=self.clock, policy=self.policy, method=verb, url=url or "")
            context.hops = 1
        if error is None and getattr(raw, "status", None) in _REDIRECTS and _redirect_location(raw):
            # urllib3 follows a redirect itself (its counters), unless it resends a body it cannot (307/308).
            why = redirect_refusal(
                method or context.method, status_of(raw), context.replayable, context.adapter is None
            )
            if why is not None:
                context.refuse(self, raise_now=True)
                raise MaxRetryError(_pool, redact_url(url), ResponseError(why))
            hop = Retry.increment(self, method, url, raw, None, _pool, _stacktrace)
            if context.adapter is None:
                hop._sume_request = context  # the hop after the redirect continues this request
            return hop
        if context.grant is not None:
            context.end_turn(status_of(raw), getattr(raw, "headers", None))  # the attempt that just ended
        if error is not None:
            attempt = self.decide_error(context, method, error)
        else:
            try:
                attempt = self.decide_response(context, raw, method)
            except Exception:  # a bug here must not leak the connection or the response
                log.exception("failed to decide on a response; not retrying")
                decision = Decision(Verdict.NO_RETRY, reason="internal error while deciding")
                attempt = Attempt(status_of(raw), None, None, None, decision, at=context.now())
        new: Optional[SumeRetry] = None
        if attempt.decision.verdict is Verdict.RETRY:
            try:
                new = Retry.increment(self, method, url, raw, error, _pool, _stacktrace)  # urllib3 counts
            except MaxRetryError:
                attempt = stopped(attempt, COUNTERS_OUT)
        wait = attempt.decision.wait or 0.0
        if new is not None:
            throttled = attempt.status == 429 or attempt.decision.source == "retry_after"
            kind = "throttle" if throttled else "error"
            turn = context.take_turn(attempt.at, wait, retry=kind, budget=self.retry_budget, rng=self.rng)
            wait = turn.wait
            if turn.refused is not None:
                new, attempt = None, stopped(attempt, turn.refused, turn.retry_in)
            else:
                let_go(raw)  # drained through urllib3, so its connection goes back to the pool
            if new is not None and context.now() + wait > context.deadline:  # reading the old body took it
                context.end_turn(None, None)  # the turn taken for it goes unused
                why = "the deadline passed while the rest of its body was read"
                new, attempt = None, stopped(attempt, why)
        context.add(attempt)
        if new is None:
            # No retry: urllib3 hands the response back or raises, as the class docstring says; a
            # transport error not resent is raised itself, so requests maps it as without retries.
            if error is None:
                status, forced = status_of(raw), self.status_forcelist
                paced = (
                    status in self.RETRY_AFTER_STATUS_CODES
                    and not (forced and status in forced)
                    and bool((getattr(raw, "headers", None) or {}).get("Retry-After"))
                )
                counted_out = attempt.decision.reason.endswith(COUNTERS_OUT)
                given_up = attempt.decision.verdict in _GIVE_UP and (context.retries > 0 or counted_out)
                context.refuse(self, raise_now=given_up and not paced)
                raise MaxRetryError(_pool, redact_url(url), ResponseError(attempt.decision.reason))
            if attempt.decision.verdict is Verdict.STOP and (
                self._is_connection_error(error) or context.adapter is None
            ):
                raise MaxRetryError(_pool, redact_url(url), error) from error  # out of retries, as urllib3
            raise error.with_traceback(_stacktrace)
        context.next_wait = new._sume_wait = wait  # what sleep and get_backoff_time answer
        if context.adapter is None:
            new._sume_request = context  # a lone retry: the object urllib3 carries on continues it
        self.announce_retry(context, attempt, method)
        return new

    def refusal(self, context: RequestContext, method: Optional[str]) -> Optional[str]:
        """Why this request may not be sent again (its method, its key, its body, ``allowed_methods``),
        or None when it may."""
        verb = (method or context.method or "").upper()
        if verb in KEYED_METHODS:
            if not context.key:
                return f"{verb} without an Idempotency-Key is never resent"
        elif verb not in SAFE_METHODS:
            return f"{verb or 'unknown method'} is not replay-safe"
        refusal = body_refusal(verb, context.replayable, lone=context.adapter is None)
        allowed = self.allowed_methods
        if refusal is None and allowed is not Retry.DEFAULT_ALLOWED_METHODS and verb not in (allowed or ()):
            return f"{verb} is not in allowed_methods"  # narrowed (SumeRetry made it a frozenset)
        return refusal

    def decide_response(self, context: RequestContext, raw: Any, method: Optional[str] = None) -> Attempt:
        """Peek at an error body and ask the policy what to do about this attempt; a retry the
        request cannot take (see :meth:`refusal`) becomes NO_RETRY."""
        policy = context.policy or self.policy
        status = status_of(raw) or 0
        envelope = _NO_HINTS
        if status >= 400:
            prefix, decoded = peek_body(raw, policy.peek_limit, lambda: context.now() >= context.deadline)
            envelope = parse_envelope(
                getattr(raw, "headers", None), prefix, limit=policy.peek_limit, decoded=decoded, message=False
            )
        # Measured after the peek: reading a slow body is part of the elapsed time.
        now = context.now()
        retry_after = self.get_retry_after(raw) if self.respect_retry_after_header else None
        decision = policy.decide(
            status, envelope.code, retry_after, context.retries, now - context.start, envelope, rng=self.rng
        )
        retry_in = None
        refusal = self.refusal(context, method) if decision.verdict is Verdict.RETRY else None
        if refusal:
            decision = Decision(Verdict.NO_RETRY, reason=f"{status_label(status, envelope.code)}: {refusal}")
        if decision.verdict in _GIVE_UP:
            # When trying again could succeed: the server's Retry-After, else the next backoff.
            retry_in = retry_after if retry_after is not None else policy.backoff(context.retries, self.rng)
        return Attempt(
            status, envelope.code, envelope.request_id, envelope.next_action, decision, None, now, retry_in
        )

    def decide_error(self, context: RequestContext, method: Optional[str], error: Exception) -> Attempt:
        """What the policy says of a transport error (connect, read, a refused tunnel)."""
        policy = context.policy or self.policy
        now = context.now()
        refused_with = tunnel_status(error)
        if refused_with is not None:
            # Decided by the row a plain-http proxy's refusal (a response) meets: nothing reached
            # the API, so any request may go again.
            elapsed = now - context.start
            decided = policy.decide(refused_with, None, None, context.retries, elapsed, rng=self.rng)
            reason = f"the proxy refused the tunnel: {decided.reason}"
            decision = Decision(decided.verdict, decided.wait, decided.source, reason)
        else:
            if self._is_connection_error(error):
                kind = "connect"
            elif self._is_read_error(error) or not _verification_failure(error):
                # Any other error (TLS mid-stream, a proxy) resends only what may be sent twice; a
                # certificate that failed verification fails the same way again.
                kind = "read"
            else:
                kind = "other"
            verb = method or context.method
            refusal = self.refusal(context, verb)
            if kind == "read" and not verb and not self._is_read_error(error):
                refusal = None  # a direct increment(error=...) names no request to protect
            decision = policy.decide_error(
                kind, context.retries, now - context.start, replay_safe=refusal is None, rng=self.rng
            )
            if refusal is not None and decision.verdict is Verdict.NO_RETRY and kind == "read":
                decision = Decision(Verdict.NO_RETRY, reason=f"{decision.reason}: {refusal}")
        retry_in = policy.backoff(context.retries, self.rng) if decision.verdict is Verdict.STOP else None
        return Attempt(
            None, None, None, None, decision, error=type(error).__name__, at=now, retry_in=retry_in
        )

    def announce_retry(self, context: RequestContext, attempt: Attempt, method: Optional[str]) -> None:
        """Tell the observers (metrics, the log line, the user's own) of a retry before its wait."""
        decision, wait = attempt.decision, context.next_wait or 0.0
        if self.observers:
            # Where the wait came from: the policy's source, or "pace" when the fleet made it longer.
            longer = decision.wait is not None and wait > decision.wait + HELD
            event = RetryEvent(
                method=(method or context.method or "").upper(),
                url=context.shown_url,
                attempt=context.retries,
                max_retries=(context.policy or self.policy).max_retries,
                wait=wait,
                wait_source="pace" if longer else decision.source or "backoff",
                status=attempt.status,
                code=attempt.code,
                request_id=attempt.request_id,
                key_prefix=key_prefix(context.key),
                reason=decision.reason,
                error=attempt.error,
            )
            self.observers.retry(event)
        log.debug("%s", decision.reason)


#: A lone retry's request before its first increment: no key, its body unseen.
_FRESH = RequestContext(0.0)
_GIVE_UP = (Verdict.STOP, Verdict.NO_RETRY)


def stopped(attempt: Attempt, why: str, retry_in: Optional[float] = None) -> Attempt:
    """``attempt`` stopped for ``why``; ``retry_in`` defaults to the wait the retry would have had."""
    decision = Decision(Verdict.STOP, reason=f"{attempt.label}: {why}")
    if retry_in is None:
        retry_in = attempt.decision.wait
    return attempt._replace(decision=decision, retry_in=retry_in)


#: The arguments urllib3's ``increment`` passes to ``new()``: counters and history only.
_COUNTERS = frozenset({"total", "connect", "read", "redirect", "status", "other", "history"})


def _checked_arguments(args: Tuple[Any, ...], policy: Optional[Policy], kwargs: Dict[str, Any]) -> Policy:
    """The policy to carry out, and urllib3's arguments (``args`` by position, in urllib3's order,
    joined into ``kwargs``): those that mean something here honoured, checked now rather than at
    the first retry; the rest refused by name."""
    if args and not (args[0] is None or isinstance(args[0], int)):  # the policy, not urllib3's total
        if policy is not None:
            raise ConfigurationError("give the policy once: positionally or as policy=")
        policy, args = args[0], args[1:]
    positional = _retry_parameters()
    if len(args) > len(positional):
        raise ConfigurationError(f"SumeRetry takes at most {len(positional)} urllib3 arguments by position")
    for name, value in zip(positional, args):
        if name in kwargs:
            raise ConfigurationError(f"SumeRetry got {name} by position and by name")
        kwargs[name] = value
    if policy is None:
        policy = DEFAULT_POLICY
    elif not isinstance(policy, Policy):
        raise ConfigurationError(f"policy must be a Policy, got {type(policy).__name__}")
    for name in _COUNTERS - {"history"}:
        value = kwargs.get(name)  # None: no limit; False: no retries, errors raised as they are
        if value is not None and not isinstance(value, (bool, int)):
            raise ConfigurationError(
                f"{name} must be None, True/False or an int (a urllib3 retry counter), got {value!r}"
            )
    headers = kwargs.get("remove_headers_on_redirect")
    if headers is not None and (
        isinstance(headers, (str, bytes))
        or not isinstance(headers, Iterable)
        or not all(isinstance(h, str) for h in headers)
    ):
        raise ConfigurationError(
            f"remove_headers_on_redirect must be a collection of header names (str), got {headers!r}"
        )
    for name, (default, field) in _REPLACED.items():
        if name in kwargs and kwargs[name] not in (default, None):
            raise ConfigurationError(
                f"SumeRetry({name}=...) is not used: the Policy sets the backoff; use Policy({field}=...)"
            )
        if name in kwargs and name not in _PORTABLE_EXTRAS:
            kwargs.pop(name)
    allowed = kwargs.get("allowed_methods", Retry.DEFAULT_ALLOWED_METHODS)
    if allowed is None or allowed is False or (isinstance(allowed, Collection) and not allowed):
        # urllib3 reads None, False and an empty collection as "every method".
        raise ConfigurationError(
            f"SumeRetry(allowed_methods={allowed!r}) would resend every method: POST and PATCH are "
            "resent only with an Idempotency-Key (use SumeSession or SumeAdapter to add one)"
        )
    if allowed is not Retry.DEFAULT_ALLOWED_METHODS:
        if isinstance(allowed, (str, bytes)) or not isinstance(allowed, Collection):
            raise ConfigurationError(f"allowed_methods must be a collection of method names, got {allowed!r}")
        kwargs["allowed_methods"] = frozenset(str(m).upper() for m in allowed)
        unknown = kwargs["allowed_methods"] - SAFE_METHODS - KEYED_METHODS
        if unknown:
            raise ConfigurationError(f"allowed_methods: {', '.join(sorted(unknown))} may never be resent")
    forcelist = kwargs.get("status_forcelist")
    if not forcelist:
        return policy
    if isinstance(forcelist, (str, bytes)) or not isinstance(forcelist, Iterable):
        raise ConfigurationError(f"status_forcelist must be a collection of int statuses, got {forcelist!r}")
    forcelist = kwargs["status_forcelist"] = frozenset(forcelist)  # is_retry reads it as urllib3 does
    wrong = sorted(repr(s) for s in forcelist if isinstance(s, bool) or not isinstance(s, int))
    if wrong:  # urllib3 would never match these (it compares ints): said, rather than retry nothing
        raise ConfigurationError(f"status_forcelist: {', '.join(wrong)} are not int statuses")
    added = []  # a RETRY row (Retry-After, else backoff) for each forced status without a row
    for status in sorted(forcelist):
        rule = policy.match(status, None)
        if rule is None:
            added.append(Rule(status, ANY, Verdict.RETRY))
        elif rule.verdict is not Verdict.RETRY:
            raise ConfigurationError(
                f"status_forcelist: the policy's row for {status} says {rule.verdict.value}; "
                "change Policy(rules=...) to decide differently"
            )
    return policy.replace(rules=(*policy.rules, *added)) if added else policy


@functools.lru_cache(maxsize=None)
def _retry_parameters() -> Tuple[str, ...]:
    """urllib3's own ``Retry`` arguments, in order (inspect is imported when first needed)."""
    import inspect

    return tuple(name for name in inspect.signature(Retry.__init__).parameters if name != "self")


#: The statuses urllib3's responses redirect with.
_REDIRECTS = frozenset(HTTPResponse.REDIRECT_STATUSES)


def _redirect_location(raw: Any) -> Any:
    getter = getattr(raw, "get_redirect_location", None)
    try:
        return getter() if getter is not None else None
    except Exception:
        return None


def tunnel_status(error: BaseException) -> Optional[int]:
    """The status a proxy refused an https request's tunnel with, or None: http.client's
    ``OSError("Tunnel connection failed: 407 ...")`` text, which urllib3 wraps, is all that keeps it."""
    for cause in cause_chain(error):
        if type(cause) is OSError:
            found = _TUNNEL_REFUSED.match(str(cause))
            if found is not None:
                return int(found.group(1))
    return None


_TUNNEL_REFUSED = re.compile(r"Tunnel connection failed: ([1-5][0-9][0-9])\b")


def _verification_failure(error: BaseException) -> bool:
    """A TLS certificate or hostname that failed verification (deterministic: not retried)."""
    for cause in cause_chain(error):
        if isinstance(cause, (ssl.SSLCertVerificationError, ssl.CertificateError)):
            return True
        if type(cause).__name__ == "CertificateError":  # urllib3 1.26's own match_hostname
            return True
        if isinstance(cause, ssl.SSLError) and "certificate verify failed" in str(cause):
            # pyOpenSSL once injected into urllib3: a plain SSLError("bad handshake: ...") naming
            # OpenSSL's reason, the one the ssl module raises as SSLCertVerificationError.
            return True
    return False


_NO_HINTS = ErrorEnvelope()
#: Why a retry the policy allowed did not go: urllib3's own counters ran out.
COUNTERS_OUT = "urllib3 retry counters exhausted"


def status_of(raw: Any) -> Optional[int]:
    """The status of a urllib3 response (None for anything without an int status)."""
    status = getattr(raw, "status", None)
    return status if isinstance(status, int) else None
