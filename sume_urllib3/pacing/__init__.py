"""Pacing shared by every request of an API key: the fleets, their grants and the retry budget.

``LocalFleet`` paces one process (the default), ``HostFleet`` every process of a host through
a file, ``sume_urllib3.contrib.redis.RedisFleet`` every host through Redis; all three run the
same rules. ``sume_urllib3.pacing.store`` is the extension point for a store of your own;
``reset_fleets()`` forgets what every local and host fleet of the process knows (tests).
"""

from __future__ import annotations

from ._fleet import Fleet, Grant, LocalFleet, RetryBudget, reset_fleets
from .host import HostFleet

__all__ = ["Fleet", "Grant", "HostFleet", "LocalFleet", "RetryBudget", "reset_fleets"]
