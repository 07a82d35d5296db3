"""The two Lua scripts of the Redis fleet and typed calls to them (one round trip each)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, List, NamedTuple, Sequence, Tuple

from ... import _pacing

#: Codes the acquire script answers with.
SEND, REFUSED, AGAIN, NO_BUDGET = 0, 1, 2, 3
#: Why a turn waits, as the acquire script numbers it.
SOURCES = (None, "pace", "cooldown", "slow_start")
#: Retry kinds as the acquire script numbers them.
RETRY_KINDS = {None: 0, "throttle": 1, "error": 2}

_HERE = Path(__file__).parent
_STATE_LUA = (_HERE / "state.lua").read_text(encoding="utf-8")
# A Redis script cannot load another: the shared part goes in front of each.
ACQUIRE_LUA = _STATE_LUA + (_HERE / "acquire.lua").read_text(encoding="utf-8")
RELEASE_LUA = _STATE_LUA + (_HERE / "release.lua").read_text(encoding="utf-8")


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
    """The acquire script's answer: its code, the core's turn, and who shares the key."""

    code: int
    pacing: _pacing.Turn  # wait, source and the stamp release() needs (as LocalFleet's core gives)
    clients: int  # processes that used this key within the client window


def parse_turn(reply: Sequence[Any], entry: str) -> Turn:
    """Decode the acquire script's reply (raises on anything malformed)."""
    code, wait, source, slot, seq, epoch, inflight, held, clients, learning = (int(v) for v in reply)
    if code not in (SEND, REFUSED, AGAIN, NO_BUDGET) or not 0 <= source < len(SOURCES):
        raise ValueError(f"unexpected acquire reply {list(reply)!r}")
    turn = _pacing.Turn(
        min(code, _pacing.AGAIN), max(0, wait), source, slot, seq, epoch, inflight, entry if held else "",
        bool(learning),
    )
    return Turn(code, turn, clients)


def parse_release(reply: Sequence[Any]) -> bool:
    """Decode the release script's reply: did this response start a cooldown?"""
    started, _cooldown_until, _interval = (int(v) for v in reply)
    return bool(started)


def as_args(values: List[Any]) -> List[str]:
    """Script arguments as strings: numbers without exponents, so Lua reads them exactly."""
    out: List[str] = []
    for v in values:
        if isinstance(v, float):
            out.append(repr(int(v)) if v.is_integer() else repr(v))
        else:
            out.append(str(v))
    return out
