-- reclaim.lua: move deliveries whose lease ran out back to due (or to dead).
-- Called by Store.reclaim (relay/queue/transitions.py). The attempt was counted at claim,
-- so a delivery that kills its worker every time reaches dead once its attempts are
-- spent; of two reclaimers racing, the ZREM decides. Design notes: docs/design/lua.md.
--
-- KEYS[1] due (zset)   KEYS[2] processing (zset)   KEYS[3] dead (zset)
-- KEYS[4] shard stats (hash)                          ShardKeys.due/processing/dead/stats
-- KEYS[5] queued index (zset)   KEYS[6] blocked lanes (zset)   ShardKeys.queued/blocked
-- KEYS[7] dead-letter tallies (zset)   ShardKeys.dead_tally_index
-- ARGV[1] delivery key prefix   ShardKeys.delivery_prefix  (relay:v3:{s0}:dlv:)
-- ARGV[2] attempt log prefix    ShardKeys.log_prefix       (relay:v3:{s0}:log:)
-- ARGV[3] limit   ARGV[4] wake channel (ShardKeys.wake)
-- ARGV[5] lane key prefix (ShardKeys.lane_prefix)
-- ARGV[6] dead-letter tally prefix (ShardKeys.dead_tally_prefix)
-- ARGV[7] event key prefix (ShardKeys.event_prefix): a delivery whose hash has no attempt
--         budget or endpoint takes them from its event's header
--
-- Returns {reclaimed, sent_to_dead, id1, id2, ...}
local now = now_ms()
local dlv_prefix = ARGV[1]
local log_prefix = ARGV[2]
local evt_prefix = ARGV[7]
local ids = redis.call("ZRANGEBYSCORE", KEYS[2], "-inf", now, "LIMIT", 0, tonumber(ARGV[3]))
local back, dead, promoted = 0, 0, 0
local res = {0, 0}
local lane_prefix = ARGV[5]
local tally_index = KEYS[7]
local tally_prefix = ARGV[6]
local B32 = {}  -- base32 digit -> value (relay/domain/ids.py)
for k = 1, 32 do B32[string.sub("0123456789ABCDEFGHJKMNPQRSTVWXYZ", k, k)] = k - 1 end

-- A head gone dead: its lane blocks ("on_dead" = "block") or the next one is due now.
local function lane_dead(dkey, id)
  local f = redis.call("HMGET", dkey, "lane", "on_dead")
  if not f[1] then return end
  local lane_key = lane_prefix .. f[1]
  if redis.call("LINDEX", lane_key, 0) ~= id then return end
  if f[2] == "block" then
    redis.call("HSET", dkey, "blocking", "1")
    redis.call("ZADD", KEYS[6], now, f[1])
    return
  end
  redis.call("LPOP", lane_key)
  local nxt = redis.call("LINDEX", lane_key, 0)
  if nxt then
    redis.call("HSET", dlv_prefix .. nxt, "status", "pending", "updated_at", now)
    redis.call("ZREM", KEYS[5], nxt)
    redis.call("ZADD", KEYS[1], now, nxt)
    promoted = promoted + 1
  end
end
for _, id in ipairs(ids) do
  if redis.call("ZREM", KEYS[2], id) == 1 then
    local dkey = dlv_prefix .. id
    local f = redis.call("HMGET", dkey, "attempts", "max_attempts", "worker", "event_id",
      "endpoint_id")
    if f[1] and not (f[2] and f[5]) then
      local event_id = f[4] or ("evt_" .. string.sub(id, 5, 28) .. "00")  -- ids.py
      local event = redis.call("GET", evt_prefix .. event_id)
      if event then
        local nl = string.find(event, "\n", 1, true)
        local header = cjson.decode(string.sub(event, 1, nl - 1))
        f[2] = f[2] or header.max_attempts
        local hi, lo = B32[string.sub(id, 29, 29)], B32[string.sub(id, 30, 30)]
        local e = hi and lo and header.d[hi * 32 + lo + 1]
        if not f[5] and type(e) == "string" then
          redis.call("HSET", dkey, "endpoint_id", e)
        end
      else
        f[2] = f[2] or f[1]  -- its event is gone: nothing left to send
      end
    end
    if f[1] then
      local num = redis.call("HINCRBY", dkey, "log_n", 1)
      local err = "lease expired: worker " .. (f[3] or "?") .. " did not report an outcome"
      local lkey = log_prefix .. id
      redis.call("RPUSH", lkey, cjson.encode({n = num, at = now,
        error = "lease_expired", detail = err, worker = f[3] or ""}))
      redis.call("HDEL", dkey, "claim", "lease_until")
      redis.call("HSET", dkey, "last_error", err, "updated_at", now)
      if tonumber(f[1]) >= tonumber(f[2]) then
        redis.call("HSET", dkey, "status", "dead", "finished_at", now)
        redis.call("ZADD", KEYS[3], now, id)
        dead = dead + 1
        local ep = redis.call("HGET", dkey, "endpoint_id")
        tally_dead(tally_index, tally_prefix, ep, id, now)
        lane_dead(dkey, id)
      else
        redis.call("HSET", dkey, "status", "pending")
        redis.call("ZADD", KEYS[1], now, id)
        back = back + 1
      end
      res[#res + 1] = id
    end
  end
end
res[1] = back
res[2] = dead
if back + dead > 0 then
  redis.call("HINCRBY", KEYS[4], "reclaimed", back + dead)
end
if back + promoted > 0 then redis.call("PUBLISH", ARGV[4], "due") end
return res
