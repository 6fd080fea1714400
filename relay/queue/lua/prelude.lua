-- prelude.lua: helpers every script may use; the loader (relay/queue/scripts.py) puts
-- this file in front of each script. No key is named here: each comes as an argument.

-- Redis's clock in ms, as a number and as a string: a Lua number passed to redis.call
-- is formatted with "%.17g" on every call, the string is made once.
local function now_ms()
  local t = redis.call("TIME")
  local s = t[1] .. string.sub(string.rep("0", 6 - #t[2]) .. t[2], 1, 3)
  return tonumber(s), s
end

-- One command for many arguments, in chunks (Lua's unpack has a stack limit).
local CHUNK = 1000
local function zadd_all(zset, pairs)
  for i = 1, #pairs, CHUNK do
    redis.call("ZADD", zset, unpack(pairs, i, math.min(i + CHUNK - 1, #pairs)))
  end
end
local function zrem_all(zset, members)
  for i = 1, #members, CHUNK do
    redis.call("ZREM", zset, unpack(members, i, math.min(i + CHUNK - 1, #members)))
  end
end
local function del_all(doomed)
  for i = 1, #doomed, CHUNK do
    redis.call("DEL", unpack(doomed, i, math.min(i + CHUNK - 1, #doomed)))
  end
end

-- A dead letter, counted in its endpoint's tally of this shard (none without an
-- endpoint); relay/connectors/opsevents.py cuts ripe tallies into delivery.dead events.
local function tally_dead(tally_index, tally_prefix, endpoint, id, now)
  if not endpoint then return end
  local tally = tally_prefix .. endpoint
  redis.call("ZADD", tally_index, "NX", now, endpoint)
  redis.call("HINCRBY", tally, "n", 1)
  redis.call("HSETNX", tally, "first_id", id)
  redis.call("HSETNX", tally, "first_at", now)
  redis.call("HSET", tally, "last_id", id, "last_at", now)
end
