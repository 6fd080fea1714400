-- claim.lua: take up to N due deliveries of one shard, atomically, under a lease.
-- Called by Store.claim (relay/queue/transitions.py), which builds these from keys.py.
-- ZRANGEBYSCORE and ZREM in one script, so two claimers never take the same delivery;
-- each claim mints a token that fences every later transition of it, and counts the
-- attempt. Design notes: docs/design/lua.md.
--
-- KEYS[1]  due queue (zset, score = next attempt, ms)       ShardKeys.due
-- KEYS[2]  processing leases (zset, score = lease expiry)   ShardKeys.processing
--
-- ARGV[1]  delivery key prefix   ShardKeys.delivery_prefix  (relay:v3:{s0}:dlv:)
-- ARGV[2]  batch limit   ARGV[3] lease, ms
-- ARGV[4]  claim token prefix (unique per call); token i is ARGV[4] .. i in base 32
-- ARGV[5]  worker id
--
-- Returns {now, next_due or -1, next_lease_expiry or -1, n,
--          then n groups of 6: id, token, attempts, max_attempts, event_id, endpoint_id}
-- where max_attempts and endpoint_id are "" when the hash has none (the header's hold),
-- and event_id "" when the hash has none either (the delivery id names its event).
local now, now_s = now_ms()
local dlv_prefix = ARGV[1]
local lease_until = now + tonumber(ARGV[3])
local lease_s = string.format("%d", lease_until)
local DIGITS = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  -- Crockford base32 (relay/domain/ids.py)
-- never a delivery id: 256 bytes, past any sensible zset-max-listpack-value (64 default)
local SKIPLIST_PAD = "relay:skiplist-pad:" .. string.rep("-", 237)
local function b32(i)  -- i in base 32: a token's suffix, with no number formatting
  local s = ""
  repeat
    local d = i % 32
    s = string.sub(DIGITS, d + 1, d + 1) .. s
    i = (i - d) / 32
  until i == 0
  return s
end

local ids = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", now, "LIMIT", 0, tonumber(ARGV[2]))
if #ids > 0 then
  redis.call("ZREM", KEYS[1], unpack(ids))
end

local out = {now, -1, -1, 0}  -- the reply; its head is filled in last
local leases = {}
local n = 0
for i, id in ipairs(ids) do
  local dkey = dlv_prefix .. id
  local token = ARGV[4] .. b32(i)
  local event_id, endpoint_id, max, attempts = "", "", "", "1"
  if redis.call("EXISTS", dkey) == 1 then
    local f = redis.call("HMGET", dkey, "event_id", "endpoint_id", "max_attempts", "attempts",
      "claim", "status")
    event_id = f[1] or ""  -- "": its id names its event, as a first claim's does
    endpoint_id = f[2] or ""
    max = f[3] or ""
    attempts = (tonumber(f[4]) or 0) + 1
    local set = {"status", "delivering", "attempts", attempts, "claim", token,
      "worker", ARGV[5], "updated_at", now_s}
    if f[5] and f[6] ~= "delivering" then  -- the last claim's outcome was written
      set[#set + 1] = "recorded"
      set[#set + 1] = f[5]
    end
    redis.call("HSET", dkey, unpack(set))
  else
    -- as published: its id names its event (Store.claim reads it there: event_id "")
    redis.call("HSET", dkey, "status", "delivering", "attempts", "1", "claim", token,
      "worker", ARGV[5], "updated_at", now_s)
  end
  n = n + 1
  leases[#leases + 1] = lease_s
  leases[#leases + 1] = id
  out[#out + 1] = id
  out[#out + 1] = token
  out[#out + 1] = attempts
  out[#out + 1] = max
  out[#out + 1] = event_id
  out[#out + 1] = endpoint_id
end
if #leases > 0 then
  if redis.call("EXISTS", KEYS[2]) == 0 then
    -- A new processing set is made a skiplist, not a listpack (where each lease added
    -- scans the whole set): a member longer than any zset-max-listpack-value is added
    -- with the first leases and removed at once, and Redis never turns it back.
    redis.call("ZADD", KEYS[2], "+inf", SKIPLIST_PAD, unpack(leases))
    redis.call("ZREM", KEYS[2], SKIPLIST_PAD)
  else
    redis.call("ZADD", KEYS[2], unpack(leases))
  end
end

local head = redis.call("ZRANGE", KEYS[1], 0, 0, "WITHSCORES")
local lease = redis.call("ZRANGE", KEYS[2], 0, 0, "WITHSCORES")
out[2], out[3], out[4] = head[2] or -1, lease[2] or -1, n
return out
