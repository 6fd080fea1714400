-- endpoint_forget.lua: drop a deleted endpoint's shared state and leave a tombstone.
--
-- Sends still in flight when an endpoint is deleted settle afterwards; settle.lua finds
-- the tombstone and writes nothing, so no breaker comes back for an endpoint that no
-- sweep visits any more. The tombstone expires (ARGV[1]), long after the last such
-- settle. The ops outbox keeps what it holds, for the worker that appended it to
-- publish, and expires with the tombstone.
--
-- Called by Store.delete_endpoint_state (relay/queue/endpoints.py).
--
-- KEYS[1] breaker (hash)   EndpointKeys.breaker   KEYS[2] rate TAT (string)   EndpointKeys.rate
-- KEYS[3] in-flight slots (zset)   EndpointKeys.inflight
-- KEYS[4] ops outbox (list)   EndpointKeys.ops   KEYS[5] tombstone (string)   EndpointKeys.deleted
-- ARGV[1] how long the tombstone (and the ops outbox) lives, ms
--
-- Returns the number of keys deleted.
redis.call("SET", KEYS[5], "1", "PX", ARGV[1])
redis.call("PEXPIRE", KEYS[4], ARGV[1])
return redis.call("DEL", KEYS[1], KEYS[2], KEYS[3])
