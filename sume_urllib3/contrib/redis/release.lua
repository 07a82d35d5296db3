-- sume_urllib3 RedisFleet: learn from one response of one key, atomically (learn.lua, in front,
-- ports _core.release); also how lessons told late reach Redis when no acquire carried them.
-- KEYS[1] state hash {prefix:vN:kid}:s   KEYS[2] in-flight zset {prefix:vN:kid}:i
-- ARGV: 1-5 as state.lua says; 6 ttl_ms (RELEASE_ARGV); then the lessons, as learn.lua reads them.
-- Returns 1 when a lesson started a cooldown, else 0.
local started = learn_from(RELEASE_ARGV)
save(arg(ARGV[6]))
return started and 1 or 0
