-- discard.lua: give up on dead deliveries; a dead head blocking its lane lets it go on.
--
-- Ordered lanes with ordering_on_dead "block" stop at a dead head until an operator
-- replays it (replay.lua) or discards it here: the delivery stays a dead letter (marked
-- "discarded_at"), leaves its lane, the lane leaves the blocked set and the next one of
-- the lane becomes pending, due now, in this same call. A dead delivery that blocks
-- nothing is only marked. Anything not dead is refused (its status is returned).
-- Called by Store.discard (relay/queue/transitions.py).
--
-- KEYS[1] due (zset)   KEYS[2] queued index (zset)   KEYS[3] blocked lanes (zset)
--                                                  ShardKeys.due/queued/blocked
-- KEYS[4..3+n] delivery hashes, one per item       ShardKeys.delivery(id)
-- ARGV[1] wake channel (ShardKeys.wake)
-- ARGV[2] lane key prefix       ShardKeys.lane_prefix      (relay:v3:{s0}:lane:)
-- ARGV[3] delivery key prefix   ShardKeys.delivery_prefix  (relay:v3:{s0}:dlv:)
--         (a lane's next id is only known in here; same hash tag, same slot)
-- ARGV[4] n, the number of items   ARGV[5..4+n] delivery ids (same order as the hashes)
--
-- Returns one value per item: "ok" (discarded; it unblocked its lane or blocked none),
-- or the status that made it not discardable ("" when the delivery does not exist).
local now = now_ms()
local n = tonumber(ARGV[4])
local res = {}
local wake = false
local lane_prefix = ARGV[2]
local dlv_prefix = ARGV[3]
for i = 1, n do
  local dkey = KEYS[3 + i]
  local id = ARGV[4 + i]
  local f = redis.call("HMGET", dkey, "status", "lane")
  if f[1] == "dead" then
    redis.call("HSET", dkey, "discarded_at", now, "updated_at", now)
    redis.call("HDEL", dkey, "blocking")
    local lane = f[2]
    if lane and redis.call("LINDEX", lane_prefix .. lane, 0) == id then
      local lane_key = lane_prefix .. lane
      redis.call("LPOP", lane_key)
      redis.call("ZREM", KEYS[3], lane)
      local nxt = redis.call("LINDEX", lane_key, 0)
      if nxt then
        redis.call("HSET", dlv_prefix .. nxt, "status", "pending", "updated_at", now)
        redis.call("ZREM", KEYS[2], nxt)
        redis.call("ZADD", KEYS[1], now, nxt)
        wake = true
      end
    end
    res[i] = "ok"
  else
    -- no hash: as published, pending if it is due (layout v3), else unknown
    res[i] = f[1] or (redis.call("ZSCORE", KEYS[1], id) and "pending") or ""
  end
end
if wake then redis.call("PUBLISH", ARGV[1], "due") end
return res
