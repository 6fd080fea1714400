-- endpoint_put.lua: create or replace an endpoint and keep its app index true.
--
-- KEYS[1] endpoints (hash id -> JSON)   KEYS[2] new app's set   KEYS[3] old app's set
-- ARGV[1] endpoint id   ARGV[2] endpoint JSON
-- Returns 1.
redis.call("HSET", KEYS[1], ARGV[1], ARGV[2])
if KEYS[3] ~= KEYS[2] then redis.call("SREM", KEYS[3], ARGV[1]) end
redis.call("SADD", KEYS[2], ARGV[1])
return 1
