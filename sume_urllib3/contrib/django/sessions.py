"""``get_session()``: one configured SumeSession per thread, rebuilt when ``SUME`` changes.

What the threads' sessions share, so that the process is one client: the connection pools and
the retry budget (per setting generation), one ``SumeMetrics`` (for the life of the process:
``get_session().metrics`` counts every thread's requests), the observers of ``SUME["OBSERVERS"]``
and the fleet of ``SUME["FLEET"]`` (both built once per value of the setting; without ``FLEET``,
the host fleet, which every process of the deployment shares: see ``fleet``).

The pools are shared because a thread may live for one request only: under ASGI Django runs
each sync view (and each ``sync_to_async(thread_sensitive=True)`` call) in a thread of the
request's own, so a session with pools of its own would open a connection, and a TLS
handshake, per request. The session stays per thread (requests does not document a Session's
cookies and headers as safe to change from several threads); its connections are the
generation's, in one urllib3 ``PoolManager``, which is thread-safe.

A process made by ``os.fork`` (a preforking server's worker) starts afresh: zero counts, a
full retry budget, and new sessions on the next ``get_session()`` in every thread.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Optional

from ... import SumeAdapter, SumeSession, _fork
from ...exceptions import ConfigurationError
from ...observe import SumeMetrics
from ...pacing import LocalFleet, RetryBudget
from . import conf, fleet

_local = threading.local()
_lock = threading.Lock()


class _Generation:
    """What every thread's session of one setting generation shares.

    The retry budget, so the whole process (not each thread) is held to the budget's fraction
    of traffic; and the first session's adapter, whose pools (requests' ``poolmanager`` and
    ``proxy_manager``) every later session of the generation sends through.
    """

    def __init__(self) -> None:
        self.budget = RetryBudget()
        self.pools: Optional[SumeAdapter] = None

    def share_pools(self, session: SumeSession) -> None:
        with _lock:
            if self.pools is None:
                self.pools = session.adapter
                return
        session.adapter.poolmanager = self.pools.poolmanager
        session.adapter.proxy_manager = self.pools.proxy_manager


# A setting_changed receiver starts a new generation; a thread notices on its next call.
_shared = _Generation()
# Counters are cumulative for the whole process, like a Prometheus counter: a settings
# change does not reset them. A child process made by fork starts from zero, or every
# worker of a preloaded server would report the parent's requests again.
_metrics = SumeMetrics()


@_fork.in_child
def _after_fork_in_child() -> None:
    """A forked child builds sessions of its own on next use (with a fresh retry budget).

    The shared ``SumeMetrics`` and every ``RetryBudget`` start afresh in a child by themselves.
    """
    global _shared, _lock
    # Only this thread survives a fork: a lock another thread held would stay held forever.
    _lock = threading.Lock()
    _shared = _Generation()


def get_session() -> SumeSession:
    """The calling thread's SumeSession, configured from ``settings.SUME``.

    The same object is returned within a thread until the setting changes (for example
    under ``override_settings``; the app must be in ``INSTALLED_APPS`` to hear of it) or
    ``SUME_API_KEY`` / ``SUME_API_BASE_URL`` change, then the old session is closed and a
    new one built.
    Raises ``ConfigurationError`` naming the system check id when the settings are
    invalid (``manage.py check`` lists every problem).
    """
    shared = _shared
    # The environment is part of the configuration too (SUME_API_KEY, SUME_API_BASE_URL),
    # and changes to it send no signal: compare it on every call (two dict lookups).
    built_from = (shared, os.environ.get(conf.ENV_KEY), os.environ.get(conf.ENV_BASE_URL))
    session: Optional[SumeSession] = getattr(_local, "session", None)
    if session is not None and _local.built_from == built_from:
        return session
    close_session()
    session = _build(shared)
    _local.session, _local.built_from = session, built_from
    return session


def close_session() -> None:
    """Close and forget the calling thread's session (e.g. when a worker thread finishes)."""
    session: Optional[SumeSession] = getattr(_local, "session", None)
    _local.session = None
    if session is not None:
        session.close()


def on_setting_changed(sender: Any = None, setting: str = "", **kwargs: Any) -> None:
    """``setting_changed`` receiver: a changed ``SUME`` gets fresh sessions and a fresh fleet.

    Django sends the signal only from ``override_settings`` (and ``TestCase.settings``), on
    entering and on leaving: a test that sets ``SUME`` starts with nothing a previous test
    learned (no cooldown, no pace, a full retry budget), and leaves nothing behind. The
    fleet of ``SUME["FLEET"]`` forgets what it learned (a host fleet's file too) and is built
    again (without ``FLEET``, the host fleet of ``fleet.DEFAULT``, at the test run's own file).
    A ``RedisFleet``'s state lives in Redis, shared with other processes, and is not cleared.
    """
    if setting == conf.SUME_SETTING:
        reset()


def reset() -> None:
    """Make every thread build a new session on its next ``get_session()`` call, with a fleet
    that knows nothing (``on_setting_changed``; ``testing.reset_fleets()`` calls it too)."""
    global _shared
    _shared = _Generation()
    fleet.forget()
    LocalFleet.default().reset()


def _build(shared: _Generation) -> SumeSession:
    resolved = conf.read()
    if resolved.errors:
        details = "; ".join(f"{problem.id}: {problem.msg}" for problem in resolved.errors)
        raise ConfigurationError(f"invalid settings.{conf.SUME_SETTING}: {details}")
    budget = shared.budget if resolved.retry_budget else None
    kwargs = dict(resolved.session_kwargs)
    try:
        if "fleet" not in kwargs:  # no SUME["FLEET"]: the workers of a deployment share one pace
            kwargs["fleet"] = fleet.build_fleet(fleet.DEFAULT)
        session = SumeSession(policy=resolved.policy, retry_budget=budget, metrics=_metrics, **kwargs)
    except ConfigurationError as exc:
        # The checks validate what SumeSession validates, so this means they fell behind it.
        raise ConfigurationError(
            f"invalid settings.{conf.SUME_SETTING}: {conf.CHECK_TAG}.E004: {exc}"
        ) from exc
    shared.share_pools(session)
    return session


def process_metrics() -> SumeMetrics:
    """The counters of every session ``get_session()`` builds in this process."""
    return _metrics
