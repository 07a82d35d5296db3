-- sume_urllib3 RedisFleet: learn from one response of one key, atomically: the port of
-- sume_urllib3/pacing/_core.py release() (learn.lua, in front, holds it); also how lessons told late
-- reach Redis when no acquire of this process carried them in time.
-- KEYS[1] state hash {prefix:vN:kid}:s   KEYS[2] in-flight zset {prefix:vN:kid}:i
-- ARGV: 1-5 as state.lua says; 6 ttl_ms (RELEASE_ARGV); then the lessons, LESSON_ARGV each, oldest
--       first, as learn.lua reads them: those this process told late, and this response's own.
-- Returns {cooldown started (0/1), cooldown until us, interval us (0: unknown)}
local ttl_ms = arg(ARGV[6])
local started = 0
if learn_from(RELEASE_ARGV) then started = 1 end
save(ttl_ms)
return {started, st.cooldown_until, (pace(now))}
