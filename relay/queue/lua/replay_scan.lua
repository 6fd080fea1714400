-- replay_scan.lua: the next page of a delivery index in a time range, after a cursor.
-- Read-only. A reconciliation replay job (relay/ops/replays.py) walks a shard with it.
-- Called by Store.replay_scan (relay/queue/replays.py).
--
-- KEYS[1]  the index walked (zset, score = created ms)   ShardKeys.deliveries, or
--          ShardKeys.endpoint_index(endpoint_id) for one endpoint's deliveries
--
-- ARGV[1]  delivery key prefix   ShardKeys.delivery_prefix  (relay:v2:{s0}:dlv:)
-- ARGV[2]  since, ms (inclusive)   ARGV[3] until, ms (inclusive)
-- ARGV[4]  cursor: score of the last id returned before ("" to start at since)
-- ARGV[5]  cursor: the last id returned before ("" to start at since)
-- ARGV[6]  page size
--
-- The page starts right after the cursor's id: its rank when it is still indexed, else
-- (retention removed it) the first entry ordered after (score, id), so an entry removed
-- meanwhile never shifts the walk past one it has not seen.
-- Returns {done (1: the range is walked to its end), then per entry 5 values:
--          id, score, status, endpoint_id, type ("" for a field that is not there)}
local dlv_prefix = ARGV[1]
local limit = tonumber(ARGV[6])
local start
if ARGV[5] == "" then
  start = redis.call("ZCOUNT", KEYS[1], "-inf", "(" .. ARGV[2])
else
  local rank = redis.call("ZRANK", KEYS[1], ARGV[5])
  if rank then
    start = rank + 1
  else
    start = redis.call("ZCOUNT", KEYS[1], "-inf", "(" .. ARGV[4])
    local same = redis.call("ZRANGE", KEYS[1], ARGV[4], ARGV[4], "BYSCORE")
    for _, member in ipairs(same) do
      if member <= ARGV[5] then start = start + 1 else break end
    end
  end
end
local page = redis.call("ZRANGE", KEYS[1], start, start + limit - 1, "WITHSCORES")
local upto = tonumber(ARGV[3])
local out = {0}
for i = 1, #page, 2 do
  local id = page[i]
  if tonumber(page[i + 1]) > upto then
    out[1] = 1
    return out
  end
  local dkey = dlv_prefix .. id
  local f = redis.call("HMGET", dkey, "status", "endpoint_id", "type")
  out[#out + 1] = id
  out[#out + 1] = page[i + 1]
  out[#out + 1] = f[1] or ""
  out[#out + 1] = f[2] or ""
  out[#out + 1] = f[3] or ""
end
if #page < 2 * limit then out[1] = 1 end
return out
