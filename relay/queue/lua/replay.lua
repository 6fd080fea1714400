-- replay.lua: put dead or succeeded deliveries back to pending with a fresh budget.
--
-- Conditional in one script, so two operators replaying at once cannot both win:
-- the first flips the status to pending, the second finds it pending and is refused.
--
-- Held, pending and in-flight deliveries are refused (their status is returned).
-- Called by Store.replay (relay/queue/transitions.py).
--
-- KEYS[1] due (zset)   KEYS[2] succeeded (zset)   KEYS[3] dead (zset)
-- KEYS[4..3+n] delivery hashes, one per item   ShardKeys.delivery(id)
-- KEYS[4+n] queued index (zset)   KEYS[5+n] blocked lanes (zset)   ShardKeys.queued/blocked
-- ARGV[1] wake channel   ARGV[2] max attempts   ARGV[3] n, the number of items
-- ARGV[4..3+n] delivery ids (same order as the hashes)
-- ARGV[4+n] lane key prefix (ShardKeys.lane_prefix)
--
-- Ordered lanes: the dead head blocking its lane is retried in place, still the head
-- (the lane unblocks and waits for it); any other replayed delivery of a lane goes to
-- the back of it: pending and due if the lane is empty, else "queued" behind the rest.
--
-- Returns one value per item: "ok", or the status that made it not replayable
-- ("" when the delivery does not exist).
local now = now_ms()
local n = tonumber(ARGV[3])
local res = {}
local any = false
local queued = KEYS[4 + n]
local blocked = KEYS[5 + n]
local lane_prefix = ARGV[4 + n]

-- The creation time an id carries (relay/domain/ids.py: 10 base32 characters of ms).
local B32 = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
local function created_of(id)
  local ms = 0
  for k = 5, 14 do
    ms = ms * 32 + string.find(B32, string.sub(id, k, k), 1, true) - 1
  end
  return ms
end
for i = 1, n do
  local dkey = KEYS[3 + i]
  local id = ARGV[3 + i]
  local status = redis.call("HGET", dkey, "status")
  if status == "dead" or status == "succeeded" then
    redis.call("ZREM", KEYS[2], id)
    redis.call("ZREM", KEYS[3], id)
    redis.call("HDEL", dkey, "finished_at")
    redis.call("HSET", dkey, "status", "pending", "attempts", 0, "max_attempts", ARGV[2],
      "updated_at", now, "replayed_at", now)
    redis.call("HINCRBY", dkey, "replays", 1)
    local lane = redis.call("HGET", dkey, "lane")
    local head = true
    if lane then
      local lane_key = lane_prefix .. lane
      redis.call("HDEL", dkey, "blocking")
      if redis.call("LINDEX", lane_key, 0) == id then
        redis.call("ZREM", blocked, lane)  -- the blocked head, retried in place
      else
        head = redis.call("RPUSH", lane_key, id) == 1
      end
    end
    if head then
      redis.call("ZADD", KEYS[1], now, id)
    else
      redis.call("HSET", dkey, "status", "queued")
      redis.call("ZADD", queued, created_of(id), id)
    end
    res[i] = "ok"
    any = true
  else
    -- no hash: as published, pending if it is due (layout v3), else unknown
    res[i] = status or (redis.call("ZSCORE", KEYS[1], id) and "pending") or ""
  end
end
if any then redis.call("PUBLISH", ARGV[1], "due") end
return res
