-- sume_urllib3 RedisFleet: record what one response taught about an API key, atomically.
-- The same rules as sume_urllib3._fleet.LocalFleet, with the state shared by every process.
--
-- KEYS[1] state hash {prefix:kid}:s   KEYS[2] in-flight zset {prefix:kid}:i
-- ARGV: 1 now_us (0: Redis TIME)  2 in-flight entry ('' for none)  3 slot_us of the turn (0: none)
--       4 status (0: no response)  5 Retry-After us (0: none)
--       6 limit  7 remaining  8 reset_us  9 window_us   (each -1 when the headers do not say)
--       10 configured interval_us (0: learned)  11 configured burst  12 initial window  13 ttl_ms
-- Returns {cooldown_until_us, interval_us (0: unknown), window, cooldown_started}
if redis.replicate_commands then pcall(redis.replicate_commands) end

local function num(v, default)
  local n = tonumber(v)
  if n == nil then return default end
  return n
end
local function fmt(x) return string.format('%.0f', x) end
local MIN_INTERVAL, MAX_INTERVAL = 1, 86400000000  -- 1e6/s .. 1/day

local now = num(ARGV[1], 0)
if now <= 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local entry, slot, status, retry_after = ARGV[2], num(ARGV[3], 0), num(ARGV[4], 0), num(ARGV[5], 0)
local limit, remaining, reset, window = num(ARGV[6], -1), num(ARGV[7], -1), num(ARGV[8], -1), num(ARGV[9], -1)
local cfg, cfg_burst, initial, ttl_ms = num(ARGV[10], 0), num(ARGV[11], 1), num(ARGV[12], 4), num(ARGV[13], 3600000)

local st = redis.call('HMGET', KEYS[1], 'tat', 'cd', 'cl', 'li', 'lb', 'src', 'prec', 'win', 'oks', 'oks0', 'rt')
local tat, cd, cl = num(st[1], 0), num(st[2], 0), num(st[3], 0)
local li, lb, src, prec = num(st[4], 0), num(st[5], 1), num(st[6], 0), num(st[7], 0)
local win, oks, oks0, rt = num(st[8], initial), num(st[9], 0), num(st[10], 0), num(st[11], -1)

if entry ~= '' then redis.call('ZREM', KEYS[2], entry) end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', fmt(now))
local pending = redis.call('ZCARD', KEYS[2])
if slot > 0 and now >= slot then
  rt = (rt < 0) and (now - slot) or (0.8 * rt + 0.2 * (now - slot))
end

local function clamp(x) return math.min(math.max(x, MIN_INTERVAL), MAX_INTERVAL) end
local function pace()
  if li > 0 then
    if cfg > 0 then return math.max(li, cfg), math.min(math.max(1, lb), math.max(1, cfg_burst)) end
    return li, math.max(1, lb)
  end
  if cfg > 0 then return cfg, math.max(1, cfg_burst) end
  return 0, 1
end

-- What the RateLimit headers say: limit per window, else the refill of what was spent.
if limit >= 1 then
  local learned, precision = 0, 0
  if window > 0 then
    learned, precision = window / limit, 1e300
  elseif remaining >= 0 and reset > 0 and remaining < limit then
    learned, precision = reset / (limit - remaining), limit - remaining
  end
  if learned > 0 and (src ~= 1 or precision >= prec) then
    if li <= 0 and cfg <= 0 then tat = now + pending * clamp(learned) end  -- in-flight turns are spent
    li, prec, lb, src = clamp(learned), precision, math.max(1, math.floor(limit)), 1
  end
end
local interval, burst = pace()
if remaining >= 0 and interval > 0 then
  tat = math.max(tat, now + (burst - remaining + pending) * interval)
elseif remaining >= 0 and remaining < 1 and reset > 0 then
  cd, cl = math.max(cd, now + reset), math.max(cl, reset)  -- nothing left, no pace: hold until reset
end

if status == 429 then
  if cfg <= 0 and src ~= 1 then
    if oks > 0 then
      -- What got through since the last 429 is what the server admits.
      local span = math.max(now - oks0, retry_after > 0 and retry_after or 1000000)
      li, lb, src = clamp(span / oks), 1, 2
      tat = math.max(tat, now)
    elseif li > 0 then
      li = clamp(li * 2)
    else
      win = math.max(1, math.floor(win / 2))
    end
  end
  oks = 0
elseif status > 0 and status < 400 then
  oks = oks + 1
  if oks == 1 then oks0 = now end
  if li <= 0 and cfg <= 0 then
    win = win + 1
  elseif src == 2 and cfg <= 0 then
    li = clamp(li / 1.01)  -- a pace learned from 429s alone creeps up to find a raised quota
  end
end

local started = 0
if retry_after > 0 and now + retry_after > cd then
  if cd <= now then started = 1 end
  cd, cl = now + retry_after, retry_after
  interval, burst = pace()
  if interval > 0 then tat = math.max(tat, cd + (burst - 1) * interval) end
end

interval, burst = pace()
redis.call('HSET', KEYS[1], 'tat', fmt(tat), 'cd', fmt(cd), 'cl', fmt(cl), 'li', fmt(li), 'lb', fmt(lb),
  'src', src, 'prec', tostring(prec), 'win', fmt(win), 'oks', oks, 'oks0', fmt(oks0), 'rt', fmt(rt))
local horizon = math.floor((math.max(tat, cd) - now) / 1000)
redis.call('PEXPIRE', KEYS[1], math.max(ttl_ms, horizon + 1000))
return {cd, interval, win, started}
