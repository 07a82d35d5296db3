"""One table of pacing scenarios, run against LocalFleet, RedisFleet on a real redis-server, and HostFleet.

Each scenario is a timestamped sequence of events on one key: ``acq`` (an attempt asks for a
turn; the grant it must get is written beside it), ``rel`` (the attempt's response: status and
headers), ``die`` (the process holding the attempt died: it is never released). The fleets run
on an injected clock (Redis through ``server_clock``) and the same random draws, so every wait
is exact; HostFleet runs the Python core on state it stores in a file between calls. The
expectations are the rules of ``sume_urllib3/pacing/_core.py`` worked by hand; a change to any
implementation (the Python core, its Lua port, the file's storage of the state) fails here.

Run ``python -m tests.contrib.test_pacing_conformance`` to print what LocalFleet answers.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import pytest

from sume_urllib3.pacing import HostFleet, LocalFleet, RetryBudget
from sume_urllib3.pacing._fleet import Fleet, Grant

from ..redis_server import RedisServer

KEY = "k0123456789abcdef"

Event = Tuple[Any, ...]

# Grants as "send WAIT [SOURCE]", "again WAIT SOURCE", "refused WAIT SOURCE" (WAIT in seconds, 3 places).
RA = "Retry-After"
RL = {"RateLimit-Limit": "10"}


def rl(remaining: int, reset: int, limit: int = 10) -> Dict[str, str]:
    """RateLimit-* headers as real servers send them: Reset in whole seconds, no policy."""
    return {
        "RateLimit-Limit": str(limit),
        "RateLimit-Remaining": str(remaining),
        "RateLimit-Reset": str(reset),
    }


def xrl(remaining: int, reset: int, limit: int = 10) -> Dict[str, str]:
    return {
        "X-RateLimit-Limit": str(limit),
        "X-RateLimit-Remaining": str(remaining),
        "X-RateLimit-Reset": str(reset),
    }


def policy(q: int, w: int, remaining: Optional[int] = None, reset: Optional[int] = None) -> Dict[str, str]:
    headers = {"RateLimit-Policy": f"{q};w={w}", "RateLimit-Limit": str(q)}
    if remaining is not None:
        headers["RateLimit-Remaining"] = str(remaining)
    if reset is not None:
        headers["RateLimit-Reset"] = str(reset)
    return headers


def burst(n: int, t: float, prefix: str, expect: Union[str, List[str]], **kw: Any) -> List[Event]:
    """n first attempts asking at time t, named prefix0..prefixN-1."""
    answers = expect if isinstance(expect, list) else [expect] * n
    return [(t, "acq", f"{prefix}{i}", kw, answers[i]) for i in range(n)]


def light(t: float, name: str) -> List[Event]:
    """One request at t, answered 10 ms later: light use, nothing else in flight."""
    return [(t, "acq", name, {}, "send 0.000"), (t + 0.01, "rel", name, 200, {})]


def oks(t: float, names: List[str], headers: Optional[Dict[str, str]] = None) -> List[Event]:
    return [(t, "rel", name, 200, headers or {}) for name in names]


#: Two rounds of 429s on a learned pace: the first (3 admitted, floored to 1 s) reads 0.333334 s
#: and sets no plateau (nothing was known); three successes creep it a quarter a second
#: (0.303031, 0.279721, 0.259741 s); the second round's 3 over 1.001366 s read 0.333789 s: the
#: server refused the 0.259741 s it met, so its plateau, an eighth slower, is 0.292208 s.
PLATEAU_ROUND: List[Event] = [
    *burst(4, 0.0, "a", "send 0.000"),
    *oks(0.01, ["a0", "a1", "a2"]),
    (0.01, "rel", "a3", 429, {}),
    *burst(4, 0.01, "b", ["send 0.333 pace", "send 0.667 pace", "send 1.000 pace", "send 1.333 pace"]),
    *[(0.01 + 0.333334 * (i + 1) + 0.001, "rel", f"b{i}", 200, {}) for i in range(3)],
    (1.3447, "rel", "b3", 429, {}),
]


#: A fleet retry budget of 3 units (0.3 a second over 10 s) that requests earn nothing from.
FLOOR_3 = RetryBudget(ratio=0, window=10, min_per_second=0.3)
#: One that only requests fill, half a retry each.
HALF_NO_FLOOR = RetryBudget(ratio=0.5, window=10, min_per_second=0)
ERR = {"retry": "error"}

#: name -> (fleet settings, events). rand: the random draws, cycled (0.5 when not given).
#: Every fleet has a retry budget (RetryBudget()'s unless the settings give one).
SCENARIOS: Dict[str, Tuple[Dict[str, Any], List[Event]]] = {
    # -- rule 7 and the lone request -------------------------------------------------------------
    "a lone request is never delayed": ({}, [
        (0.0, "acq", "a", {}, "send 0.000"),
        (0.1, "rel", "a", 200, {}),
        (0.2, "acq", "b", {}, "send 0.000"),
    ]),
    "a retry's own wait is its turn when nothing paces the key": ({}, [
        (0.0, "acq", "a", {"retry": "error", "not_before": 1.5}, "send 1.500"),
    ]),
    # -- rule 2: configured pace ------------------------------------------------------------------
    "a configured pace spaces turns one interval apart": ({"rate": "2/s"}, [
        *burst(4, 0.0, "a", ["send 0.000", "send 0.500 pace", "send 1.000 pace", "send 1.500 pace"]),
    ]),
    "a configured burst goes at once, then one per interval": ({"rate": "10/s", "burst": 3}, [
        *burst(5, 0.0, "a", ["send 0.000", "send 0.000", "send 0.000", "send 0.100 pace", "send 0.200 pace"]),
    ]),
    "a configured pace refills while idle": ({"rate": "2/s"}, [
        *burst(2, 0.0, "a", ["send 0.000", "send 0.500 pace"]),
        (5.0, "acq", "b", {}, "send 0.000"),
        (5.0, "acq", "c", {}, "send 0.500 pace"),
    ]),
    "a turn after the deadline is refused and reserves nothing": ({"rate": "1/s"}, [
        (0.0, "acq", "a", {}, "send 0.000"),
        (0.0, "acq", "b", {"time_left": 0.5}, "refused 1.000 pace"),
        (0.0, "acq", "c", {}, "send 1.000 pace"),
    ]),
    "a backoff retry keeps its spacing: the next request comes one interval after it": ({"rate": "2/s"}, [
        (0.0, "acq", "a", {}, "send 0.000"),
        (0.1, "acq", "r", {"retry": "error", "not_before": 1.0}, "send 1.000"),
        (0.2, "acq", "b", {}, "send 1.400 pace"),
    ]),
    "headers never change a configured pace": ({"rate": "2/s"}, [
        (0.0, "acq", "a", {}, "send 0.000"),
        (0.1, "rel", "a", 200, policy(100, 1)),
        (0.1, "acq", "b", {}, "send 0.400 pace"),
        (0.1, "acq", "c", {}, "send 0.900 pace"),
    ]),
    "a stated pace slower than the configured one wins": ({"rate": "10/s"}, [
        (0.0, "acq", "a", {}, "send 0.000"),
        (0.1, "rel", "a", 200, policy(1, 1)),
        (0.1, "acq", "b", {}, "send 0.000"),
        (0.1, "acq", "c", {}, "send 1.010 pace"),
    ]),
    "a 429 at a configured pace halves it, successes bring it back": ({"rate": "10/s"}, [
        (0.0, "acq", "a", {}, "send 0.000"),
        (0.05, "rel", "a", 429, {}),
        (0.05, "acq", "b", {}, "send 0.200 pace"),  # the quota is empty: one new step from now
        (0.05, "acq", "c", {}, "send 0.400 pace"),
        (0.3, "rel", "b", 200, {}),
        (0.3, "acq", "d", {}, "send 0.350 pace"),
    ]),
    # -- rule 1: cooldowns ----------------------------------------------------------------------
    "a Retry-After holds every new attempt until it ends (spread under a second)": (
        {"rand": [0.5, 0.5, 0.25]},
        [
        (0.0, "acq", "a", {}, "send 0.000"),
        (0.1, "rel", "a", 429, {RA: "2"}),
        (0.1, "acq", "b", {}, "again 2.500 cooldown"),
        (0.1, "acq", "c", {}, "again 2.250 cooldown"),
            (0.1, "acq", "d", {"retry": "throttle", "not_before": 2.0}, "send 2.000"),
        ],
    ),
    "held attempts at a known pace come back one step apart": ({"rate": "4/s"}, [
        (0.0, "acq", "a", {}, "send 0.000"),
        (0.1, "rel", "a", 503, {RA: "1"}),
        *burst(3, 0.2, "b", ["send 0.900 cooldown", "send 1.150 pace", "send 1.400 pace"]),
    ]),
    "a cooldown is capped at ten minutes": ({}, [
        (0.0, "acq", "a", {}, "send 0.000"),
        (0.0, "rel", "a", 429, {RA: "86400"}),
        (1.0, "acq", "b", {"time_left": 1000.0}, "again 599.500 cooldown"),
    ]),
    "a cooldown past the deadline refuses at once": ({}, [
        (0.0, "acq", "a", {}, "send 0.000"),
        (0.0, "rel", "a", 429, {RA: "30"}),
        (0.0, "acq", "b", {"time_left": 12.0}, "refused 30.500 cooldown"),
        (0.0, "acq", "c", {"retry": "throttle", "not_before": 30.0, "time_left": 12.0}, "refused 30.000"),
    ]),
    "a shorter Retry-After never shortens a cooldown": ({}, [
        (0.0, "acq", "a", {}, "send 0.000"),
        (0.0, "acq", "b", {}, "send 0.000"),
        (0.1, "rel", "a", 429, {RA: "5"}),
        (0.1, "rel", "b", 429, {RA: "1"}),
        (0.2, "acq", "c", {}, "again 5.400 cooldown"),
    ]),
    "a cooldown ends": ({}, [
        (0.0, "acq", "a", {}, "send 0.000"),
        (0.0, "rel", "a", 503, {RA: "1"}),
        (1.5, "acq", "b", {}, "send 0.000"),
    ]),
    "a 503 without Retry-After holds nothing": ({}, [
        (0.0, "acq", "a", {}, "send 0.000"),
        (0.1, "rel", "a", 503, {}),
        (0.1, "acq", "b", {}, "send 0.000"),
    ]),
    "an HTTP-date Retry-After in the past holds nothing": ({}, [
        (0.0, "acq", "a", {}, "send 0.000"),
        (0.1, "rel", "a", 429, {RA: "Wed, 21 Oct 2015 07:28:00 GMT"}),
        (0.1, "acq", "b", {}, "send 0.000"),
    ]),
    # -- rule 3: exact server pace ----------------------------------------------------------------
    "RateLimit-Policy gives the pace, with Remaining its burst, and Reset holds one interval": ({}, [
        (0.0, "acq", "a", {}, "send 0.000"),
        (0.05, "rel", "a", 200, policy(5, 1, remaining=4, reset=1)),
        *burst(6, 0.05, "b", ["send 0.000", "send 0.000", "send 0.000", "send 0.000", "send 0.202 pace",
                              "again 0.252 pace"]),
    ]),
    "an overspent reading with a stated pace: the probe waits one interval per unit overspent": ({}, [
        *burst(3, 0.0, "a", "send 0.000"),
        (0.01, "rel", "a2", 200, policy(10, 1, remaining=1, reset=1)),  # a0, a1 unseen: -1
        (0.01, "acq", "b", {}, "send 0.202 pace"),  # 2 intervals of 0.101 after the reading
        (0.01, "acq", "c", {}, "again 0.212 pace"),  # after the probe's answer
    ]),
    "a configured pace is exact too: at 0 left the probe waits one interval, not a whole-second Reset": (
        {"rate": "10/s", "burst": 3}, [
            *burst(3, 0.0, "a", "send 0.000"),
            *[(0.01, "rel", f"a{i}", 200, rl(2 - i, 1, limit=3)) for i in range(3)],  # 0 left
            (0.01, "acq", "b", {}, "send 0.100 pace"),  # the probe: one interval after the reading
            (0.01, "acq", "c", {}, "again 0.110 pace"),  # after the probe's answer
        ],
    ),
    "a stated pace without Remaining has a burst of one": ({}, [
        (0.0, "acq", "a", {}, "send 0.000"),
        (0.05, "rel", "a", 200, policy(4, 1)),
        *burst(3, 0.05, "b", ["send 0.000", "send 0.253 pace", "send 0.505 pace"]),
    ]),
    "the IETF RateLimit and RateLimit-Policy fields": ({}, [
        (0.0, "acq", "a", {}, "send 0.000"),
        (0.05, "rel", "a", 200, {"RateLimit-Policy": '"default";q=2;w=1'}),
        *burst(3, 0.05, "b", ["send 0.000", "send 0.505 pace", "send 1.010 pace"]),
    ]),
    # -- rule 4: Remaining and Reset are a budget -------------------------------------------------
    "a budget allows Remaining more, less those sent since": ({}, [
        *burst(3, 0.0, "a", "send 0.000"),
        (0.01, "rel", "a0", 200, rl(3, 1)),  # a1, a2 unseen: 1 left
        *burst(2, 0.01, "b", ["send 0.000", "again 0.010 pace"]),  # b1: a1, a2, b0 are due
        (0.02, "rel", "a1", 200, rl(2, 1)),  # newer readings: 2 - 2, 1 - 1, 0 left
        (0.02, "rel", "a2", 200, rl(1, 1)),
        (0.02, "rel", "b0", 200, rl(0, 1)),
        (0.02, "acq", "c", {}, "send 1.000 pace"),  # nothing due: the probe, at the last Reset
        (0.02, "acq", "d", {}, "again 1.013 pace"),  # after the probe's answer: one RTT
    ]),
    "at 0 left an answer still due may give a unit back: asked again, not booked a Reset away": ({}, [
        *burst(3, 0.0, "a", "send 0.000"),
        (0.01, "rel", "a2", 200, rl(1, 1)),  # a0, a1 unseen: 1 - 2
        (0.01, "acq", "b", {}, "again 0.010 pace"),  # a0 and a1 are due: again after one RTT
        (0.02, "rel", "a0", 200, rl(3, 1)),  # 3 > 1: the server counted a0 before a2, 0 left
        (0.02, "rel", "a1", 200, rl(2, 1)),  # and a1: 1 left
        (0.02, "acq", "b", {}, "send 0.000"),  # the unit a probe booked at 0.01 would leave unused
        (0.02, "acq", "c", {}, "again 0.014 pace"),  # b is due
        (0.03, "rel", "b", 200, rl(0, 1)),
        (0.03, "acq", "c", {}, "send 1.000 pace"),
    ]),
    "an answer before the reading's, counted after it, stays spent: the reading in force bounds it": (
        {}, [
            *burst(4, 0.0, "a", "send 0.000"),
            (0.01, "rel", "a1", 200, rl(5, 1)),  # a0, a2, a3 unseen: 2 left
            (0.01, "rel", "a0", 200, rl(3, 1)),  # 3 < 5: counted after a1, as the reading assumed
            (0.01, "rel", "a3", 200, rl(4, 1)),  # 4 - 1 (a2) would say 3, but a0 came after a3
            *burst(3, 0.01, "b", ["send 0.000", "send 0.000", "again 0.010 pace"]),  # a third: a 429
        ],
    ),
    "an answer sent before the reading came that left more than it said was counted first": ({}, [
        *burst(2, 0.0, "a", "send 0.000"),
        (0.01, "rel", "a0", 200, rl(5, 1)),  # a1 unseen: 4 left
        (0.01, "rel", "a1", 200, rl(6, 1)),  # granted after a0, counted before it: 5 left, a0's stands
        *burst(6, 0.01, "b", ["send 0.000"] * 5 + ["again 0.010 pace"]),  # 6 would overspend
    ]),
    "at 0 left one probe goes at Reset and the rest come after its answer": ({"rand": [0.5, 0.5, 0.5, 0.0]}, [
        (0.0, "acq", "a", {}, "send 0.000"),
        (0.01, "rel", "a", 200, rl(0, 2)),
        (0.01, "acq", "p", {}, "send 2.000 pace"),
        (0.01, "acq", "q", {}, "again 2.010 pace"),
        (2.02, "rel", "p", 200, rl(9, 1)),
        *burst(3, 2.03, "c", "send 0.000"),
    ]),
    "whole-second Reset of a 10/s bucket costs at most a second, never a pace of 1/s": ({}, [
        *burst(4, 0.0, "a", "send 0.000"),
        *[(0.01, "rel", f"a{i}", 200, rl(9 - i, 1)) for i in range(4)],  # 6 left after each
        *burst(7, 0.01, "b", ["send 0.000"] * 6 + ["again 0.010 pace"]),  # b6: b0-b5 are due
        *[(0.02, "rel", f"b{i}", 200, rl(5 - i, 1)) for i in range(6)],
        (0.02, "acq", "b6", {}, "send 1.000 pace"),  # the probe, at the last reading's Reset
        (1.03, "rel", "b6", 200, rl(9, 1)),
        *burst(9, 1.03, "c", "send 0.000"),
    ]),
    "a fixed window of 10 per 60 s with X-RateLimit sends all 8 of 8": ({}, [
        (0.0, "acq", "a", {}, "send 0.000"),
        (0.01, "rel", "a", 200, xrl(9, 60)),
        *burst(7, 0.01, "b", "send 0.000"),
    ]),
    "an older reading (by send order) never replaces a newer one": ({}, [
        *burst(2, 0.0, "a", "send 0.000"),
        (0.01, "rel", "a1", 200, rl(5, 1)),  # a0 still in flight: 4 left
        (0.02, "rel", "a0", 200, rl(0, 1)),
        *burst(5, 0.02, "b", ["send 0.000"] * 4 + ["again 0.012 pace"]),  # a1's 4, b0-b3 due
    ]),
    "a reading does not count attempts still in flight: they may reach the server after it": ({}, [
        *burst(3, 0.0, "a", "send 0.000"),
        (0.01, "rel", "a2", 200, rl(5, 1)),  # a0 and a1, sent before a2, may arrive after it
        *burst(4, 0.01, "b", ["send 0.000"] * 3 + ["again 0.010 pace"]),  # b0-b2 are due
        *oks(0.02, ["a0", "a1"], rl(4, 1)),  # older readings: they change nothing
        (0.02, "acq", "c", {}, "again 0.014 pace"),  # b0-b2 still due
        (0.03, "rel", "b0", 200, rl(1, 1)),  # b1, b2 unseen: 1 - 2, overspent
        (0.03, "acq", "d", {}, "again 0.015 pace"),
        (0.04, "rel", "b1", 200, rl(0, 1)),
        (0.04, "rel", "b2", 200, rl(0, 1)),
        (0.04, "acq", "d", {}, "send 1.000 pace"),  # nothing due: the probe, at the last Reset
    ]),
    "a budget past its Reset no longer holds": ({}, [
        (0.0, "acq", "a", {}, "send 0.000"),
        (0.01, "rel", "a", 200, rl(0, 1)),
        (1.5, "acq", "b", {}, "send 0.000"),
    ]),
    "a 429 with Remaining holds by the budget and learns no pace": ({}, [
        (0.0, "acq", "a", {}, "send 0.000"),
        (0.01, "rel", "a", 200, rl(5, 1)),
        (0.02, "acq", "b", {}, "send 0.000"),
        (0.03, "rel", "b", 429, {**rl(0, 1), RA: "1"}),
        (0.03, "acq", "c", {}, "again 1.500 cooldown"),
    ]),
    "an older answer that left more than the reading said was counted by it: one unit back": ({}, [
        *burst(3, 0.0, "a", "send 0.000"),
        (0.01, "rel", "a2", 200, rl(5, 1)),  # a0 and a1 unseen: 3 left
        (0.02, "rel", "a0", 200, rl(7, 1)),  # 7 > 5: the server saw a0 before a2: 4 left
        (0.02, "rel", "a1", 200, rl(4, 1)),  # 4 < 5: after a2, as the reading assumed
        *burst(5, 0.02, "b", ["send 0.000"] * 4 + ["again 0.014 pace"]),  # b0-b3 are due
    ]),
    # -- rule 5: unknown pace ---------------------------------------------------------------------
    "slow start: four first attempts in flight, the fifth asks again": ({"rand": [0.5]}, [
        *burst(5, 0.0, "a", ["send 0.000"] * 4 + ["again 0.050 slow_start"]),
        (0.02, "rel", "a0", 200, {}),
        *burst(2, 0.02, "b", ["send 0.000", "send 0.000"]),
        (0.02, "acq", "c", {}, "again 0.020 slow_start"),
    ]),
    "the window stops counting at 64: a wide key sends every first attempt": ({"initial_window": 62}, [
        *burst(2, 0.0, "a", "send 0.000"),
        *oks(0.01, ["a0", "a1"]),
        *burst(70, 0.02, "b", "send 0.000"),
    ]),
    "retries take no slow-start slot": ({}, [
        *burst(4, 0.0, "a", "send 0.000"),
        (0.0, "acq", "r", {"retry": "error", "not_before": 0.5}, "send 0.500"),
    ]),
    "a retry sleeping its backoff holds no slot from first attempts": ({}, [
        *burst(3, 0.0, "a", "send 0.000"),
        (0.0, "acq", "r", {"retry": "error", "not_before": 8.0}, "send 8.000"),
        (0.0, "acq", "b", {}, "send 0.000"),
    ]),
    "a first attempt that would miss its deadline waiting goes instead": ({}, [
        *burst(4, 0.0, "a", "send 0.000"),
        (0.0, "acq", "b", {"time_left": 0.01}, "send 0.000"),
    ]),
    "the first 429 of a round sets the pace the server admitted": ({}, [
        *burst(4, 0.0, "a", "send 0.000"),
        *oks(0.01, ["a0", "a1", "a2"]),
        *burst(3, 0.01, "b", "send 0.000"),
        *oks(0.02, ["b0", "b1", "b2"]),
        (0.02, "rel", "a3", 429, {}),  # 6 over 1 s; the next turn one step after the 429
        *burst(3, 0.02, "c", ["send 0.167 pace", "send 0.333 pace", "send 0.500 pace"]),
    ]),
    "a 429 answering an attempt sent before the decrease changes nothing": ({}, [
        *burst(4, 0.0, "a", "send 0.000"),
        *oks(0.01, ["a0", "a1"]),
        (0.02, "rel", "a2", 429, {}),
        (0.02, "rel", "a3", 429, {}),
        *burst(2, 0.02, "c", ["send 0.500 pace", "send 1.000 pace"]),
    ]),
    "a success sent before the round's 429 and answered after it still counts in its pace": ({}, [
        *burst(4, 0.0, "a", "send 0.000"),
        *oks(0.01, ["a0", "a1"]),
        (0.02, "rel", "a2", 429, {}),  # 2 admitted over (at least) 1 s: 0.5 s
        (0.03, "rel", "a3", 200, {}),  # 3 over 1 s: 0.333334 s, then its creep: 0.303031 s
        *burst(2, 0.03, "b", ["send 0.490 pace", "send 0.793 pace"]),  # from 0.02 + 0.5
    ]),
    "a round's 429 never slows a known pace by more than half": ({}, [
        *burst(4, 0.0, "a", "send 0.000"),
        *oks(0.01, ["a0", "a1", "a2"]),
        (0.01, "rel", "a3", 429, {}),  # 3 over 1 s: 0.333334 s
        (0.01, "acq", "b", {}, "send 0.333 pace"),
        (0.35, "rel", "b", 200, {}),  # creep (4 s / 0.333334 s = 11 steps): 0.303031 s
        (0.35, "acq", "c", {}, "send 0.327 pace"),
        (0.70, "rel", "c", 429, {}),  # 1 over 1 s would be 1 s; half the known pace: 0.606062 s
        *burst(2, 0.70, "d", ["send 0.606 pace", "send 1.212 pace"]),
    ]),
    "a success granted before the round's 429 but sent after it does not count in its pace": ({}, [
        *burst(4, 0.0, "a", "send 0.000"),
        *oks(0.01, ["a0", "a1", "a2"]),
        (0.01, "rel", "a3", 429, {}),  # 0.333334 s
        *burst(2, 0.01, "b", ["send 0.333 pace", "send 0.667 pace"]),
        (0.35, "rel", "b0", 200, {}),  # 0.303031 s
        (0.35, "acq", "c", {}, "send 0.660 pace"),  # granted now, sent at 1.010002
        (0.69, "rel", "b1", 429, {}),  # a new round: 1 over 1 s, at most half: 0.606062 s
        (1.02, "rel", "c", 200, {}),  # sent after that 429: only the creep, 0.505052 s
        *burst(2, 1.02, "d", ["send 0.293 pace", "send 0.798 pace"]),
    ]),
    "429 + Retry-After only: the pace admitted over the Retry-After, from the cooldown's end": ({}, [
        *burst(4, 0.0, "a", "send 0.000"),
        *oks(0.01, ["a0", "a1", "a2"]),
        (0.01, "rel", "a3", 429, {RA: "1"}),
        *burst(3, 0.02, "b", ["send 0.990 cooldown", "send 1.323 pace", "send 1.657 pace"]),
    ]),
    "a bare 429 with nothing measured halves the window": ({"rand": [0.5]}, [
        *burst(4, 0.0, "a", "send 0.000"),
        (0.01, "rel", "a0", 429, {}),
        (0.01, "acq", "b", {}, "again 0.010 slow_start"),
        *oks(0.02, ["a1", "a2"]),
        (0.02, "acq", "c", {}, "send 0.000"),
        (0.02, "acq", "d", {}, "send 0.000"),
        (0.02, "acq", "e", {}, "again 0.014 slow_start"),
    ]),
    "a second round's 429 with nothing admitted halves a learned pace": ({}, [
        *burst(2, 0.0, "a", "send 0.000"),
        (0.01, "rel", "a0", 200, {}),
        (0.01, "rel", "a1", 429, {}),  # 1 over 1 s
        (0.01, "acq", "b", {}, "send 1.000 pace"),
        (1.02, "rel", "b", 429, {}),  # nothing admitted since: 2 s
        *burst(2, 1.02, "c", ["send 2.000 pace", "send 4.000 pace"]),
    ]),
    "a learned pace creeps up 1% per success, at least a quarter per second of successes": ({}, [
        *burst(2, 0.0, "a", "send 0.000"),
        (0.01, "rel", "a0", 200, {}),
        (0.01, "rel", "a1", 429, {}),  # 1 over 1 s
        (0.01, "acq", "b", {}, "send 1.000 pace"),
        (1.02, "rel", "b", 200, {}),  # one success a second: a quarter off, 0.75 s
        (1.02, "acq", "c", {}, "send 0.990 pace"),
        (1.02, "acq", "d", {}, "send 1.740 pace"),
    ]),
    # A round that sets a plateau: the pace it met was in use (the round admitted at least half of it).
    "a learned pace recovers quickly up to its plateau, then half a percent a second": ({}, [
        *PLATEAU_ROUND,
        # 0.303445 s, then the plateau 0.292208 s (not 0.280104), then half a percent a second
        # (200 s / 0.292208 s = 684 steps): 0.291781 s
        *[ev for i in range(1, 4) for ev in light(2.0 * i, f"r{i}")],
        *burst(2, 8.0, "x", ["send 0.000", "send 0.292 pace"]),
    ]),
    "a 429 never brings back the pace it met: a faster reading holds an eighth slower": ({}, [
        *PLATEAU_ROUND,
        *[ev for i in range(1, 4) for ev in light(2.0 * i, f"r{i}")],  # 0.291781 s, as above
        # idle, so a new measurement: 5 at that pace, 4 admitted, each creeping: 0.290087 s
        *burst(5, 8.0, "c", ["send 0.000"] + [f"send {i * 0.291781:.3f} pace" for i in range(1, 5)]),
        *[(8.0 + i * 0.291781 + 0.001, "rel", f"c{i}", 200, {}) for i in range(4)],
        # 4 over 1.168124 s read 0.292031 s: faster than an eighth slower than the 0.290087 s
        # this 429 met, 0.326347 s, which holds
        (8.0 + 4 * 0.291781 + 0.001, "rel", "c4", 429, {}),
        (8.0 + 4 * 0.291781 + 0.001, "acq", "d", {}, "send 0.326 pace"),
    ]),
    "a round with nothing through halves a learned pace and sets no plateau": ({}, [
        *burst(2, 0.0, "a", "send 0.000"),
        (0.01, "rel", "a0", 200, {}),
        (0.01, "rel", "a1", 429, {}),  # 1 over 1 s
        (0.01, "acq", "b", {}, "send 1.000 pace"),
        (1.02, "rel", "b", 429, {}),  # nothing admitted since: 2 s, and no plateau (1.125 s)
        # a quarter a second, on past 1.125 s: 1, then 0.75 s
        *light(4.0, "r1"),
        *light(7.0, "r2"),
        *burst(2, 9.0, "x", ["send 0.000", "send 0.750 pace"]),
    ]),
    "an answer lost under a learned pace counts as admitted": ({}, [
        *burst(4, 0.0, "a", "send 0.000"),
        *oks(0.01, ["a0", "a1", "a2"]),
        (0.01, "rel", "a3", 429, {}),  # 0.333334 s
        (0.01, "acq", "b", {}, "send 0.333 pace"),
        (0.35, "rel", "b", None, None),  # no answer, and no 429 either: it creeps, 0.303031 s
        *burst(2, 0.35, "c", ["send 0.327 pace", "send 0.630 pace"]),
    ]),
    "nothing through one attempt at a time: one per Retry-After": ({}, [
        *burst(4, 0.0, "a", "send 0.000"),
        (0.01, "rel", "a3", 429, {}),  # nothing admitted: the window (4 in flight) halves, 2
        *[(0.02, "rel", f"a{i}", None, None) for i in (0, 1, 2)],  # answers lost: nothing learned
        (0.03, "acq", "b", {}, "send 0.000"),
        (0.04, "rel", "b", 429, {}),  # a new round, one in flight: the window 1
        (0.05, "acq", "c", {}, "send 0.000"),
        (0.06, "rel", "c", 429, {RA: "1"}),  # and again: one per Retry-After (at least 1 s)
        *burst(2, 0.07, "d", ["send 0.990 cooldown", "send 1.990 pace"]),
    ]),
    "idle time never counts as time the server admitted nothing": ({}, [
        (0.0, "acq", "a", {}, "send 0.000"),
        (0.01, "rel", "a", 200, {}),
        (3600.0, "acq", "b", {}, "send 0.000"),
        (3600.01, "rel", "b", 200, {}),
        *burst(4, 7200.0, "c", "send 0.000"),
        *oks(7200.01, ["c0", "c1", "c2"]),
        (7200.02, "rel", "c3", 429, {RA: "1"}),
        *burst(2, 7200.02, "d", ["send 1.000 cooldown", "send 1.333 pace"]),
    ]),
    # -- rule 6: nothing waits on the dead --------------------------------------------------------
    "a dead process's first wave frees the window within two seconds": ({"rand": [0.5]}, [
        *burst(4, 0.0, "dead", "send 0.000"),
        *[(0.0, "die", f"dead{i}") for i in range(4)],
        (0.5, "acq", "b", {}, "again 0.050 slow_start"),
        (2.0, "acq", "c", {}, "send 0.000"),
    ]),
    "once a response time is known, a dead entry lasts eight of them (at least a second)": ({}, [
        (0.0, "acq", "a", {}, "send 0.000"),
        (0.3, "rel", "a", 200, {}),
        *burst(5, 1.0, "dead", ["send 0.000"] * 5),
        *[(1.0, "die", f"dead{i}") for i in range(5)],
        (3.3, "acq", "b", {}, "again 0.300 slow_start"),
        (3.4, "acq", "c", {}, "send 0.000"),
    ]),
    "a lease never outlives the request's deadline": ({}, [
        *burst(4, 0.0, "dead", "send 0.000", time_left=0.2),
        *[(0.0, "die", f"dead{i}") for i in range(4)],
        (0.25, "acq", "b", {}, "send 0.000"),
    ]),
    # -- the fleet's retry budget (Python's RetryBudget rule, per key) ----------------------------
    "retry budget: a spent budget delays an error retry until its floor has room": (
        {"retry_budget": FLOOR_3},
        [
            *[(0.0, "acq", f"r{i}", ERR, "send 0.000") for i in range(3)],
            (0.0, "acq", "r3", ERR, "send 4.055"),  # 3 e^(-t / 10 s) + 1 <= 3: t = 10 ln 1.5 s
            (0.0, "acq", "r4", {**ERR, "time_left": 5.0}, "refused 6.931"),  # 10 ln 2 s: past its deadline
            (0.0, "acq", "r5", ERR, "send 6.931"),  # the refused retry spent nothing
            (0.0, "acq", "t", {"retry": "throttle", "not_before": 1.0}, "send 1.000"),  # server-paced: free
            (0.0, "acq", "a", {}, "send 0.000"),  # first attempts never wait for it
        ],
    ),
    "retry budget: the units refill as the retries' weight decays": ({"retry_budget": FLOOR_3}, [
        *[(0.0, "acq", f"r{i}", ERR, "send 0.000") for i in range(3)],
        (5.0, "acq", "b", ERR, "send 0.000"),  # 3 e^-0.5 = 1.82: room for one
        (5.0, "acq", "c", ERR, "send 3.434"),  # 2.82 e^(-t / 10 s) + 1 <= 3: t = 10 ln 1.41 s
    ]),
    "retry budget: first attempts earn their ratio of retries; with no floor, none beyond": (
        {"retry_budget": HALF_NO_FLOOR},
        [
            *burst(4, 0.0, "a", "send 0.000"),
            *[(0.0, "acq", f"r{i}", ERR, "send 0.000") for i in range(2)],
            (0.0, "acq", "r2", ERR, "refused 0.000"),  # a floor under one retry never refills
        ],
    ),
    # -- the server matrix's rows, as event sequences ------------------------------------------
    "row: 429 + Retry-After only never collapses the pace (once per round)": ({}, [
        *burst(4, 0.0, "a", "send 0.000"),
        *oks(0.01, ["a0", "a1"]),
        *[(0.02, "rel", f"a{i}", 429, {RA: "1"}) for i in (2, 3)],
        (0.02, "acq", "b", {}, "send 1.000 cooldown"),
        (1.03, "rel", "b", 429, {RA: "1"}),
        (1.03, "acq", "c", {}, "send 1.000 cooldown"),
        (1.04, "rel", "c", 429, {RA: "1"}),
        (1.04, "acq", "d", {}, "send 2.000 pace"),
    ]),
    "row: an hour of light use, then a 429 in a burst, learns the burst's pace": ({}, [
        *[ev for i in range(5) for ev in light(i * 600.0, f"l{i}")],
        *burst(4, 3600.0, "c", "send 0.000"),
        *oks(3600.01, ["c0", "c1", "c2"]),
        (3600.01, "rel", "c3", 429, {RA: "1"}),
        *burst(3, 3600.02, "d", ["send 0.990 cooldown", "send 1.323 pace", "send 1.657 pace"]),
    ]),
    "row: a configured 2/s keeps its spacing after a backoff retry (Redis gave 0.21 s)": ({"rate": "2/s"}, [
        (0.0, "acq", "a", {}, "send 0.000"),
        (0.05, "rel", "a", 503, {}),
        (0.05, "acq", "a'", {"retry": "error", "not_before": 0.5}, "send 0.500"),
        (0.06, "acq", "b", {}, "send 0.990 pace"),
    ]),
    "row: RedisFleet(rate=10/s) on a whole-second Reset bucket keeps 10/s": ({"rate": "10/s"}, [
        (0.0, "acq", "a", {}, "send 0.000"),
        (0.01, "rel", "a", 200, rl(9, 1)),
        *burst(3, 0.01, "b", ["send 0.090 pace", "send 0.190 pace", "send 0.290 pace"]),
    ]),
}


class _Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0  # a Unix time too: Redis reads dated headers with time.time

    def __call__(self) -> float:
        return self.now


def _draws(values: List[float]) -> Callable[[], float]:
    cycle = itertools.cycle(values)
    return lambda: next(cycle)


def _describe(grant: Grant) -> str:
    kind = "refused" if grant.refused else "again" if grant.again else "send"
    text = f"{kind} {grant.wait:.3f}"
    return f"{text} {grant.source}" if grant.source else text


def run(
    make: Callable[..., Fleet], settings: Dict[str, Any], events: List[Event]
) -> Iterator[Tuple[Event, str]]:
    """Play one scenario; yields each ``acq`` event with the grant it got."""
    clock = _Clock()
    start = clock.now
    config = dict(settings)
    config.setdefault("retry_budget", RetryBudget())
    fleet = make(clock, _draws(config.pop("rand", [0.5])), **config)
    grants: Dict[str, Grant] = {}
    for event in events:
        at, kind, name = event[0], event[1], event[2]
        clock.now = start + at
        if kind == "acq":
            kw = dict(event[3])
            grant = fleet.acquire(
                KEY,
                time_left=kw.pop("time_left", 60.0),
                retry=kw.pop("retry", None),
                not_before=kw.pop("not_before", 0.0),
            )
            grants[name] = grant
            yield event, _describe(grant)
        elif kind == "rel":
            fleet.release(KEY, grants.pop(name), event[3], event[4])
        elif kind == "die":
            grants.pop(name)  # never released


def _local(clock: _Clock, rng: Callable[[], float], **config: Any) -> Fleet:
    return LocalFleet(clock=clock, rng=rng, wall=lambda: clock.now, **config)


@pytest.fixture
def redis_fleet(redis_server: RedisServer) -> Callable[..., Fleet]:
    from sume_urllib3.contrib.redis import RedisFleet

    prefixes = itertools.count()

    def make(clock: _Clock, rng: Callable[[], float], **config: Any) -> Fleet:
        return RedisFleet(
            redis_server.url,
            server_clock=clock,
            clock=clock,
            rng=rng,
            prefix=f"conf{next(prefixes)}",
            timeout=5.0,
            **config,
        )

    return make


def _check(make: Callable[..., Fleet], name: str) -> None:
    settings, events = SCENARIOS[name]
    fleets: List[Fleet] = []

    def kept(*args: Any, **kwargs: Any) -> Fleet:
        fleets.append(make(*args, **kwargs))
        return fleets[-1]

    got = [(event[2], answer) for event, answer in run(kept, settings, events)]
    want = [(event[2], event[4]) for event in events if event[1] == "acq"]
    assert got == want
    # A RedisFleet or HostFleet that failed open would pace locally and pass for the wrong reason.
    assert getattr(fleets[0], "fallbacks", 0) == 0
    assert getattr(fleets[0], "errors", 0) == 0


def test_the_table_covers_every_rule() -> None:
    assert len(SCENARIOS) >= 40
    names = " ".join(SCENARIOS)
    for needle in ("lone", "configured", "Retry-After", "cooldown", "RateLimit-Policy", "budget", "Reset",
                   "X-RateLimit", "slow start", "429", "dead", "deadline", "retry budget", "row:"):
        assert needle in names, needle


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_local_fleet(name: str) -> None:
    _check(_local, name)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_redis_fleet(name: str, redis_fleet: Callable[..., Fleet]) -> None:
    _check(redis_fleet, name)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_host_fleet(name: str, tmp_path: Path) -> None:
    def make(clock: _Clock, rng: Callable[[], float], **config: Any) -> Fleet:
        path = str(tmp_path / "conformance.fleet")
        return HostFleet(path, clock=clock, wall=clock, rng=rng, timeout=5.0, **config)

    _check(make, name)


@pytest.mark.parametrize("name", [name for name in SCENARIOS if name.startswith("retry budget")])
def test_a_sessions_retry_budget_answers_as_the_fleets_do(name: str) -> None:
    """RetryBudget.reserve() is the fleets' rule: a retry waits as long, or is refused alike."""
    settings, events = SCENARIOS[name]
    rule = settings["retry_budget"]
    clock = _Clock()
    start = clock.now
    budget = RetryBudget(rule.ratio, rule.window, rule.min_per_second, clock=clock)
    got, want = [], []
    for event in events:
        kw = event[3]
        if event[1] != "acq" or kw.get("retry") == "throttle":
            continue
        clock.now = start + event[0]
        if kw.get("retry") is None:
            budget.record_request()
            continue
        wait = budget.reserve(kw.get("time_left", 60.0))
        got.append("refused" if wait is None else f"send {wait:.3f}")
        want.append("refused" if event[4].startswith("refused") else event[4])
    assert got == want


if __name__ == "__main__":  # print LocalFleet's answers, to write or review an expectation
    for scenario, (settings, events) in SCENARIOS.items():
        if len(sys.argv) > 1 and sys.argv[1] not in scenario:
            continue
        print(f"# {scenario}")
        for event, answer in run(_local, settings, events):
            mark = "" if answer == event[4] else f"   <-- table says {event[4]!r}"
            print(f"  {event[0]:>9} {event[2]:<6} {answer}{mark}")
