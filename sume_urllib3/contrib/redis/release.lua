-- sume_urllib3 RedisFleet: learn from one response of one key, atomically.
-- A line-for-line port of sume_urllib3/_pacing.py release() (the rules are written there);
-- tests/test_pacing_conformance.py runs the same scenarios against both.
--
-- KEYS[1] state hash {prefix:kid}:s   KEYS[2] in-flight zset {prefix:kid}:i
-- ARGV: 1 now_us (0: Redis TIME)  2 skew_us  3 configured interval_us  4 configured burst
--       5 initial window  6 entry ('' none)  7 slot_us  8 seq  9 epoch  10 inflight
--       11 status (0: no response)  12 Retry-After us (0: none)
--       13 limit  14 remaining  15 reset_us  16 window_us   (each -1 when not said)  17 ttl_ms
-- Returns {cooldown started (0/1), cooldown until us, interval us (0: unknown)}
if redis.replicate_commands then pcall(redis.replicate_commands) end

local SECOND = 1000000
local MAX_COOLDOWN, OPEN = 600 * SECOND, 64
local MIN_INTERVAL, MAX_INTERVAL = 1, 86400 * SECOND

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
local entry, slot, seq, epoch, inflight = ARGV[6], num(ARGV[7], 0), num(ARGV[8], 0), num(ARGV[9], 0), num(ARGV[10], 0)
local status, retry_after = num(ARGV[11], 0), num(ARGV[12], 0)
local limit, remaining, reset, window = num(ARGV[13], -1), num(ARGV[14], -1), num(ARGV[15], -1), num(ARGV[16], -1)
local ttl_ms = num(ARGV[17], 3600000)

local F = {'tat', 'cd', 'cl', 'pi', 'pb', 'li', 'rem', 'rend', 'rseq', 'probe', 'seq', 'win', 'epoch',
  'oks', 'ok0', 'rt', 'last', 'rat'}
local raw = redis.call('HMGET', KEYS[1], unpack(F))
local st = {}
for i, name in ipairs(F) do st[name] = num(raw[i], 0) end
if raw[16] == false then st.rt = -1 end
if raw[5] == false then st.pb = 1 end
if raw[12] == false then st.win = -1 end

local function clamp(x) return math.min(math.max(x, MIN_INTERVAL), MAX_INTERVAL) end
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

if entry ~= '' then redis.call('ZREM', KEYS[2], entry) end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', fmt(now))
if st.win < 0 then st.win = cfg_window end
st.last = now
if status > 0 and slot > 0 and slot <= now then
  if st.rt < 0 then st.rt = now - slot else st.rt = math.floor((4 * st.rt + (now - slot)) / 5) end
end
if limit >= 1 and window > 0 then
  st.pi = clamp(math.ceil(window * 101 / (100 * limit)))
  st.pb = limit
end
if remaining >= 0 and reset > 0 and seq >= st.rseq then
  st.rem, st.rend, st.rseq, st.rat = remaining - (st.seq - seq), now + reset, seq, now
end
if status == 429 then
  if epoch == st.epoch then
    st.epoch = st.epoch + 1
    if remaining >= 0 then
      -- the server counts for us: its Remaining and Reset hold the key
    elseif st.oks > 0 then
      local span = math.max(now - st.ok0, retry_after, SECOND)
      st.li = clamp(math.ceil(span / st.oks))
    elseif st.li > 0 then
      st.li = clamp(st.li * 2)
    elseif math.max(cfg, st.pi) > 0 then
      st.li = clamp(math.max(cfg, st.pi) * 2)
    else
      st.win = math.max(1, math.floor(math.min(st.win, inflight) / 2))
    end
    st.tat = math.max(st.tat, now)
    st.oks = 0
  end
elseif status > 0 and status < 400 then
  if st.oks == 0 then
    if slot > 0 and slot <= now then st.ok0 = slot else st.ok0 = now end
  end
  st.oks = st.oks + 1
  if st.li > 0 then
    st.li = clamp(st.li - math.floor(st.li / 100))
    if st.li <= math.max(cfg, st.pi) then st.li = 0 end
  elseif math.max(cfg, st.pi) == 0 and st.win < OPEN then
    st.win = st.win + 1
  end
end
local started = 0
if retry_after > 0 and (status == 429 or status == 503) then
  local until_ = now + math.min(retry_after, MAX_COOLDOWN)
  if until_ > st.cd then
    if st.cd <= now then started = 1 end
    st.cd, st.cl = until_, math.min(retry_after, MAX_COOLDOWN)
    local interval, burst = pace()
    if interval > 0 then st.tat = math.max(st.tat, st.cd + (burst - 1) * interval) end
  end
end

local out = {}
for _, name in ipairs(F) do
  out[#out + 1] = name
  out[#out + 1] = fmt(st[name])
end
redis.call('HSET', KEYS[1], unpack(out))
local horizon = math.floor((math.max(st.tat, st.cd, st.rend) - now) / 1000)
redis.call('PEXPIRE', KEYS[1], math.max(ttl_ms, horizon + 1000))
local interval = pace()
return {started, st.cd, interval}
