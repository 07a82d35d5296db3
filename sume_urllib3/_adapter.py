"""SumeAdapter: idempotency keys, per-request state and records around urllib3's retries."""

from __future__ import annotations

import io
import uuid
from typing import Any, Callable, Iterable, Mapping, Optional, Tuple, Union

import requests
from requests.adapters import HTTPAdapter

from ._envelope import parse_envelope
from ._errors import ConfigurationError, SumeRetryError
from ._observers import dispatch_outcome, observer_tuple
from ._policy import Decision, Outcome, Policy, RandomSource, Verdict
from ._record import SumeRecord
from ._retry import KEYED_METHODS, SumeRetry, decide_response
from ._sleeping import now as _sleeping_now
from ._state import LogicalRequest, RequestState, current_logical, current_request

IDEMPOTENCY_HEADER = "Idempotency-Key"


class SumeAdapter(HTTPAdapter):
    """An ``HTTPAdapter`` that makes every request follow the Sume retry policy.

    It adds one ``Idempotency-Key`` per logical POST/PATCH (a caller's own key is kept
    and validated), gives ``SumeRetry`` the request's start time, key and whether its
    body can be replayed, attaches ``response.sume`` (a :class:`SumeRecord`), tells the
    observers how each request ended, and raises :class:`SumeRetryError` on giving up
    unless ``raise_on_give_up`` is False.
    """

    __attrs__ = [*HTTPAdapter.__attrs__, "raise_on_give_up", "observers", "budget"]  # noqa: RUF012

    def __init__(
        self,
        policy: Optional[Policy] = None,
        *,
        raise_on_give_up: bool = True,
        observers: Iterable[object] = (),
        budget: Any = None,
        sleep: Optional[Callable[[float], None]] = None,
        clock: Optional[Callable[[], float]] = None,
        rng: RandomSource = None,
        max_retries: Optional[SumeRetry] = None,
        **adapter_kwargs: Any,
    ) -> None:
        observers = observer_tuple(observers)
        if max_retries is None:
            max_retries = SumeRetry(
                policy,
                sleep=sleep,
                clock=clock,
                rng=rng,
                budget=budget,
                observers=observers,
                raise_on_status=False,
            )
        elif not isinstance(max_retries, SumeRetry):
            raise ConfigurationError("max_retries must be a SumeRetry (or None for the default)")
        elif any(v is not None for v in (policy, budget, sleep, clock, rng)) or observers:
            raise ConfigurationError(
                "give policy, budget, observers, sleep, clock and rng to the SumeRetry "
                "passed as max_retries, not to the adapter as well"
            )
        else:
            # The adapter raises SumeRetryError itself; urllib3 must hand responses back.
            max_retries = max_retries.new(raise_on_status=False)
            observers, budget = max_retries.observers, max_retries.budget
        self.raise_on_give_up = bool(raise_on_give_up)
        self.observers = observers
        self.budget = budget
        super().__init__(max_retries=max_retries, **adapter_kwargs)

    @property
    def retry(self) -> SumeRetry:
        """The retry template every request starts from (never changed by a request)."""
        assert isinstance(self.max_retries, SumeRetry)
        return self.max_retries

    @property
    def policy(self) -> Policy:
        """The policy the retry carries out."""
        return self.retry.policy

    def __repr__(self) -> str:
        return f"<SumeAdapter {self.retry!r}>"

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: Union[float, Tuple[float, float], Tuple[float, None], None] = None,
        verify: Union[bool, str] = True,
        cert: Union[bytes, str, Tuple[Union[bytes, str], Union[bytes, str]], None] = None,
        proxies: Optional[Mapping[str, str]] = None,
    ) -> requests.Response:
        """Send with the policy; see the class docstring for what is added."""
        method = (request.method or "GET").upper()
        key = request.headers.get(IDEMPOTENCY_HEADER)
        if key is not None:
            key = validate_idempotency_key(key)
        elif method in KEYED_METHODS:
            key = str(uuid.uuid4())
        if key is not None:
            # Set on the prepared request itself (as str), so redirects and resends reuse it.
            request.headers[IDEMPOTENCY_HEADER] = key
        logical = self._logical()
        state = RequestState(
            start=logical.start if logical is not None else _sleeping_now(self.retry.clock),
            method=method,
            url=request.url or "",
            key=key,
            replayable=body_is_replayable(request.body),
        )
        if logical is not None:
            # Redirect hops share one attempt list: the cap and the record span them.
            logical.hops += 1
            state.attempts, state.hops = logical.attempts, logical.hops
        if self.budget is not None and state.hops == 1:
            self.budget.record_request()
        token = current_request.set(state)
        try:
            response = super().send(
                request, stream=stream, timeout=timeout, verify=verify, cert=cert, proxies=proxies
            )
        except requests.exceptions.RequestException as exc:
            record = self._record(state, None, request)
            exc.sume = record  # type: ignore[attr-defined]
            self._finish(record)
            raise
        finally:
            current_request.reset(token)
        record = self._record(state, response, request)
        response.sume = record  # type: ignore[attr-defined]
        self._finish(record)
        if record.outcome is Outcome.GAVE_UP and self.raise_on_give_up:
            if not stream:
                response.content  # noqa: B018 - load the body so the error keeps it whole
            raise SumeRetryError(record, response)
        return response

    def _logical(self) -> Optional[LogicalRequest]:
        """The session request this send belongs to, if its session mounted this adapter."""
        logical = current_logical.get()
        return logical if logical is not None and logical.owner is self else None

    def _finish(self, record: SumeRecord) -> None:
        logical = self._logical()
        if logical is not None:
            logical.record = record  # the session reports once, after redirects
        else:
            dispatch_outcome(self.observers, record)

    def _record(
        self,
        state: RequestState,
        response: Optional[requests.Response],
        request: requests.PreparedRequest,
    ) -> SumeRecord:
        retries = state.retries
        attempts = list(state.attempts)
        status = response.status_code if response is not None else None
        last = attempts[-1] if attempts else None
        if last is not None and last.decision.retry:
            last = None  # the final response was not consulted (e.g. a success)
        if response is not None and last is not None and last.status != status:
            last = None
        code = last.code if last else None
        request_id = last.request_id if last else None
        next_action = last.next_action if last else None
        if response is not None and status is not None and status < 400:
            request_id = parse_envelope(response.headers, None).request_id
            outcome = Outcome.OK if retries == 0 else Outcome.RETRIED_OK
            reason = (
                "succeeded"
                if retries == 0
                else f"succeeded after {retries} retr{'y' if retries == 1 else 'ies'}"
            )
        elif last is not None:
            outcome = _outcome(last.decision.verdict, retries)
            reason = last.decision.reason
        elif response is not None and status is not None:
            # The retry never saw this response (requests < 2.29 sends streamed bodies
            # around urllib3; some mocks skip it): decide here, but nothing was resent.
            seen = decide_response(self.policy, state, state.method, response.raw, 0.0)
            decision = seen.decision
            if decision.retry:
                decision = Decision(
                    Verdict.NO_RETRY,
                    reason=f"{seen.label}: not retried: the transport did not consult the retry",
                )
            outcome = _outcome(decision.verdict, retries)
            code, request_id, next_action = seen.code, seen.request_id, seen.next_action
            reason = decision.reason
        else:
            outcome = Outcome.NO_RETRY if retries == 0 else Outcome.GAVE_UP
            reason = "transport error before any response"
        if status == 401 and _has_both_auth(request.headers):
            reason += "; the request carried both x-api-key and Authorization: send only one"
        ids = tuple(a.request_id for a in attempts if a.request_id)
        if request_id and (not ids or ids[-1] != request_id):
            ids += (request_id,)
        return SumeRecord(
            idempotency_key=state.key,
            attempts=retries + state.hops,
            outcome=outcome,
            status=status,
            code=code,
            request_id=request_id,
            request_ids=ids,
            waits=state.waits,
            elapsed=max(_sleeping_now(self.retry.clock) - state.start, 0.0),
            reason=reason,
            next_action=next_action,
            method=state.method,
            url=state.url,
        )


def _outcome(verdict: Verdict, retries: int) -> Outcome:
    if verdict is Verdict.FIX:
        return Outcome.FIX
    if verdict is Verdict.POLL:
        return Outcome.POLL
    if verdict is Verdict.NO_RETRY and retries == 0:
        return Outcome.NO_RETRY
    return Outcome.GAVE_UP


def _has_both_auth(headers: Mapping[str, Any]) -> bool:
    return "x-api-key" in headers and "Authorization" in headers


def validate_idempotency_key(key: Any) -> str:
    """The key as str; refuses keys the server cannot store: 1-255 visible ASCII characters."""
    if isinstance(key, bytes):
        try:
            key = key.decode("ascii")
        except UnicodeDecodeError:
            raise ConfigurationError("Idempotency-Key must be visible ASCII") from None
    if not isinstance(key, str):
        raise ConfigurationError(f"Idempotency-Key must be a str, got {type(key).__name__}")
    if not 1 <= len(key) <= 255:
        raise ConfigurationError(f"Idempotency-Key must be 1-255 characters, got {len(key)}")
    if not all("!" <= ch <= "~" for ch in key):
        raise ConfigurationError("Idempotency-Key must be visible ASCII (no spaces or control characters)")
    return key


def body_is_replayable(body: Any) -> bool:
    """True when urllib3 can send this body again: bytes, text, or a seekable file."""
    if body is None or isinstance(body, (bytes, bytearray, str)):
        return True
    if isinstance(body, io.IOBase) or hasattr(body, "read"):
        try:
            return (
                bool(body.seekable())
                if hasattr(body, "seekable")
                else hasattr(body, "tell") and hasattr(body, "seek")
            )
        except Exception:
            return False
    return False  # generators and other iterables are consumed by the first attempt
