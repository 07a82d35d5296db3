"""SumeRetry: urllib3's own retry loop carrying out the Sume policy."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import logging
import time
from typing import Any, Callable, Dict, Iterable, Optional

from urllib3.exceptions import MaxRetryError, ResponseError
from urllib3.util.retry import Retry

from . import _sleeping
from ._envelope import ErrorEnvelope, header, parse_envelope
from ._errors import ConfigurationError
from ._observers import dispatch_retry, observer_tuple
from ._peek import discard_body, peek_body
from ._policy import DEFAULT_POLICY, Decision, Policy, RandomSource, Verdict
from ._record import RetryEvent, key_prefix
from ._retry_after import parse_retry_after
from ._state import Attempt, RequestState, current_request

log = logging.getLogger("sume_urllib3")

#: Methods that may be sent twice without harm.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})
#: Methods that may be sent twice only with the same Idempotency-Key.
KEYED_METHODS = frozenset({"POST", "PATCH"})

# Retry arguments that only some urllib3 versions accept; kept as attributes elsewhere.
_BASE_PARAMS = frozenset(inspect.signature(Retry.__init__).parameters)
_PORTABLE_EXTRAS = ("backoff_max", "backoff_jitter", "retry_after_max")
_OWN = ("policy", "sleep", "clock", "rng", "budget", "observers", "_state")


class SumeRetry(Retry):
    """A urllib3 ``Retry`` whose every decision comes from a :class:`Policy`.

    Use it through ``SumeAdapter``/``SumeSession`` (which give it per-request state:
    start time, idempotency key, body replayability), or alone on any ``HTTPAdapter`` or
    ``PoolManager``, where POST and PATCH are never resent and the deadline counts
    from the first failure. Error responses that are not retried are returned, not
    raised; giving up after retries raises ``MaxRetryError`` when ``raise_on_status``
    (the default, as in urllib3).

    ``sleep``, ``clock`` (monotonic) and ``rng`` (a ``random.Random`` or a callable
    returning [0, 1)) are injectable so schedules can be asserted without sleeping.
    ``budget`` is an optional shared retry budget; ``observers`` receive each retry.
    """

    def __init__(
        self,
        policy: Optional[Policy] = None,
        *,
        sleep: Optional[Callable[[float], None]] = None,
        clock: Optional[Callable[[], float]] = None,
        rng: RandomSource = None,
        budget: Any = None,
        observers: Iterable[object] = (),
        _state: Optional[RequestState] = None,
        **retry_kwargs: Any,
    ) -> None:
        if policy is None:
            policy = DEFAULT_POLICY
        if not isinstance(policy, Policy):
            raise ConfigurationError(f"policy must be a Policy, got {type(policy).__name__}")
        if sleep is not None and not callable(sleep):
            raise ConfigurationError("sleep must be callable")
        if clock is not None and not callable(clock):
            raise ConfigurationError("clock must be callable")
        self._raise_on_give_up = bool(retry_kwargs.pop("raise_on_status", True))
        retry_kwargs.setdefault("total", None)
        retry_kwargs.setdefault("redirect", 10)
        extras = {k: retry_kwargs.pop(k) for k in _PORTABLE_EXTRAS if k in retry_kwargs}
        # urllib3 reads raise_on_status on the object whose increment refused, so it must
        # be False for refusals to come back as responses; giving up flips it per request.
        super().__init__(raise_on_status=False, **retry_kwargs)
        for name, value in extras.items():
            setattr(self, name, value)
        self.policy = policy
        self.sleep_function = sleep or _sleeping.default_sleep
        self.clock = clock or time.monotonic
        self.rng = rng
        self.budget = budget
        # new() hands the checked tuple on: validate only what a caller passed.
        self.observers = observers if type(observers) is tuple else observer_tuple(observers)
        self._state = _state
        self._next_wait: Optional[float] = None

    # -- construction --------------------------------------------------------------

    def new(self, **kw: Any) -> SumeRetry:
        """A copy carrying the policy, injected parts and per-request state."""
        kw.setdefault("raise_on_status", self._raise_on_give_up)
        for name in _PORTABLE_EXTRAS:
            if name not in _BASE_PARAMS and hasattr(self, name):
                kw.setdefault(name, getattr(self, name))
        kw.setdefault("policy", self.policy)
        kw.setdefault("sleep", self.sleep_function)
        kw.setdefault("clock", self.clock)
        kw.setdefault("rng", self.rng)
        kw.setdefault("budget", self.budget)
        kw.setdefault("observers", self.observers)
        kw.setdefault("_state", self._state)
        new = super().new(**kw)
        assert isinstance(new, SumeRetry)
        return new

    def _bind(self, state: RequestState) -> SumeRetry:
        """A copy of this (shared) template that belongs to one logical request."""
        me = copy.copy(self)  # every field is immutable or replaced, so shallow is enough
        me._state = state
        me._next_wait = None
        return me

    @classmethod
    def from_int(
        cls,
        retries: Any,
        redirect: Any = True,
        default: Any = None,
    ) -> Retry:
        """Like ``Retry.from_int``: an int becomes ``SumeRetry(total=n)``."""
        if retries is None:
            retries = default if default is not None else cls.DEFAULT
        if isinstance(retries, Retry):
            return retries
        return cls(total=retries, redirect=bool(redirect) and None)

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_next_wait", None)  # a pending wait belongs to one live request
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._next_wait = None

    def __repr__(self) -> str:
        p = self.policy
        parts = [
            f"max_retries={p.max_retries}",
            f"max_elapsed={p.max_elapsed}",
            f"total={self.total}",
            f"connect={self.connect}",
            f"read={self.read}",
            f"redirect={self.redirect}",
            f"status={self.status}",
            f"other={self.other}",
        ]
        if self._state is not None:
            parts.append(f"retries={self._state.retries}")
            parts.append(f"key={key_prefix(self._state.key)!r}")
        return f"{type(self).__name__}({', '.join(parts)})"

    # -- what urllib3 asks -----------------------------------------------------------

    def is_retry(self, method: str, status_code: int, has_retry_after: bool = False) -> bool:
        """Maybe, for every error status: the body decides in ``increment``."""
        return self.total is not False and status_code >= 400

    def _is_method_retryable(self, method: str) -> bool:
        return refusal_for(method, self._state) is None

    def get_backoff_time(self) -> float:
        """The wait decided for the retry this object was made for."""
        return self._next_wait if self._next_wait is not None else 0.0

    def get_retry_after(self, response: Any) -> Optional[float]:
        """Retry-After in seconds, or None; never raises on garbage (urllib3 does)."""
        return parse_retry_after(header(getattr(response, "headers", None), "Retry-After"))

    def sleep_for_retry(self, response: Any = None) -> bool:
        """Honour Retry-After on the redirect path without ever raising."""
        seconds = self.get_retry_after(response)
        if seconds:
            _sleeping.wait(seconds, self.sleep_function)
            return True
        return False

    def sleep(self, response: Any = None) -> None:
        """Wait what the policy decided, but never past the deadline.

        The decision already refused waits that cross it; this only trims what reading
        the rest of the old body took meanwhile.
        """
        if self._next_wait is None:
            self.sleep_for_retry(response)
            return
        wait = self._next_wait
        if self._state is not None:
            left = self._state.start + self.policy.max_elapsed - self._now()
            wait = min(wait, max(left, 0.0))
        _sleeping.wait(wait, self.sleep_function)

    # -- the decision ----------------------------------------------------------------

    def increment(
        self,
        method: Optional[str] = None,
        url: Optional[str] = None,
        response: Any = None,
        error: Optional[Exception] = None,
        _pool: Any = None,
        _stacktrace: Any = None,
    ) -> SumeRetry:
        """Decide with the policy, then let urllib3 count; refuse with ``MaxRetryError``."""
        state = self._state
        if state is None:
            state = current_request.get() or RequestState(
                start=self._now(), method=(method or "").upper(), url=url or ""
            )
        me = self if self._state is state else self._bind(state)
        raw = _raw_response(response)
        if error is None and raw is not None and _redirect_location(raw):
            # A redirect followed by urllib3 itself: urllib3's rules, not the policy's.
            return Retry.increment(me, method, url, raw, None, _pool, _stacktrace)

        if error is not None:
            if self.total is False:
                raise error.with_traceback(_stacktrace)
            kind = me._error_kind(error)
            decision = me.policy.decide_error(
                kind,
                state.retries,
                me._now() - state.start,
                replay_safe=refusal_for(method, state) is None,
                rng=me.rng,
            )
            attempt = Attempt(None, None, None, None, decision, error=type(error).__name__)
        else:
            kind = "response"
            try:
                attempt = decide_response(me.policy, state, method, raw, me._now() - state.start, me.rng)
            except Exception:  # a bug here must not leak the connection or the response
                log.exception("sume_urllib3: failed to decide on a response; not retrying")
                decision = Decision(Verdict.NO_RETRY, reason="internal error while deciding")
                attempt = Attempt(_status(raw), None, None, None, decision)

        new: Optional[SumeRetry] = None
        decision = attempt.decision
        if decision.retry:
            try:
                new = Retry.increment(me, method, url, raw, error, _pool, _stacktrace)
            except MaxRetryError:
                decision = Decision(Verdict.STOP, reason=f"{attempt.label}: urllib3 retry counters exhausted")
            if new is not None and self.budget is not None and not self.budget.try_spend():
                decision = Decision(Verdict.STOP, reason=f"{attempt.label}: retry budget exhausted")
            attempt = dataclasses.replace(attempt, decision=decision)
        state.attempts.append(attempt)

        if decision.retry and new is not None:
            if raw is not None:
                discard_body(raw)
            return me._schedule(new, decision, method, url, attempt)
        if error is None:
            self._refuse(state, decision)
            raise MaxRetryError(_pool, url, ResponseError(decision.reason))
        if kind == "connect" and decision.verdict is Verdict.STOP:
            raise MaxRetryError(_pool, url, error) from error
        # Re-raise the transport error itself, so requests maps it to ReadTimeout /
        # ConnectionError exactly as it would without retries.
        raise error.with_traceback(_stacktrace)

    def _error_kind(self, error: Exception) -> str:
        if self._is_connection_error(error):
            return "connect"
        if self._is_read_error(error):
            return "read"
        return "other"

    def _schedule(
        self,
        new: SumeRetry,
        decision: Decision,
        method: Optional[str],
        url: Optional[str],
        attempt: Attempt,
    ) -> SumeRetry:
        new._next_wait = decision.wait
        state = self._state
        assert state is not None
        if self.observers:
            dispatch_retry(
                self.observers,
                RetryEvent(
                    method=(method or state.method or "").upper(),
                    url=state.url or url or "",
                    attempt=state.retries,
                    max_retries=self.policy.max_retries,
                    wait=decision.wait or 0.0,
                    wait_source=decision.source or "backoff",
                    status=attempt.status,
                    code=attempt.code,
                    request_id=attempt.request_id,
                    key_prefix=key_prefix(state.key),
                    reason=decision.reason,
                    error=attempt.error,
                ),
            )
        log.debug("sume_urllib3: %s", decision.reason)
        return new

    def _refuse(self, state: RequestState, decision: Decision) -> None:
        gave_up = decision.verdict is Verdict.STOP or (
            decision.verdict is Verdict.NO_RETRY and state.retries > 0
        )
        # Only an object made for this request may be changed; the template is shared.
        if gave_up and self._raise_on_give_up and self._state is state:
            self.raise_on_status = True

    def _now(self) -> float:
        return _sleeping.now(self.clock)


def decide_response(
    policy: Policy,
    state: RequestState,
    method: Optional[str],
    raw: Any,
    elapsed: float,
    rng: RandomSource = None,
) -> Attempt:
    """Peek at an error body, ask the policy, and refuse a retry the request cannot take."""
    status = _status(raw) or 0
    headers = getattr(raw, "headers", None)
    envelope = ErrorEnvelope()
    if status >= 400:
        prefix, decoded = peek_body(raw, policy.peek_limit)
        envelope = parse_envelope(headers, prefix, limit=policy.peek_limit, decoded=decoded)
    decision = policy.decide(
        status, envelope.code, header(headers, "Retry-After"), state.retries, elapsed, envelope, rng=rng
    )
    attempt = Attempt(status, envelope.code, envelope.request_id, envelope.next_action, decision)
    refusal = refusal_for(method, state) if decision.retry else None
    if refusal:
        decision = Decision(Verdict.NO_RETRY, reason=f"{attempt.label}: {refusal}")
        attempt = dataclasses.replace(attempt, decision=decision)
    return attempt


def refusal_for(method: Optional[str], state: Optional[RequestState]) -> Optional[str]:
    """Why this request may not be sent again, or None when it may."""
    verb = (method or "").upper()
    key = state.key if state is not None else None
    if verb in KEYED_METHODS and not key:
        return f"{verb} without an Idempotency-Key is never resent"
    if verb not in SAFE_METHODS and verb not in KEYED_METHODS:
        return f"{verb or 'unknown method'} is not replay-safe"
    if state is not None and not state.replayable:
        return "the request body cannot be replayed"
    return None


def _raw_response(response: Any) -> Any:
    # responses 0.21 hands increment a requests.Response; everything else a urllib3 one.
    if response is not None and hasattr(response, "status_code") and hasattr(response, "raw"):
        return response.raw
    return response


def _redirect_location(raw: Any) -> Any:
    getter = getattr(raw, "get_redirect_location", None)
    try:
        return getter() if getter is not None else None
    except Exception:
        return None


def _status(raw: Any) -> Optional[int]:
    status = getattr(raw, "status", None)
    return status if isinstance(status, int) else None
