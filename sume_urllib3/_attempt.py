"""What happens between two attempts, whichever way the request came in.

Every way in (``SumeRetry`` alone on a ``PoolManager``, an ``HTTPConnectionPool`` or a plain
``HTTPAdapter``; ``SumeAdapter``; ``SumeSession``; redirects followed by requests or by
urllib3) calls these functions rather than keeping a copy:

- :func:`decide_response` and :func:`decide_error`: what the pure :class:`Policy` says about
  the attempt that just ended (the error body peeked, bounded), and :func:`resend_broken_body`
  for a body that broke after urllib3 handed the response back;
- :func:`retry_turn`: the retry budget and the fleet's turn for a retry the policy allowed;
- :func:`end_turn`: tell the fleet what the attempt in flight got;
- :func:`body_refusal`: whether the request body can be sent again (a retry, a 307/308);
- :func:`redirect_wait`: how long a redirect's Retry-After may hold the request;
- :func:`let_go`: what is done with the connection of a response nobody will read.

``SumeRetry`` carries them out inside urllib3's loop, ``SumeAdapter`` around it; the order
of a request's life is in the docs' "How it works" page.
"""

from __future__ import annotations

import contextlib
import logging
import re
import ssl
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple, Optional

from ._budget import RetryBudget
from ._envelope import ErrorEnvelope, header, parse_envelope
from ._fleet import ANONYMOUS
from ._helpers import RandomSource, cause_chain, frozen, uniform
from ._idempotency import BODY_METHODS
from ._peek import PrefixedFP, fp_closed, peek_body, release
from ._policy import NO_RETRY, RETRY, STOP, Decision, Policy
from ._record import RetryEvent, key_prefix, status_label
from ._redact import redact_url
from ._retry_after import parse_retry_after
from ._state import Attempt, RequestContext

if TYPE_CHECKING:
    from ._retry import SumeRetry

log = logging.getLogger("sume_urllib3")

# A fleet's wait longer than the policy's by less than this is the same wait (float noise).
_HELD = 1e-6
#: A body not read by anyone is drained up to this many bytes to keep its connection; a longer
#: one costs more to read than a new connection does (a handshake is a few round trips).
DRAIN_LIMIT = 1024 * 1024
_DRAIN_CHUNK = 65536


class RetryTurn(NamedTuple):
    """The retry's turn: the wait before it, or why it may not go (and when it might).

    A tuple, not a frozen dataclass: one is made on every retry, and a frozen dataclass's
    ``__init__`` sets each field through ``object.__setattr__``."""

    wait: float
    refused: Optional[str] = None
    retry_in: Optional[float] = None


def retry_turn(
    context: RequestContext,
    policy: Policy,
    wait: float,
    *,
    throttled: bool,
    budget: Optional[RetryBudget],
    rng: RandomSource,
    now: float,
) -> RetryTurn:
    """Spend the retry budget and take the fleet's turn for a retry the policy allowed.

    A retry the server paced (a 429, or a Retry-After) waits its turn without spending the
    budget: the server, not an outage, asked for it. Any other waits, when the budget is
    spent, until a unit of it is free (the rule the fleets' budgets follow), and is refused
    only when that comes after the deadline. The fleet may make the wait longer
    (the pace of every sender of this key) or refuse the turn when it would cross the
    deadline; then every caller refused at once hears a next turn spread over one more pace.
    """
    if budget is not None and not throttled:
        hold = budget.reserve(context.deadline(policy) - now)
        if hold is None:
            return RetryTurn(wait, "retry budget exhausted")
        wait = max(wait, hold)
    fleet = context.fleet
    if fleet is None:
        return RetryTurn(wait)
    grant = fleet.acquire(
        context.key_id or ANONYMOUS,
        time_left=context.deadline(policy) - now,
        retry="throttle" if throttled else "error",
        not_before=wait,
    )
    if grant.fallback:
        context.fallbacks += 1
    if grant.refused:
        context.fleet_refused = True
        return RetryTurn(wait, grant.refused, refused_retry_in(max(grant.wait, wait), rng))
    context.grant = grant
    if grant.wait > wait + _HELD:
        context.paced += grant.wait - wait
        wait = grant.wait
    return RetryTurn(wait)


def end_turn(context: RequestContext, status: Optional[int], headers: Optional[Mapping[str, str]]) -> None:
    """Tell the fleet what the attempt in flight got (None: no response), once."""
    grant, context.grant = context.grant, None
    if grant is not None:
        context.fleet.release(context.key_id, grant, status, headers)


def refused_retry_in(wait: float, rng: RandomSource) -> float:
    """``retry_in`` after the fleet refused a turn: the next turn, spread over one more of it.

    Every caller refused at one moment hears the same "next turn in X s". Told X, a queue
    of refused tasks would come back at one instant and be refused together again; drawn
    from [X, 2X] they come back over a window as long as the backlog ahead of them, which
    the pace then serves one by one.
    """
    return wait * uniform(rng, 1.0, 2.0)


def body_refusal(context: RequestContext, method: Optional[str]) -> Optional[str]:
    """Why this request's body may not be sent again, or None.

    Through ``SumeAdapter`` the body was seen before the first send (``context.replayable``).
    A lone ``SumeRetry`` never sees it (urllib3 hands a Retry the method and URL only), so it
    cannot tell bytes from a consumed generator: it does not resend a method that carries
    a body.
    """
    if context.adapter is None and (method or context.method or "").upper() in BODY_METHODS:
        return "a lone SumeRetry cannot see the request body, so it never sends it twice"
    if not context.replayable:
        return "the request body cannot be replayed (a generator or a stream without seek)"
    return None


def redirect_refusal(context: RequestContext, method: Optional[str], status: Optional[int]) -> Optional[str]:
    """Why a redirect that sends the body again may not be followed, or None.

    Only a 303 always becomes a GET without a body. urllib3 keeps the method and the body on
    a 301, 302, 307 and 308 when it follows them itself (a ``PoolManager``); requests keeps them
    on a 307/308 only, and only those reach a ``SumeRetry`` under requests. Either way a
    request with a body that cannot be sent again is refused.
    """
    if status not in _BODY_KEEPING_REDIRECTS:
        return None
    why = body_refusal(context, method)
    return None if why is None else f"{status} redirect not followed: {why}"


#: Redirects urllib3 follows with the same method and body (a 303 becomes a bodiless GET).
_BODY_KEEPING_REDIRECTS = frozenset({301, 302, 307, 308})


def redirect_wait(asked: Optional[float], time_left: float) -> float:
    """How long a redirect's Retry-After holds the request: what it asks when that fits in
    what is left of the deadline, else nothing (the redirect is followed at once, as requests
    and ``PoolManager`` always do; waiting would only end the call with nothing to show)."""
    if asked is None or asked <= 0 or asked > time_left:
        return 0.0
    return asked


def let_go(raw: Any, limit: int = DRAIN_LIMIT) -> None:
    """Give back the connection of a response nobody will read.

    The rest of the body is read through urllib3's own ``read`` (64 KiB at a time, so
    urllib3 counts the bytes and hands the connection back at the end) up to ``limit``
    bytes; a longer body, or one that breaks, closes the connection instead. Either way the
    pool gets its slot back: a ``pool_block=True`` pool never waits for it.
    """
    if raw is None:
        return
    fp = getattr(raw, "_fp", None)
    if isinstance(fp, PrefixedFP) and fp.complete:
        # The peek read the whole body: what is left is in memory, and dropping it is the
        # drain (reading it back through urllib3 cost a fifth of a decision).
        try:  # noqa: SIM105 - contextlib.suppress would build an object on every decision
            fp.close()
        except Exception:
            pass
        if isinstance(getattr(raw, "length_remaining", None), int):
            # urllib3 counts what it reads itself; the peek read the body around it. Told that
            # nothing is left, the drain urllib3 makes after every retry reads nothing, where it
            # would raise IncompleteRead for the bytes it never saw (and catch it).
            raw.length_remaining = 0
        release(raw)
        return
    if fp is None or (isinstance(fp, PrefixedFP) and fp.isclosed()) or fp_closed(fp):
        release(raw)
        return
    read = getattr(raw, "read", None)
    drained = 0
    try:
        while read is not None and drained <= limit:
            piece = read(_DRAIN_CHUNK, decode_content=False)
            if not piece:
                break
            drained += len(piece)
        else:
            with contextlib.suppress(Exception):
                raw.close()  # too long to be worth its connection: a new one is cheaper
    except Exception:  # a body that broke: its connection cannot be reused
        with contextlib.suppress(Exception):
            raw.close()
    release(raw)


# -- the decision: what this attempt got, and whether another may follow -------------------


def decide_response(
    retry: SumeRetry,
    context: RequestContext,
    raw: Any,
    method: Optional[str] = None,
    policy: Optional[Policy] = None,
) -> Attempt:
    """Peek at an error body and ask the policy what to do about this attempt.

    A retry the request cannot take (a POST without a key, a body that cannot be
    replayed) becomes NO_RETRY here. The adapter asks this too, for a response that
    urllib3 never showed the retry (old requests streaming around urllib3).
    """
    policy = policy or context.policy or retry.policy
    status = status_of(raw) or 0
    headers = getattr(raw, "headers", None)
    envelope = _NO_HINTS
    if status >= 400:
        deadline = context.deadline(policy)
        prefix, decoded = peek_body(raw, policy.peek_limit, lambda: retry._now() >= deadline)
        envelope = parse_envelope(headers, prefix, limit=policy.peek_limit, decoded=decoded, message=False)
    # Measured after the peek: reading a slow body is part of the elapsed time.
    now = retry._now()
    retry_after = header(headers, "Retry-After") if retry.respect_retry_after_header else None
    decision = policy.decide(
        status, envelope.code, retry_after, context.retries, now - context.start, envelope, rng=retry.rng
    )
    verdict = decision.verdict
    retry_in = None
    if verdict is RETRY:
        refusal = retry._refusal(context, method)
        if refusal:
            decision = Decision(
                NO_RETRY, reason=f"{status_label(status, envelope.code)}: {refusal}"
            )
            verdict = NO_RETRY
    if verdict is STOP or verdict is NO_RETRY:
        retry_in = _retry_in(policy, retry_after, context.retries, retry.rng)
    return Attempt(
        status, envelope.code, envelope.request_id, envelope.next_action, decision, None, now, retry_in
    )


def decide_error(
    retry: SumeRetry, context: RequestContext, policy: Policy, method: Optional[str], error: Exception
) -> Attempt:
    refused_with = tunnel_status(error)
    if refused_with is not None:
        return _decide_tunnel(retry, context, policy, refused_with, error)
    if retry._is_connection_error(error):
        kind = "connect"
    elif retry._is_read_error(error) or not _verification_failure(error):
        # urllib3 resends after any other error (TLS mid-stream, a proxy); here only a
        # request that may be sent twice, as after a read failure. A certificate that
        # failed verification fails the same way again: not retried.
        kind = "read"
    else:
        kind = "other"
    now = retry._now()
    verb = method or context.method
    refusal = retry._refusal(context, verb)
    if kind == "read" and not verb and not retry._is_read_error(error):
        refusal = None  # a direct increment(error=...) names no request to protect
    decision = policy.decide_error(
        kind, context.retries, now - context.start, replay_safe=refusal is None, rng=retry.rng
    )
    if refusal is not None and decision.verdict is NO_RETRY and kind == "read":
        # Which rule keeps it from going again (no key, a body sent once), as for a response.
        decision = Decision(NO_RETRY, reason=f"{decision.reason}: {refusal}")
    retry_in = policy.backoff(context.retries, retry.rng) if decision.verdict is STOP else None
    return Attempt(
        None, None, None, None, decision, error=type(error).__name__, at=now, retry_in=retry_in
    )


def _decide_tunnel(
    retry: SumeRetry, context: RequestContext, policy: Policy, status: int, error: Exception
) -> Attempt:
    """A proxy that refused the CONNECT tunnel with ``status``: decided by that status's row.

    Through a plain-http origin the proxy's answer arrives as a response, decided by the table;
    through a tunnel it arrives as an error. The same row decides both (a 407 is not retried, a
    proxy's 503 is), and nothing reached the API: any request may go again.
    """
    now = retry._now()
    decided = policy.decide(status, None, None, context.retries, now - context.start, rng=retry.rng)
    reason = f"the proxy refused the tunnel: {decided.reason}"
    decision = Decision(decided.verdict, decided.wait, decided.source, reason)
    retry_in = policy.backoff(context.retries, retry.rng) if decision.verdict is STOP else None
    return Attempt(None, None, None, None, decision, error=type(error).__name__, at=now, retry_in=retry_in)


def tunnel_status(error: BaseException) -> Optional[int]:
    """The status a proxy refused an https request's tunnel with, or None.

    http.client raises ``OSError("Tunnel connection failed: 407 Proxy Authentication Required")``
    and urllib3 wraps it in a ``ProxyError``: its text is the only place the status is kept.
    """
    for cause in cause_chain(error):
        if type(cause) is OSError:
            found = _TUNNEL_REFUSED.match(str(cause))
            if found is not None:
                return int(found.group(1))
    return None


_TUNNEL_REFUSED = re.compile(r"Tunnel connection failed: ([1-5][0-9][0-9])\b")


def resend_broken_body(
    retry: SumeRetry, context: RequestContext, policy: Policy, error: Exception, rewind: Callable[[], bool]
) -> bool:
    """A body that broke mid-read after urllib3 handed the response back: resend it?

    The same decision as a read failure inside urllib3's loop (``decide_error("read")``),
    bounded by urllib3's counters, the body (``rewind`` puts a file body back, False when
    it cannot), the retry budget and the fleet's turn. Records the attempt; on a resend
    the wait is in ``context.next_wait`` for :meth:`sleep`.
    """
    now = retry._now()
    why = "the body failed mid-read"
    decision = policy.decide_error(
        "read",
        context.retries,
        now - context.start,
        replay_safe=retry._refusal(context, context.method) is None,
        rng=retry.rng,
    )
    if decision.retry and not counters_allow(retry, context.retries):
        decision = Decision(STOP, reason=f"{why}: {COUNTERS_OUT}")
    if decision.retry and not rewind():
        decision = Decision(NO_RETRY, reason=f"{why}; the request body cannot be rewound")
    wait = decision.wait or 0.0
    retry_in: Optional[float] = None  # on a give-up: when trying again could succeed
    if decision.retry:  # a resend waits its turn and spends the budget like any retry
        budget = retry.retry_budget
        turn = retry_turn(context, policy, wait, throttled=False, budget=budget, rng=retry.rng, now=now)
        wait, retry_in = turn.wait, turn.retry_in
        if turn.refused is not None:
            decision = Decision(STOP, reason=f"{why}: {turn.refused}")
    if decision.verdict is STOP and retry_in is None:
        retry_in = decision.wait
        if retry_in is None:
            retry_in = policy.backoff(context.retries, retry.rng)
    attempt = Attempt(None, None, None, None, decision, error=type(error).__name__, at=now, retry_in=retry_in)
    context.add(attempt)
    if decision.retry:
        context.next_wait = wait
        # A retry like any other: the observers (metrics, the log line) hear of it before its wait.
        announce_retry(retry, context, policy, attempt, context.method, context.url)
    return decision.retry


def counters_allow(
    retry: SumeRetry, retries: int) -> bool:
    """Whether urllib3's own counters (``total``, ``read``) leave room for one more retry."""
    for counter in (retry.total, retry.read):
        if counter is False or (
            isinstance(counter, int) and not isinstance(counter, bool) and retries >= counter
        ):
            return False
    return True


def announce_retry(
    retry: SumeRetry,
    context: RequestContext,
    policy: Policy,
    attempt: Attempt,
    method: Optional[str],
    url: Optional[str],
) -> None:
    decision = attempt.decision
    if retry.observers:
        retry.observers.retry(
            frozen(
                RetryEvent,
                method=(method or context.method or "").upper(),
                url=redact_url(context.url or url or ""),
                attempt=context.retries,
                max_retries=policy.max_retries,
                wait=context.next_wait or 0.0,
                wait_source=_source(decision, context.next_wait),
                status=attempt.status,
                code=attempt.code,
                request_id=attempt.request_id,
                key_prefix=key_prefix(context.key),
                reason=decision.reason,
                error=attempt.error,
            )
        )
    if log.isEnabledFor(logging.DEBUG):  # the question debug() asks, one call fewer
        log.debug("sume_urllib3: %s", decision.reason)


def _source(decision: Decision, wait: Optional[float]) -> str:
    """Where the wait came from: the policy's source, or "pace" when the fleet made it longer."""
    if wait is not None and decision.wait is not None and wait > decision.wait + _HELD:
        return "pace"
    return decision.source or "backoff"


def _retry_in(policy: Policy, retry_after: Optional[str], retries: int, rng: RandomSource) -> float:
    """Seconds until trying again could succeed: the server's Retry-After, else the next backoff."""
    asked = parse_retry_after(retry_after)
    return asked if asked is not None else policy.backoff(retries, rng)


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
