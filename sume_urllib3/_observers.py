"""Call observers so that a broken observer can never break a request."""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any, Dict, Iterable, Tuple

from ._errors import ConfigurationError
from ._record import RetryEvent, SumeRecord

logger = logging.getLogger("sume_urllib3")

_lock = threading.Lock()
# id(observer) -> a weak reference (dropped when the observer dies, so a new
# object reusing the id is warned about again) or, for objects that cannot be
# weakly referenced, the observer itself (kept alive so its id is never reused).
_warned: Dict[int, Any] = {}


def observer_tuple(observers: object) -> Tuple[object, ...]:
    """Observers as a tuple; a str or a non-iterable is a configuration mistake."""
    if isinstance(observers, (str, bytes)) or not isinstance(observers, Iterable):
        raise ConfigurationError("observers must be a sequence of observer objects")
    return tuple(observers)


def dispatch_retry(observers: Iterable[object], event: RetryEvent) -> None:
    """Tell every observer that has ``on_retry`` about a retry that is about to happen."""
    _dispatch(observers, "on_retry", event)


def dispatch_outcome(observers: Iterable[object], record: SumeRecord) -> None:
    """Tell every observer that has ``on_outcome`` how a logical request ended."""
    _dispatch(observers, "on_outcome", record)


def _dispatch(observers: Iterable[object], hook: str, argument: object) -> None:
    for observer in observers:
        try:
            method = getattr(observer, hook, None)
            if method is not None:
                method(argument)
        except Exception:
            if _first_failure(observer):
                logger.warning(
                    "observer %s raised in %s; the request goes on, and further errors "
                    "from this observer are ignored silently",
                    type(observer).__name__,
                    hook,
                    exc_info=True,
                )


def _first_failure(observer: object) -> bool:
    """True only the first time this observer object fails."""
    key = id(observer)
    with _lock:
        if key in _warned:
            return False
        try:
            _warned[key] = weakref.ref(observer, _forgetter(key))
        except TypeError:
            _warned[key] = observer
        return True


def _forgetter(key: int) -> Any:
    # Runs inside garbage collection, possibly while _lock is held by this very
    # thread, so it must not take the lock: a guarded single dict operation is enough.
    def forget(ref: weakref.ReferenceType[Any]) -> None:
        if _warned.get(key) is ref:
            _warned.pop(key, None)

    return forget
