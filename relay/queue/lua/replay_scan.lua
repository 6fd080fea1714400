-- replay_scan.lua: the next page of a delivery index in a time range, after a cursor.
-- Read-only. A reconciliation replay job (relay/ops/replays.py) walks a shard with it.
-- Called by Store.replay_scan (relay/queue/replays.py).
--
-- KEYS[1]  the index walked (zset, score = created ms)   ShardKeys.events (every event,
--          each standing for its deliveries), or ShardKeys.endpoint_index(endpoint_id)
--          for one endpoint's deliveries
--
-- ARGV[1]  delivery key prefix   ShardKeys.delivery_prefix  (relay:v3:{s0}:dlv:)
-- ARGV[2]  since, ms (inclusive)   ARGV[3] until, ms (inclusive)
-- ARGV[4]  cursor: score of the last delivery returned before ("" to start at since)
-- ARGV[5]  cursor: the last delivery id returned before ("" to start at since)
-- ARGV[6]  page size (index entries)
-- ARGV[7]  event key prefix (ShardKeys.event_prefix) when KEYS[1] lists events, else ""
-- ARGV[8]  event key prefix (ShardKeys.event_prefix), always: a delivery's hash holds no
--          type (layout v3 keeps it in the event's header) but for an ordered one's
--
-- The page starts right after the cursor's entry: its rank when it is still indexed, else
-- (retention removed it) the first entry ordered after (score, id), so an entry removed
-- meanwhile never shifts the walk past one it has not seen. Walking the events index, an
-- event's deliveries come together (ids from its header: relay/domain/eventrecord.py), and
-- the cursor's entry is the event of the last delivery returned (its hash names it, or
-- its id: relay/domain/ids.py).
-- Returns {done (1: the range is walked to its end), then per delivery 5 values:
--          id, score, status, endpoint_id, type ("" for a field that is not there: a
--          delivery never claimed has no status here, and is not replayable)}
local dlv_prefix = ARGV[1]
local evt_prefix = ARGV[7]
local header_prefix = ARGV[8]
local limit = tonumber(ARGV[6])
local B32 = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

local after = ARGV[5]
if after ~= "" and evt_prefix ~= "" then  -- the cursor's entry: its delivery's event
  after = redis.call("HGET", dlv_prefix .. after, "event_id")
    or ("evt_" .. string.sub(ARGV[5], 5, 28) .. "00")
end
local start
if after == "" then
  start = redis.call("ZCOUNT", KEYS[1], "-inf", "(" .. ARGV[2])
else
  local rank = redis.call("ZRANK", KEYS[1], after)
  if rank then
    start = rank + 1
  else
    start = redis.call("ZCOUNT", KEYS[1], "-inf", "(" .. ARGV[4])
    local same = redis.call("ZRANGE", KEYS[1], ARGV[4], ARGV[4], "BYSCORE")
    for _, member in ipairs(same) do
      if member <= after then start = start + 1 else break end
    end
  end
end

-- The type of a delivery whose hash does not hold it: its event's (relay/domain/ids.py).
local function type_of(id)
  local eid = "evt_" .. string.sub(id, 5, 28) .. "00"
  local ekey = header_prefix .. eid
  local event = redis.call("GET", ekey)
  if not event then return "" end
  local nl = string.find(event, "\n", 1, true)
  return cjson.decode(string.sub(event, 1, nl - 1)).type or ""
end

local out = {0}
local function emit(id, score, fallback_ep, fallback_type)
  local f = redis.call("HMGET", dlv_prefix .. id, "status", "endpoint_id", "type")
  out[#out + 1] = id
  out[#out + 1] = score
  out[#out + 1] = f[1] or ""
  out[#out + 1] = f[2] or fallback_ep
  out[#out + 1] = f[3] or fallback_type or (f[1] and type_of(id)) or ""
end

local page = redis.call("ZRANGE", KEYS[1], start, start + limit - 1, "WITHSCORES")
local upto = tonumber(ARGV[3])
for i = 1, #page, 2 do
  local id = page[i]
  if tonumber(page[i + 1]) > upto then
    out[1] = 1
    return out
  end
  if evt_prefix == "" then
    emit(id, page[i + 1], "", nil)
  else
    local event = redis.call("GET", evt_prefix .. id)
    if event then
      local nl = string.find(event, "\n", 1, true)
      local header = cjson.decode(string.sub(event, 1, nl - 1))
      local stem = "dlv_" .. string.sub(id, 5, 28)
      for k, entry in ipairs(header.d) do
        if type(entry) == "string" then  -- derived: the event's 24 characters and k - 1
          local j = k - 1
          local hi, lo = math.floor(j / 32) + 1, j % 32 + 1
          local d = stem .. string.sub(B32, hi, hi) .. string.sub(B32, lo, lo)
          emit(d, page[i + 1], entry, header.type)
        else
          emit(entry[1], page[i + 1], entry[2], header.type)
        end
      end
    end
  end
end
if #page < 2 * limit then out[1] = 1 end
return out
