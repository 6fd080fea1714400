-- endpoint_delete.lua: delete an endpoint and its app index entry.
--
-- Called by Store.delete_endpoint (relay/queue/endpoints.py).
--
-- KEYS[1] endpoints (hash id -> JSON)   Keys.endpoints
-- KEYS[2] its app's set                 Keys.app(app)
-- (the slot guard follows, relay/queue/scripts.py)
-- ARGV[1] endpoint id
-- ARGV[2] change channel (Keys.endpoints_changed: API replicas drop their endpoint cache)
-- Returns 1 when deleted, 0 when it did not exist.
redis.call("SREM", KEYS[2], ARGV[1])
local gone = redis.call("HDEL", KEYS[1], ARGV[1])
redis.call("PUBLISH", ARGV[2], ARGV[1])
return gone
