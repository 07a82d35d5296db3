"""``SUME["OBSERVERS"]``: observers named by dotted path (or given as callables or objects).

Each entry is a dotted path such as ``"sume_urllib3.contrib.prometheus.PrometheusObserver"``,
a class or other callable, or an observer object. A path is imported; a class or factory is
called with no arguments; what results must have at least one of the observer hooks
(``on_start``, ``on_retry``, ``on_outcome``, ``on_job``), as ``SumeSession`` requires. The
observers are built once per process and shared by every thread's session; a changed
setting builds them again.
"""

from __future__ import annotations

import threading
from typing import Any, Optional, Sequence, Tuple

from django.utils.module_loading import import_string

from ...exceptions import ConfigurationError

# The hooks SumeSession calls; an observer needs at least one.
_HOOKS = ("on_start", "on_retry", "on_outcome", "on_job")

_lock = threading.Lock()
# (the setting's value, the observers built from it): one slot, so an unchanged setting
# (the usual case, and every rebuild after an unrelated override) reuses the same objects.
_built: Optional[Tuple[Any, Tuple[object, ...]]] = None


def build_observers(entries: Any) -> Tuple[object, ...]:
    """The observers for this value of the setting, built on first use; raises ConfigurationError."""
    global _built
    with _lock:
        if _built is not None and _same(_built[0], entries):
            return _built[1]
        observers = tuple(_build(entry, index) for index, entry in enumerate(_entries(entries)))
        _built = (_snapshot(entries), observers)
        return observers


def forget() -> None:
    """Drop the built observers: the next call builds them again (tests)."""
    global _built
    with _lock:
        _built = None


def _entries(entries: Any) -> Sequence[Any]:
    if entries is None:
        return ()
    if isinstance(entries, (str, bytes)) or not isinstance(entries, (list, tuple)):
        raise ConfigurationError(
            f"must be a list of dotted paths, classes or observer objects, got {type(entries).__name__}"
        )
    return entries


def _build(entry: Any, index: int) -> object:
    where = f"entry {index}"
    if isinstance(entry, str):
        where = f"{where} ({entry!r})"
        try:
            entry = import_string(entry)
        except Exception as exc:  # ImportError, or the module itself failing as it loads
            raise ConfigurationError(f"{where}: cannot import it: {_describe(exc)}") from exc
    if _is_observer(entry) and not isinstance(entry, type):
        return entry
    if not callable(entry):
        raise ConfigurationError(
            f"{where} is a {type(entry).__name__}: expected a dotted path, a class or an object "
            f"with at least one of {', '.join(_HOOKS)}"
        )
    try:
        observer = entry()
    except Exception as exc:
        raise ConfigurationError(f"{where}: calling it with no arguments failed: {_describe(exc)}") from exc
    if not _is_observer(observer):
        raise ConfigurationError(
            f"{where} made a {type(observer).__name__}, which has none of {', '.join(_HOOKS)}"
        )
    return observer


def _is_observer(value: Any) -> bool:
    return any(callable(getattr(value, hook, None)) for hook in _HOOKS)


def _describe(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _snapshot(entries: Any) -> Any:
    # A list in settings may be mutated in place; keep what it held when the observers were built.
    return tuple(entries) if isinstance(entries, list) else entries


def _same(before: Any, now: Any) -> bool:
    try:
        return bool(before == _snapshot(now))
    except Exception:  # an entry with a broken __eq__: build again rather than fail
        return False
