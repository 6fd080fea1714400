-- expire.lua: remove finished deliveries past their retention, and every index entry
-- that points at them; an event goes with its last delivery.
--
-- Bounded per call (ARGV[4] deliveries at most), so a large backlog is worked off in
-- many short calls instead of one long one that would stall Redis. Many sweepers may
-- run it at once: each id is taken with ZREM, so exactly one of them removes it.
-- Only ids still in the succeeded / dead sets are touched: a replayed delivery left
-- them for due, so it is never expired; pending and in-flight ones never are either.
--
-- KEYS[1] succeeded (zset, score = finish time)   KEYS[2] dead (zset, score = time of death)
-- KEYS[3] deliveries index (zset)                  KEYS[4] events index (zset)
-- ARGV[1] shard key prefix, e.g. "relay:v1:{s0}:": delivery, log, event and endpoint-index
--         keys are built from it, since the ids are only known in here (same hash tag,
--         so the same slot as KEYS[1])
-- ARGV[2] succeeded cutoff, ms: succeeded deliveries finished at or before it go ("-1": none)
-- ARGV[3] dead cutoff, ms: dead deliveries that died at or before it go ("-1": none)
-- ARGV[4] most deliveries to remove in this call
--
-- Returns {deliveries removed, events removed, 1 when the limit cut this call short else 0}
local prefix = ARGV[1]
local budget = tonumber(ARGV[4])
local removed, events, more = 0, 0, 0

-- One command for many members (in chunks: Lua's unpack has a stack limit).
local function each_chunk(cmd, key, members)
  for i = 1, #members, 500 do
    local stop = math.min(i + 499, #members)
    if key then
      redis.call(cmd, key, unpack(members, i, stop))
    else
      redis.call(cmd, unpack(members, i, stop))
    end
  end
end

-- The event hash counts its deliveries still kept ("live", set by publish.lua); true when
-- this was its last one. A hash already gone is not counted as an event removed.
local function last_of_event(ekey)
  if redis.call("EXISTS", ekey) == 0 then return false end
  return redis.call("HINCRBY", ekey, "live", -1) <= 0
end

local function sweep(set, cutoff)
  if cutoff < 0 or budget <= 0 then return end
  local ids = redis.call("ZRANGEBYSCORE", set, "-inf", cutoff, "LIMIT", 0, budget)
  if #ids == 0 then return end
  if #ids == budget then more = 1 end
  budget = budget - #ids
  each_chunk("ZREM", set, ids)
  each_chunk("ZREM", KEYS[3], ids)
  local doomed, by_endpoint, gone_events = {}, {}, {}
  for _, id in ipairs(ids) do
    local dkey = prefix .. "dlv:" .. id
    local f = redis.call("HMGET", dkey, "event_id", "endpoint_id")
    doomed[#doomed + 1] = dkey
    doomed[#doomed + 1] = prefix .. "log:" .. id
    if f[2] then
      local list = by_endpoint[f[2]]
      if not list then
        list = {}
        by_endpoint[f[2]] = list
      end
      list[#list + 1] = id
    end
    if f[1] then
      local ekey = prefix .. "evt:" .. f[1]
      if last_of_event(ekey) then
        doomed[#doomed + 1] = ekey
        gone_events[#gone_events + 1] = f[1]
      end
    end
  end
  each_chunk("DEL", nil, doomed)
  for endpoint_id, list in pairs(by_endpoint) do
    each_chunk("ZREM", prefix .. "ep:" .. endpoint_id, list)
  end
  if #gone_events > 0 then each_chunk("ZREM", KEYS[4], gone_events) end
  removed = removed + #ids
  events = events + #gone_events
end

sweep(KEYS[1], tonumber(ARGV[2]))
sweep(KEYS[2], tonumber(ARGV[3]))
return {removed, events, more}
