-- sume_urllib3 RedisFleet: reserve a turn for one attempt of one API key, atomically.
-- The same rules as sume_urllib3._fleet.LocalFleet, with the state shared by every process.
--
-- KEYS[1] state hash {prefix:kid}:s   tat cd cl li lb src prec win oks oks0 rt br bt bts
-- KEYS[2] in-flight  {prefix:kid}:i   zset entry -> lease end (slow start only)
-- KEYS[3] clients    {prefix:kid}:c   zset client id -> last seen (how many processes share the key)
-- ARGV: 1 now_us (0: Redis TIME)  2 configured interval_us (0: learned)  3 configured burst
--       4 time_left_us (-1: none)  5 retry (0 first, 1 throttle, 2 error)  6 not_before_us
--       7 initial window  8 entry  9 lease_us  10 ttl_ms
--       11 budget ratio (-1: no fleet budget)  12 budget window_us  13 budget floor per second
--       14 client id  15 client window_us  16 random in [0, 1)
-- Returns {code, wait_us, source, slot_us, clients, in_flight}
--   code 0 send after wait_us, 1 refused (turn after the deadline), 2 again, 3 retry budget spent
--   source 0 none, 1 pace, 2 cooldown, 3 slow_start
-- Times are integer microseconds on the Redis clock: hosts need no synchronised clocks.
if redis.replicate_commands then pcall(redis.replicate_commands) end

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
local cfg, cfg_burst = num(ARGV[2], 0), num(ARGV[3], 1)
local time_left, retry, not_before = num(ARGV[4], -1), num(ARGV[5], 0), num(ARGV[6], 0)
local initial, entry, lease, ttl_ms = num(ARGV[7], 4), ARGV[8], num(ARGV[9], 60000000), num(ARGV[10], 3600000)
local ratio, bwindow, bfloor = num(ARGV[11], -1), num(ARGV[12], 10000000), num(ARGV[13], 0)
local client, cwindow, rand = ARGV[14], num(ARGV[15], 60000000), num(ARGV[16], 0.5)

-- Who shares this key: one entry per process seen within the client window.
redis.call('ZADD', KEYS[3], fmt(now), client)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', fmt(now - cwindow))
local clients = redis.call('ZCARD', KEYS[3])
redis.call('PEXPIRE', KEYS[3], math.floor(cwindow / 1000) + 1000)

local st = redis.call('HMGET', KEYS[1], 'tat', 'cd', 'cl', 'li', 'lb', 'win', 'rt', 'br', 'bt', 'bts')
local tat, cd, cl = num(st[1], 0), num(st[2], 0), num(st[3], 0)
local li, lb, win, rt = num(st[4], 0), num(st[5], 1), num(st[6], initial), num(st[7], -1)
local br, bt, bts = num(st[8], 0), num(st[9], 0), num(st[10], now)

-- The pace: learned from the server (never faster than a configured one), else configured.
local interval, burst = 0, 1
if li > 0 then
  interval, burst = li, math.max(1, lb)
  if cfg > 0 then interval, burst = math.max(li, cfg), math.min(burst, math.max(1, cfg_burst)) end
elseif cfg > 0 then
  interval, burst = cfg, math.max(1, cfg_burst)
end

-- The fleet-wide retry budget: retries may be `ratio` of recent first attempts, with a floor.
-- Both counts decay over the window, so the budget refills as old traffic ages out.
if ratio >= 0 then
  local decay = math.exp(-math.max(0, now - bts) / bwindow)
  br, bt, bts = br * decay, bt * decay, now
  if retry == 2 and bt + 1 > math.max(ratio * br, bfloor * bwindow / 1000000) + 1e-9 then
    return {3, 0, 0, 0, clients, 0}
  end
end

local start, source = now + math.max(0, not_before), 0
if cd > start then start, source = cd, 2 end

local function refuse(wait) return {1, wait, source, now + wait, clients, 0} end
local function again(wait, why) return {2, wait, why, now + wait, clients, 0} end

local turn, in_flight = start, 0
if interval > 0 then
  -- The server's bucket is empty when a cooldown ends: one turn then, the rest one step apart.
  if cd > now then tat = math.max(tat, cd + (burst - 1) * interval) end
  turn = math.max(start, tat - (burst - 1) * interval)
  if turn > start then source = 1 end
  if time_left >= 0 and turn - now > time_left then return refuse(turn - now) end
  -- A turn deferred beyond the schedule takes its capacity without dragging the schedule along.
  tat = math.max(tat, now) + interval
else
  -- Nobody knows the pace: spread held requests over a window as long as the cooldown.
  if source == 2 then turn = start + rand * cl end
  local wait = turn - now
  if time_left >= 0 and wait > time_left then return refuse(wait) end
  if retry == 0 and source == 2 then return again(wait, 2) end
  if win < initial * 16 then
    -- Slow start: only `win` first attempts in flight fleet-wide until a response tells the pace.
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', fmt(now))
    if retry == 0 and redis.call('ZCARD', KEYS[2]) >= win then
      local pause = math.min(math.max(rt >= 0 and rt or 50000, 1000), 1000000) * (0.5 + rand)
      if time_left < 0 or pause < time_left then return again(pause, 3) end
    end
    redis.call('ZADD', KEYS[2], fmt(now + lease), entry)
    redis.call('PEXPIRE', KEYS[2], math.floor(lease / 1000) + 1000)
    in_flight = 1
  end
end

if ratio >= 0 then
  if retry == 0 then br = br + 1 elseif retry == 2 then bt = bt + 1 end
end
redis.call('HSET', KEYS[1], 'tat', fmt(tat), 'br', tostring(br), 'bt', tostring(bt), 'bts', fmt(bts))
local horizon = math.floor((math.max(tat, cd) - now) / 1000)
redis.call('PEXPIRE', KEYS[1], math.max(ttl_ms, horizon + 1000))
return {0, turn - now, source, turn, clients, in_flight}
