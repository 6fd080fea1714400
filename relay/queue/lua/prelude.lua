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

-- The leaving `id` is its lane's (blocked) head: the lane goes on without it. Returns
-- true when the next one of the lane became due.
local function lane_go_on(fin_dlv, fin_lkey, fin_due, fin_queued, fin_blocked, lane, id)
  if redis.call("LINDEX", fin_lkey, 0) ~= id then return false end
  redis.call("LPOP", fin_lkey)
  redis.call("ZREM", fin_blocked, lane)
  local nxt = redis.call("LINDEX", fin_lkey, 0)
  if not nxt then return false end
  local now = now_ms()
  redis.call("HSET", fin_dlv .. nxt, "status", "pending", "updated_at", now)
  redis.call("ZREM", fin_queued, nxt)
  redis.call("ZADD", fin_due, now, nxt)
  return true
end

-- True when the event (relay/domain/eventrecord.py: a header line, then its body) keeps
-- none of the deliveries its header lists, counting those leaving now (`dying`) as
-- gone. An event already gone is not counted as an event removed. A delivery listed
-- by its endpoint alone has the id derived from the event's (relay/domain/ids.py), and
-- no hash until its first claim: it is kept while it is fin_due.
local B32 = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
local function last_of_event(fin_dlv, fin_due, event_id, ekey, dying)
  local event = redis.call("GET", ekey)
  if not event then return false end
  local nl = string.find(event, "\n", 1, true)
  local header = cjson.decode(string.sub(event, 1, nl - 1))
  local stem = "dlv_" .. string.sub(event_id, 5, 28)
  for i, entry in ipairs(header.d) do
    local other
    if type(entry) == "string" then
      local j = i - 1
      local hi, lo = math.floor(j / 32) + 1, j % 32 + 1
      other = stem .. string.sub(B32, hi, hi) .. string.sub(B32, lo, lo)
    else
      other = entry[1]
    end
    if not dying[other] and (redis.call("EXISTS", fin_dlv .. other) == 1
        or redis.call("ZSCORE", fin_due, other)) then
      return false
    end
  end
  return true
end

-- Remove finished deliveries `ids` (already out of their succeeded or dead index) with
-- their hashes, logs and endpoint index entries; an event goes with its last delivery
-- (out of the `events` index too). The prefixes are ShardKeys.delivery_prefix,
-- fin_log, event_prefix, endpoint_index_prefix and fin_lane.
-- Returns {deliveries removed, fin_events removed, 1 when a lane's next one became fin_due}.
local function drop_finished(fin_due, fin_queued, fin_blocked, fin_events, fin_dlv, fin_log,
                             fin_evt, fin_ep, fin_lane, ids)
  local doomed, by_endpoint, gone_events, gone, dying = {}, {}, {}, {}, {}
  local promoted = 0
  for _, id in ipairs(ids) do dying[id] = true end
  for _, id in ipairs(ids) do
    local dkey = fin_dlv .. id
    local f = redis.call("HMGET", dkey, "event_id", "endpoint_id", "lane")
    f[1] = f[1] or ("evt_" .. string.sub(id, 5, 28) .. "00")  -- derived (ids.py)
    if f[3] then
      local lane = f[3]
      if lane_go_on(fin_dlv, fin_lane .. lane, fin_due, fin_queued, fin_blocked, lane, id) then
        promoted = 1
      end
    end
    doomed[#doomed + 1] = dkey
    doomed[#doomed + 1] = fin_log .. id
    if f[2] then
      local list = by_endpoint[f[2]]
      if not list then
        list = {}
        by_endpoint[f[2]] = list
      end
      list[#list + 1] = id
    end
    if f[1] and not gone[f[1]] then
      local ekey = fin_evt .. f[1]
      if last_of_event(fin_dlv, fin_due, f[1], ekey, dying) then
        gone[f[1]] = true
        doomed[#doomed + 1] = ekey
        gone_events[#gone_events + 1] = f[1]
      end
    end
  end
  del_all(doomed)
  if #gone_events > 0 then zrem_all(fin_events, gone_events) end
  for endpoint_id, list in pairs(by_endpoint) do
    zrem_all(fin_ep .. endpoint_id, list)
  end
  return {#ids, #gone_events, promoted}
end
