-- sume_urllib3 RedisFleet: what acquire.lua and release.lua share. _scripts.py puts this in
-- front of each (a Redis script cannot load another), so each rule below exists once in Lua.
--
-- ARGV 1-5 of both scripts: 1 now_us (0: Redis TIME)  2 skew_us (added to now: no_sleep's
-- virtual time)  3 configured interval_us (0: learned)  4 configured burst  5 initial window
-- KEYS[1] is the state hash {prefix:kid}:s: the fields of _pacing.State, by the same names.
if redis.replicate_commands then pcall(redis.replicate_commands) end

local SECOND = 1000000

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

-- _pacing.State's fields; a field not stored yet takes State's default.
local FIELDS = {'tat', 'cd', 'cl', 'pi', 'pb', 'li', 'rem', 'rend', 'rseq', 'probe', 'seq', 'win',
  'epoch', 'oks', 'ok0', 'rt', 'last', 'rat', 'rr', 'ms', 'mo',
  'me', 'lx'}
local DEFAULTS = {pb = 1, win = -1, rt = -1, bts = now}

local function load(names)
  local raw = redis.call('HMGET', KEYS[1], unpack(names))
  local out = {}
  for i, name in ipairs(names) do
    if raw[i] == false then out[name] = DEFAULTS[name] or 0 else out[name] = tonumber(raw[i]) end
  end
  return out
end
local st = load(FIELDS)

-- Write `names` of `values` back (integers exactly, others as Lua prints them) and keep the
-- hash at least `ttl_ms`, and past any turn, cooldown or budget it still holds.
local function save(names, values, ttl_ms)
  local out = {}
  for _, name in ipairs(names) do
    local v = values[name]
    out[#out + 1] = name
    out[#out + 1] = (v == math.floor(v)) and fmt(v) or tostring(v)
  end
  redis.call('HSET', KEYS[1], unpack(out))
  local horizon = math.floor((math.max(st.tat, st.cd, st.rend) - now) / 1000)
  redis.call('PEXPIRE', KEYS[1], math.max(ttl_ms, horizon + 1000))
end

-- _pacing.pace(): the interval (0 unknown) and burst the key is held to now.
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
if st.win < 0 then st.win = cfg_window end
