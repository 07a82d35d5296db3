"""Failing open: a fleet that shares its state (in Redis, in a host file) paces locally while
that store fails, and never blocks a request on it.

``RedisFleet`` and ``HostFleet`` share this part, written once: the counters, the backoff
before the store is tried again (spread, so processes do not retry it in step), the local
``LocalFleet`` of the outage (a configured rate shared among the processes seen lately), and
the two log lines (one WARNING when an outage starts, one INFO when it ends).
"""

from __future__ import annotations

import abc
import logging
from typing import Any, Callable, Dict, Mapping, NamedTuple, Optional

from ._fleet import Fleet, Grant, LocalFleet

log = logging.getLogger("sume_urllib3")


class Local(NamedTuple):
    """``Grant.token`` of a turn the local fallback fleet gave."""

    fleet: Fleet
    grant: Grant


class FailOpen(abc.ABC):
    """Outage handling for a shared fleet; the fleet sets these attributes in each process.

    ``_outage_lock`` guards the counters and the outage state; ``_backoff``/``_max_backoff``
    bound the wait before the store is tried again; ``_clock`` and ``_random`` are the fleet's.
    A subclass says what its store is called (``_store``, ``_scope``) and which local fleet
    stands in (``_local_settings``).
    """

    _outage_lock: Any
    _backoff: float
    _max_backoff: float
    _clock: Callable[[], float]
    _random: Callable[[], float]
    #: How log lines name the store ("Redis fleet", "host fleet file /run/...").
    _store: str
    #: Where the pace is shared when the store works ("fleet-wide", "host-wide").
    _scope: str

    def _start_outage_state(self) -> None:
        """A process's outage state: none yet (again in a forked child)."""
        self._down_until = 0.0  # clock() before which the store is not tried
        self._delay = self._backoff  # the next backoff after a failure
        self._outage = False
        self._clients = 1  # processes seen sharing a key lately (for the fallback's share)
        self._fallbacks = 0
        self._errors = 0
        self._local_fleet: Optional[LocalFleet] = None

    @property
    def fallbacks(self) -> int:
        """Grants this process served from local pacing because the shared store failed."""
        return self._fallbacks

    @property
    def errors(self) -> int:
        """Calls of this process to the shared store that failed (each opens or extends an outage)."""
        return self._errors

    @property
    def healthy(self) -> bool:
        """False while this process paces locally and waits to try the shared store again."""
        return not self._outage

    @abc.abstractmethod
    def _local_settings(self, share: int) -> Dict[str, Any]:
        """``LocalFleet`` arguments for an outage, a configured pace divided by ``share``."""

    def _fallback(self, kid: str, time_left: float, retry: Optional[str], not_before: float) -> Grant:
        """A turn from the local fleet of this outage, marked ``fallback``."""
        fleet = self._local()
        grant = fleet.acquire(kid, time_left=time_left, retry=retry, not_before=not_before)
        with self._outage_lock:
            self._fallbacks += 1
        return Grant(
            wait=grant.wait,
            refused=grant.refused,
            source=grant.source,
            again=grant.again,
            fallback=True,
            token=Local(fleet, grant),
        )

    @staticmethod
    def _released_locally(
        key_id: str, grant: Grant, status: Optional[int], headers: Optional[Mapping[str, str]]
    ) -> bool:
        """Release a turn the outage's local fleet gave (True); False for a turn of the store."""
        token = grant.token
        if not isinstance(token, Local):
            return False
        token.fleet.release(key_id, token.grant, status, headers)
        return True

    def _local(self) -> LocalFleet:
        """The local fleet of this outage; a configured rate is shared among the processes seen."""
        fleet = self._local_fleet
        if fleet is None:
            with self._outage_lock:
                fleet = self._local_fleet
                if fleet is None:
                    fleet = LocalFleet(**self._local_settings(max(1, self._clients)))
                    self._local_fleet = fleet
        return fleet

    def _failed(self, exc: BaseException) -> None:
        """The store failed: count it, back off (spread), and say so once per outage."""
        with self._outage_lock:
            self._errors += 1
            delay = self._delay * (0.5 + self._random())  # processes do not retry the store in step
            self._down_until = self._clock() + delay
            self._delay = min(self._delay * 2, self._max_backoff)
            first = not self._outage
            self._outage = True
        if first:
            log.warning(
                "sume_urllib3: %s unavailable (%s); pacing locally, trying it again in %.1fs",
                self._store,
                describe(exc),
                delay,
            )

    def _recovered(self) -> None:
        """The store answered: the outage (if any) is over, and its local fleet forgotten."""
        if not self._outage:
            return
        with self._outage_lock:
            was_out, self._outage = self._outage, False
            self._delay = self._backoff
            self._local_fleet = None
        if was_out:
            log.info("sume_urllib3: %s available again; pacing %s", self._store, self._scope)


def describe(exc: BaseException) -> str:
    """An error for a log line: its class and the first line of its text, at most 200 characters."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__
