"""Share pacing across processes and hosts through Redis (needs the ``redis`` extra).

``SumeSession(fleet=RedisFleet("redis://localhost:6379/0", rate="10/min"))``: every process
using an API key shares its cooldown, its pace and a retry budget; if Redis fails, each
process paces locally until Redis is back.
"""

from __future__ import annotations

try:
    import redis as _redis_py  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised by a test that hides the module
    raise ImportError("sume_urllib3.contrib.redis needs redis-py: pip install 'sume-urllib3[redis]'") from exc

from ._redis_fleet import RedisFleet

__all__ = ["RedisFleet"]
