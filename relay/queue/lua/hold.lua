-- hold.lua: park claimed deliveries of a disabled endpoint, without charging an attempt.
--
-- They leave the due queue for a per-endpoint held set, so a disabled endpoint costs no
-- claims at all; re-enabling the endpoint moves them back (resume.lua).
--
-- KEYS[1] processing (zset)   KEYS[2] held set of the endpoint (zset)   KEYS[3..] delivery hashes
-- ARGV[1..n] claim tokens (same order)   ARGV[n+1..] delivery ids
-- Returns the number held.
local t = redis.call("TIME")
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local n = #KEYS - 3  -- the last key is the slot guard (relay/scripts.py)
local held = 0
for i = 1, n do
  local dkey = KEYS[2 + i]
  local id = ARGV[n + i]
  if redis.call("HGET", dkey, "claim") == ARGV[i] then
    redis.call("HINCRBY", dkey, "attempts", -1)
    redis.call("HDEL", dkey, "claim", "lease_until", "next_attempt_at")
    redis.call("HSET", dkey, "status", "pending", "held", "endpoint_disabled", "updated_at", now)
    redis.call("ZREM", KEYS[1], id)
    redis.call("ZADD", KEYS[2], now, id)
    held = held + 1
  end
end
return held
