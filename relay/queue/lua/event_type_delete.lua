-- event_type_delete.lua: remove one event type from the catalog, and announce it.
--
-- Called by Store.delete_event_type (relay/queue/eventtypes.py).
--
-- KEYS[1] event types (hash name -> JSON)   Keys.event_types
-- (the slot guard follows, relay/queue/scripts.py)
-- ARGV[1] name
-- ARGV[2] change channel (Keys.endpoints_changed: API replicas drop their validators)
-- Returns 1 when deleted, 0 when it did not exist.
local gone = redis.call("HDEL", KEYS[1], ARGV[1])
if gone == 1 then redis.call("PUBLISH", ARGV[2], "event_type") end
return gone
