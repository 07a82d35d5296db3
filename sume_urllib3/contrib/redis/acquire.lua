-- sume_urllib3 RedisFleet: reserve a turn for one attempt of one key, atomically: the port of
-- pacing/_core.py acquire(), _quota_hold() and retry_wait(), after state.lua and learn.lua.
-- KEYS[1] state hash {prefix:vN:kid}:s  KEYS[2] in-flight zset {prefix:vN:kid}:i (entry -> lease end)
-- KEYS[3] clients zset {prefix:vN:kid}:c (client id -> last seen: processes sharing the key)
-- ARGV: 1-5 as state.lua says, 6 to ACQUIRE_ARGV as read below, then lessons told late (learn.lua)
-- Returns {code, wait_us, source, slot_us, seq, epoch, inflight, entry held (0/1), clients, learning (0/1)}
local retry, not_before, time_left = arg(ARGV[6]), arg(ARGV[7]), arg(ARGV[8])  -- _core.RETRY_KINDS
local rand, entry, ttl_ms = arg(ARGV[9]), ARGV[10], arg(ARGV[11])  -- rand in [0, 1)
local ratio, budget_window, budget_floor = arg(ARGV[12]), arg(ARGV[13]), arg(ARGV[14])  -- ratio -1: none
local client, client_window = ARGV[15], arg(ARGV[16])

-- What this process learned since its last call for the key, at their own times, first.
learn_from(ACQUIRE_ARGV)

-- Who shares this key: one entry per process seen within the client window.
redis.call('ZADD', KEYS[3], fmt(now), client)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', fmt(now - client_window))
local clients = redis.call('ZCARD', KEYS[3])
redis.call('PEXPIRE', KEYS[3], math.floor(client_window / MILLISECOND) + SECOND / MILLISECOND)

local function answer(code, wait, why)
  save(ttl_ms)  -- AGAIN, REFUSED and NO_BUDGET change nothing but the idle clock and budget decay
  return {code, wait, why, 0, 0, 0, 0, 0, clients, 0}
end

local function pause()
  local base = st.response_time >= 0 and st.response_time or FIRST_PAUSE_US
  return math.floor(math.min(math.max(base, MIN_PAUSE_US), SECOND) * (0.5 + rand))
end

-- _core.retry_wait
if ratio >= 0 then
  local decay = math.exp(-math.max(0, now - st.counted_at) / budget_window)
  st.recent_firsts, st.recent_retries = st.recent_firsts * decay, st.recent_retries * decay
  st.counted_at = now
  local floor = budget_floor * budget_window / SECOND
  local room = math.max(ratio * st.recent_firsts, floor) + EPSILON
  if retry == ERROR and st.recent_retries + 1 > room then
    if floor <= 1 then return answer(NO_BUDGET, 0, NONE) end
    local due = math.ceil(budget_window * math.log(st.recent_retries / (floor - 1)))
    if time_left >= 0 and due > time_left then return answer(NO_BUDGET, due, NONE) end
    not_before = math.max(not_before, due)
  end
end

-- _core._purge
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', fmt(now))
local flight = redis.call('ZCARD', KEYS[2])

-- _core._quota_hold: rule 4, a spent quota (the reasons are there)
local function quota_hold(start)
  local hold = st.budget_until
  local exact = math.max(cfg, st.stated_interval)
  if exact > 0 then hold = math.min(hold, st.reading_at + exact * (1 - st.budget_left)) end
  if st.probe_at >= hold then
    local wait = math.max(start, hold) - now + pause()
    return nil, answer((time_left < 0 or wait <= time_left) and AGAIN or REFUSED, wait, PACE)
  end
  if flight > 0 and st.probe_at <= st.reading_at and exact == 0 then
    local p = pause()
    if now + p < math.max(start, hold) and (time_left < 0 or p < time_left) then
      return nil, answer(AGAIN, p, PACE)
    end
  end
  return hold
end

-- _core.acquire
if flight == 0 and now - st.last_seen >= IDLE_US then st.successes = 0 end
st.last_seen = now
local start, source = now + math.max(not_before, 0), NONE
if st.cooldown_until > start then start, source = st.cooldown_until, COOLDOWN end
local interval, burst = pace(now)
local budget = now < st.budget_until
local probe = 0
if budget and st.budget_left <= 0 then
  local held, done = quota_hold(start)
  if done ~= nil then return done end
  if held > start then start, source = held, PACE end
  probe = held
end
local turn = start
if interval > 0 then
  turn = math.max(start, st.theoretical_arrival - (burst - 1) * interval)
  if turn > start then source = PACE end
elseif source == COOLDOWN then
  turn = start + math.floor(rand * math.min(st.cooldown_length, SPREAD_US))
  if retry == FIRST and time_left >= 0 and turn - now <= time_left then
    return answer(AGAIN, turn - now, COOLDOWN)
  end
end
local wait = turn - now
if time_left >= 0 and wait > time_left then return answer(REFUSED, wait, source) end
local track = retry == FIRST and interval == 0 and (not budget) and st.slow_start_window < OPEN_WINDOW
if track and flight >= st.slow_start_window then
  local p = pause()
  if time_left < 0 or p < time_left then return answer(AGAIN, p, SLOW_START) end
end
if interval > 0 then st.theoretical_arrival = math.max(st.theoretical_arrival, turn) + interval end
if probe > 0 then
  st.probe_at, st.slow_start_window = probe, 1
elseif budget then
  st.budget_left = st.budget_left - 1
end
st.seq = st.seq + 1
if ratio >= 0 then  -- the budget's counts
  if retry == FIRST then st.recent_firsts = st.recent_firsts + 1 end
  if retry == ERROR then st.recent_retries = st.recent_retries + 1 end
end
local held = 0
if track or budget then
  local lease = FIRST_LEASE_US
  if st.response_time >= 0 then lease = math.max(MIN_LEASE_US, LEASE_RTTS * st.response_time) end
  if time_left >= 0 then lease = math.min(lease, time_left) end
  redis.call('ZADD', KEYS[2], fmt(turn + lease), fmt(st.seq) .. ':' .. entry)
  -- Never shortened: an entry granted before this one may hold a longer lease (no deadline, or
  -- slower answers then), and the set expiring would free its slot while it is still out.
  local lease_ms = math.floor((turn + lease - now) / MILLISECOND) + SECOND / MILLISECOND
  if redis.call('PTTL', KEYS[2]) < lease_ms then redis.call('PEXPIRE', KEYS[2], lease_ms) end
  flight, held = flight + 1, 1
end
save(ttl_ms)
local learning = st.learned_interval > 0 and 1 or 0
return {SEND, wait, source, turn, st.seq, st.epoch, flight, held, clients, learning}
