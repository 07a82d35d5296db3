"""Parse a Retry-After header value without ever raising."""

from __future__ import annotations

import email.utils
import math
import re
import time
from typing import Callable, Optional, Union

#: Longest wait we represent; anything larger is already far past any sane deadline.
RETRY_AFTER_CEILING = 10.0**9

# ASCII only: "١٢" is two Unicode digits, but not a delta-seconds value.
# However many digits, a delta is a (huge) wait; beyond this it is not a header value at all.
_MAX_LENGTH = 4096
_MAX_DATE_LENGTH = 256
_DELTA = re.compile(r"^\s*([+-]?)(\d+(?:\.\d*)?|\.\d+)\s*$", re.ASCII)


def parse_retry_after(
    value: Union[str, bytes, None],
    now: Optional[Callable[[], float]] = None,
) -> Optional[float]:
    """Return the wait a Retry-After value asks for, in seconds, or None when it is garbage.

    Accepts delta seconds (integer or decimal) and HTTP-dates. A negative delta or a
    past date means 0. Absurd values are clamped to ``RETRY_AFTER_CEILING`` rather than
    overflowing, so the caller's deadline check turns them into "stop". ``now`` is the
    wall clock used for HTTP-dates (injected so tests need no real time).
    """
    if value is None:
        return None
    if isinstance(value, bytes):
        try:
            value = value.decode("latin-1")
        except Exception:  # pragma: no cover - latin-1 decodes every byte
            return None
    if not isinstance(value, str) or len(value) > _MAX_LENGTH:
        return None
    match = _DELTA.match(value)
    if match:
        sign, number = match.groups()
        seconds = float(number)  # float() of a digit string saturates to inf, never raises
        if sign == "-":
            return 0.0
        return min(seconds, RETRY_AFTER_CEILING)
    if len(value) > _MAX_DATE_LENGTH:
        return None
    return _parse_http_date(value, now or time.time)


def _parse_http_date(value: str, now: Callable[[], float]) -> Optional[float]:
    try:
        parsed = email.utils.parsedate_tz(value.strip())
        if parsed is None:
            return None
        stamp = email.utils.mktime_tz(parsed)
    except (TypeError, ValueError, OverflowError, IndexError):
        return None
    delta = float(stamp) - now()
    if math.isnan(delta):
        return None
    return min(max(delta, 0.0), RETRY_AFTER_CEILING)
