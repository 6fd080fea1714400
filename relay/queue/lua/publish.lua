-- publish.lua: store one event, its deliveries and their queue entries, all or nothing.
--
-- KEYS[1]  idempotency key (string; only touched when ARGV[1] == "1")
-- KEYS[2]  event hash                  relay:v1:{sN}:evt:<event_id>
-- KEYS[3]  events index (zset)         relay:v1:{sN}:events
-- KEYS[4]  due queue (zset)            relay:v1:{sN}:due
-- KEYS[5]  deliveries index (zset)     relay:v1:{sN}:deliveries
-- KEYS[6..] per delivery, two keys:    delivery hash, endpoint index (zset)
--
-- ARGV[1]  "1" when an Idempotency-Key guards this publish
-- ARGV[2]  idempotency value (JSON: body hash + first answer)
-- ARGV[3]  idempotency TTL, ms
-- ARGV[4]  event id   ARGV[5] type   ARGV[6] app   ARGV[7] body (exact bytes sent)
-- ARGV[8]  created_at, ms        ARGV[9] max attempts
-- ARGV[10] wake channel          ARGV[11] deliveries JSON (for the event hash)
-- ARGV[12..] per delivery, two values: delivery id, endpoint id
-- ARGV[last] retention, ms: an event with no delivery is not indexed and expires after it
--
-- The event hash keeps "live", the number of its deliveries still stored: expire.lua
-- counts it down and removes the event with its last delivery.
-- Returns {1} when stored, or {0, <stored idempotency value>} when the key was taken.
if ARGV[1] == "1" then
  local ok = redis.call("SET", KEYS[1], ARGV[2], "NX", "PX", ARGV[3])
  if not ok then
    return {0, redis.call("GET", KEYS[1])}
  end
end

local t = redis.call("TIME")
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local created = ARGV[8]

local n = (#KEYS - 6) / 2  -- the last key is the slot guard (relay/scripts.py)
redis.call("HSET", KEYS[2], "id", ARGV[4], "type", ARGV[5], "app", ARGV[6],
  "body", ARGV[7], "created_at", created, "deliveries", ARGV[11], "live", n)
if n > 0 then
  redis.call("ZADD", KEYS[3], created, ARGV[4])
else -- no delivery will ever expire it, so it carries its own TTL and stays out of the index
  redis.call("PEXPIRE", KEYS[2], ARGV[#ARGV])
end

-- Wake sleeping workers only when nothing was due yet: a busy queue is being drained.
local head = redis.call("ZRANGE", KEYS[4], 0, 0, "WITHSCORES")
local wake = (head[2] == nil) or (tonumber(head[2]) > now)

for i = 1, n do
  local dkey = KEYS[4 + 2 * i]
  local ekey = KEYS[5 + 2 * i]
  local did = ARGV[10 + 2 * i]
  local eid = ARGV[11 + 2 * i]
  redis.call("HSET", dkey, "id", did, "event_id", ARGV[4], "endpoint_id", eid,
    "app", ARGV[6], "type", ARGV[5], "status", "pending", "attempts", 0,
    "max_attempts", ARGV[9], "created_at", created, "updated_at", now,
    "next_attempt_at", now, "log_n", 0)
  redis.call("ZADD", KEYS[4], now, did)
  redis.call("ZADD", KEYS[5], created, did)
  redis.call("ZADD", ekey, created, did)
end
if wake and n > 0 then
  redis.call("PUBLISH", ARGV[10], "due")
end
return {1}
