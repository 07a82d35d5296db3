"""Small helpers shared by several modules: text, enums, hosts and pickling."""

from __future__ import annotations

import enum
import ipaddress
import random
import threading
from typing import Any, Callable, Dict, Iterator, Optional, Tuple, Type, TypeVar, Union
from urllib.parse import urlsplit

#: Values that come from the server (codes, request ids) are cut to this length so a
#: hostile or broken response cannot flood a log line or an exception message.
MAX_FIELD = 200


#: A source of randomness: a ``random.Random``, a callable returning [0, 1), or None (the module).
RandomSource = Union[random.Random, Callable[[], float], None]


def uniform(rng: RandomSource, low: float, high: float) -> float:
    """A uniform draw in [low, high] from ``rng`` (tests inject theirs to fix the schedule)."""
    if rng is None:
        return low + (high - low) * random.random()  # random.uniform's own formula, one call fewer
    if isinstance(rng, random.Random):
        return rng.uniform(low, high)
    return low + (high - low) * float(rng())


class StrEnum(str, enum.Enum):
    """A str enum whose ``str()`` is its value (``enum.StrEnum`` arrived only in 3.11)."""

    def __str__(self) -> str:
        return str(self.value)


def seconds(value: float) -> str:
    """Seconds as people read them in reasons: "1.5s", or "1e+09s" when absurdly large."""
    return f"{value:.1f}s" if value < 1e6 else f"{value:.3g}s"


def plural(count: int, one: str, many: str) -> str:
    """ "1 retry" or "3 retries": the count and the word that fits it."""
    return f"{count} {one if count == 1 else many}"


def printable(value: Any, max_len: int = MAX_FIELD) -> Optional[str]:
    """``value`` as printable text, bounded, or None: no forged log lines, no floods."""
    if value is None:
        return None
    text = value if isinstance(value, str) else str(value)
    if len(text) > max_len:
        text = text[:max_len] + "…"
    if text.isprintable():  # the usual case, without a per-character loop
        return text
    return "".join(ch if ch.isprintable() else "?" for ch in text)


def is_visible_ascii(text: str) -> bool:
    """True when every character is visible ASCII ("!" to "~"): safe in a header value."""
    return all("!" <= ch <= "~" for ch in text)


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
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = _DEFAULT_PORTS.get(scheme)
    return scheme, (parts.hostname or "").lower(), port


def leaves_origin(previous: str, url: str) -> bool:
    """True when going from ``previous`` to ``url`` leaves its origin (an https upgrade stays)."""
    old, new = origin(previous), origin(url)
    if old == new:
        return False
    upgrade = old == ("http", new[1], 80) and new[0] == "https" and new[2] == 443
    return not upgrade


_DEFAULT_PORTS = {"http": 80, "https": 443}


def header_value(headers: Any, name: str) -> Any:
    """The value of header ``name`` (give it lower-cased) as stored (str or bytes), or None.

    requests' and urllib3's header mappings keep a dict keyed by the lower-cased name; their
    ``get`` and ``in`` go through ``Mapping`` and raise and catch ``KeyError`` for every
    missing name, which costs more than the rest of the look-up on the success path. Other
    mappings are asked the ordinary way.
    """
    store = getattr(headers, "_store", None)  # requests.structures.CaseInsensitiveDict
    if isinstance(store, dict):
        item = store.get(name)
        return None if item is None else item[1]
    container = getattr(headers, "_container", None)  # urllib3 HTTPHeaderDict
    if isinstance(container, dict):
        values = container.get(name)
        return None if values is None else ", ".join(values[1:])
    if type(headers) is dict:  # a plain dict is case-sensitive: find the name in any case
        return next((v for k, v in headers.items() if isinstance(k, str) and k.lower() == name), None)
    return headers.get(name) if headers is not None else None


T = TypeVar("T")


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


def frozen(cls: Type[T], **fields: Any) -> T:
    """An instance of frozen dataclass ``cls`` from fields the caller has already checked.

    What the generated ``__init__`` does, without one ``object.__setattr__`` per field:
    for the objects made on every request or every decision. Every field must be given.
    """
    instance: T = object.__new__(cls)
    instance.__dict__.update(fields)
    return instance


class LockFreePickle:
    """Pickles an object without its ``_lock`` and gives the copy a fresh one."""

    _lock: Any

    def __getstate__(self) -> Dict[str, Any]:
        with self._lock:
            return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
