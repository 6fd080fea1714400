-- expire.lua: remove finished deliveries past their retention, and every index entry
-- that points at them; an event goes with its last delivery.
-- Called by Store.expire_shard (relay/queue/transitions.py). At most ARGV[7] deliveries
-- per call; many sweepers may run it at once (each id is taken with ZREM). Only ids in
-- succeeded or dead are touched. Design notes: docs/design/lua.md.
--
-- KEYS[1] succeeded (zset, score = finish time)   KEYS[2] dead (zset, score = time of death)
-- KEYS[3] events index (zset)   ShardKeys.events: an event leaves it with its last delivery
-- KEYS[4] due (zset)   KEYS[5] queued index (zset)   KEYS[6] blocked lanes (zset)
-- ARGV[1] delivery key prefix        ShardKeys.delivery_prefix        (relay:v3:{s0}:dlv:)
-- ARGV[2] attempt log prefix         ShardKeys.log_prefix             (relay:v3:{s0}:log:)
-- ARGV[3] event key prefix           ShardKeys.event_prefix           (relay:v3:{s0}:evt:)
-- ARGV[4] endpoint index prefix      ShardKeys.endpoint_index_prefix  (relay:v3:{s0}:ep:)
-- ARGV[5] succeeded cutoff, ms: succeeded deliveries finished at or before it go ("-1": none)
-- ARGV[6] dead cutoff, ms: dead deliveries that died at or before it go ("-1": none)
-- ARGV[7] most deliveries to remove in this call
-- ARGV[8] lane key prefix (ShardKeys.lane_prefix)   ARGV[9] wake channel (ShardKeys.wake)
--
-- Returns {deliveries removed, events removed, 1 when the limit cut this call short else 0}
local dlv_prefix = ARGV[1]
local log_prefix = ARGV[2]
local evt_prefix = ARGV[3]
local ep_prefix = ARGV[4]
local budget = tonumber(ARGV[7])
local removed, events, more = 0, 0, 0
local lane_prefix = ARGV[8]
local promoted = false

-- The expiring `id` is its lane's (blocked) head: the lane goes on without it.
local function lane_next(lane, id)
  local lkey = lane_prefix .. lane
  if redis.call("LINDEX", lkey, 0) ~= id then return end
  redis.call("LPOP", lkey)
  redis.call("ZREM", KEYS[6], lane)
  local nxt = redis.call("LINDEX", lkey, 0)
  if nxt then
    local now = now_ms()
    redis.call("HSET", dlv_prefix .. nxt, "status", "pending", "updated_at", now)
    redis.call("ZREM", KEYS[5], nxt)
    redis.call("ZADD", KEYS[4], now, nxt)
    promoted = true
  end
end

-- True when the event (relay/domain/eventrecord.py: a header line, then its body) keeps
-- none of the deliveries its header lists, counting those this sweep removes (`dying`)
-- as gone. An event already gone is not counted as an event removed. A delivery listed
-- by its endpoint alone has the id derived from the event's (relay/domain/ids.py), and
-- no hash until its first claim: it is kept while it is due.
local B32 = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
local function last_of_event(event_id, ekey, dying)
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
    if not dying[other] and (redis.call("EXISTS", dlv_prefix .. other) == 1
        or redis.call("ZSCORE", KEYS[4], other)) then
      return false
    end
  end
  return true
end

local function sweep(zkey, cutoff)
  if cutoff < 0 or budget <= 0 then return end
  local ids = redis.call("ZRANGEBYSCORE", zkey, "-inf", cutoff, "LIMIT", 0, budget)
  if #ids == 0 then return end
  if #ids == budget then more = 1 end
  budget = budget - #ids
  zrem_all(zkey, ids)
  local doomed, by_endpoint, gone_events, gone, dying = {}, {}, {}, {}, {}
  for _, id in ipairs(ids) do dying[id] = true end
  for _, id in ipairs(ids) do
    local dkey = dlv_prefix .. id
    local f = redis.call("HMGET", dkey, "event_id", "endpoint_id", "lane")
    f[1] = f[1] or ("evt_" .. string.sub(id, 5, 28) .. "00")  -- derived (ids.py)
    if f[3] then lane_next(f[3], id) end
    doomed[#doomed + 1] = dkey
    doomed[#doomed + 1] = log_prefix .. id
    if f[2] then
      local list = by_endpoint[f[2]]
      if not list then
        list = {}
        by_endpoint[f[2]] = list
      end
      list[#list + 1] = id
    end
    if f[1] and not gone[f[1]] then
      local ekey = evt_prefix .. f[1]
      if last_of_event(f[1], ekey, dying) then
        gone[f[1]] = true
        doomed[#doomed + 1] = ekey
        gone_events[#gone_events + 1] = f[1]
      end
    end
  end
  del_all(doomed)
  if #gone_events > 0 then zrem_all(KEYS[3], gone_events) end
  for endpoint_id, list in pairs(by_endpoint) do
    zrem_all(ep_prefix .. endpoint_id, list)
  end
  removed = removed + #ids
  events = events + #gone_events
end

sweep(KEYS[1], tonumber(ARGV[5]))
sweep(KEYS[2], tonumber(ARGV[6]))
if promoted then redis.call("PUBLISH", ARGV[9], "due") end
return {removed, events, more}
