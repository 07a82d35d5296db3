-- sume_urllib3 RedisFleet: learn from one response of one key, atomically (learn.lua, in front,
-- ports _core.release); also how lessons told late reach Redis when no acquire carried them.
-- KEYS[1] state hash {prefix:vN:kid}:s   KEYS[2] in-flight zset {prefix:vN:kid}:i
-- ARGV: 1-5 as state.lua says; 6 ttl_ms (RELEASE_ARGV); then the lessons, as learn.lua reads them.
-- Returns {cooldown started (0/1), cooldown until us, interval us (0: unknown)}
local ttl_ms = arg(ARGV[6])
local started = 0
if learn_from(RELEASE_ARGV) then started = 1 end
save(ttl_ms)
return {started, st.cooldown_until, (pace(now))}
