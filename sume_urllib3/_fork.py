"""Noticing a fork, with or without at-fork hooks.

What a process must not share with its children (pooled sockets, fleet client ids, locks,
per-process counters) is reset once in each new process: an object registers itself with
:func:`track` and has its ``_after_fork()`` called; module-level state registers a function
with :func:`in_child`. Both run from whichever comes first:

- ``os.register_at_fork``'s child hook, when the fork came from Python (gunicorn, Celery's
  prefork, ``multiprocessing``);
- :func:`check`, called where those resources are used (once per request), which compares
  ``os.getpid()`` with the pid it last saw. uWSGI forks its workers from C and runs no
  Python at-fork hook (unless ``--py-call-osafterfork``), so without this check every
  worker would send on the master's pooled keep-alive connections and read each other's
  answers. redis-py's connection pool guards itself the same way.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from typing import Callable, Dict, List, Protocol


class ForkAware(Protocol):
    def _after_fork(self) -> None:
        """Drop what belongs to the parent process (sockets, locks, client ids, counts)."""


log = logging.getLogger("sume_urllib3")

_callbacks: List[Callable[[], None]] = []
_tracked: weakref.WeakSet[ForkAware] = weakref.WeakSet()
#: The process the library's state belongs to. A use site compares ``os.getpid()`` with it and
#: calls :func:`check` only when they differ (in a process forked without at-fork hooks).
pid = os.getpid()
# One lock per process, made in that process: a lock inherited from the parent may have been
# held by one of its threads at the fork, and would never be released in the child.
_locks: Dict[int, threading.Lock] = {}


def in_child(callback: Callable[[], None]) -> Callable[[], None]:
    """Run ``callback`` once in every process forked from this one, before it is used there."""
    _callbacks.append(callback)
    return callback


def track(obj: ForkAware) -> None:
    """Call ``obj._after_fork()`` once in every process forked from this one, while it lives."""
    _tracked.add(obj)


def check() -> None:
    """Start afresh if this is a new process whose fork ran no at-fork hook (one getpid)."""
    if os.getpid() != pid:
        _start_afresh()


def _start_afresh() -> None:
    global pid
    current = os.getpid()
    with _locks.setdefault(current, threading.Lock()):  # dict.setdefault is atomic under the GIL
        if pid == current:
            return  # another thread of this process got here first
        for callback in [*_callbacks, *(obj._after_fork for obj in list(_tracked))]:
            try:
                callback()
            except Exception:  # one failed reset must not leave the rest shared
                log.exception("resetting %s after a fork failed", callback)
        pid = current


def _after_fork_hook() -> None:
    _locks.clear()  # the parent's locks belong to the parent's threads
    _start_afresh()


if hasattr(os, "register_at_fork"):  # not on Windows
    os.register_at_fork(after_in_child=_after_fork_hook)
