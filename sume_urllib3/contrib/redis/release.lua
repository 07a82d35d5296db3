-- sume_urllib3 RedisFleet: learn from one response of one key, atomically: the port of
-- sume_urllib3/_pacing.py release(); tests/contrib/test_pacing_conformance.py runs the same
-- scenarios against both. (state.lua, in front, loads the state and holds pace().)
-- KEYS[1] state hash {prefix:vN:kid}:s   KEYS[2] in-flight zset {prefix:vN:kid}:i
-- ARGV: 1-5 as state.lua says; 6 entry ('' none)  7 slot_us  8 seq  9 epoch  10 inflight
--       11 status (0: no response)  12 Retry-After us (0: none)
--       13 limit  14 remaining  15 reset_us  16 window_us   (each -1 when not said)  17 ttl_ms
-- Returns {cooldown started (0/1), cooldown until us, interval us (0: unknown)}
local entry, slot, seq, epoch, inflight = ARGV[6], arg(ARGV[7]), arg(ARGV[8]), arg(ARGV[9]), arg(ARGV[10])
local status, retry_after = arg(ARGV[11]), arg(ARGV[12])
local limit, remaining, reset, window = arg(ARGV[13]), arg(ARGV[14]), arg(ARGV[15]), arg(ARGV[16])
local ttl_ms = arg(ARGV[17])

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

-- Was this attempt in flight (not purged as dead)? Then a reading taken since counted it.
local was_out = entry ~= '' and redis.call('ZREM', KEYS[2], fmt(seq) .. ':' .. entry) == 1
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', fmt(now))
st.last_seen = now
if status > 0 and slot > 0 and slot <= now then
  local rt, sample = st.response_time, now - slot
  if rt < 0 then st.response_time = sample
  else st.response_time = math.floor(((RT_SHARE - 1) * rt + sample) / RT_SHARE) end
end
if limit >= 1 and window > 0 then
  st.stated_interval = clamp(math.ceil(window * SLACK_PERCENT / (100 * limit)))
  st.stated_limit = limit
end
-- Counted as unseen by the reading, and it left more than the reading said (_pacing.py says why).
local earlier = was_out and (seq < st.reading_seq or (slot > 0 and slot <= st.reading_at))
  and remaining > st.reading_remaining and budget_valid()
if remaining >= 0 and reset > 0 and seq >= st.reading_seq and not earlier then
  -- Not counted in this reading yet: granted after it, and granted before it still in flight.
  local unseen = st.seq - seq
  for _, member in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
    local granted = tonumber(string.match(member, '^(%d+):'))  -- nil: an older version's entry
    if granted ~= nil and granted < seq then unseen = unseen + 1 end
  end
  local left = remaining - unseen
  if slot > 0 and slot <= st.reading_at and budget_valid() then
    -- Overlapping the reading in force: what it leaves bounds this one (_pacing.py says why).
    left = math.min(left, st.budget_left)
  end
  st.budget_left, st.budget_until = left, now + reset
  st.reading_seq, st.reading_at, st.reading_remaining = seq, now, remaining
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
      local before = pace()  -- the pace this 429 met (0: none known, slow start)
      local span = math.max(now - st.successes_since, retry_after, SECOND)
      local measured = math.ceil(span / st.successes)
      local known = st.learned_interval
      if known == 0 then known = math.max(cfg, st.stated_interval) end
      -- a round at most halves a known pace (a span floored to a second measures little)
      if known > 0 then measured = math.min(measured, 2 * known) end
      st.learned_interval = clamp(measured)
      st.measured_span, st.measured_successes, st.measured_at = span, st.successes, now
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
    st.theoretical_arrival = math.max(st.theoretical_arrival, now + pace())
    st.successes = 0
  end
elseif (status > 0 and status < 400) or (status == 0 and st.learned_interval > 0) then
  -- admitted: a success, or (with a learned pace) an attempt whose answer was lost on the way
  if st.successes == 0 then
    if slot > 0 and slot <= now then st.successes_since = slot else st.successes_since = now end
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
local started = 0
if retry_after > 0 and (status == 429 or status == 503) then
  local until_ = now + math.min(retry_after, MAX_COOLDOWN_US)
  if until_ > st.cooldown_until then
    if st.cooldown_until <= now then started = 1 end
    st.cooldown_until, st.cooldown_length = until_, math.min(retry_after, MAX_COOLDOWN_US)
    local interval, burst = pace()
    if interval > 0 then
      st.theoretical_arrival = math.max(st.theoretical_arrival, st.cooldown_until + (burst - 1) * interval)
    end
  end
end

save(ttl_ms)
return {started, st.cooldown_until, (pace())}
