-- resume.lua: put an endpoint's held deliveries back on the due queue (endpoint re-enabled).
--
-- KEYS[1] held set of the endpoint (zset)   KEYS[2] due (zset)
-- ARGV[1] shard key prefix (the held ids are only known here; same hash tag, same slot)
-- ARGV[2] wake channel
-- Returns the number resumed.
local t = redis.call("TIME")
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ids = redis.call("ZRANGE", KEYS[1], 0, -1)
for _, id in ipairs(ids) do
  local dkey = ARGV[1] .. "dlv:" .. id
  redis.call("HDEL", dkey, "held")
  redis.call("HSET", dkey, "next_attempt_at", now, "updated_at", now)
  redis.call("ZADD", KEYS[2], now, id)
end
redis.call("DEL", KEYS[1])
if #ids > 0 then redis.call("PUBLISH", ARGV[2], "due") end
return #ids
