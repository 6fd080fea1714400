-- release.lua: hand claims back without charging an attempt (graceful shutdown).
--
-- KEYS[1] due (zset)   KEYS[2] processing (zset)   KEYS[3..] delivery hashes
-- ARGV[1] wake channel   ARGV[2..] claim tokens (same order)   then delivery ids
--
-- Returns one integer per item: 1 handed back, 0 the claim was no longer ours.
local t = redis.call("TIME")
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local n = #KEYS - 3  -- the last key is the slot guard (relay/scripts.py)
local res = {}
local any = false
for i = 1, n do
  local dkey = KEYS[2 + i]
  local id = ARGV[1 + n + i]
  if redis.call("HGET", dkey, "claim") == ARGV[1 + i] then
    redis.call("HINCRBY", dkey, "attempts", -1)
    redis.call("HDEL", dkey, "claim", "lease_until")
    redis.call("HSET", dkey, "status", "pending", "next_attempt_at", now, "updated_at", now)
    redis.call("ZREM", KEYS[2], id)
    redis.call("ZADD", KEYS[1], now, id)
    res[i] = 1
    any = true
  else
    res[i] = 0
  end
end
if any then redis.call("PUBLISH", ARGV[1], "due") end
return res
