-- sume_urllib3 RedisFleet: what both scripts share, after the header _scripts.py writes from
-- pacing/_core.py (its numbers, State's FIELDS and DEFAULTS, the ARGV layout). ARGV 1 now_us (0:
-- Redis TIME)  2 skew_us (no_sleep's virtual time)  3 configured interval_us (0: learned)  4 burst
-- 5 initial window. KEYS[1], the state hash, holds State's fields by name.
if redis.replicate_commands then pcall(redis.replicate_commands) end

local function fmt(x) return string.format('%.0f', x) end
local arg = tonumber  -- every argument is given: Python always passes all of them

local now = arg(ARGV[1])
if now <= 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * SECOND + tonumber(t[2])
end
now = now + arg(ARGV[2])
local cfg, cfg_burst, cfg_window = arg(ARGV[3]), arg(ARGV[4]), arg(ARGV[5])

local st = {}
local raw = redis.call('HMGET', KEYS[1], unpack(FIELDS))
for i, name in ipairs(FIELDS) do st[name] = tonumber(raw[i]) or DEFAULTS[name] end
if st.last_seen > now + FUTURE_US then  -- _core._purge: a state from a clock ahead, afresh
  for _, name in ipairs(FIELDS) do st[name] = DEFAULTS[name] end
  redis.call('DEL', KEYS[2])
end
if st.slow_start_window < 0 then st.slow_start_window = cfg_window end

-- Write the state back (integers exactly, others to the last bit), kept at least ttl_ms and past
-- any turn, cooldown or budget it still holds.
local function save(ttl_ms)
  local out = {}
  for _, name in ipairs(FIELDS) do
    local v = st[name]
    out[#out + 1] = name
    out[#out + 1] = (v == math.floor(v)) and fmt(v) or string.format('%.17g', v)
  end
  redis.call('HSET', KEYS[1], unpack(out))
  local horizon = (math.max(st.theoretical_arrival, st.cooldown_until, st.budget_until) - now) / MILLISECOND
  redis.call('PEXPIRE', KEYS[1], math.max(ttl_ms, math.floor(horizon) + SECOND / MILLISECOND))
end

-- _core.pace at time t (now, or a lesson's own time: learn.lua)
local function pace(t)
  local interval = math.max(cfg, st.stated_interval, st.learned_interval)
  if interval == 0 then return 0, 1 end
  local burst = cfg > 0 and cfg_burst or 1
  if st.stated_interval > 0 and t < st.budget_until then
    if cfg > 0 then burst = math.min(burst, st.stated_limit) else burst = st.stated_limit end
  end
  return interval, math.max(1, burst)
end
