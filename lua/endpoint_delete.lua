-- endpoint_delete.lua: delete an endpoint and its app index entry.
--
-- KEYS[1] endpoints (hash id -> JSON)   KEYS[2] its app's set
-- ARGV[1] endpoint id
-- Returns 1 when deleted, 0 when it did not exist.
redis.call("SREM", KEYS[2], ARGV[1])
return redis.call("HDEL", KEYS[1], ARGV[1])
