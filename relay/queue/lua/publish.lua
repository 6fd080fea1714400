-- publish.lua: store one event, its deliveries and their queue entries, all or nothing.
-- Called by Store.publish_many (relay/queue/transitions.py), which builds these from keys.py.
-- Design notes (which deliveries get a hash, ordered lanes): docs/design/lua.md.
--
-- KEYS[1]  idempotency key (string)    ShardKeys.idempotency(app, key); only touched when
--          ARGV[1] == "1" (without an Idempotency-Key the event key again, untouched)
-- KEYS[2]  event (string)              ShardKeys.event(event_id)
-- KEYS[3]  due queue (zset)            ShardKeys.due
-- KEYS[4]  events index (zset)         ShardKeys.events
-- KEYS[5..4+2n] per delivery, two keys: ShardKeys.delivery(id), ShardKeys.endpoint_index(ep)
-- KEYS[5+2n] queued index (zset)      ShardKeys.queued (ordered lanes: waiting behind a head)
-- KEYS[6+2n] scheduled index (zset)   ShardKeys.scheduled (only touched with a deliver_at)
-- KEYS[7+2n] idempotency-key index (zset)  ShardKeys.idempotency_index(key); only touched
--          when ARGV[1] == "1" (else the event key again, untouched)
--
-- ARGV[1]  "1" when an Idempotency-Key guards this publish
-- ARGV[2]  idempotency value (JSON: body hash + first answer)   ARGV[3] its TTL, ms
-- ARGV[4]  event id   ARGV[5] type   ARGV[6] app
-- ARGV[7]  the event as stored: header line, newline, payload (relay/domain/eventrecord.py)
-- ARGV[8]  created_at, ms        ARGV[9] wake channel
-- ARGV[10] retention, ms: an event with no delivery is not indexed and expires after it;
--          the idempotency-key index expires that long after its last event
-- ARGV[11] n, the number of deliveries
-- ARGV[12..11+3n] per delivery: delivery id, endpoint id, "1" when its id does not derive
--          from the event's (relay/domain/ids.py), else ""
-- ARGV[12+3n] deliver_at, ms: the deliveries are due then (and indexed as scheduled) when
--          it is ahead of Redis's clock, due now when it is "" or past
-- ARGV[13+3n] lane key prefix (ShardKeys.lane_prefix), "" when no delivery is ordered
-- ARGV[14+3n..13+5n] (only with a lane prefix) per delivery: its lane ("" unordered; else
--          <endpoint_id> or <endpoint_id>:<ordering_key>) and "skip" | "block" (on dead)
--
-- Returns {1} when stored, or {0, <stored idempotency value>} when the key was taken.
if ARGV[1] == "1" then
  local ok = redis.call("SET", KEYS[1], ARGV[2], "NX", "PX", ARGV[3])
  if not ok then
    -- A write on the hit path (the same value set again, TTL kept): a WAIT after this
    -- call then covers the first answer's write too, which may not be on a replica yet.
    local stored = redis.call("GET", KEYS[1])
    redis.call("SET", KEYS[1], stored, "KEEPTTL")
    return {0, stored}
  end
end

local n = tonumber(ARGV[11])
if ARGV[1] == "1" then  -- the lookup by key, which outlives the idempotency record
  redis.call("ZADD", KEYS[7 + 2 * n], ARGV[8], ARGV[4])
  redis.call("PEXPIRE", KEYS[7 + 2 * n], ARGV[10])
end

local now = now_ms()
local created = ARGV[8]
local at = tonumber(ARGV[12 + 3 * n])
if at and at <= now then at = nil end
local score = at or now
if n > 0 then
  redis.call("SET", KEYS[2], ARGV[7])
else -- no delivery will ever expire it, so it carries its own TTL
  redis.call("SET", KEYS[2], ARGV[7], "PX", ARGV[10])
  return {1}
end

-- Wake sleeping workers only when these are due before anything else: a busy queue is
-- being drained, and a worker learns of a later head from its next claim.
local first = redis.call("ZRANGE", KEYS[3], 0, 0, "WITHSCORES")
local wake = (first[2] == nil) or (tonumber(first[2]) > score)

local lane_prefix = ARGV[13 + 3 * n]
local due = {}
for i = 1, n do
  local dkey = KEYS[3 + 2 * i]
  local b = 11 + 3 * (i - 1)
  local did, eid, explicit = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3] == "1"
  local lane = lane_prefix ~= "" and ARGV[12 + 3 * n + 2 * i] or ""
  local head = true
  if lane ~= "" then  -- ordered: joins its lane; only the head goes to due
    head = redis.call("RPUSH", lane_prefix .. lane, did) == 1
  end
  if lane ~= "" or explicit then  -- more to keep than its id and its event say
    local fields = {"endpoint_id", eid, "app", ARGV[6], "type", ARGV[5],
      "status", head and "pending" or "queued", "attempts", 0}
    if lane ~= "" then
      fields[#fields + 1] = "lane"
      fields[#fields + 1] = lane
      fields[#fields + 1] = "on_dead"
      fields[#fields + 1] = ARGV[13 + 3 * n + 2 * i]
    end
    if explicit then
      fields[#fields + 1] = "event_id"
      fields[#fields + 1] = ARGV[4]
    end
    redis.call("HSET", dkey, unpack(fields))
  end
  if head then
    due[#due + 1] = score
    due[#due + 1] = did
  else
    redis.call("ZADD", KEYS[5 + 2 * n], created, did)
  end
  redis.call("ZADD", KEYS[4 + 2 * i], created, did)
end
if #due > 0 then
  zadd_all(KEYS[3], due)
  if at then  -- the index's past entries are no longer scheduled: trimmed as it grows
    redis.call("ZREMRANGEBYSCORE", KEYS[6 + 2 * n], "-inf", now)
    zadd_all(KEYS[6 + 2 * n], due)
  end
end
redis.call("ZADD", KEYS[4], created, ARGV[4])
if wake and #due > 0 then
  redis.call("PUBLISH", ARGV[9], "due")
end
return {1}
