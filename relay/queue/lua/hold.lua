-- hold.lua: park claimed deliveries of a disabled endpoint, without charging an attempt.
--
-- Each one fenced on its claim token goes to status "held": out of processing and due
-- (a disabled endpoint costs no claims at all), into the endpoint's held set, which
-- resume.lua moves back to due when the endpoint is enabled again, and into the shard's
-- held index, which lists and counts held deliveries. Called by Store.hold
-- (relay/queue/transitions.py).
--
-- KEYS[1] processing (zset)                           ShardKeys.processing
-- KEYS[2] held set of the endpoint (zset)             ShardKeys.held(endpoint_id)
-- KEYS[3] held index of the shard (zset)              ShardKeys.held_index
-- KEYS[4..3+n] delivery hashes, one per item          ShardKeys.delivery(id)
-- ARGV[1] n, the number of items
-- ARGV[2..1+n] claim tokens   ARGV[2+n..1+2n] delivery ids (same order as the hashes)
-- ARGV[2+2n] the endpoint id (written into a hash that has none: a first claim's)
-- A claim is ours while the hash's claim is its token and its status "delivering".
-- Returns the number held.
local now = now_ms()
local n = tonumber(ARGV[1])
local held = 0
for i = 1, n do
  local dkey = KEYS[3 + i]
  local id = ARGV[1 + n + i]
  local f = redis.call("HMGET", dkey, "claim", "status")
  if f[1] == ARGV[1 + i] and f[2] == "delivering" then
    redis.call("HINCRBY", dkey, "attempts", -1)
    redis.call("HDEL", dkey, "claim", "lease_until")
    redis.call("HSET", dkey, "status", "held", "held", "endpoint_disabled", "updated_at", now,
      "endpoint_id", ARGV[2 + 2 * n])
    redis.call("ZREM", KEYS[1], id)
    redis.call("ZADD", KEYS[2], now, id)
    redis.call("ZADD", KEYS[3], now, id)
    held = held + 1
  end
end
return held
