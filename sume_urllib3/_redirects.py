"""Every rule of a redirect hop, once: what is left behind, which method and body go on.

requests follows redirects itself (urllib3's ``redirect=False``): each hop is a copy of the
request sent again through ``Session.send``, whichever adapter serves it. A ``PoolManager``
with a lone ``SumeRetry`` follows them inside urllib3 (``remove_headers_on_redirect``).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Mapping, Optional, Tuple
from urllib.parse import urldefrag, urljoin

from requests.models import REDIRECT_STATI
from requests.structures import CaseInsensitiveDict
from requests.utils import requote_uri

from ._envelope import status_label
from ._idempotency import IDEMPOTENCY_HEADER, KEYED_METHODS
from ._request import body_refusal
from ._util import leaves_origin

#: Auth headers that never leave the origin they were meant for (requests strips Authorization only).
AUTH_HEADER_NAMES = ("x-api-key", "Authorization")
#: Redirects urllib3 follows with the same method and body (a 303 becomes a bodiless GET);
#: requests keeps them on a 307/308 only, and only those reach a ``SumeRetry`` under requests.
BODY_KEEPING_REDIRECTS = frozenset({301, 302, 307, 308})


def left_behind(from_url: str, to_url: str, method: Optional[str]) -> Tuple[str, ...]:
    """The headers that must not go from ``from_url`` to the hop ``method`` ``to_url``: both auth
    headers when it leaves the origin (an https upgrade on the same host stays), the
    Idempotency-Key when the hop is no longer the keyed request (a 303 made the POST a GET)."""
    names: Tuple[str, ...] = AUTH_HEADER_NAMES if from_url and leaves_origin(from_url, to_url) else ()
    if (method or "GET").upper() not in KEYED_METHODS:
        names += (IDEMPOTENCY_HEADER,)
    return names


def strip(headers: Any, names: Tuple[str, ...]) -> None:
    """Remove ``names`` from a request's headers (case-insensitive, as requests keeps them)."""
    for name in names:
        headers.pop(name, None)


def next_method(method: Optional[str], status: int) -> str:
    """The method requests sends a redirect's next hop with (its ``rebuild_method``)."""
    method = (method or "GET").upper()
    if (status in (302, 303) and method != "HEAD") or (status == 301 and method == "POST"):
        return "GET"
    return method


def redirect_refusal(
    method: Optional[str], status: Optional[int], replayable: bool, lone: bool
) -> Optional[str]:
    """Why a redirect that sends the body again may not be followed, or None."""
    if status not in BODY_KEEPING_REDIRECTS:
        return None
    why = body_refusal(method, replayable, lone)
    return None if why is None else f"{status} redirect not followed: {why}"


def spent_body_refusal(
    status: Optional[int], body: Any, method: Optional[str], replayable: bool
) -> Optional[str]:
    """Why a send after ``status`` may not go: it would send the first send's body again.

    requests sends the body again after a 307/308 (rewinding a file it can), and so does an
    auth handler answering a 401 challenge (requests' ``HTTPDigestAuth``): a generator or a
    stream without seek would go out empty, under the same Idempotency-Key.
    """
    why = None if body is None else body_refusal(method, replayable)
    if why is None:
        return None
    if status in REDIRECT_STATI:
        return f"{status} redirect not followed: {why}"
    return f"not sent again after the {status_label(status)}: {why}"


def taken_before(body: Any) -> bool:
    """Whether a send already took this body that cannot be sent twice; notes it taken now
    (a body that cannot be weakly referenced is let go)."""
    try:
        if body in _TAKEN:
            return True
        _TAKEN.add(body)
    except TypeError:
        pass
    return False


TAKEN_BEFORE = (
    "not sent: an earlier send took its body, which cannot be sent again (a generator or a "
    "stream without seek): pass a new one"
)
#: Bodies that can be sent once (generators, streams without seek) that a send has taken: an
#: auth handler's resend (requests' ``HTTPDigestAuth``) or a caller's own would send them empty.
_TAKEN: weakref.WeakSet[Any] = weakref.WeakSet()


def redirect_wait(asked: Optional[float], time_left: float) -> float:
    """How long a redirect's Retry-After holds the request: what it asks when that fits in
    what is left of the deadline, else nothing (followed at once, as requests and
    ``PoolManager`` always do: waiting would only end the call with nothing to show)."""
    return 0.0 if asked is None or asked <= 0 or asked > time_left else asked


def answered(request: Any, response: Any, url: str, note: bool) -> None:
    """Before requests follows a redirect, leave behind what must not go with the next hop.

    requests sends the next hop as a copy of this request, stripping only Authorization, through
    whatever adapter: the request's headers become ones whose copy leaves behind what
    :func:`left_behind` names (the request itself still shows what it sent). With ``note``
    (outside a SumeSession) the thread also notes where the redirect leads, for the next send
    (see :func:`followed_from`); any other response clears that note.
    """
    target = None
    location = response.headers.get("location") if response.status_code in REDIRECT_STATI else None
    if location and response.is_redirect:
        target = requote_uri(urldefrag(urljoin(response.url or url, location))[0])
        names = left_behind(request.url or url, target, next_method(request.method, response.status_code))
        names = tuple(name for name in names if name in request.headers)
        if names:
            request.headers = _HeadersLeftBehind(request.headers, names)
    if note:
        first = getattr(_hops, "first", None) or url
        _hops.next = None if target is None else (target, first, response.status_code)


def followed_from(url: Optional[str]) -> Optional[Tuple[str, int]]:
    """The first URL of a redirect chain a send of ``url`` continues, and the redirect's status
    (whichever SumeAdapter on this thread answered it)."""
    pending = getattr(_hops, "next", None)
    _hops.next = _hops.first = None
    if pending is None or pending[0] != urldefrag(url or "")[0]:
        return None
    first: str = pending[1]
    _hops.first = first
    return first, pending[2]


class _HeadersLeftBehind(CaseInsensitiveDict):  # type: ignore[type-arg]
    """A request's headers whose copy (requests' next hop after a redirect) leaves some behind."""

    def __init__(self, headers: Mapping[str, Any], left_behind: Tuple[str, ...]) -> None:
        super().__init__(headers)
        self.left_behind = left_behind

    def copy(self) -> CaseInsensitiveDict:  # type: ignore[type-arg]
        copied = super().copy()
        strip(copied, self.left_behind)
        return copied


# Outside a SumeSession each redirect hop is a separate send: the thread notes where the
# last redirect it received leads (target URL, the chain's first URL, the redirect's status).
_hops = threading.local()
