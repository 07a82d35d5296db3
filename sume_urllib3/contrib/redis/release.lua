-- sume_urllib3 RedisFleet: learn from one response of one key, atomically.
-- A line-for-line port of sume_urllib3/_pacing.py release() (the rules are written there);
-- tests/test_pacing_conformance.py runs the same scenarios against both.
--
-- (state.lua, put in front of this script, loads the state and holds pace())
-- KEYS[1] state hash {prefix:kid}:s   KEYS[2] in-flight zset {prefix:kid}:i
-- ARGV: 1-5 as state.lua says (clock and configuration)
--       6 entry ('' none)  7 slot_us  8 seq  9 epoch  10 inflight
--       11 status (0: no response)  12 Retry-After us (0: none)
--       13 limit  14 remaining  15 reset_us  16 window_us   (each -1 when not said)  17 ttl_ms
-- Returns {cooldown started (0/1), cooldown until us, interval us (0: unknown)}
local MAX_COOLDOWN, OPEN = 600 * SECOND, 64
local MIN_INTERVAL, MAX_INTERVAL = 1, 86400 * SECOND
-- a learned pace recovers about all of itself per RECOVERY of successes below its plateau, per PROBE from it
local RECOVERY, PROBE = 4 * SECOND, 200 * SECOND

local entry, slot, seq, epoch, inflight = ARGV[6], num(ARGV[7], 0), num(ARGV[8], 0), num(ARGV[9], 0), num(ARGV[10], 0)
local status, retry_after = num(ARGV[11], 0), num(ARGV[12], 0)
local limit, remaining, reset, window = num(ARGV[13], -1), num(ARGV[14], -1), num(ARGV[15], -1), num(ARGV[16], -1)
local ttl_ms = num(ARGV[17], 3600000)

local function clamp(x) return math.min(math.max(x, MIN_INTERVAL), MAX_INTERVAL) end
-- _pacing._plateau: an eighth slower than the pace the last measuring 429 met
local function plateau(lx)
  if lx > 0 then return lx + math.floor(lx / 8) end
  return 0
end
-- _pacing._creep: fast below the plateau (never past it), slowly from there
local function creep(li, lx)
  local top = plateau(lx)
  if li <= top then return math.floor(li / math.max(math.floor(PROBE / li), 2)) end
  local fast = math.max(math.floor(li / 100), math.floor(li / math.max(math.floor(RECOVERY / li), 2)))
  if top > 0 then return math.min(fast, li - top) end
  return fast
end

-- Was this attempt in flight (not purged as dead)? Then a reading taken since counted it.
local was_out = entry ~= '' and redis.call('ZREM', KEYS[2], fmt(seq) .. ':' .. entry) == 1
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', fmt(now))
st.last = now
if status > 0 and slot > 0 and slot <= now then
  if st.rt < 0 then st.rt = now - slot else st.rt = math.floor((4 * st.rt + (now - slot)) / 5) end
end
if limit >= 1 and window > 0 then
  st.pi = clamp(math.ceil(window * 101 / (100 * limit)))
  st.pb = limit
end
if remaining >= 0 and reset > 0 and seq >= st.rseq then
  -- Not counted in this reading yet: granted after it, and granted before it still in flight.
  local unseen = st.seq - seq
  for _, member in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
    local granted = tonumber(string.match(member, '^(%d+):'))  -- nil: an older version's entry
    if granted ~= nil and granted < seq then unseen = unseen + 1 end
  end
  st.rem, st.rend, st.rseq, st.rat, st.rr = remaining - unseen, now + reset, seq, now, remaining
elseif was_out and seq < st.rseq and remaining > st.rr and budget_valid() then
  -- An older answer the reading counted as unseen, which the server had counted already.
  st.rem = st.rem + 1
end
if status == 429 then
  if epoch == st.epoch then
    st.epoch = st.epoch + 1
    st.ms = 0
    if remaining >= 0 then
      -- the server counts for us: its Remaining and Reset hold the key
    elseif st.oks > 0 then
      local before = pace()  -- the pace this 429 met (0: none known, slow start)
      local span = math.max(now - st.ok0, retry_after, SECOND)
      local measured = math.ceil(span / st.oks)
      local known = st.li
      if known == 0 then known = math.max(cfg, st.pi) end
      -- a round at most halves a known pace (a span floored to a second measures little)
      if known > 0 then measured = math.min(measured, 2 * known) end
      st.li = clamp(measured)
      st.ms, st.mo, st.me = span, st.oks, now
      if before > 0 then
        -- the server admitted some and refused the pace this round met: at most its plateau
        st.lx = before
        st.li = clamp(math.max(st.li, plateau(before)))
      end
    elseif st.li > 0 then
      st.li = clamp(st.li * 2)
    elseif math.max(cfg, st.pi) > 0 then
      st.li = clamp(math.max(cfg, st.pi) * 2)
    elseif st.win > 1 then
      st.win = math.max(1, math.floor(math.min(st.win, inflight) / 2))
    else
      -- nothing got through one attempt at a time: one per Retry-After, at least a second
      st.li = clamp(math.max(retry_after, SECOND))
    end
    -- the quota is empty now: the next turn one step of the new pace from here
    st.tat = math.max(st.tat, now + pace())
    st.oks = 0
  end
elseif (status > 0 and status < 400) or (status == 0 and st.li > 0) then
  -- admitted: a success, or (with a learned pace) an attempt whose answer was lost on the way
  if st.oks == 0 then
    if slot > 0 and slot <= now then st.ok0 = slot else st.ok0 = now end
  end
  st.oks = st.oks + 1
  if st.li > 0 then
    if st.ms > 0 and epoch == st.epoch - 1 and slot > 0 and slot <= st.me then
      -- sent before the 429 that measured the pace, answered after it: admitted in that span
      st.mo = st.mo + 1
      st.li = math.min(st.li, math.max(clamp(math.ceil(st.ms / st.mo)), plateau(st.lx)))
    end
    st.li = clamp(st.li - creep(st.li, st.lx))
    if st.li <= math.max(cfg, st.pi) then st.li = 0 end
  elseif status > 0 and math.max(cfg, st.pi) == 0 and st.win < OPEN then
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

save(FIELDS, st, ttl_ms)
local interval = pace()
return {started, st.cd, interval}
