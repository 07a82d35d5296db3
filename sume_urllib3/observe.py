"""Observability: what a request tells its observers, and the observers the library ships.

An observer has some of the hooks of :class:`SumeObserver`; :class:`Observers` calls them so that a
broken observer never breaks a request. :class:`SumeMetrics` counts; :class:`LoggingObserver` writes
the lines a person can act on; :func:`redact_urllib3_logs` keeps secrets out of urllib3's own lines.
"""

from __future__ import annotations

import collections
import contextvars
import functools
import logging
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Collection, Dict, Iterable, Optional, Protocol, Tuple, TypeVar
from urllib.parse import urlsplit

from . import _fork
from ._envelope import key_prefix, printable
from ._errors import ConfigurationError
from ._jobs import JobEvent
from ._record import Outcome, SumeRecord
from ._redact import redact_urllib3_logs
from ._util import plural

__all__ = [
    "JOB_EVENT_KINDS",
    "MAX_REASONS",
    "JobEvent",
    "LoggingObserver",
    "Observers",
    "RequestStart",
    "RetryEvent",
    "SumeMetrics",
    "SumeObserver",
    "key_prefix",
    "redact_urllib3_logs",
    "retry_reason",
]

logger = logging.getLogger("sume_urllib3")

# -- what observers are told ------------------------------------------------------------------

#: The kinds of a :class:`JobEvent` (``session.jobs``, where it is defined beside ``Job``): one
#: poll, or how a wait ended (an error: an answer polling cannot fix, a transport failure, the
#: caller's ``on_status`` raising). Every observer counts these.
JOB_EVENT_KINDS = ("poll", "completed", "failed", "timed_out", "error")


@dataclass(frozen=True)
class RetryEvent:
    """One retry about to happen: which attempt, how long we wait and why."""

    method: str
    url: str
    attempt: int  # 1-based number of this retry
    max_retries: int
    wait: float
    wait_source: str  # "retry_after" | "backoff" | "fixed" | "pace" (the fleet made it longer)
    status: Optional[int]
    code: Optional[str]
    request_id: Optional[str]
    key_prefix: Optional[str]
    reason: str
    error: Optional[str] = None  # transport error class name when there was no response


@dataclass(frozen=True)
class RequestStart:
    """A logical request about to send its first attempt (before any pacing wait)."""

    method: str
    url: str
    idempotency_key: Optional[str] = None


class SumeObserver(Protocol):
    """Receives every retry and every final outcome, on the requesting thread.

    An observer may also have ``on_start(RequestStart)`` (called once before the first
    attempt, always followed by exactly one ``on_outcome``) and ``on_job(JobEvent)`` (job
    polls and endings); neither is required. With ``on_start`` present, the request runs in
    a copy of the caller's ``contextvars`` context, so what ``on_start`` sets is seen by the
    request's other hooks and gone when the call returns (what else the call sets reaches the
    caller). A streamed response's outcome (``stream=True``) comes when its body ends, on
    whichever thread ends it, in that context.
    """

    def on_retry(self, event: RetryEvent) -> None:
        """Called before each wait."""

    def on_outcome(self, record: SumeRecord) -> None:
        """Called once per logical request, with its final record."""


# -- telling them -------------------------------------------------------------------------------

_HOOKS = ("on_start", "on_retry", "on_outcome", "on_job")


class Observers(Tuple[SumeObserver, ...]):
    """Observers as one: an immutable tuple that is itself an observer and tells each of them.

    A hook that raises is logged once (with its traceback) and the request goes on. A str,
    a non-iterable or an object with none of the hooks is refused when the tuple is made.
    """

    #: Whether any observer has ``on_start`` (so the start event is worth building).
    starts: bool

    def __new__(cls, observers: Iterable[SumeObserver] = ()) -> Observers:
        given: object = observers  # what the caller passed, whatever its annotation says
        if isinstance(given, (str, bytes)) or not isinstance(given, Iterable):
            raise ConfigurationError("observers must be a sequence of observer objects")
        # An Observers among them is unpacked: its observers are told directly, like the rest.
        self = super().__new__(
            cls, (o for each in observers for o in (each if isinstance(each, Observers) else (each,)))
        )
        for observer in self:
            if not any(hasattr(observer, hook) for hook in _HOOKS):
                raise ConfigurationError(
                    f"observers: {type(observer).__name__} has none of the hooks {', '.join(_HOOKS)}: "
                    "each observer must have at least one"
                )
        self.starts = any(getattr(observer, "on_start", None) is not None for observer in self)
        return self

    def __repr__(self) -> str:
        return f"Observers({', '.join(type(o).__name__ for o in self)})"

    def on_start(self, event: RequestStart) -> None:
        """Tell every observer with ``on_start`` that a logical request begins.

        The context variables the hooks set are noted, to stay within the call (``in_own_context``).
        """
        before = contextvars.copy_context()
        self._tell("on_start", event)
        changed = frozenset(
            var for var, value in contextvars.copy_context().items() if before.get(var, _UNSET) is not value
        )
        if changed:
            _SET_BY_START.set(_SET_BY_START.get() | changed)

    def _tell(self, hook: str, value: Any) -> None:
        """Call ``hook`` of every observer that has it."""
        for observer in self:
            call = getattr(observer, hook, None)
            if call is not None:
                try:
                    call(value)
                except Exception:
                    _failed(observer, hook)

    on_retry = functools.partialmethod(_tell, "on_retry")
    on_outcome = functools.partialmethod(_tell, "on_outcome")
    on_job = functools.partialmethod(_tell, "on_job")

    # The names the adapter, the retry and the session call them by.
    start, retry, outcome = on_start, on_retry, on_outcome


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
_SET_BY_START: contextvars.ContextVar[frozenset[contextvars.ContextVar[Any]]] = contextvars.ContextVar(
    "sume_urllib3_set_by_start", default=frozenset()
)
_UNSET = object()

_lock = threading.Lock()
# id(observer) -> a finalizer that forgets the id when the observer dies (so a new object
# reusing the id is warned about again) or, for objects that cannot be weakly referenced,
# the observer itself (kept alive so its id is never reused).
_warned: Dict[int, Any] = {}


def _failed(observer: object, hook: str) -> None:
    """Log an observer's first failure (with its traceback); later ones pass silently."""
    key = id(observer)
    with _lock:
        if key in _warned:
            return
        try:
            # It may run inside garbage collection while this thread holds _lock: one dict
            # operation, no lock.
            _warned[key] = weakref.finalize(observer, _warned.pop, key, None)
        except TypeError:
            _warned[key] = observer
    logger.warning(
        "observer %s raised in %s; the request goes on, and further errors "
        "from this observer are ignored silently",
        type(observer).__name__,
        hook,
        exc_info=True,
    )


# -- counting -----------------------------------------------------------------------------------

#: Distinct retry reasons counted before the rest go under "other": codes come from the
#: server, and a label set that grows without bound is a memory leak in a metrics store.
MAX_REASONS = 50
#: ``snapshot()["jobs"]``'s keys: each JobEvent kind, a poll counted as "polls".
JOB_EVENTS = tuple("polls" if kind == "poll" else kind for kind in JOB_EVENT_KINDS)


def retry_reason(event: RetryEvent, seen: Collection[str] = ()) -> str:
    """The label a retry is counted under: error code, else status, else error class; "other"
    when it is new and ``seen`` (the labels counted so far) already holds MAX_REASONS."""
    if event.code:
        reason = event.code
    elif event.status is not None:
        reason = str(event.status)
    else:
        reason = event.error or "unknown"
    return reason if reason in seen or len(seen) < MAX_REASONS else "other"


class SumeMetrics:
    """An observer that counts outcomes, retries by reason, attempts, pacing and jobs.

    One object may serve many sessions (Django shares one per process); every method is
    thread-safe. ``snapshot()`` gives plain dicts with string keys. A forked child starts its
    own at zero (gunicorn ``--preload``); a copy pickles without the lock.
    """

    def __init__(self) -> None:
        self._after_fork()
        _fork.track(self)

    def _reset(self) -> None:
        self._outcomes = collections.Counter(dict.fromkeys((o.value for o in Outcome), 0))
        self._retries: collections.Counter[str] = collections.Counter()
        self._attempts: collections.Counter[int] = collections.Counter()
        self._pacing: Dict[str, float] = {"held": 0, "wait_seconds": 0.0, "refused": 0, "fleet_fallbacks": 0}
        self._jobs = collections.Counter(dict.fromkeys(JOB_EVENTS, 0))

    def _after_fork(self) -> None:
        # Another thread may have held the lock at the fork, and would never let go.
        self._lock = threading.Lock()
        self._reset()

    def on_retry(self, event: RetryEvent) -> None:
        """Count one retry under its reason."""
        with self._lock:
            self._retries[retry_reason(event, self._retries)] += 1

    def on_outcome(self, record: SumeRecord) -> None:
        """Count one logical request: its outcome, attempts and the time the fleet held it."""
        with self._lock:
            self._outcomes[record.outcome.value] += 1
            self._attempts[record.attempts] += 1
            # In _pacing's order: held, wait_seconds, refused, fleet_fallbacks.
            pacing = (bool(record.paced), record.paced, record.fleet_refused, record.fleet_fallbacks)
            for name, value in zip(self._pacing, pacing):
                self._pacing[name] += value

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
                "pacing": {**self._pacing, "wait_seconds": round(self._pacing["wait_seconds"], 6)},
                "jobs": dict(self._jobs),
            }

    def reset(self) -> None:
        """Set every counter back to zero."""
        with self._lock:
            self._reset()

    def __getstate__(self) -> Dict[str, Any]:
        with self._lock:
            return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        _fork.track(self)

    def __repr__(self) -> str:
        snap = self.snapshot()
        return f"SumeMetrics(total={sum(snap['outcomes'].values())}, outcomes={snap['outcomes']!r})"


# -- log lines ----------------------------------------------------------------------------------

#: The level of an outcome's line: a give-up needs someone; a caller error is the caller's to fix.
_LEVELS = {Outcome.GAVE_UP: logging.WARNING, Outcome.FIX: logging.INFO}


class LoggingObserver:
    """An observer that logs give-ups at WARNING, retries and caller errors at INFO, the rest at DEBUG.

    Lines carry method, path, status, code, request id and idempotency key prefix
    ("idempotency key 3f2a9c1e…"), and the same values as ``sume_*`` attributes of the log
    record. Never logged: headers, the query string, the host, the full idempotency key.
    """

    def __init__(self, logger: Optional[logging.Logger] = None) -> None:
        self.logger = logger if logger is not None else logging.getLogger("sume_urllib3")

    def on_retry(self, event: RetryEvent) -> None:
        """Log one INFO line before a retry's wait."""
        if not self.logger.isEnabledFor(logging.INFO):
            return
        line = _Line(event, event.key_prefix)
        error = _clean(event.error)
        said_by = f" ({line.request_id})" if line.request_id else ""
        message = (
            f"retrying {line.target} after {line.label or error or 'an error'}{said_by}, attempt "
            f"{event.attempt}/{event.max_retries}, waiting {event.wait:.1f}s "
            f"({_clean(event.wait_source) or 'unknown'}){', ' + line.key if line.key else ''}"
        )
        fields = {"attempt": event.attempt, "max_retries": event.max_retries, "wait": event.wait}
        extra = line.extra(event="retry", wait_source=event.wait_source, error=error, **fields)
        self.logger.info(message, extra=extra)

    def on_outcome(self, record: SumeRecord) -> None:
        """Log a give-up at WARNING, a caller error at INFO, any other outcome at DEBUG."""
        level = _LEVELS.get(record.outcome, logging.DEBUG)
        if not self.logger.isEnabledFor(level):
            return
        outcome = Outcome(record.outcome)
        line = _Line(record, record.idempotency_key)
        reason = _clean(record.reason)
        label = (
            line.label if record.status is not None else " ".join(filter(None, ("no response", line.code)))
        )
        # Reasons usually open with the status and code: say them once.
        details = ", ".join(
            filter(None, ("" if reason.startswith(label) else label, line.request_id, line.key))
        )
        suffix = f" ({details})" if details else ""
        took = f"after {plural(record.attempts, 'attempt', 'attempts')} in {record.elapsed:.1f}s"
        if outcome is Outcome.GAVE_UP:
            message = f"gave up on {line.target} {took}: {reason}{suffix}"
        elif outcome is Outcome.FIX:
            message = f"not retried, the caller must fix it: {line.target}: {reason}{suffix}"
        else:
            message = f"{line.target} ended {outcome.value} {took}{suffix}"
        extra = line.extra(
            event="outcome", attempt=record.attempts, outcome=outcome.value, elapsed=record.elapsed
        )
        self.logger.log(level, message, extra=extra)


#: The ``sume_*`` attributes every line's record carries (None where one does not apply), so
#: one format string fits them all; each line adds method, path, status, code, request id, prefix.
_EXTRAS = dict.fromkeys(
    ("event", "attempt", "max_retries", "wait", "wait_source", "outcome", "error", "elapsed")
)


class _Line:
    """The cleaned values every line carries, and how the line names them."""

    def __init__(self, told: RetryEvent | SumeRecord, key: Optional[str]) -> None:
        status, self.code = told.status, _clean(told.code)
        self.fields: Dict[str, Any] = {
            "method": _clean(told.method),
            "path": _path(told.url),
            "status": status,
            "code": self.code,
            "request_id": _clean(told.request_id),
            "key_prefix": key_prefix(_clean(key)),  # a whole key given as a prefix is cut all the same
        }
        self.target = " ".join(filter(None, (self.fields["method"], self.fields["path"]))) or "request"
        self.label = " ".join(filter(None, (None if status is None else str(status), self.code)))
        self.request_id = f"request id {self.fields['request_id']}" if self.fields["request_id"] else ""
        # Never "key" alone: the fleet's lines name the API key's hash, as key_id.
        self.key = f"idempotency key {self.fields['key_prefix']}" if self.fields["key_prefix"] else ""

    def extra(self, **values: Any) -> Dict[str, Any]:
        """The record's ``sume_*`` attributes: prefixed, as logging refuses to overwrite its own."""
        return {f"sume_{name}": value for name, value in {**_EXTRAS, **self.fields, **values}.items()}


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
