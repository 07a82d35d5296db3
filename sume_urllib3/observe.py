"""Call observers so that a broken observer can never break a request."""

from __future__ import annotations

import collections
import contextvars
import logging
import threading
import weakref
from typing import (
    Any,
    Callable,
    Collection,
    Counter,
    Dict,
    FrozenSet,
    Iterable,
    Iterator,
    Optional,
    Tuple,
    TypeVar,
)
from urllib.parse import urlsplit

from . import _fork
from ._errors import ConfigurationError
from ._record import JOB_EVENT_KINDS, Outcome, RequestStart, RetryEvent, SumeObserver, SumeRecord, key_prefix
from ._util import LockFreePickle, plural, printable

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


# Thread-safe counters of outcomes, retry reasons, attempts, pacing and jobs.

#: Distinct retry reasons counted before the rest go under "other": codes come from the
#: server, and a label set that grows without bound is a memory leak in a metrics store.
MAX_REASONS = 50
#: What ``on_job`` counts: polls, and how waited-for jobs ended.
#: ``snapshot()["jobs"]``'s keys: each JobEvent kind, a poll counted as "polls".
JOB_EVENTS = tuple("polls" if kind == "poll" else kind for kind in JOB_EVENT_KINDS)
_OUTCOMES = tuple(outcome.value for outcome in Outcome)
# Outcome -> its value, looked up rather than computed (Enum.value is a slow descriptor).
_KEYS: Dict[Any, str] = {outcome: outcome.value for outcome in Outcome}


def bounded_reason(reason: str, seen: Collection[str]) -> str:
    """``reason`` itself while fewer than MAX_REASONS are known, else "other"."""
    return reason if reason in seen or len(seen) < MAX_REASONS else "other"


def retry_reason(event: RetryEvent) -> str:
    """The label a retry is counted under: error code, else status, else error class."""
    if event.code:
        return event.code
    if event.status is not None:
        return str(event.status)
    if event.error:
        return event.error
    return "unknown"


class SumeMetrics(LockFreePickle):
    """An observer that counts outcomes, retries by reason, attempts, pacing and jobs.

    One object may serve many sessions (Django shares one per process); every method is
    thread-safe. ``snapshot()`` gives plain dicts with string keys.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()
        _LIVE.add(self)

    def _reset(self) -> None:
        self._outcomes: Counter[str] = collections.Counter(dict.fromkeys(_OUTCOMES, 0))
        self._retries: Counter[str] = collections.Counter()
        self._attempts: Counter[int] = collections.Counter()
        self._held = 0
        self._paced = 0.0
        self._refused = 0
        self._fallbacks = 0
        self._jobs: Counter[str] = collections.Counter(dict.fromkeys(JOB_EVENTS, 0))

    def on_retry(self, event: RetryEvent) -> None:
        """Count one retry under its reason."""
        reason = retry_reason(event)
        with self._lock:
            retries = self._retries
            if reason not in retries and len(retries) >= MAX_REASONS:
                reason = "other"  # bounded_reason, inline: this runs on every retry
            retries[reason] += 1

    def on_outcome(self, record: SumeRecord) -> None:
        """Count one logical request: its outcome, attempts and the time the fleet held it."""
        key = _KEYS.get(record.outcome) or str(record.outcome)
        with self._lock:
            self._outcomes[key] += 1
            self._attempts[record.attempts] += 1
        if record.paced or record.fleet_refused or record.fleet_fallbacks:
            self._count_pacing(record)

    def _count_pacing(self, record: SumeRecord) -> None:
        with self._lock:
            if record.paced:
                self._held += 1
                self._paced += record.paced
            if record.fleet_refused:
                self._refused += 1
            self._fallbacks += record.fleet_fallbacks

    def on_job(self, event: Any) -> None:
        """Count one job event (a ``JobEvent``): a poll, or a wait that completed, failed or timed out."""
        kind = getattr(event, "kind", None)
        key = "polls" if kind == "poll" else kind
        if not isinstance(key, str) or key not in self._jobs:
            return  # a kind this version does not know: nothing to count it under
        with self._lock:
            self._jobs[key] += 1

    @property
    def total(self) -> int:
        """Logical requests counted so far."""
        with self._lock:
            return sum(self._outcomes.values())

    def snapshot(self) -> Dict[str, Dict[str, Any]]:
        """A consistent copy: outcomes, retries, attempts, pacing and jobs, string keys."""
        with self._lock:
            return {
                "outcomes": dict(self._outcomes),
                "retries": dict(sorted(self._retries.items())),
                "attempts": {str(n): self._attempts[n] for n in sorted(self._attempts)},
                "pacing": {
                    "held": self._held,
                    "wait_seconds": round(self._paced, 6),
                    "refused": self._refused,
                    "fleet_fallbacks": self._fallbacks,
                },
                "jobs": dict(self._jobs),
            }

    def reset(self) -> None:
        """Set every counter back to zero."""
        with self._lock:
            self._reset()

    def __setstate__(self, state: Dict[str, Any]) -> None:
        super().__setstate__(state)
        _LIVE.add(self)

    def __repr__(self) -> str:
        snap = self.snapshot()
        return f"SumeMetrics(total={sum(snap['outcomes'].values())}, outcomes={snap['outcomes']!r})"


# Counters made in this process: a forked child (gunicorn --preload) starts its own at zero,
# with new locks (another thread may have held one at the fork, and would never let go).
_LIVE: weakref.WeakSet[SumeMetrics] = weakref.WeakSet()


def _fresh_in_child() -> None:
    for metrics in list(_LIVE):
        metrics._lock = threading.Lock()
        metrics._reset()


_fork.in_child(_fresh_in_child)


# Log lines a person can act on: one per retry, one per give-up or caller error.

_LOUD = frozenset({Outcome.GAVE_UP, Outcome.FIX})


class LoggingObserver:
    """An observer that logs retries, give-ups and caller errors at INFO, the rest at DEBUG.

    Lines carry method, path, status, code, request id and idempotency key prefix,
    and the same values as ``sume_*`` attributes of the log record. Never logged:
    headers, the query string, the host, the full idempotency key.
    """

    def __init__(self, logger: Optional[logging.Logger] = None) -> None:
        self.logger = logger if logger is not None else logging.getLogger("sume_urllib3")

    def on_retry(self, event: RetryEvent) -> None:
        """Log one INFO line before a retry's wait."""
        if not self.logger.isEnabledFor(logging.INFO):
            return
        fields = _Fields(event.method, event.url, event.status, event.code, event.request_id)
        prefix = key_prefix(_clean(event.key_prefix))
        cause = fields.label or _clean(event.error) or "an error"
        message = f"retrying {fields.target} after {cause}"
        if fields.request_id:
            message += f" (request id {fields.request_id})"
        message += (
            f", attempt {event.attempt}/{event.max_retries}, "
            f"waiting {event.wait:.1f}s ({_clean(event.wait_source) or 'unknown'})"
        )
        if prefix:
            message += f", key {prefix}"
        extra = fields.extra(
            event="retry",
            attempt=event.attempt,
            max_retries=event.max_retries,
            wait=event.wait,
            wait_source=event.wait_source,
            outcome=None,
            key_prefix=prefix,
            error=_clean(event.error),
            elapsed=None,
        )
        self.logger.info(message, extra=extra)

    def on_outcome(self, record: SumeRecord) -> None:
        """Log a give-up or a caller error at INFO, any other outcome at DEBUG."""
        level = logging.INFO if record.outcome in _LOUD else logging.DEBUG
        if not self.logger.isEnabledFor(level):
            return
        outcome = Outcome(record.outcome)
        fields = _Fields(record.method, record.url, record.status, record.code, record.request_id)
        prefix = key_prefix(record.idempotency_key)
        extra = fields.extra(
            event="outcome",
            attempt=record.attempts,
            max_retries=None,
            wait=None,
            wait_source=None,
            outcome=outcome.value,
            key_prefix=prefix,
            error=None,
            elapsed=record.elapsed,
        )
        self.logger.log(level, _outcome_message(record, fields, prefix), extra=extra)


class _Fields:
    """The cleaned values every line carries: method, path, status, code, request id."""

    def __init__(
        self, method: str, url: str, status: Optional[int], code: Optional[str], request_id: Optional[str]
    ) -> None:
        self.method, self.path = _clean(method), _path(url)
        self.status, self.code, self.request_id = status, _clean(code), _clean(request_id)
        self.target = " ".join(filter(None, (self.method, self.path))) or "request"
        self.label = " ".join(filter(None, (None if status is None else str(status), self.code)))

    def extra(self, **values: Any) -> Dict[str, Any]:
        """The ``sume_*`` attributes of the log record."""
        return _fields(
            method=self.method,
            path=self.path,
            status=self.status,
            code=self.code,
            request_id=self.request_id,
            **values,
        )


def _outcome_message(record: SumeRecord, fields: _Fields, prefix: Optional[str]) -> str:
    reason = _clean(record.reason)
    label = (
        fields.label if record.status is not None else " ".join(filter(None, ("no response", fields.code)))
    )
    details = ", ".join(
        filter(
            None,
            (
                "" if reason.startswith(label) else label,  # reasons usually open with it
                f"request id {fields.request_id}" if fields.request_id else "",
                f"key {prefix}" if prefix else "",
            ),
        )
    )
    suffix = f" ({details})" if details else ""
    attempts = plural(record.attempts, "attempt", "attempts")
    outcome = Outcome(record.outcome)
    if outcome is Outcome.GAVE_UP:
        return f"gave up on {fields.target} after {attempts} in {record.elapsed:.1f}s: {reason}{suffix}"
    if outcome is Outcome.FIX:
        return f"not retried, the caller must fix it: {fields.target}: {reason}{suffix}"
    return f"{fields.target} ended {outcome.value} after {attempts} in {record.elapsed:.1f}s{suffix}"


def _fields(**values: Any) -> Dict[str, Any]:
    # The prefix keeps these apart from LogRecord's own attributes (which
    # logging refuses to overwrite) and from other libraries' extras.
    return {f"sume_{name}": value for name, value in values.items()}


def _path(url: str) -> str:
    """The path of a URL: no scheme, host, credentials, query string or fragment."""
    if not url:
        return ""
    try:
        path = urlsplit(url).path
    except ValueError:
        return "?"
    return _clean(path) or "/"


def _clean(value: Optional[str]) -> str:
    """Printable characters only (no forged log lines), bounded length."""
    return printable(value) or ""
