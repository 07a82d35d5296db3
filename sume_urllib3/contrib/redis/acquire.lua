-- sume_urllib3 RedisFleet: reserve a turn for one attempt of one key, atomically.
-- A line-for-line port of sume_urllib3/_pacing.py acquire() (the rules are written there);
-- tests/test_pacing_conformance.py runs the same scenarios against both.
--
-- KEYS[1] state hash {prefix:kid}:s   (the fields of _pacing.State, and the retry budget br bt bts)
-- KEYS[2] in-flight  {prefix:kid}:i   zset entry -> lease end
-- KEYS[3] clients    {prefix:kid}:c   zset client id -> last seen (processes sharing the key)
-- ARGV: 1 now_us (0: Redis TIME)  2 skew_us (added to now: no_sleep's virtual time)
--       3 configured interval_us (0: learned)  4 configured burst  5 initial window
--       6 retry (0 first, 1 throttle, 2 error)  7 not_before_us  8 time_left_us (-1: none)
--       9 random in [0, 1)  10 entry  11 ttl_ms
--       12 budget ratio (-1: no fleet budget)  13 budget window_us  14 budget floor per second
--       15 client id  16 client window_us
-- Returns {code, wait_us, source, slot_us, seq, epoch, inflight, entry held (0/1), clients, learning (0/1)}
--   code 0 send after wait_us, 1 refused (turn after the deadline), 2 again, 3 retry budget spent
--   source 0 none, 1 pace, 2 cooldown, 3 slow_start
if redis.replicate_commands then pcall(redis.replicate_commands) end

local SECOND = 1000000
local SPREAD, IDLE, OPEN = SECOND, SECOND, 64
local FIRST_LEASE, MIN_LEASE, LEASE_RTTS = 2 * SECOND, SECOND, 8

local function num(v, default)
  local n = tonumber(v)
  if n == nil then return default end
  return n
end
local function fmt(x) return string.format('%.0f', x) end

local now = num(ARGV[1], 0)
if now <= 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
now = now + num(ARGV[2], 0)
local cfg, cfg_burst, cfg_window = num(ARGV[3], 0), num(ARGV[4], 1), num(ARGV[5], 4)
local retry, not_before, time_left = num(ARGV[6], 0), num(ARGV[7], 0), num(ARGV[8], -1)
local rand, entry, ttl_ms = num(ARGV[9], 0.5), ARGV[10], num(ARGV[11], 3600000)
local ratio, bwindow, bfloor = num(ARGV[12], -1), num(ARGV[13], 10000000), num(ARGV[14], 0)
local client, cwindow = ARGV[15], num(ARGV[16], 60000000)

-- Who shares this key: one entry per process seen within the client window.
redis.call('ZADD', KEYS[3], fmt(now), client)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', fmt(now - cwindow))
local clients = redis.call('ZCARD', KEYS[3])
redis.call('PEXPIRE', KEYS[3], math.floor(cwindow / 1000) + 1000)

local F = {'tat', 'cd', 'cl', 'pi', 'pb', 'li', 'rem', 'rend', 'rseq', 'probe', 'seq', 'win', 'epoch',
  'oks', 'ok0', 'rt', 'last', 'br', 'bt', 'bts', 'rat'}
local raw = redis.call('HMGET', KEYS[1], unpack(F))
local st = {}
for i, name in ipairs(F) do st[name] = num(raw[i], 0) end
if raw[16] == false then st.rt = -1 end
if raw[5] == false then st.pb = 1 end
if raw[12] == false then st.win = -1 end
if raw[20] == false then st.bts = now end

local function save()
  local out = {}
  for _, name in ipairs(F) do
    out[#out + 1] = name
    out[#out + 1] = (name == 'br' or name == 'bt') and tostring(st[name]) or fmt(st[name])
  end
  redis.call('HSET', KEYS[1], unpack(out))
  local horizon = math.floor((math.max(st.tat, st.cd, st.rend) - now) / 1000)
  redis.call('PEXPIRE', KEYS[1], math.max(ttl_ms, horizon + 1000))
end

-- The fleet-wide retry budget (not a pacing rule; LocalFleet leaves it to the session's
-- RetryBudget): retries may be `ratio` of recent first attempts, with a floor, both decaying.
if ratio >= 0 then
  local decay = math.exp(-math.max(0, now - st.bts) / bwindow)
  st.br, st.bt, st.bts = st.br * decay, st.bt * decay, now
  if retry == 2 and st.bt + 1 > math.max(ratio * st.br, bfloor * bwindow / 1000000) + 1e-9 then
    return {3, 0, 0, 0, 0, 0, 0, 0, clients, 0}
  end
end

-- _pacing.acquire from here on.
local function budget_valid() return now < st.rend end
local function pace()
  local interval = math.max(cfg, st.pi, st.li)
  if interval == 0 then return 0, 1 end
  local burst = 1
  if cfg > 0 then burst = cfg_burst end
  if st.pi > 0 and budget_valid() then
    if cfg > 0 then burst = math.min(burst, st.pb) else burst = st.pb end
  end
  return interval, math.max(1, burst)
end
local function pause()
  local base = st.rt
  if base < 0 then base = 50000 end
  base = math.min(math.max(base, 1000), SECOND)
  return math.floor(base * (0.5 + rand))
end

redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', fmt(now))
local flight = redis.call('ZCARD', KEYS[2])
if st.win < 0 then st.win = cfg_window end
if flight == 0 and now - st.last >= IDLE then st.oks = 0 end
st.last = now
local start, source = now + math.max(not_before, 0), 0
if st.cd > start then start, source = st.cd, 2 end
local interval, burst = pace()
local budget = budget_valid()
local probe = false
local function answer(code, wait, why)
  -- AGAIN and REFUSED change nothing but the idle clock and the retry budget's decay.
  save()
  return {code, wait, why, 0, 0, 0, 0, 0, clients, 0}
end
local hold = st.rend
if st.pi > 0 then hold = math.min(st.rend, st.rat + st.pi) end
if budget and st.rem <= 0 then
  if st.probe >= hold then
    local wait = math.max(start, hold) - now + pause()
    if time_left < 0 or wait <= time_left then return answer(2, wait, 1) end
    return answer(1, wait, 1)
  end
  if hold > start then start, source = hold, 1 end
  probe = true
end
local turn = start
if interval > 0 then
  turn = math.max(start, st.tat - (burst - 1) * interval)
  if turn > start then source = 1 end
elseif source == 2 then
  turn = start + math.floor(rand * math.min(st.cl, SPREAD))
  if retry == 0 and time_left >= 0 and turn - now <= time_left then return answer(2, turn - now, 2) end
end
local wait = turn - now
if time_left >= 0 and wait > time_left then return answer(1, wait, source) end
local track = interval == 0 and (not budget) and st.win < OPEN
if track and retry == 0 and flight >= st.win then
  local p = pause()
  if time_left < 0 or p < time_left then return answer(2, p, 3) end
end
if interval > 0 then st.tat = math.max(st.tat, turn) + interval end
if probe then
  st.probe, st.win = hold, 1
elseif budget then
  st.rem = st.rem - 1
end
st.seq = st.seq + 1
local held = 0
if track then
  local lease = FIRST_LEASE
  if st.rt >= 0 then lease = math.max(MIN_LEASE, LEASE_RTTS * st.rt) end
  if time_left >= 0 then lease = math.min(lease, time_left) end
  redis.call('ZADD', KEYS[2], fmt(turn + lease), entry)
  redis.call('PEXPIRE', KEYS[2], math.floor((turn + lease - now) / 1000) + 1000)
  flight, held = flight + 1, 1
end
if ratio >= 0 then
  if retry == 0 then st.br = st.br + 1 elseif retry == 2 then st.bt = st.bt + 1 end
end
save()
local learning = 0
if st.li > 0 then learning = 1 end
return {0, wait, source, turn, st.seq, st.epoch, flight, held, clients, learning}
