-- reserve.lua: take an Idempotency-Key's guard, or return what holds it.
-- Called by Store.reserve (relay/queue/guards.py): step one of a publish whose event
-- goes to another shard than its key's guard (relay/idempotency.py).
--
-- KEYS[1]  idempotency key (string)    ShardKeys.idempotency(app, key)
--
-- ARGV[1]  idempotency value (JSON: body hash, first answer, how to write its event)
-- ARGV[2]  its TTL, ms
--
-- Returns {1} when taken by this call, or {0, <stored idempotency value>}.
local ok = redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2])
if ok then
  return {1}
end
-- A write on the hit path (the same value set again, TTL kept), as in publish.lua: a
-- WAIT after this call then covers the first answer's write too.
local stored = redis.call("GET", KEYS[1])
redis.call("SET", KEYS[1], stored, "KEEPTTL")
return {0, stored}
