-- event_type_put.lua: create or change one event type of the catalog.
--
-- A create is refused when the name exists; a change is a compare-and-set (written only
-- if the type still holds the JSON read before), so two PATCHes cannot drop one another.
-- Every write is announced on the {cfg} change channel, where the API replicas drop their
-- compiled validators (the same channel as endpoint writes, the same subscription).
--
-- Called by Store.put_event_type (relay/queue/eventtypes.py).
--
-- KEYS[1] event types (hash name -> JSON)   Keys.event_types
-- (the slot guard follows, relay/queue/scripts.py)
-- ARGV[1] name   ARGV[2] event type JSON
-- ARGV[3] change channel (Keys.endpoints_changed)
-- ARGV[4] "" to create, else the JSON it must still hold
-- Returns 1 when written, 0 when it existed (create) or changed meanwhile (change).
if ARGV[4] == "" then
  if redis.call("HSETNX", KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
else
  if redis.call("HGET", KEYS[1], ARGV[1]) ~= ARGV[4] then return 0 end
  redis.call("HSET", KEYS[1], ARGV[1], ARGV[2])
end
redis.call("PUBLISH", ARGV[3], "event_type")
return 1
