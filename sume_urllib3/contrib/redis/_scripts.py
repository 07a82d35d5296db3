"""The two Lua scripts of the Redis fleet and typed calls to them (one round trip each)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, List, NamedTuple, Optional, Sequence, Tuple

#: Codes the acquire script answers with.
SEND, REFUSED, AGAIN, NO_BUDGET = 0, 1, 2, 3
#: Why a turn waits, as the acquire script numbers it.
SOURCES = (None, "pace", "cooldown", "slow_start")
#: Retry kinds as the acquire script numbers them.
RETRY_KINDS = {None: 0, "throttle": 1, "error": 2}

_HERE = Path(__file__).parent
ACQUIRE_LUA = (_HERE / "acquire.lua").read_text(encoding="utf-8")
RELEASE_LUA = (_HERE / "release.lua").read_text(encoding="utf-8")


def keys(prefix: str, key_id: str) -> Tuple[str, str, str]:
    """The state, in-flight and clients keys of one API key, all in one cluster hash slot."""
    tag = "{" + prefix + ":" + key_id + "}"
    return tag + ":s", tag + ":i", tag + ":c"


def micros(seconds: float) -> int:
    """Seconds as integer microseconds; infinity and NaN as -1 ("none")."""
    if math.isnan(seconds) or math.isinf(seconds):
        return -1
    return round(seconds * 1_000_000)


class Turn(NamedTuple):
    """The acquire script's answer."""

    code: int
    wait: float  # seconds from the Redis clock's now
    source: Optional[str]
    slot_us: int  # the turn on the Redis clock (microseconds)
    clients: int  # processes that used this key within the client window
    in_flight: bool  # the turn holds a slow-start in-flight entry that release() must free


class Lesson(NamedTuple):
    """The release script's answer: what the key's shared state now says."""

    cooldown_until_us: int
    interval: float  # seconds between turns, 0.0 while the pace is unknown
    window: int  # slow-start window
    cooldown_started: bool  # this response started a cooldown (nobody was cooling before)


def parse_turn(reply: Sequence[Any]) -> Turn:
    """Decode the acquire script's reply (raises on anything malformed)."""
    code, wait_us, source, slot_us, clients, in_flight = (int(v) for v in reply)
    if code not in (SEND, REFUSED, AGAIN, NO_BUDGET) or not 0 <= source < len(SOURCES):
        raise ValueError(f"unexpected acquire reply {list(reply)!r}")
    return Turn(code, max(0, wait_us) / 1_000_000, SOURCES[source], slot_us, clients, bool(in_flight))


def parse_lesson(reply: Sequence[Any]) -> Lesson:
    """Decode the release script's reply (raises on anything malformed)."""
    cooldown_until_us, interval_us, window, started = (int(v) for v in reply)
    return Lesson(cooldown_until_us, interval_us / 1_000_000, window, bool(started))


def as_args(values: List[Any]) -> List[str]:
    """Script arguments as strings: numbers without exponents, so Lua reads them exactly."""
    out: List[str] = []
    for v in values:
        if isinstance(v, float):
            out.append(repr(int(v)) if v.is_integer() else repr(v))
        else:
            out.append(str(v))
    return out
