"""Small helpers several modules share: text for people, hosts and origins, errors, randomness."""

from __future__ import annotations

import enum
import ipaddress
import random
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, Union
from urllib.parse import urlsplit

# -- text for people ----------------------------------------------------------------------------


def plural(count: int, one: str, many: str) -> str:
    """ "1 retry" or "3 retries": the count and the word that fits it."""
    return f"{count} {one if count == 1 else many}"


def columns(rows: Sequence[Sequence[str]]) -> List[str]:
    """Rows of cells as aligned lines: each column as wide as its widest cell, two spaces apart."""
    widths = [max(map(len, column)) for column in zip(*rows)]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]


def is_visible_ascii(text: str) -> bool:
    """True when every character is visible ASCII ("!" to "~"): safe in a header value."""
    return all("!" <= ch <= "~" for ch in text)


class StrEnum(str, enum.Enum):
    """A str enum whose ``str()`` is its value (``enum.StrEnum`` arrived only in 3.11)."""

    def __str__(self) -> str:
        return str(self.value)


# -- hosts and origins --------------------------------------------------------------------------

_DEFAULT_PORTS = {"http": 80, "https": 443}


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (where plain http is acceptable)."""
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def plain_http_refusal(url: str) -> Optional[str]:
    """Why a secret must not be sent to ``url`` (plain http off loopback), or None."""
    parts = urlsplit(url)
    if parts.scheme == "http" and not is_loopback(parts.hostname or ""):
        return f"refusing to send the API key over plain http to {parts.hostname}: use https"
    return None


def origin(url: str) -> Tuple[str, str, Optional[int]]:
    """(scheme, host, port) of a URL, lower-cased, with the scheme's default port filled in."""
    parts = urlsplit(url)  # its scheme and hostname come lower-cased
    try:
        port = parts.port
    except ValueError:
        port = None
    return parts.scheme, parts.hostname or "", _DEFAULT_PORTS.get(parts.scheme) if port is None else port


def leaves_origin(previous: str, url: str) -> bool:
    """True when going from ``previous`` to ``url`` leaves its origin (an https upgrade stays)."""
    old, new = origin(previous), origin(url)
    upgrade = old == ("http", new[1], 80) and new == ("https", new[1], 443)
    return old != new and not upgrade


def header_value(headers: Any, name: str) -> Any:
    """The value of header ``name`` (give it lower-cased) as stored (str or bytes), or None.

    requests' ``CaseInsensitiveDict`` and urllib3's ``HTTPHeaderDict`` (several values joined
    with ", ") ignore case themselves; a plain dict is searched in any case.
    """
    if headers is None:
        return None
    if type(headers) is dict:
        return next((v for k, v in headers.items() if isinstance(k, str) and k.lower() == name), None)
    return headers.get(name)


# -- errors -------------------------------------------------------------------------------------


def cause_chain(error: BaseException, depth: int = 8) -> Iterator[BaseException]:
    """``error``, then what it wraps, at most ``depth`` in all: each one's ``__cause__``, else its
    ``__context__``, else an exception among its ``args`` (where requests and urllib3 keep the
    error they wrap)."""
    cause: Optional[BaseException] = error
    for _ in range(depth):
        if cause is None:
            return
        yield cause
        cause = (
            cause.__cause__
            or cause.__context__
            or next((arg for arg in getattr(cause, "args", ()) if isinstance(arg, BaseException)), None)
        )


# -- randomness and objects ---------------------------------------------------------------------

#: A source of randomness: a ``random.Random``, a callable returning [0, 1), or None (the module).
RandomSource = Union[random.Random, Callable[[], float], None]


def uniform(rng: RandomSource, low: float, high: float) -> float:
    """A uniform draw in [low, high] from ``rng`` (tests inject theirs to fix the schedule)."""
    if rng is None:
        return random.uniform(low, high)
    if isinstance(rng, random.Random):
        return rng.uniform(low, high)
    return low + (high - low) * float(rng())
