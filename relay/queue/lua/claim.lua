-- claim.lua: take up to N due deliveries of one shard, atomically, under a lease.
--
-- The Redis form of SELECT ... FOR UPDATE SKIP LOCKED: ZRANGEBYSCORE + ZREM in one
-- script, so two claimers can never take the same delivery. Each claim mints a claim
-- token that fences every later transition of it, and the attempt is counted here, at
-- claim, so a delivery that kills its worker every time still runs out of attempts.
-- Called by Store.claim (relay/queue/transitions.py), which builds these from keys.py.
--
-- KEYS[1]  due queue (zset, score = next attempt, ms)       ShardKeys.due
-- KEYS[2]  processing leases (zset, score = lease expiry)   ShardKeys.processing
--
-- ARGV[1]  delivery key prefix   ShardKeys.delivery_prefix  (relay:v2:{s0}:dlv:)
-- ARGV[2]  event key prefix      ShardKeys.event_prefix     (relay:v2:{s0}:evt:)
--          The due ids are only known in here, so their delivery and event keys are
--          prefix .. id; they share the shard's hash tag, hence the slot of KEYS[1].
-- ARGV[3]  batch limit   ARGV[4] lease, ms
-- ARGV[5]  claim token prefix (unique per call); token i is ARGV[5] .. i
-- ARGV[6]  worker id
--
-- Returns {now, next_due or -1, next_lease_expiry or -1, n,
--          then n groups of 7: id, token, attempts, max_attempts, event_id, endpoint_id, body}
local t = redis.call("TIME")
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local dlv_prefix = ARGV[1]
local evt_prefix = ARGV[2]
local lease_until = now + tonumber(ARGV[4])

local ids = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", now, "LIMIT", 0, tonumber(ARGV[3]))
local out = {}
local n = 0
for i, id in ipairs(ids) do
  redis.call("ZREM", KEYS[1], id)
  local dkey = dlv_prefix .. id
  local f = redis.call("HMGET", dkey, "event_id", "endpoint_id", "max_attempts")
  if f[1] then
    local token = ARGV[5] .. i
    local attempts = redis.call("HINCRBY", dkey, "attempts", 1)
    redis.call("HSET", dkey, "status", "delivering", "claim", token, "worker", ARGV[6],
      "lease_until", lease_until, "updated_at", now)
    redis.call("ZADD", KEYS[2], lease_until, id)
    -- the event (relay/domain/eventrecord.py): a header line, then the body sent
    local event = redis.call("GET", evt_prefix .. f[1])
    local body = nil
    if event then
      local nl = string.find(event, "\n", 1, true)
      body = nl and string.sub(event, nl + 1) or nil
    end
    n = n + 1
    out[#out + 1] = id
    out[#out + 1] = token
    out[#out + 1] = attempts
    out[#out + 1] = f[3]
    out[#out + 1] = f[1]
    out[#out + 1] = f[2]
    out[#out + 1] = body or ""
  end
end

local head = redis.call("ZRANGE", KEYS[1], 0, 0, "WITHSCORES")
local lease = redis.call("ZRANGE", KEYS[2], 0, 0, "WITHSCORES")
local res = {now, head[2] or -1, lease[2] or -1, n}
for _, v in ipairs(out) do res[#res + 1] = v end
return res
