-- sume_urllib3 RedisFleet: reserve a turn for one attempt of one key, atomically.
-- A line-for-line port of sume_urllib3/_pacing.py acquire() (the rules are written there);
-- tests/test_pacing_conformance.py runs the same scenarios against both.
--
-- (state.lua, put in front of this script, loads the state and holds pace())
-- KEYS[1] state hash {prefix:kid}:s   (the fields of _pacing.State, and the retry budget br bt bts)
-- KEYS[2] in-flight  {prefix:kid}:i   zset entry -> lease end
-- KEYS[3] clients    {prefix:kid}:c   zset client id -> last seen (processes sharing the key)
-- ARGV: 1-5 as state.lua says (clock and configuration)
--       6 retry (0 first, 1 throttle, 2 error)  7 not_before_us  8 time_left_us (-1: none)
--       9 random in [0, 1)  10 entry  11 ttl_ms
--       12 budget ratio (-1: no fleet budget)  13 budget window_us  14 budget floor per second
--       15 client id  16 client window_us
-- Returns {code, wait_us, source, slot_us, seq, epoch, inflight, entry held (0/1), clients, learning (0/1)}
--   code 0 send after wait_us, 1 refused (turn after the deadline), 2 again, 3 retry budget spent
--   (wait_us: when it refills for this retry, after the deadline; 0: it never refills)
--   source 0 none, 1 pace, 2 cooldown, 3 slow_start
local SPREAD, IDLE, OPEN = SECOND, SECOND, 64
local FIRST_LEASE, MIN_LEASE, LEASE_RTTS = 2 * SECOND, SECOND, 8

local retry, not_before, time_left = num(ARGV[6], 0), num(ARGV[7], 0), num(ARGV[8], -1)
local rand, entry, ttl_ms = num(ARGV[9], 0.5), ARGV[10], num(ARGV[11], 3600000)
local ratio, bwindow, bfloor = num(ARGV[12], -1), num(ARGV[13], 10000000), num(ARGV[14], 0)
local client, cwindow = ARGV[15], num(ARGV[16], 60000000)

-- Who shares this key: one entry per process seen within the client window.
redis.call('ZADD', KEYS[3], fmt(now), client)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', fmt(now - cwindow))
local clients = redis.call('ZCARD', KEYS[3])
redis.call('PEXPIRE', KEYS[3], math.floor(cwindow / 1000) + 1000)

-- The fleet-wide retry budget's counts (rb) live beside the pacing state.
local rb = load({'br', 'bt', 'bts'})
local function save_all()
  save(FIELDS, st, ttl_ms)
  save({'br', 'bt', 'bts'}, rb, ttl_ms)
end

-- The fleet-wide retry budget (not a pacing rule; LocalFleet leaves it to the session's
-- RetryBudget): retries may be `ratio` of recent first attempts, with a floor, both decaying.
-- A spent budget delays a retry rather than refusing it: the floor refills at `bfloor` per
-- second, so the retry waits until its unit has decayed in (counted now, so the next one
-- waits longer). An outage is then retried at the floor's rate fleet-wide, and a short one
-- costs no request that unpaced clients would have carried through. Refused only when that
-- wait passes the deadline, or when the floor is under one retry per window.
if ratio >= 0 then
  local decay = math.exp(-math.max(0, now - rb.bts) / bwindow)
  rb.br, rb.bt, rb.bts = rb.br * decay, rb.bt * decay, now
  local floor = bfloor * bwindow / 1000000
  if retry == 2 and rb.bt + 1 > math.max(ratio * rb.br, floor) + 1e-9 then
    if floor <= 1 then return {3, 0, 0, 0, 0, 0, 0, 0, clients, 0} end
    -- bt * exp(-dt / window) + 1 <= floor
    local due = math.ceil(bwindow * math.log(rb.bt / (floor - 1)))
    if time_left >= 0 and due > time_left then return {3, due, 0, 0, 0, 0, 0, 0, clients, 0} end
    not_before = math.max(not_before, due)
  end
end

-- _pacing.acquire from here on.
local function pause()
  local base = st.rt
  if base < 0 then base = 50000 end
  base = math.min(math.max(base, 1000), SECOND)
  return math.floor(base * (0.5 + rand))
end

redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', fmt(now))
local flight = redis.call('ZCARD', KEYS[2])
if flight == 0 and now - st.last >= IDLE then st.oks = 0 end
st.last = now
local start, source = now + math.max(not_before, 0), 0
if st.cd > start then start, source = st.cd, 2 end
local interval, burst = pace()
local budget = budget_valid()
local probe = 0  -- when this attempt goes as the budget's one probe (0: not the probe)
local function answer(code, wait, why)
  -- AGAIN and REFUSED change nothing but the idle clock and the retry budget's decay.
  save_all()
  return {code, wait, why, 0, 0, 0, 0, 0, clients, 0}
end
local hold = st.rend
if st.pi > 0 then hold = math.min(st.rend, st.rat + st.pi * (1 - math.min(st.rem, 0))) end
if budget and st.rem <= 0 then
  if st.probe >= hold then
    local wait = math.max(start, hold) - now + pause()
    if time_left < 0 or wait <= time_left then return answer(2, wait, 1) end
    return answer(1, wait, 1)
  end
  if hold > start then start, source = hold, 1 end
  probe = hold
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
local track = retry == 0 and interval == 0 and (not budget) and st.win < OPEN
local keep = track or budget
if track and flight >= st.win then
  local p = pause()
  if time_left < 0 or p < time_left then return answer(2, p, 3) end
end
if interval > 0 then st.tat = math.max(st.tat, turn) + interval end
if probe > 0 then
  st.probe, st.win = probe, 1
elseif budget then
  st.rem = st.rem - 1
end
st.seq = st.seq + 1
local held = 0
if keep then
  local lease = FIRST_LEASE
  if st.rt >= 0 then lease = math.max(MIN_LEASE, LEASE_RTTS * st.rt) end
  if time_left >= 0 then lease = math.min(lease, time_left) end
  redis.call('ZADD', KEYS[2], fmt(turn + lease), fmt(st.seq) .. ':' .. entry)
  redis.call('PEXPIRE', KEYS[2], math.floor((turn + lease - now) / 1000) + 1000)
  flight, held = flight + 1, 1
end
if ratio >= 0 then
  if retry == 0 then rb.br = rb.br + 1 elseif retry == 2 then rb.bt = rb.bt + 1 end
end
save_all()
local learning = 0
if st.li > 0 then learning = 1 end
return {0, wait, source, turn, st.seq, st.epoch, flight, held, clients, learning}
