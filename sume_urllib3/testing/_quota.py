"""FakeSume's quota mode: a GCRA rate limit per API key, as a real API enforces one."""

from __future__ import annotations

import hashlib
import math
import threading
from typing import Callable, Dict, Mapping, Optional, Tuple, Union

from ..pacing.store import check_burst, parse_rate
from ._nosleep import shared_monotonic
from ._reply import Reply


class Quota:
    """Admits ``rate`` requests per second per API key (see :meth:`FakeSume.quota`) with ``burst`` at once.

    Keys are kept only as hashes. ``RateLimit-Limit`` is the burst, ``-Reset`` whole seconds until
    the quota is whole again, a refusal's ``Retry-After`` whole seconds until the next turn (at
    least 1). Thread-safe.
    """

    def __init__(
        self,
        rate: Union[str, float],
        burst: int = 1,
        *,
        clock: Callable[[], float] = shared_monotonic,
    ) -> None:
        per_second = parse_rate(rate)
        if per_second is None:
            raise ValueError("quota needs a rate such as '10/s' or '10/min'")
        self.rate = per_second
        self.burst = check_burst(burst)
        self._step = 1.0 / per_second
        self._clock = clock
        self._lock = threading.Lock()
        self._tat: Dict[str, float] = {}
        self.admitted = 0
        self.refused = 0

    def __repr__(self) -> str:
        return f"Quota(rate={self.rate:g}/s, burst={self.burst})"

    def take(self, headers: Mapping[str, str]) -> Tuple[bool, Dict[str, str]]:
        """Spend one turn of the request's key: (admitted, headers to add to the reply)."""
        key = _key_of(headers)
        step, burst = self._step, self.burst
        with self._lock:
            now = self._clock()
            tat = max(self._tat.get(key, now), now)
            allowed = tat - now <= (burst - 1) * step + 1e-9
            if allowed:
                tat += step
                self._tat[key] = tat
                self.admitted += 1
            else:
                self.refused += 1
        ahead = tat - now  # seconds of turns already spent beyond now
        out = {
            "RateLimit-Limit": str(burst),
            "RateLimit-Remaining": str(max(0, math.floor(burst - ahead / step + 1e-9))),
            "RateLimit-Reset": str(max(0, math.ceil(ahead - 1e-9))),
            "RateLimit-Policy": f"{burst};w={burst * step:g}",
        }
        if not allowed:
            out["Retry-After"] = str(max(1, math.ceil(ahead - (burst - 1) * step - 1e-9)))
        return allowed, out

    def refusal(self, headers: Mapping[str, str]) -> Reply:
        """The 429 a request over the quota gets, with the quota's headers from :meth:`take`."""
        message = f"Rate limit exceeded: {self.burst} per {self.burst / self.rate:g}s"
        return Reply.error(429, "rate_limit_exceeded", message=message, headers=headers)


def _key_of(headers: Mapping[str, str]) -> str:
    value: Optional[str] = headers.get("x-api-key") or headers.get("Authorization")
    if not value:
        return "anonymous"
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
