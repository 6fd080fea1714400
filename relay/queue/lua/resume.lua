-- resume.lua: put an endpoint's held deliveries back on the due queue (endpoint re-enabled,
-- or deleted: the worker then records them dead with endpoint_deleted).
--
-- Each id in the endpoint's held set goes back to status "pending", due now, and leaves
-- the shard's held index; the held set is deleted. Called by Store.resume
-- (relay/queue/transitions.py), once per shard.
--
-- KEYS[1] held set of the endpoint (zset)   ShardKeys.held(endpoint_id)
-- KEYS[2] due (zset)                        ShardKeys.due
-- KEYS[3] held index of the shard (zset)    ShardKeys.held_index
-- ARGV[1] delivery key prefix   ShardKeys.delivery_prefix  (relay:v3:{s0}:dlv:)
--         (the held ids are only known in here; same hash tag, same slot)
-- ARGV[2] wake channel (ShardKeys.wake)
-- Returns the number resumed.
local now = now_ms()
local dlv_prefix = ARGV[1]
local ids = redis.call("ZRANGE", KEYS[1], 0, -1)
for _, id in ipairs(ids) do
  local dkey = dlv_prefix .. id
  redis.call("HDEL", dkey, "held")
  redis.call("HSET", dkey, "status", "pending", "updated_at", now)
  redis.call("ZADD", KEYS[2], now, id)
  redis.call("ZREM", KEYS[3], id)
end
redis.call("DEL", KEYS[1])
if #ids > 0 then redis.call("PUBLISH", ARGV[2], "due") end
return #ids
