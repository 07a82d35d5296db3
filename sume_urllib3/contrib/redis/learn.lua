-- sume_urllib3 RedisFleet: learn from responses, the port of sume_urllib3/pacing/_core.py release();
-- tests/contrib/test_pacing_conformance.py runs the same scenarios against both. _scripts.py puts
-- it in front of both scripts, after state.lua: release.lua learns the response it was called
-- for, and acquire.lua first the lessons this process told late (_pacing.release_need: plain
-- successes under a learned pace), each at its own time, as release.lua would have then.

local function clamp(x) return math.min(math.max(x, MIN_INTERVAL_US), MAX_INTERVAL_US) end
local function plateau(refused)  -- _pacing._plateau
  if refused > 0 then return refused + math.floor(refused / PLATEAU_SHARE) end
  return 0
end
local function creep(learned, refused)  -- _pacing._creep
  local top = plateau(refused)
  if learned <= top then return math.floor(learned / math.max(math.floor(PROBE_US / learned), 2)) end
  local fast = math.floor(learned / math.max(math.floor(RECOVERY_US / learned), 2))
  fast = math.max(math.floor(learned / CREEP_SHARE), fast)
  if top > 0 then return math.min(fast, learned - top) end
  return fast
end

-- _pacing.release at time `at` (now, or when a lesson told late was learned); true when this
-- response started a cooldown (nobody was cooling before). status 0: no response; -1 for what
-- the headers do not say.
local function learn(at, entry, slot, seq, epoch, inflight, status, retry_after, limit, remaining, reset, window)
  -- Was this attempt in flight (not purged as dead)? Then a reading taken since counted it.
  local was_out = entry ~= '' and redis.call('ZREM', KEYS[2], fmt(seq) .. ':' .. entry) == 1
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', fmt(at))
  st.last_seen = math.max(st.last_seen, at)  -- a lesson told late never moves the idle clock back
  if status > 0 and slot > 0 and slot <= at then
    local rt, sample = st.response_time, at - slot
    if rt < 0 then st.response_time = sample
    else st.response_time = math.floor(((RT_SHARE - 1) * rt + sample) / RT_SHARE) end
  end
  if limit >= 1 and window > 0 then
    st.stated_interval = clamp(math.ceil(window * SLACK_PERCENT / (100 * limit)))
    st.stated_limit = limit
  end
  -- Counted as unseen by the reading, and it left more than the reading said (_pacing.py says why).
  local earlier = was_out and (seq < st.reading_seq or (slot > 0 and slot <= st.reading_at))
    and remaining > st.reading_remaining and budget_valid(at)
  if remaining >= 0 and reset > 0 and seq >= st.reading_seq and not earlier then
    -- Not counted in this reading yet: granted after it, and granted before it still in flight.
    local unseen = st.seq - seq
    for _, member in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
      local granted = tonumber(string.match(member, '^(%d+):'))  -- nil: an older version's entry
      if granted ~= nil and granted < seq then unseen = unseen + 1 end
    end
    local left = remaining - unseen
    if slot > 0 and slot <= st.reading_at and budget_valid(at) then
      -- Overlapping the reading in force: what it leaves bounds this one (_pacing.py says why).
      left = math.min(left, st.budget_left)
    end
    st.budget_left, st.budget_until = left, at + reset
    st.reading_seq, st.reading_at, st.reading_remaining = seq, at, remaining
  elseif earlier then
    st.budget_left = st.budget_left + 1
  end
  if status == 429 then
    if epoch == st.epoch then
      st.epoch = st.epoch + 1
      st.measured_span = 0
      if remaining >= 0 then
        -- the server counts for us: its Remaining and Reset hold the key
      elseif st.successes > 0 then
        local before = pace(at)  -- the pace this 429 met (0: none known, slow start)
        local span = math.max(at - st.successes_since, retry_after, SECOND)
        local measured = math.ceil(span / st.successes)
        local known = st.learned_interval
        if known == 0 then known = math.max(cfg, st.stated_interval) end
        -- a round at most halves a known pace (a span floored to a second measures little)
        if known > 0 then measured = math.min(measured, 2 * known) end
        st.learned_interval = clamp(measured)
        st.measured_span, st.measured_successes, st.measured_at = span, st.successes, at
        if before > 0 then
          -- the server admitted some and refused the pace this round met: at most its plateau
          st.refused_interval = before
          st.learned_interval = clamp(math.max(st.learned_interval, plateau(before)))
        end
      elseif st.learned_interval > 0 then
        st.learned_interval = clamp(st.learned_interval * 2)
      elseif math.max(cfg, st.stated_interval) > 0 then
        st.learned_interval = clamp(math.max(cfg, st.stated_interval) * 2)
      elseif st.slow_start_window > 1 then
        st.slow_start_window = math.max(1, math.floor(math.min(st.slow_start_window, inflight) / 2))
      else
        -- nothing got through one attempt at a time: one per Retry-After, at least a second
        st.learned_interval = clamp(math.max(retry_after, SECOND))
      end
      -- the quota is empty now: the next turn one step of the new pace from here
      st.theoretical_arrival = math.max(st.theoretical_arrival, at + pace(at))
      st.successes = 0
    end
  elseif (status > 0 and status < 400) or (status == 0 and st.learned_interval > 0) then
    -- admitted: a success, or (with a learned pace) an attempt whose answer was lost on the way
    if st.successes == 0 then
      if slot > 0 and slot <= at then st.successes_since = slot else st.successes_since = at end
    end
    st.successes = st.successes + 1
    if st.learned_interval > 0 then
      if st.measured_span > 0 and epoch == st.epoch - 1 and slot > 0 and slot <= st.measured_at then
        -- sent before the 429 that measured the pace, answered after it: admitted in that span
        st.measured_successes = st.measured_successes + 1
        local remeasured = clamp(math.ceil(st.measured_span / st.measured_successes))
        st.learned_interval = math.min(st.learned_interval, math.max(remeasured, plateau(st.refused_interval)))
      end
      st.learned_interval = clamp(st.learned_interval - creep(st.learned_interval, st.refused_interval))
      if st.learned_interval <= math.max(cfg, st.stated_interval) then st.learned_interval = 0 end
    elseif status > 0 and math.max(cfg, st.stated_interval) == 0 and st.slow_start_window < OPEN_WINDOW then
      st.slow_start_window = st.slow_start_window + 1
    end
  end
  local started = false
  if retry_after > 0 and (status == 429 or status == 503) then
    local until_ = at + math.min(retry_after, MAX_COOLDOWN_US)
    if until_ > st.cooldown_until then
      started = st.cooldown_until <= at
      st.cooldown_until, st.cooldown_length = until_, math.min(retry_after, MAX_COOLDOWN_US)
      local interval, burst = pace(at)
      if interval > 0 then
        st.theoretical_arrival = math.max(st.theoretical_arrival, st.cooldown_until + (burst - 1) * interval)
      end
    end
  end
  return started
end

-- Learn every lesson in ARGV after the call's own arguments (ARGV[first] the last of them), oldest
-- first: LESSON_ARGV each, {us before now it was learned, entry ('' none), slot_us, seq, epoch,
-- inflight, status (0: no response), Retry-After us (0: none), limit, remaining, reset_us,
-- window_us (each -1 when not said)}. True when one of them started a cooldown.
local function learn_from(first)
  local i, started = first, false
  local function take()
    i = i + 1
    return ARGV[i]
  end
  while i + LESSON_ARGV <= #ARGV do
    local at = now - arg(take())
    local entry = take()
    local slot, seq, epoch, inflight = arg(take()), arg(take()), arg(take()), arg(take())
    local status, retry_after = arg(take()), arg(take())
    local limit, remaining, reset, window = arg(take()), arg(take()), arg(take()), arg(take())
    if learn(at, entry, slot, seq, epoch, inflight, status, retry_after, limit, remaining, reset, window) then
      started = true
    end
  end
  return started
end
