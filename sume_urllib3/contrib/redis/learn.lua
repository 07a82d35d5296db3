-- sume_urllib3 RedisFleet: learn from responses, the port of pacing/_core.py release() and its
-- steps (the reasons are there), in front of both scripts: release.lua learns its response, and
-- acquire.lua first the lessons this process told late (pacing.store.release_need).

local function clamp(x) return math.min(math.max(x, MIN_INTERVAL_US), MAX_INTERVAL_US) end
local function plateau(refused)  -- _core._plateau (0 is true in Lua)
  return refused > 0 and refused + math.floor(refused / PLATEAU_SHARE) or 0
end
local function creep(learned, refused)  -- _core._creep
  local top = plateau(refused)
  if learned <= top then return math.floor(learned / math.max(math.floor(PROBE_US / learned), 2)) end
  local fast = math.max(math.floor(learned / CREEP_SHARE), math.floor(learned / math.max(math.floor(RECOVERY_US / learned), 2)))
  if top > 0 then return math.min(fast, learned - top) end
  return fast
end

-- _core._read_quota: rule 4, a Remaining (and Reset) reading
local function read_quota(at, slot, seq, was_out, remaining, reset)
  local valid = at < st.budget_until
  local earlier = was_out and (seq < st.reading_seq or (slot > 0 and slot <= st.reading_at)) and valid
  if earlier and remaining > st.reading_remaining then
    st.budget_left = st.budget_left + 1
  elseif reset > 0 and seq >= st.reading_seq then
    local unseen = st.seq - seq
    for _, member in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
      local granted = tonumber(string.match(member, '^(%d+):'))  -- nil: an older version's entry
      if granted ~= nil and granted < seq then unseen = unseen + 1 end
    end
    local left = remaining - unseen
    if slot > 0 and slot <= st.reading_at and valid then left = math.min(left, st.budget_left) end
    st.budget_left, st.budget_until = left, at + reset
    st.reading_seq, st.reading_at, st.reading_remaining = seq, at, remaining
  end
end

-- _core._throttled: rule 5, the first 429 of a round
local function throttled(at, inflight, retry_after, remaining)
  st.epoch = st.epoch + 1
  st.measured_span = 0
  local known = math.max(cfg, st.stated_interval)
  if remaining >= 0 then
    -- the server counts for us: its Remaining and Reset hold the key
  elseif st.successes > 0 then
    local before = pace(at)
    local span = math.max(at - st.successes_since, retry_after, SECOND)
    local measured = math.ceil(span / st.successes)
    if st.learned_interval > 0 then known = st.learned_interval end
    if known > 0 then measured = math.min(measured, 2 * known) end
    st.learned_interval = clamp(measured)
    st.measured_span, st.measured_successes, st.measured_at = span, st.successes, at
    if before > 0 then
      st.refused_interval = before
      st.learned_interval = clamp(math.max(st.learned_interval, plateau(before)))
    end
  elseif st.learned_interval > 0 or known > 0 then
    if st.learned_interval > 0 then known = st.learned_interval end
    st.learned_interval = clamp(known * 2)
  elseif st.slow_start_window > 1 then
    st.slow_start_window = math.max(1, math.floor(math.min(st.slow_start_window, inflight) / 2))
  else
    st.learned_interval = clamp(math.max(retry_after, SECOND))
  end
  st.theoretical_arrival = math.max(st.theoretical_arrival, at + pace(at))
  st.successes = 0
end

-- _core._cool_down: rule 1, a Retry-After; true when nobody was cooling before
local function cool_down(at, retry_after)
  local length = math.min(retry_after, MAX_COOLDOWN_US)
  if at + length <= st.cooldown_until then return false end
  local started = st.cooldown_until <= at
  st.cooldown_until, st.cooldown_length = at + length, length
  local interval, burst = pace(at)
  if interval > 0 then
    st.theoretical_arrival = math.max(st.theoretical_arrival, st.cooldown_until + (burst - 1) * interval)
  end
  return started
end

-- _core.release at time `at` (now, or when a lesson told late was learned)
local function learn(at, entry, slot, seq, epoch, inflight, status, retry_after, limit, remaining, reset, window)
  local was_out = entry ~= '' and redis.call('ZREM', KEYS[2], fmt(seq) .. ':' .. entry) == 1
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', fmt(at))
  st.last_seen = math.max(st.last_seen, at)
  if status > 0 and slot > 0 and slot <= at then
    local rt, sample = st.response_time, at - slot
    if rt < 0 then st.response_time = sample
    else st.response_time = math.floor(((RT_SHARE - 1) * rt + sample) / RT_SHARE) end
  end
  if limit >= 1 and window > 0 then
    st.stated_interval = clamp(math.ceil(window * SLACK_PERCENT / (100 * limit)))
    st.stated_limit = limit
  end
  if remaining >= 0 then read_quota(at, slot, seq, was_out, remaining, reset) end
  if status == 429 then
    if epoch == st.epoch then throttled(at, inflight, retry_after, remaining) end
  elseif (status > 0 and status < 400) or (status == 0 and st.learned_interval > 0) then
    if st.successes == 0 then st.successes_since = (slot > 0 and slot <= at) and slot or at end
    st.successes = st.successes + 1
    if st.learned_interval > 0 then
      if st.measured_span > 0 and epoch == st.epoch - 1 and slot > 0 and slot <= st.measured_at then
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
  if retry_after > 0 and (status == 429 or status == 503) then return cool_down(at, retry_after) end
  return false
end

-- Learn the lessons in ARGV after ARGV[first], oldest first, LESSON_ARGV each: {us before now it was
-- learned, then learn()'s arguments from entry on}. True when one of them started a cooldown.
local function learn_from(first)
  local started = false
  for i = first + 1, #ARGV - LESSON_ARGV + 1, LESSON_ARGV do
    local numbers = {}
    for j = 2, LESSON_ARGV - 1 do numbers[j] = arg(ARGV[i + j]) end
    if learn(now - arg(ARGV[i]), ARGV[i + 1], unpack(numbers, 2, LESSON_ARGV - 1)) then started = true end
  end
  return started
end
