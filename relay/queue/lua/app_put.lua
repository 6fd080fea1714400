-- app_put.lua: create or change one application of the Svix-compatible API.
--
-- A create is refused when the name exists; a change is a compare-and-set (written only
-- if the application still holds the JSON read before), so two PATCHes cannot drop one
-- another.
--
-- Called by Store.put_app (relay/queue/apps.py).
--
-- KEYS[1] applications (hash name -> JSON)   Keys.apps
-- (the slot guard follows, relay/queue/scripts.py)
-- ARGV[1] name   ARGV[2] application JSON
-- ARGV[3] "" to create, else the JSON it must still hold
-- Returns 1 when written, 0 when it existed (create) or changed meanwhile (change).
if ARGV[3] == "" then
  return redis.call("HSETNX", KEYS[1], ARGV[1], ARGV[2])
end
if redis.call("HGET", KEYS[1], ARGV[1]) ~= ARGV[3] then return 0 end
redis.call("HSET", KEYS[1], ARGV[1], ARGV[2])
return 1
