"""Which pacing sub-rules the server matrix needs: the matrix run with each one turned off.

Each ablation turns one sub-rule of rules 3-5 (``docs/how-it-works.md``, "The pacing rules")
off in both runtimes at once: text replacements on ``sume_urllib3/pacing/_core.py`` (re-executed
into the module, so ``LocalFleet`` runs the changed rules) and on the Lua scripts
``RedisFleet`` loads. Every replacement must match, so an ablation that no longer applies
fails loudly instead of measuring the unchanged rules. Nothing in the library is changed
for this: the patches live only in the processes of a run.

An ablation runs on the servers where its rule can act (rules 3-4 and 5k need ``Remaining``:
``token-bucket``, ``token-bucket-policy``, ``fixed-window``; the rest of rule 5 needs 429s
without it: ``retry-after``, ``bare-429``) and on the clients that learn (``LocalFleet()``,
``RedisFleet(url)``; a configured client never reads Remaining and only 429s slow it), in every
shape of ``benchmarks/pacing_matrix.py``. The rules as they stand (the baseline) and the
unpaced client run on the same servers, ``--baseline-repeats`` times (3), which gives each
cell's spread; an ablation's cell runs ``--repeats`` times (1) and reports its median run.

A cell has *changed* when a target the baseline meets is missed, or when its calls per
request, 429s or time to the last success fall outside the baseline's spread widened by
``NOISE`` (15%) on the worse side. A sub-rule that changes no cell is a candidate for removal
(a rule can also serve a server the matrix lacks: the docs say which).

Run: ``python benchmarks/pacing_ablation.py`` (about 40 minutes on 2 cores), ``--only`` to run
some ablations, ``--write`` to record ``benchmarks/results/pacing_ablation.json`` (full run),
``--table`` to print the recorded results as the Markdown table the docs show.
Needs redis-server on PATH and redis-py.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import _quota_servers as qs  # noqa: E402
import _results  # noqa: E402
import pacing_matrix as matrix  # noqa: E402

from sume_urllib3.contrib.redis import _scripts  # noqa: E402
from sume_urllib3.pacing import _core as _pacing  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402

NOISE = 0.15
BUDGET_SERVERS = ("token-bucket", "token-bucket-policy", "fixed-window")
THROTTLE_SERVERS = ("retry-after", "bare-429")
LEARNED = ("local-learned", "redis-learned")
#: (kind, old, new): kind "py" patches _pacing.py, "lua" the scripts (state.lua's part is in both).
Patch = Tuple[str, str, str]


class Ablation:
    def __init__(self, name: str, rule: str, what: str, servers: Sequence[str], *patches: Patch) -> None:
        self.name, self.rule, self.what, self.servers, self.patches = (
            name,
            rule,
            what,
            tuple(servers),
            patches,
        )


ABLATIONS: Tuple[Ablation, ...] = (
    Ablation(
        "remaining-burst",
        "3",
        "the stated limit is not the burst while Remaining is tracked",
        BUDGET_SERVERS,
        ("py", "burst = min(burst, st.stated_limit) if cfg.interval > 0 else st.stated_limit", "pass"),
        (
            "lua",
            "if cfg > 0 then burst = math.min(burst, st.stated_limit) else burst = st.stated_limit end",
            "",
        ),
    ),
    Ablation(
        "unseen",
        "4",
        "a reading is Remaining as said (attempts sent since or in flight not counted)",
        BUDGET_SERVERS,
        ("py", "unseen = st.seq - seq + _granted_before(st, seq)", "unseen = 0"),
        ("lua", "local unseen = st.seq - seq\n", "local unseen = 0\n"),
        ("lua", "if granted ~= nil and granted < seq then unseen = unseen + 1 end", ""),
    ),
    Ablation(
        "older-answer",
        "4",
        "an older answer that left more gives no unit back",
        BUDGET_SERVERS,
        ("py", "        st.budget_left += 1\n", "        pass\n"),
        ("lua", "  st.budget_left = st.budget_left + 1\n", ""),
    ),
    Ablation(
        "stated-hold",
        "4",
        "at 0 left the probe waits for Reset, never one stated or configured interval",
        BUDGET_SERVERS,
        ("py", "hold = min(hold, st.reading_at + exact * (1 - st.budget_left))", "pass"),
        ("lua", "hold = math.min(hold, st.reading_at + exact * (1 - st.budget_left))", ""),
    ),
    Ablation(
        "due-answers",
        "4",
        "at 0 left the probe is booked at once, answers still due or not",
        BUDGET_SERVERS,
        ("py", "if st.flight and st.probe_at <= st.reading_at and exact == 0:", "if False:"),
        ("lua", "if flight > 0 and st.probe_at <= st.reading_at and exact == 0 then", "if false then"),
    ),
    Ablation(
        "overlap-bound",
        "4",
        "a reading overlapping the one in force is not bounded by it",
        BUDGET_SERVERS,
        ("py", "left = min(left, st.budget_left)", "pass"),
        ("lua", "left = math.min(left, st.budget_left)", ""),
    ),
    Ablation(
        "one-probe",
        "4",
        "at 0 left every attempt goes at Reset, not one probe",
        BUDGET_SERVERS,
        ("py", "if st.probe_at >= hold:", "if False:"),
        ("lua", "if st.probe_at >= hold then", "if false then"),
    ),
    Ablation(
        "remaining-429",
        "5",
        "a 429 with Remaining learns a pace like a bare one",
        BUDGET_SERVERS,
        ("py", "            if remaining >= 0:\n", "            if False:\n"),
        ("lua", "    if remaining >= 0 then\n", "    if false then\n"),
    ),
    Ablation(
        "once-per-round",
        "5",
        "every 429 acts, not the first of a round",
        THROTTLE_SERVERS,
        ("py", "if epoch == st.epoch:  # the first 429", "if True:  # the first 429"),
        ("lua", "  if epoch == st.epoch then\n", "  if true then\n"),
    ),
    Ablation(
        "half-at-most",
        "5",
        "a round may slow a known pace by more than half",
        THROTTLE_SERVERS,
        ("py", "_clamp(min(measured, 2 * known) if known > 0 else measured)", "_clamp(measured)"),
        ("lua", "if known > 0 then measured = math.min(measured, 2 * known) end", ""),
    ),
    Ablation(
        "plateau",
        "5",
        "no plateau: a 429 may bring back the pace it met, and recovery never slows",
        THROTTLE_SERVERS,
        ("py", "return refused + refused // PLATEAU_SHARE if refused > 0 else 0", "return 0"),
        ("lua", "if refused > 0 then return refused + math.floor(refused / PLATEAU_SHARE) end", ""),
    ),
    Ablation(
        "quarter-per-second",
        "5",
        "a learned pace recovers 1% per success only",
        THROTTLE_SERVERS,
        (
            "py",
            "fast = max(learned // CREEP_SHARE, learned // max(RECOVERY_US // learned, 2))",
            "fast = learned // CREEP_SHARE",
        ),
        (
            "lua",
            "fast = math.max(math.floor(learned / CREEP_SHARE), fast)",
            "fast = math.floor(learned / CREEP_SHARE)",
        ),
    ),
    Ablation(
        "late-successes",
        "5",
        "a success answered after the round's 429 does not count in its pace",
        THROTTLE_SERVERS,
        (
            "py",
            "if st.measured_span > 0 and epoch == st.epoch - 1 and 0 < slot <= st.measured_at:",
            "if False:",
        ),
        (
            "lua",
            "if st.measured_span > 0 and epoch == st.epoch - 1 and slot > 0 and slot <= st.measured_at then",
            "if false then",
        ),
    ),
    Ablation(
        "window-of-one",
        "5",
        "nothing through at a window of 1: no pace of one per Retry-After",
        THROTTLE_SERVERS,
        ("py", "st.learned_interval = _clamp(max(retry_after, SECOND))", "pass"),
        ("lua", "st.learned_interval = clamp(math.max(retry_after, SECOND))", ""),
    ),
    Ablation(
        "step-after-429",
        "5",
        "the next turn is not one step of the new pace after the 429",
        THROTTLE_SERVERS,
        ("py", "st.theoretical_arrival = max(st.theoretical_arrival, now + pace(st, cfg, now)[0])", "pass"),
        ("lua", "st.theoretical_arrival = math.max(st.theoretical_arrival, at + pace(at))", ""),
    ),
    Ablation(
        "span-floor",
        "5",
        "the measured span is not floored to the Retry-After and a second",
        THROTTLE_SERVERS,
        (
            "py",
            "span = max(now - st.successes_since, retry_after, SECOND)",
            "span = max(now - st.successes_since, 1)",
        ),
        (
            "lua",
            "local span = math.max(at - st.successes_since, retry_after, SECOND)",
            "local span = math.max(at - st.successes_since, 1)",
        ),
    ),
    Ablation(
        "idle-restart",
        "5",
        "a key idle for a second keeps measuring from its last success",
        THROTTLE_SERVERS,
        ("py", "if not st.flight and now - st.last_seen >= IDLE_US:", "if False:"),
        ("lua", "if flight == 0 and now - st.last_seen >= IDLE_US then st.successes = 0 end", ""),
    ),
)
# Not ablated here: lost answers counting as admitted under a learned pace (rule 5) acts only
# when answers are lost, which no matrix server does; benchmarks/celery_e2e.py's server does.


class Patched:
    """The rules with one ablation's replacements, in this process (forked workers inherit it)."""

    def __init__(self, ablation: Optional[Ablation]) -> None:
        self.ablation = ablation

    def __enter__(self) -> Patched:
        self.saved = dict(vars(_pacing))
        self.lua = (_scripts.ACQUIRE_LUA, _scripts.RELEASE_LUA)
        if self.ablation is None:
            return self
        source = inspect.getsource(_pacing)
        acquire, release = self.lua
        for kind, old, new in self.ablation.patches:
            if kind == "py":
                source = _replace(source, old, new, self.ablation.name)
            else:
                found = acquire.count(old) + release.count(old)
                if not found:
                    raise SystemExit(f"ablation {self.ablation.name}: {old!r} is not in the Lua scripts")
                acquire, release = acquire.replace(old, new), release.replace(old, new)
        exec(compile(source, _pacing.__file__, "exec"), vars(_pacing))  # our own source, patched
        _scripts.ACQUIRE_LUA, _scripts.RELEASE_LUA = acquire, release
        return self

    def __exit__(self, *exc: object) -> None:
        vars(_pacing).clear()
        vars(_pacing).update(self.saved)
        _scripts.ACQUIRE_LUA, _scripts.RELEASE_LUA = self.lua


def _replace(text: str, old: str, new: str, name: str) -> str:
    if text.count(old) != 1:
        raise SystemExit(f"ablation {name}: {old!r} occurs {text.count(old)} times in _pacing.py, not once")
    return text.replace(old, new)


def run_cells(
    server: qs.QuotaProcess,
    clients: Sequence[str],
    repeats: int,
    redis_url: str,
    shapes: Dict[str, Tuple[int, int, int]],
) -> List[Dict[str, Any]]:
    """Every shape x client on one server, each cell's median run (runs interleaved)."""
    cells: List[Dict[str, Any]] = []
    for shape_name, shape in shapes.items():
        order = [c for c in clients if c in matrix.SHAPE_CLIENTS[shape_name]]
        runs: Dict[str, List[Dict[str, Any]]] = {c: [] for c in order}
        for _ in range(repeats):
            for client in order:
                runs[client].append(matrix.run_cell(server, shape_name, shape, client, redis_url))
        cells += [matrix.median_run(runs[c]) for c in order]
    return cells


def worse(cell: Dict[str, Any], base: Dict[str, Any], unpaced: Dict[str, Any]) -> List[str]:
    """How an ablated cell is worse than the rules' own, beyond the baseline's spread and NOISE."""
    out: List[str] = []
    verdict, before = matrix.check(cell, unpaced), matrix.check(base, unpaced)
    out += [f"misses {k}" for k in matrix.TARGETS if verdict[k] is False and before[k] is not False]
    spread = base["spread"]
    top_calls = spread["calls_per_request"][1] * (1 + NOISE)
    if cell["calls_per_request"] > top_calls + 1e-9:
        out.append(f"calls {cell['calls_per_request']:.2f} > {spread['calls_per_request'][1]:.2f}")
    if cell["429s"] > base["429s"] * (1 + NOISE) + 2:
        out.append(f"429s {cell['429s']} > {base['429s']}")
    lasts = spread["last_success_s"]
    if lasts and (cell["last_success_s"] is None or cell["last_success_s"] > lasts[1] * (1 + NOISE)):
        out.append(f"last success {cell['last_success_s']} s > {lasts[1]:.2f} s")
    if cell["succeeded"] < base["succeeded"]:
        out.append(f"succeeded {cell['succeeded']} < {base['succeeded']}")
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated ablation names (default: all)")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each ablated cell")
    parser.add_argument("--baseline-repeats", type=int, default=3, help="runs of each baseline cell")
    parser.add_argument("--quick", action="store_true", help="the matrix's smaller herds: a smoke")
    parser.add_argument("--write", action="store_true", help="record benchmarks/results/pacing_ablation.json")
    parser.add_argument("--table", action="store_true", help="print the committed results as Markdown")
    args = parser.parse_args(argv)
    if args.table:
        import render  # the docs' block, as benchmarks/render.py writes it

        print(render.pacing_ablation(render.Results()))
        return 0
    _results.refuse_partial(parser, args, "only", "repeats", "baseline_repeats", "quick")
    wanted = [n for n in args.only.split(",") if n]
    known = {a.name for a in ABLATIONS}
    if set(wanted) - known:
        parser.error(
            f"unknown ablation(s) {', '.join(sorted(set(wanted) - known))}: {', '.join(sorted(known))}"
        )
    ablations = [a for a in ABLATIONS if not wanted or a.name in wanted]
    for ablation in ablations:  # every patch applies before anything runs
        with Patched(ablation):
            pass
    shapes = matrix.QUICK_SHAPES if args.quick else matrix.SHAPES
    servers = [s for s in qs.KINDS if any(s in a.servers for a in ablations)]
    redis = RedisServer.find()
    if redis is None:
        parser.error("redis-server is not on PATH (apt-get install redis-server)")
    began = time.monotonic()
    baseline: Dict[str, List[Dict[str, Any]]] = {}
    results: List[Dict[str, Any]] = []
    with redis:
        for name in servers:
            with qs.QuotaProcess(name) as server:
                baseline[name] = run_cells(
                    server, ("none", *LEARNED), args.baseline_repeats, redis.url, shapes
                )
                index = {(c["shape"], c["client"]): c for c in baseline[name]}
                print(
                    f"{name}: baseline "
                    + "; ".join(f"{c['shape']} {c['client']} {matrix.cell_text(c)}" for c in baseline[name]),
                    flush=True,
                )
                for ablation in ablations:
                    if name not in ablation.servers:
                        continue
                    with Patched(ablation):
                        cells = run_cells(server, LEARNED, args.repeats, redis.url, shapes)
                    for cell in cells:
                        changes = worse(
                            cell, index[(cell["shape"], cell["client"])], index[(cell["shape"], "none")]
                        )
                        results.append({"ablation": ablation.name, "cell": cell, "worse": changes})
                        print(
                            f"  {ablation.name:18} {cell['shape']:5} {cell['client']:14} "
                            f"{matrix.cell_text(cell)}  {'; '.join(changes) or 'no change'}",
                            flush=True,
                        )
    summary = []
    for ablation in ablations:
        mine = [r for r in results if r["ablation"] == ablation.name]
        changed = [
            f"{r['cell']['server']} {r['cell']['shape']} {r['cell']['client']}" for r in mine if r["worse"]
        ]
        summary.append(
            {
                "ablation": ablation.name,
                "rule": ablation.rule,
                "what": ablation.what,
                "servers": list(ablation.servers),
                "cells": len(mine),
                "changed": changed,
            }
        )
    elapsed = time.monotonic() - began
    print(f"\n{len(results)} ablated cells in {elapsed:.0f} s")
    for row in summary:
        verdict = (
            f"changes {len(row['changed'])}/{row['cells']}: " + ", ".join(row["changed"])
            if row["changed"]
            else f"no change in {row['cells']} cells"
        )
        print(f"  rule {row['rule']} {row['ablation']:18} {verdict}")
    if args.write:
        _results.write(
            "pacing_ablation",
            {
                "noise": NOISE,
                "repeats": args.repeats,
                "baseline_repeats": args.baseline_repeats,
                "clients": {c: matrix.CLIENTS[c] for c in ("none", *LEARNED)},
                "baseline": [c for cells in baseline.values() for c in cells],
                "ablations": summary,
                "cells": results,
                "run_s": elapsed,
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
