"""Writing a fleet of your own: the extension point ``HostFleet`` and ``RedisFleet`` are built on.

Subclass :class:`StoreFleet` and implement ``_transact(kid, rule, **args)``: one transaction on one
key's state that runs ``rule(state, config, now, **args)`` (``_core.acquire`` or ``_core.release``,
the rules of ``sume_urllib3.pacing._core`` on a ``_core.State``), stores what it left and returns
its answer. A store running a port of the rules (RedisFleet's Lua) runs the rule's port instead
(a release it may tell later when :func:`release_need` says RELEASE_LATER). ``_snapshot()``
(every key's state and the store's clock, read without writing) lets ``python -m sume_urllib3
status`` show it.
The base does the rest once for every store: the Fleet protocol, the grants, what a response
teaches (:func:`read_response`, a :class:`Lesson`), failing open to local pacing, the reset
in a forked child, and the counters. The settings checks are the ones the built-in fleets
(and Django's ``manage.py check``) apply, so a store accepts what they accept.
"""

from __future__ import annotations

from ._fleet import (
    REDIS_PREFIX,
    RELEASE_LATER,
    RELEASE_NEVER,
    RELEASE_NOW,
    Lesson,
    StoreFleet,
    check_burst,
    check_prefix,
    check_timeout,
    check_ttl,
    fleet_key,
    parse_rate,
    read_response,
    release_need,
)

__all__ = [
    "REDIS_PREFIX",
    "RELEASE_LATER",
    "RELEASE_NEVER",
    "RELEASE_NOW",
    "Lesson",
    "StoreFleet",
    "check_burst",
    "check_prefix",
    "check_timeout",
    "check_ttl",
    "fleet_key",
    "parse_rate",
    "read_response",
    "release_need",
]
