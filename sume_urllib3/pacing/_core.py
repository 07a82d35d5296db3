"""The pacing rules, once: a pure state machine over integer microseconds (``rand`` is an argument).

The fleets run it on their stores; ``contrib/redis/*.lua`` is its port, step for step, and
``tests/contrib/test_pacing_conformance.py`` holds all three to the same timestamped grants.
The rules in prose, numbered as the comments cite them: docs/how-it-works.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, NamedTuple, Optional, Tuple, Union

# contrib/redis/_scripts.py writes every upper-case number here into the Lua scripts' header.
SECOND, MILLISECOND = 1_000_000, 1_000
#: The longest cooldown one Retry-After can start (microseconds): an absurd value (a year, a bug)
#: must not hold every request of a key for that long; the policy still refuses to wait the full
#: value and gives up, with the server's figure in its reason.
MAX_COOLDOWN_US = 600 * SECOND
#: With no pace known, held attempts are spread over at most this long after a cooldown.
SPREAD_US = SECOND
#: A key quiet this long starts its admitted-rate measurement afresh.
IDLE_US = SECOND
#: The slow-start window stops counting (and the key takes the lock-free path) at this size.
OPEN_WINDOW = 64
#: An in-flight entry before any response time is known, and at least, and in response times.
FIRST_LEASE_US = 2 * SECOND
MIN_LEASE_US = SECOND
LEASE_RTTS = 8
#: Below its plateau a learned pace recovers by about all of itself per RECOVERY_US of successes
#: (at least 1/CREEP_SHARE per success); from the plateau on, by all of itself per PROBE_US.
RECOVERY_US = 4 * SECOND
PROBE_US = 200 * SECOND
CREEP_SHARE = 100
#: The plateau is the pace a 429 met, 1/PLATEAU_SHARE slower.
PLATEAU_SHARE = 8
#: A stated window/limit is paced SLACK_PERCENT % of it: an exact spacing meets a fixed window's edge.
SLACK_PERCENT = 101
#: Each response weighs 1/RT_SHARE in the smoothed response time.
RT_SHARE = 5
#: A first attempt kept out of the window asks again after [0.5, 1.5) response times (this
#: before any is known), within [MIN_PAUSE_US, a second].
FIRST_PAUSE_US = 50_000
MIN_PAUSE_US = MILLISECOND
#: A learned interval is at least 1 µs and at most a day.
MIN_INTERVAL_US, MAX_INTERVAL_US = 1, 86_400 * SECOND
#: A state last seen this far ahead of the store's clock came from another clock: started afresh.
FUTURE_US = 60 * SECOND
#: ratio * count is a float product: without this slack 0.57 * 100 = 56.99999... refuses the 57th.
EPSILON = 1e-9


#: Attempt kinds (``retry``), grant codes and wait sources, as both runtimes number them.
FIRST, THROTTLE, ERROR = 0, 1, 2
SEND, REFUSED, AGAIN, NO_BUDGET = 0, 1, 2, 3
NONE, PACE, COOLDOWN, SLOW_START = 0, 1, 2, 3
#: The names the fleets' callers use for the codes above.
SOURCES = (None, "pace", "cooldown", "slow_start")
RETRY_KINDS = {None: FIRST, "throttle": THROTTLE, "error": ERROR}


@dataclass(frozen=True)
class RetryAllowance:
    """A retry budget: error retries may be ``ratio`` of recent first attempts, or ``floor`` per
    second; both counts decay by e every ``window`` µs (a spent budget refills smoothly)."""

    ratio: float
    window: int
    floor: float


@dataclass(frozen=True)
class Config:
    """What the user configured: ``interval`` µs between turns (0: learn it), ``burst``, first window."""

    interval: int = 0
    burst: int = 1
    window: int = 4
    retries: Optional[RetryAllowance] = None


@dataclass
class RetryCounts:
    """A retry budget's counts (``RetryAllowance``), decayed to ``counted_at``."""

    recent_firsts: float = 0.0
    recent_retries: float = 0.0
    counted_at: int = 0


@dataclass
class State(RetryCounts):
    """Everything known about one key; field for field the Redis hash ``{prefix:v2:kid}:s``, and
    ``flight`` (``"<seq>:<entry>"`` -> lease end) its sorted set ``:i``."""

    theoretical_arrival: int = 0  # GCRA's: the next turn at a burst of 1
    cooldown_until: int = 0
    cooldown_length: int = 0
    stated_interval: int = 0  # a RateLimit-Policy's window / limit (0: none stated)
    stated_limit: int = 1
    learned_interval: int = 0  # from 429s (0: none)
    refused_interval: int = 0  # the pace the last measuring 429 round met (0: none)
    budget_left: int = 0  # Remaining, less the attempts the server may not have seen (< 0: overspent)
    budget_until: int = 0  # the reading's Reset (0: no reading)
    reading_seq: int = 0  # the grant whose answer gave the reading
    reading_at: int = 0
    reading_remaining: int = 0
    measured_span: int = 0  # what the last 429 measured the pace over (0: it measured nothing)
    measured_successes: int = 0
    measured_at: int = 0
    probe_at: int = 0  # the hold a budget probe was reserved for
    seq: int = 0  # grants so far
    slow_start_window: int = -1  # -1: not started (Config.window)
    epoch: int = 0  # rounds of 429s
    successes: int = 0
    successes_since: int = 0  # the send time of the first of them
    response_time: int = -1  # smoothed (-1: none yet)
    last_seen: int = 0  # the last acquire or release
    flight: Dict[str, int] = field(default_factory=dict)


class Turn(NamedTuple):
    """An acquire's answer: ``code`` SEND/REFUSED/AGAIN/NO_BUDGET after ``wait`` µs, and the grant's stamp."""

    code: int
    wait: int
    source: int
    slot: int = 0  # the turn, on the state's clock
    seq: int = 0  # the grant number (for budget readings)
    epoch: int = 0  # the 429 round it was sent in
    inflight: int = 0  # attempts in flight when it was granted, itself included
    entry: str = ""  # the in-flight entry it holds ("" none)
    learning: bool = False  # a pace learned from 429s was in force: its successes must be counted


class Lesson(NamedTuple):
    """What one response tells the rules (-1: not said): Retry-After (µs, 0 none, a 429's or
    503's only), the quota's limit, what remains of it, its Reset (µs) and its window (µs)."""

    retry_after: int
    limit: int
    remaining: int
    reset: int
    window: int


def _clamp(interval: int) -> int:
    return min(max(interval, MIN_INTERVAL_US), MAX_INTERVAL_US)


def _plateau(refused: int) -> int:
    """An eighth slower than the pace the last measuring 429 met: where fast recovery stops."""
    return refused + refused // PLATEAU_SHARE if refused > 0 else 0


def _creep(learned: int, refused: int) -> int:
    """How much one success takes off a learned interval (rule 5): below the plateau 1%, at least a
    quarter of a second's worth, never past it; from it, about half a percent a second."""
    plateau = _plateau(refused)
    if learned <= plateau:
        return learned // max(PROBE_US // learned, 2)
    fast = max(learned // CREEP_SHARE, learned // max(RECOVERY_US // learned, 2))
    return min(fast, learned - plateau) if plateau else fast


def retry_wait(counts: RetryCounts, allowance: RetryAllowance, now: int, retry: int) -> int:
    """µs until the budget has room for this attempt (0: now; -1: never); decays the counts to now.
    Only an ERROR retry spends; a spent budget delays it until the floor has room (rule 8)."""
    decay = math.exp(-max(0, now - counts.counted_at) / allowance.window)
    counts.recent_firsts, counts.recent_retries = counts.recent_firsts * decay, counts.recent_retries * decay
    counts.counted_at = now
    if retry != ERROR or counts.recent_retries + 1 <= retry_room(counts, allowance) + EPSILON:
        return 0
    floor = allowance.floor * allowance.window / SECOND
    if floor <= 1:
        return -1
    # When recent_retries * exp(-wait / window) + 1 <= floor.
    return math.ceil(allowance.window * math.log(counts.recent_retries / (floor - 1)))


def retry_room(counts: RetryCounts, allowance: RetryAllowance) -> float:
    """Retries the budget allows at the counts' time: ``ratio`` of recent first attempts, or the
    floor over a window, whichever is more."""
    return max(allowance.ratio * counts.recent_firsts, allowance.floor * allowance.window / SECOND)


def pace_source(st: State, cfg: Config, interval: int) -> str:
    """Whose pace ``interval`` (:func:`pace`'s) is: ``learned`` from 429s, ``stated`` by the
    server's quota headers, or ``configured``."""
    if interval == st.learned_interval:
        return "learned"
    if interval == st.stated_interval and interval != cfg.interval:
        return "stated"
    return "configured"


def pace(st: State, cfg: Config, now: int) -> Tuple[int, int]:
    """The interval (µs, 0 unknown) and burst a key is held to now."""
    interval = max(cfg.interval, st.stated_interval, st.learned_interval)
    if interval == 0:
        return 0, 1
    burst = cfg.burst if cfg.interval > 0 else 1
    if st.stated_interval > 0 and now < st.budget_until:  # a quota reading before its Reset
        burst = min(burst, st.stated_limit) if cfg.interval > 0 else st.stated_limit
    return interval, max(1, burst)


def _purge(st: State, cfg: Config, now: int) -> None:
    """Forget a state from a clock ahead (a Redis failover, an NTP step, a reboot: FUTURE_US), the
    in-flight entries whose lease ended (rule 6); start the slow-start window."""
    if st.last_seen > now + FUTURE_US:
        vars(st).update(vars(State()))
    if st.flight:  # most keys have nothing in flight
        st.flight = {entry: end for entry, end in st.flight.items() if end > now}
    if st.slow_start_window < 0:
        st.slow_start_window = cfg.window


def _pause(st: State, rand: float) -> int:
    """How long a first attempt kept out of the window waits before asking again."""
    base = min(max(st.response_time if st.response_time >= 0 else FIRST_PAUSE_US, MIN_PAUSE_US), SECOND)
    return int(base * (0.5 + rand))


def acquire(
    st: State, cfg: Config, now: int, *, retry: int, not_before: int, time_left: int, rand: float, entry: str
) -> Turn:
    """Reserve a turn for one attempt (``time_left`` -1: no deadline). Only SEND reserves anything
    (a turn, an in-flight entry, a unit of budget); the other answers touch no more than the idle
    clock and the retry budget's decay."""
    _purge(st, cfg, now)
    if cfg.retries is not None:
        due = retry_wait(st, cfg.retries, now, retry)
        if due < 0 or (time_left >= 0 and due > time_left):
            return Turn(NO_BUDGET, max(due, 0), NONE)  # the budget refills after the deadline (or never)
        not_before = max(not_before, due)
    if not st.flight and now - st.last_seen >= IDLE_US:
        st.successes = 0  # a new busy spell: what the server admits is measured from here
    st.last_seen = now
    start, source = now + max(not_before, 0), NONE
    if st.cooldown_until > start:
        start, source = st.cooldown_until, COOLDOWN
    interval, burst = pace(st, cfg, now)
    budget = now < st.budget_until  # a quota reading before its Reset (budget_left < 0: overspent)
    probe = 0  # when this attempt goes as the budget's one probe (0: it is not the probe)
    if budget and st.budget_left <= 0:
        held = _quota_hold(st, cfg, now, start, time_left, rand)
        if isinstance(held, Turn):
            return held
        if held > start:
            start, source = held, PACE
        probe = held
    turn = start
    if interval > 0:
        turn = max(start, st.theoretical_arrival - (burst - 1) * interval)
        if turn > start:
            source = PACE
    elif source == COOLDOWN:
        turn = start + int(rand * min(st.cooldown_length, SPREAD_US))
        if retry == FIRST and time_left >= 0 and turn - now <= time_left:
            return Turn(AGAIN, turn - now, COOLDOWN)  # ask again then: the state may have changed
    wait = turn - now
    if time_left >= 0 and wait > time_left:
        return Turn(REFUSED, wait, source)
    # Slow start: with nothing known, count first attempts in flight (until the window is wide).
    # Retries take no slot: one sleeping its backoff is not in flight, and counting it would hold
    # every new request for as long as the herd backs off.
    track = retry == FIRST and interval == 0 and not budget and st.slow_start_window < OPEN_WINDOW
    if track and len(st.flight) >= st.slow_start_window:
        pause = _pause(st, rand)
        if time_left < 0 or pause < time_left:  # one about to miss its deadline goes instead
            return Turn(AGAIN, pause, SLOW_START)
    # Granted: from here on the state changes.
    if interval > 0:
        st.theoretical_arrival = max(st.theoretical_arrival, turn) + interval
    if probe:  # one probe; after it, the window starts again from one
        st.probe_at, st.slow_start_window = probe, 1
    elif budget:
        st.budget_left -= 1
    st.seq += 1
    if cfg.retries is not None:  # counted in the budget (retry_wait made the counts now's)
        if retry == FIRST:
            st.recent_firsts += 1
        elif retry == ERROR:
            st.recent_retries += 1
    # Under a budget every attempt holds an entry (no window): a later reading must know
    # what is still on its way to the server (rule 4).
    if track or budget:
        rt = st.response_time
        lease = FIRST_LEASE_US if rt < 0 else max(MIN_LEASE_US, LEASE_RTTS * rt)
        if time_left >= 0:
            lease = min(lease, time_left)
        st.flight[f"{st.seq}:{entry}"] = turn + lease
    else:
        entry = ""
    return Turn(SEND, wait, source, turn, st.seq, st.epoch, len(st.flight), entry, st.learned_interval > 0)


def _quota_hold(
    st: State, cfg: Config, now: int, start: int, time_left: int, rand: float
) -> Union[Turn, int]:
    """Rule 4, a spent quota: when its one probe may go, or the answer (AGAIN, REFUSED) until then."""
    # An exact pace makes a whole-second Reset overstate the wait: a unit comes one interval
    # after the reading, and one more per unit overspent (sent, not yet seen by the server).
    hold = st.budget_until
    exact = max(cfg.interval, st.stated_interval)  # a configured pace is as exact as a stated one
    if exact > 0:
        hold = min(hold, st.reading_at + exact * (1 - st.budget_left))
    if st.probe_at >= hold:
        # The probe for this reading is out: come back once it should have been answered.
        wait = max(start, hold) - now + _pause(st, rand)
        return Turn(AGAIN if time_left < 0 or wait <= time_left else REFUSED, wait, PACE)
    if st.flight and st.probe_at <= st.reading_at and exact == 0:
        # Attempts in flight were counted as spent, though the server may have counted one before
        # the reading (a unit back when its answer says so) or refilled since (a newer reading):
        # ask again once their answers should be in, rather than book the probe a whole-second
        # Reset away, leaving those units unused and counting it as one more unseen. (An exact
        # pace holds the probe one interval per unit: nothing to wait for.)
        pause = _pause(st, rand)
        if now + pause < max(start, hold) and (time_left < 0 or pause < time_left):
            return Turn(AGAIN, pause, PACE)
    return hold


def release(st: State, cfg: Config, now: int, *, turn: Optional[Turn], status: int, lesson: Lesson) -> bool:
    """Learn from one response to the attempt ``turn`` granted (status 0: none; turn None: granted
    on a store's lock-free path, as if just now); True when it started a cooldown."""
    if turn is None:
        turn = Turn(SEND, 0, NONE, 0, st.seq, st.epoch, len(st.flight))
        st.successes = 0  # that path counts no success: a 429 now measures nothing stale
    # Was this attempt in flight (not purged as dead)? Then a reading taken since counted it.
    was_out = bool(turn.entry) and st.flight.pop(f"{turn.seq}:{turn.entry}", None) is not None
    _purge(st, cfg, now)
    st.last_seen = max(st.last_seen, now)  # a lesson told late never moves the idle clock back
    slot = turn.slot
    if status > 0 and 0 < slot <= now:
        rt, sample = st.response_time, now - slot
        st.response_time = sample if rt < 0 else ((RT_SHARE - 1) * rt + sample) // RT_SHARE
    if lesson.limit >= 1 and lesson.window > 0:
        st.stated_interval = _clamp(math.ceil(lesson.window * SLACK_PERCENT / (100 * lesson.limit)))
        st.stated_limit = lesson.limit
    if lesson.remaining >= 0:
        _read_quota(st, now, turn, was_out, lesson)
    if status == 429:
        if turn.epoch == st.epoch:  # the first 429 of this round: those sent before it change nothing
            _throttled(st, cfg, now, turn.inflight, lesson)
    elif 0 < status < 400 or (status == 0 and st.learned_interval > 0):
        # Admitted: a success, or (with a learned pace) an answer lost on the way: no 429 refused it.
        if st.successes == 0:
            st.successes_since = slot if 0 < slot <= now else now
        st.successes += 1
        if st.learned_interval > 0:
            if st.measured_span > 0 and turn.epoch == st.epoch - 1 and 0 < slot <= st.measured_at:
                # Sent before the 429 that measured the pace, answered after it: the server
                # admitted it within that span too (answers of a herd arrive in any order).
                st.measured_successes += 1
                remeasured = _clamp(math.ceil(st.measured_span / st.measured_successes))
                st.learned_interval = min(st.learned_interval, max(remeasured, _plateau(st.refused_interval)))
            st.learned_interval -= _creep(st.learned_interval, st.refused_interval)
            st.learned_interval = _clamp(st.learned_interval)
            if st.learned_interval <= max(cfg.interval, st.stated_interval):
                st.learned_interval = 0  # recovered: the configured or stated pace rules again
        elif status > 0 and max(cfg.interval, st.stated_interval) == 0 and st.slow_start_window < OPEN_WINDOW:
            st.slow_start_window += 1
    if lesson.retry_after > 0 and (status == 429 or status == 503):
        return _cool_down(st, cfg, now, lesson.retry_after)
    return False


def _read_quota(st: State, now: int, turn: Turn, was_out: bool, lesson: Lesson) -> None:
    """Rule 4: a Remaining (and Reset) reading becomes the key's budget when it is the newest."""
    seq, slot, valid = turn.seq, turn.slot, now < st.budget_until
    # Counted as unseen by the reading, this attempt leaves more than it said: the server counted
    # it first (answers of a herd arrive in any order) or refilled since. A unit back either way.
    earlier = was_out and (seq < st.reading_seq or 0 < slot <= st.reading_at) and valid
    if earlier and lesson.remaining > st.reading_remaining:
        st.budget_left += 1
    elif lesson.reset > 0 and seq >= st.reading_seq:
        # The newest reading by send order. Not counted in it yet: the attempts granted after
        # this one, and those granted before it still in flight (they may reach the server
        # after it did). Counting both as spent, a reading never overstates what is left.
        before = sum(1 for member in st.flight if int(member.split(":", 1)[0]) < seq)
        left = lesson.remaining - (st.seq - seq + before)
        if 0 < slot <= st.reading_at and valid:
            # Sent before the reading in force came, this attempt overlapped it: answers between
            # them may be of attempts the server counted after this one (seen here, no longer in
            # flight), which the reading in force counted as spent. What it leaves bounds this one.
            left = min(left, st.budget_left)
        st.budget_left, st.budget_until = left, now + lesson.reset
        st.reading_seq, st.reading_at, st.reading_remaining = seq, now, lesson.remaining


def _throttled(st: State, cfg: Config, now: int, inflight: int, lesson: Lesson) -> None:
    """Rule 5: the first 429 of a round slows the key (a server counting for us holds it by rule 4)."""
    st.epoch += 1
    st.measured_span = 0
    known = max(cfg.interval, st.stated_interval)
    if lesson.remaining >= 0:
        pass  # the server counts for us: its Remaining and Reset hold the key (rule 4)
    elif st.successes > 0:
        before = pace(st, cfg, now)[0]  # the pace this 429 met (0: none known, slow start)
        span = max(now - st.successes_since, lesson.retry_after, SECOND)
        measured = math.ceil(span / st.successes)
        known = st.learned_interval or known
        # A round at most halves a known pace: a span too short to measure (floored
        # to a second) must not turn 10/s into 3/s.
        st.learned_interval = _clamp(min(measured, 2 * known) if known > 0 else measured)
        st.measured_span, st.measured_successes, st.measured_at = span, st.successes, now
        if 0 < before:
            # The server admitted some and refused the pace this round met: never back to it, at
            # most its plateau, probed slowly from there (a measurement can read a little fast).
            st.refused_interval = before
            st.learned_interval = _clamp(max(st.learned_interval, _plateau(before)))
    elif st.learned_interval > 0 or known > 0:
        st.learned_interval = _clamp((st.learned_interval or known) * 2)
    elif st.slow_start_window > 1:
        st.slow_start_window = max(1, min(st.slow_start_window, inflight) // 2)
    else:
        # Nothing got through one attempt at a time (answers lost, or too slow to count
        # as successes): a window cannot go lower, so pace at one per Retry-After.
        st.learned_interval = _clamp(max(lesson.retry_after, SECOND))
    # The quota is empty now: the next turn one step of the new pace from here (sent
    # at once, it would meet the same 429 and halve the pace again).
    st.theoretical_arrival = max(st.theoretical_arrival, now + pace(st, cfg, now)[0])
    st.successes = 0


def _cool_down(st: State, cfg: Config, now: int, retry_after: int) -> bool:
    """Rule 1: a Retry-After holds the key until it passes; True when nobody was cooling before."""
    length = min(retry_after, MAX_COOLDOWN_US)
    if now + length <= st.cooldown_until:
        return False
    started = st.cooldown_until <= now
    st.cooldown_until, st.cooldown_length = now + length, length
    interval, burst = pace(st, cfg, now)
    if interval > 0:
        # An empty quota when the cooldown ends: one turn then, the rest a step apart.
        st.theoretical_arrival = max(st.theoretical_arrival, st.cooldown_until + (burst - 1) * interval)
    return started


def is_open(st: State, cfg: Config, now: int) -> bool:
    """Nothing held, nothing to pace, nothing counted: an attempt may go without asking."""
    paced = cfg.interval or st.stated_interval or st.learned_interval or cfg.retries is not None
    held = st.cooldown_until > now or now < st.budget_until
    return not paced and not held and st.slow_start_window >= OPEN_WINDOW
