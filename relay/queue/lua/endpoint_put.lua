-- endpoint_put.lua: create or replace an endpoint and keep its app index true.
--
-- With an expected value it is a compare-and-set: a change computed from a read (PATCH,
-- rotate-secret, auto-disable) is written only if nobody wrote in between, so two
-- concurrent changes cannot silently drop one another.
--
-- Called by Store._endpoint_put (relay/queue/endpoints.py), for create and for change.
--
-- KEYS[1] endpoints (hash id -> JSON)   Keys.endpoints
-- KEYS[2] new app's set   KEYS[3] old app's set   Keys.app(app)
-- (the slot guard follows, relay/queue/scripts.py)
-- ARGV[1] endpoint id   ARGV[2] endpoint JSON
-- ARGV[3] change channel (Keys.endpoints_changed): API replicas that cache endpoints
--         drop their cache on it
-- ARGV[4] (optional) the JSON it must still hold, else nothing is written
-- Returns 1 when written, 0 when the expected value no longer matched.
if ARGV[4] and redis.call("HGET", KEYS[1], ARGV[1]) ~= ARGV[4] then
  return 0
end
redis.call("HSET", KEYS[1], ARGV[1], ARGV[2])
if KEYS[3] ~= KEYS[2] then redis.call("SREM", KEYS[3], ARGV[1]) end
redis.call("SADD", KEYS[2], ARGV[1])
redis.call("PUBLISH", ARGV[3], ARGV[1])
return 1
