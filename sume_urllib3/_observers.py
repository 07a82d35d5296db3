"""Call observers so that a broken observer can never break a request."""

from __future__ import annotations

import contextvars
import logging
import threading
import weakref
from typing import Any, Callable, Dict, FrozenSet, Iterable, Iterator, Tuple, TypeVar

from ._errors import ConfigurationError
from ._record import RequestStart, RetryEvent, SumeObserver, SumeRecord

logger = logging.getLogger("sume_urllib3")

_HOOKS = ("on_start", "on_retry", "on_outcome", "on_job")
_lock = threading.Lock()
# id(observer) -> a weak reference (dropped when the observer dies, so a new
# object reusing the id is warned about again) or, for objects that cannot be
# weakly referenced, the observer itself (kept alive so its id is never reused).
_warned: Dict[int, Any] = {}


class Observers:
    """An immutable set of observers with their hooks looked up once, not per request."""

    __slots__ = ("_all", "_outcome", "_retry", "_start")

    def __init__(self, observers: Iterable[SumeObserver] = ()) -> None:
        self._all: Tuple[SumeObserver, ...] = observer_tuple(observers)
        self._start = _bound(self._all, "on_start")
        self._retry = _bound(self._all, "on_retry")
        self._outcome = _bound(self._all, "on_outcome")

    def __iter__(self) -> Iterator[SumeObserver]:
        return iter(self._all)

    def __len__(self) -> int:
        return len(self._all)

    def __bool__(self) -> bool:
        return bool(self._all)

    def __repr__(self) -> str:
        return f"Observers({', '.join(type(o).__name__ for o in self._all)})"

    @property
    def starts(self) -> bool:
        """Whether any observer wants ``on_start`` (so the start event is worth building)."""
        return bool(self._start)

    # The loops call the bound hooks inline (no helper frame): outcome() runs on every request.

    def start(self, event: RequestStart) -> None:
        """Tell every observer with ``on_start`` that a logical request begins.

        The context variables the hooks set are noted: they stay within the call (see
        ``in_own_context``), where everything else set during it reaches the caller.
        """
        before = contextvars.copy_context()
        for observer, hook in self._start:
            try:
                hook(event)
            except Exception:
                _failed(observer, "on_start")
        after = contextvars.copy_context()
        changed = frozenset(var for var, value in after.items() if before.get(var, _UNSET) is not value)
        if changed:
            _SET_BY_START.set(_SET_BY_START.get() | changed)

    def retry(self, event: RetryEvent) -> None:
        """Tell every observer with ``on_retry`` about a retry that is about to happen."""
        for observer, hook in self._retry:
            try:
                hook(event)
            except Exception:
                _failed(observer, "on_retry")

    def outcome(self, record: SumeRecord) -> None:
        """Tell every observer with ``on_outcome`` how a logical request ended."""
        for observer, hook in self._outcome:
            try:
                hook(record)
            except Exception:
                _failed(observer, "on_outcome")


_T = TypeVar("_T")


def in_own_context(call: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """Run one logical request in a copy of the caller's context (an announced request).

    Whoever tells a request's ``on_start`` (the session, or an adapter used alone) runs the
    call through this when some observer has that hook: what ``on_start`` makes current (a
    span) stays current for every attempt, wait and redirect, and is gone when the call
    returns, even when the outcome comes later (a streamed body, see ``StreamWatch``); the
    observer never has to undo it. Every other change made during the call (a response
    hook binding a logger's fields) reaches the caller, as it does without the copy.
    """
    call_context = contextvars.copy_context()
    try:
        return call_context.run(call, *args, **kwargs)
    finally:
        scoped = call_context.get(_SET_BY_START, frozenset())
        for var, value in call_context.items():
            if var is not _SET_BY_START and var not in scoped and var.get(_UNSET) is not value:
                var.set(value)


#: The context variables ``on_start`` hooks set during this call (kept within it).
_SET_BY_START: contextvars.ContextVar[FrozenSet[contextvars.ContextVar[Any]]] = contextvars.ContextVar(
    "sume_urllib3_set_by_start", default=frozenset()
)
_UNSET = object()


def observer_tuple(observers: object) -> Tuple[SumeObserver, ...]:
    """Observers as a tuple; a str, a non-iterable or an object with no hook is a mistake."""
    if isinstance(observers, Observers):
        return tuple(observers)
    if isinstance(observers, (str, bytes)) or not isinstance(observers, Iterable):
        raise ConfigurationError("observers must be a sequence of observer objects")
    found = tuple(observers)
    for observer in found:
        if not any(hasattr(observer, hook) for hook in _HOOKS):
            raise ConfigurationError(
                f"observers: {type(observer).__name__} has none of the hooks {', '.join(_HOOKS)}: "
                "each observer must have at least one"
            )
    return found


def _bound(observers: Tuple[SumeObserver, ...], hook: str) -> Tuple[Tuple[object, Any], ...]:
    return tuple((o, getattr(o, hook)) for o in observers if getattr(o, hook, None) is not None)


def _failed(observer: object, hook: str) -> None:
    """Log an observer's first failure (with its traceback); later ones pass silently."""
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
