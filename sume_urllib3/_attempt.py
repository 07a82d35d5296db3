"""What happens between two attempts, whichever way the request came in.

Every way in (``SumeRetry`` alone on a ``PoolManager``, an ``HTTPConnectionPool`` or a plain
``HTTPAdapter``; ``SumeAdapter``; ``SumeSession``; redirects followed by requests or by
urllib3) calls these functions rather than keeping a copy:

- :func:`retry_turn`: the retry budget and the fleet's turn for a retry the policy allowed;
- :func:`end_turn`: tell the fleet what the attempt in flight got;
- :func:`body_refusal`: whether the request body can be sent again (a retry, a 307/308);
- :func:`redirect_wait`: how long a redirect's Retry-After may hold the request;
- :func:`let_go`: what is done with the connection of a response nobody will read.

The decision itself is the pure :class:`Policy`; the order of a request's life is in the
docs' "How it works" page.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from urllib3.util.response import is_fp_closed

from ._budget import RetryBudget
from ._fleet import ANONYMOUS
from ._helpers import RandomSource, uniform
from ._idempotency import BODY_METHODS
from ._peek import PrefixedFP
from ._policy import Policy
from ._state import RequestContext

# A fleet's wait longer than the policy's by less than this is the same wait (float noise).
_HELD = 1e-6
#: A body not read by anyone is drained up to this many bytes to keep its connection; a longer
#: one costs more to read than a new connection does (a handshake is a few round trips).
DRAIN_LIMIT = 1024 * 1024
_DRAIN_CHUNK = 65536


@dataclass(frozen=True)
class Turn:
    """The retry's turn: the wait before it, or why it may not go (and when it might)."""

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
) -> Turn:
    """Spend the retry budget and take the fleet's turn for a retry the policy allowed.

    A retry the server paced (a 429, or a Retry-After) waits its turn without spending the
    budget: the server, not an outage, asked for it. The fleet may make the wait longer
    (the pace of every sender of this key) or refuse the turn when it would cross the
    deadline; then every caller refused at once hears a next turn spread over one more pace.
    """
    if budget is not None and not throttled and not budget.try_spend():
        return Turn(wait, "retry budget exhausted")
    fleet = context.fleet
    if fleet is None:
        return Turn(wait)
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
        return Turn(wait, grant.refused, refused_retry_in(max(grant.wait, wait), rng))
    context.grant = grant
    if grant.wait > wait + _HELD:
        context.paced += grant.wait - wait
        wait = grant.wait
    return Turn(wait)


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
    """Why a 307/308 (which resends the body) may not be followed, or None.

    A 301/302/303 turns the request into a GET without a body (requests and urllib3 agree),
    so only a 307/308 of a request with a body that cannot be sent again is refused.
    """
    if status not in (307, 308):
        return None
    why = body_refusal(context, method)
    return None if why is None else f"{status} redirect not followed: {why}"


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
    if fp is None or (isinstance(fp, PrefixedFP) and fp.isclosed()) or is_fp_closed(fp):
        _release(raw)
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
    _release(raw)


def _release(raw: Any) -> None:
    release = getattr(raw, "release_conn", None)
    if release is not None:
        with contextlib.suppress(Exception):  # a mock without a pool
            release()
