"""The two Lua scripts of the Redis fleet and typed calls to them (one round trip each)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple, Union

from ...pacing import _core as _pacing

#: The layout of the keys below: a process of another layout never reads this one's state (its
#: field names differ), and its own keys expire. Bump it with any change to State's fields.
LAYOUT = "v2"


#: The scripts' arguments: ARGV 1 to ACQUIRE_ARGV (RELEASE_ARGV) are the call's own; after them
#: come lessons (``lesson_args``), LESSON_ARGV each, oldest first. The scripts read these three
#: from their header too, so the layout is written once.
ACQUIRE_ARGV, RELEASE_ARGV, LESSON_ARGV = 16, 6, 12


def constants() -> Dict[str, Union[int, float]]:
    """The numbers the scripts share with Python: every upper-case number of ``_pacing``, and
    the scripts' argument layout."""
    numbers = {k: v for k, v in vars(_pacing).items() if k.isupper() and type(v) in (int, float)}
    return {**numbers, "ACQUIRE_ARGV": ACQUIRE_ARGV, "RELEASE_ARGV": RELEASE_ARGV, "LESSON_ARGV": LESSON_ARGV}


def fields() -> Dict[str, Union[int, float]]:
    """``_pacing.State``'s fields (the state hash's, by the same names) and their defaults."""
    return {name: value for name, value in vars(_pacing.State()).items() if name != "flight"}


def header() -> str:
    """The Lua that goes in front of both scripts: ``_pacing``'s constants and State's fields."""
    numbers = [f"local {name} = {value!r}" for name, value in constants().items()]
    names = ", ".join(f"'{name}'" for name in fields())
    defaults = ", ".join(f"{name} = {value!r}" for name, value in fields().items())
    return "\n".join(["-- Written by _scripts.header() from sume_urllib3/pacing/_core.py.", *numbers,
                      f"local FIELDS = {{{names}}}", f"local DEFAULTS = {{{defaults}}}", ""])


_HERE = Path(__file__).parent


def _lua(name: str) -> str:
    return (_HERE / name).read_text(encoding="utf-8")


# A Redis script cannot load another: the shared part goes in front of each.
_SHARED = header() + _lua("state.lua") + _lua("learn.lua")
ACQUIRE_LUA = _SHARED + _lua("acquire.lua")
RELEASE_LUA = _SHARED + _lua("release.lua")


def keys(prefix: str, key_id: str) -> Tuple[str, str, str]:
    """The state, in-flight and clients keys of one API key, all in one cluster hash slot."""
    tag = "{" + prefix + ":" + LAYOUT + ":" + key_id + "}"
    return tag + ":s", tag + ":i", tag + ":c"


def micros(seconds: float) -> int:
    """Seconds as integer microseconds; infinity and NaN as -1 ("none")."""
    return round(seconds * _pacing.SECOND) if math.isfinite(seconds) else -1


def parse_turn(reply: Sequence[Any], entry: str) -> Tuple[_pacing.Turn, int]:
    """Decode the acquire script's reply: the core's turn, and how many processes share the key
    (raises on anything malformed)."""
    code, wait, source, slot, seq, epoch, inflight, held, clients, learning = (int(v) for v in reply)
    if not _pacing.SEND <= code <= _pacing.NO_BUDGET or not 0 <= source < len(_pacing.SOURCES):
        raise ValueError(f"unexpected acquire reply {list(reply)!r}")
    kept = entry if held else ""
    return _pacing.Turn(code, max(0, wait), source, slot, seq, epoch, inflight, kept, learning > 0), clients


def lesson_args(ago: int, turn: _pacing.Turn, status: int, lesson: _pacing.Lesson) -> List[Any]:
    """One lesson as the scripts read it (learn.lua): learned ``ago`` µs before the call, about
    the attempt ``turn`` granted, which got ``status`` (0: no response) and ``lesson``."""
    args = [ago, turn.entry, turn.slot, turn.seq, turn.epoch, turn.inflight, status, *lesson]
    assert len(args) == LESSON_ARGV
    return args


def as_args(values: List[Any]) -> List[str]:
    """Script arguments as strings: numbers without exponents, so Lua reads them exactly."""
    return [(repr(int(v)) if v.is_integer() else repr(v)) if isinstance(v, float) else str(v) for v in values]
