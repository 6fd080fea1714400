-- record.lua: record the outcomes of a batch of sends, each fenced on its claim token.
-- Called by Store.record (relay/queue/transitions.py), which builds these from keys.py.
-- A superseded claim changes only the attempt log (an entry marked "fenced"); a retried
-- write finds its own token and changes nothing. Design notes: docs/design/lua.md.
--
-- KEYS[1] due (zset)   KEYS[2] processing (zset)   KEYS[3] succeeded (zset)   KEYS[4] dead (zset)
-- KEYS[5] queued index (zset)   KEYS[6] blocked lanes (zset)   ShardKeys.queued/blocked
-- KEYS[7] dead-letter tallies (zset)   ShardKeys.dead_tally_index
--
-- ARGV[1] wake channel (ShardKeys.wake)
-- ARGV[2] lane key prefix (ShardKeys.lane_prefix)
-- ARGV[3] delivery key prefix (ShardKeys.delivery_prefix)
-- ARGV[4] dead-letter tally prefix (ShardKeys.dead_tally_prefix)
-- ARGV[5] attempt log key prefix (ShardKeys.log_prefix)
-- ARGV[6] event key prefix (ShardKeys.event_prefix)
-- ARGV[7] n, the number of full items
-- ARGV[8..7+9n] per full item, nine values: delivery id, claim token, outcome ("succeeded"
--           | "retry" | "dead" | "defer"), retry delay ms, status code ("" for none), error
--           ("" for none), attempt log entry (JSON without "n"; "" when it has a short
--           form), its short form ("" for none; relay/domain/attemptlog.py: its status
--           code "-" when the request had none), its endpoint
--           id ("": read from its event's header when the hash has none)
-- ARGV[8+9n] m, the number of short items (a first request that succeeded, said by its
--           short form), then per item four values: delivery id, claim token, short
--           form, endpoint id (as above)
--
-- Returns one integer per item, the full items' first: 1 recorded, 0 fenced (superseded).
local now, now_s = now_ms()
local res = {}
local wake = false
local n = tonumber(ARGV[7])
local m = tonumber(ARGV[8 + 9 * n])
local lane_prefix = ARGV[2]
local dlv_prefix = ARGV[3]
local queued = KEYS[5]
local blocked = KEYS[6]
local tally_index = KEYS[7]
local tally_prefix = ARGV[4]
local log_prefix = ARGV[5]
local evt_prefix = ARGV[6]

-- Where a short form's fields end: the spaces after its time, duration, status code and
-- worker (the fourth is nil when it has no detail).
local function spaces(a1)
  local find = string.find
  local p1 = find(a1, " ", 1, true)
  local p2 = find(a1, " ", p1 + 1, true)
  local p3 = find(a1, " ", p2 + 1, true)
  return p1, p2, p3, find(a1, " ", p3 + 1, true)
end

-- The status code a short form says (its third field), "" for "-": a request without
-- one (a broker's).
local function code_of(a1)
  local _, p2, p3 = spaces(a1)
  local code = string.sub(a1, p2 + 1, p3 - 1)
  return code == "-" and "" or code
end

-- The attempt-log entry (JSON, without "n") a short form stands for, as
-- attemptlog.expand reads it: an outcome with a short form is sent without its entry,
-- which only a request that is not its delivery's first in the log needs.
local function entry_of(a1)
  local sub = string.sub
  local p1, p2, p3, p4 = spaces(a1)
  local detail = p4 and cjson.encode(sub(a1, p4 + 1)) or "null"
  local code = code_of(a1)
  return '{"attempt":1,"at":' .. sub(a1, 1, p1 - 1) .. ',"duration_ms":' .. sub(a1, p1 + 1, p2 - 1)
    .. ',"status_code":' .. (code == "" and "null" or code) .. ',"error":null,"detail":' .. detail
    .. ',"outcome":"succeeded","worker":' .. cjson.encode(sub(a1, p3 + 1, (p4 or 0) - 1)) .. '}'
end

-- The endpoint id of a delivery whose hash has none: as given, or its event's header's
-- (the entry at the index its id ends with: relay/domain/ids.py); nil when neither says.
local B32 = nil  -- base32 digit -> value, made on first use
local function endpoint_of(id, given)
  if given ~= "" then return given end
  if not B32 then
    B32 = {}
    for k = 1, 32 do B32[string.sub("0123456789ABCDEFGHJKMNPQRSTVWXYZ", k, k)] = k - 1 end
  end
  local event_id = "evt_" .. string.sub(id, 5, 28) .. "00"  -- derived (ids.py)
  local event = redis.call("GET", evt_prefix .. event_id)
  local hi, lo = B32[string.sub(id, 29, 29)], B32[string.sub(id, 30, 30)]
  if not event or not hi or not lo then return nil end
  local nl = string.find(event, "\n", 1, true)
  local e = cjson.decode(string.sub(event, 1, nl - 1)).d[hi * 32 + lo + 1]
  return type(e) == "string" and e or nil
end

-- The finished head `id` leaves its lane; the next one becomes pending, due now.
local function lane_next(lane, id)
  local lane_key = lane_prefix .. lane
  if redis.call("LINDEX", lane_key, 0) ~= id then return end
  redis.call("LPOP", lane_key)
  redis.call("ZREM", blocked, lane)
  local nxt = redis.call("LINDEX", lane_key, 0)
  if nxt then
    redis.call("HSET", dlv_prefix .. nxt, "status", "pending", "updated_at", now_s)
    redis.call("ZREM", queued, nxt)
    local head = redis.call("ZRANGE", KEYS[1], 0, 0, "WITHSCORES")
    if head[2] == nil or tonumber(head[2]) > now then wake = true end
    redis.call("ZADD", KEYS[1], now_s, nxt)
  end
end

-- A head that reached succeeded or dead: promote the next one, or block the lane.
local function lane_done(dkey, id, lane, outcome, err)
  if not lane or redis.call("LINDEX", lane_prefix .. lane, 0) ~= id then return end
  if outcome == "dead" and err ~= "endpoint_deleted"
      and redis.call("HGET", dkey, "on_dead") == "block" then
    redis.call("HSET", dkey, "blocking", "1")
    redis.call("ZADD", blocked, now_s, lane)
  else
    lane_next(lane, id)
  end
end

local done, retry_at, ok_at, dead_at = {}, {}, {}, {}
local earliest = nil
local function one(i, id, token, outcome, delay, code, err, entry, a1, ep_given)
  local dkey = dlv_prefix .. id
  if entry == "" and a1 ~= "" then entry = nil end  -- entry_of(a1), if needed
  -- what every outcome needs; "recorded" only where it is used (each field read is a
  -- listpack scan and a Lua value: a retried write's after a later claim)
  local f = redis.call("HMGET", dkey, "claim", "status", "log_n", "lane", "endpoint_id")
  local mine = f[1] == token and f[2] == "delivering"
  if not mine and f[2] and (f[1] == token or redis.call("HGET", dkey, "recorded") == token) then
    res[i] = 1  -- this very outcome was written already: a retried write
  elseif outcome == "defer" then
    if mine then
      local at = now + tonumber(delay)
      redis.call("HINCRBY", dkey, "attempts", -1)
      redis.call("HSET", dkey, "status", "pending", "updated_at", now_s)
      done[#done + 1] = id
      retry_at[#retry_at + 1] = at
      retry_at[#retry_at + 1] = id
    end
    res[i] = mine and 1 or 0
  elseif not mine then
    if not f[2] then
      res[i] = 0  -- no such delivery (expired, or never was)
    else
      local num = redis.call("HINCRBY", dkey, "log_n", 1)
      local lkey = log_prefix .. id
      entry = entry or entry_of(a1)
      redis.call("RPUSH", lkey, '{"n":' .. num .. ',"fenced":true,' .. string.sub(entry, 2))
      res[i] = 0
    end
  else
    local num = (tonumber(f[3]) or 0) + 1
    local ep = f[5] or endpoint_of(id, ep_given)
    local new_ep = not f[5] and ep  -- the hash has none yet (a first claim writes none)
    if num == 1 and outcome == "succeeded" and a1 ~= "" then
      -- the common case: the first request succeeded; a1 is its whole log, and says its
      -- time, status code and worker (no request before it left a last_* field). One
      -- HSET with its arguments given as they are: a table and unpack cost more here.
      if new_ep then
        redis.call("HSET", dkey, "status", "succeeded", "updated_at", now_s,
          "a1", a1, "log_n", "1", "endpoint_id", new_ep)
      else
        redis.call("HSET", dkey, "status", "succeeded", "updated_at", now_s,
          "a1", a1, "log_n", "1")
      end
    else
      local drop = {}
      if code == nil then code = code_of(a1) end
      if code == "" then drop[#drop + 1] = "last_status_code" end
      local lkey = log_prefix .. id
      entry = entry or entry_of(a1)
      redis.call("RPUSH", lkey, '{"n":' .. num .. ',' .. string.sub(entry, 2))
      local set = {"status", outcome == "retry" and "pending" or outcome, "updated_at", now_s,
        "last_attempt_at", now_s, "log_n", num}
      if code ~= "" then
        set[#set + 1] = "last_status_code"
        set[#set + 1] = code
      end
      if err ~= "" then
        set[#set + 1] = "last_error"
        set[#set + 1] = err
      else
        drop[#drop + 1] = "last_error"
      end
      if outcome == "dead" then
        set[#set + 1] = "finished_at"
        set[#set + 1] = now_s
      end
      if new_ep then
        set[#set + 1] = "endpoint_id"
        set[#set + 1] = new_ep
      end
      redis.call("HSET", dkey, unpack(set))
      if #drop > 0 then redis.call("HDEL", dkey, unpack(drop)) end
    end
    done[#done + 1] = id
    if outcome == "retry" then
      local at = now + tonumber(delay)
      if earliest == nil or at < earliest then earliest = at end
      retry_at[#retry_at + 1] = at
      retry_at[#retry_at + 1] = id
    elseif outcome == "succeeded" then
      ok_at[#ok_at + 1] = now_s
      ok_at[#ok_at + 1] = id
      lane_done(dkey, id, f[4], outcome, "")
    else
      dead_at[#dead_at + 1] = now_s
      dead_at[#dead_at + 1] = id
      tally_dead(tally_index, tally_prefix, ep, id, now_s)
      lane_done(dkey, id, f[4], outcome, err)
    end
    res[i] = 1
  end
end
for i = 1, n do
  local b = 7 + (i - 1) * 9
  one(i, ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], ARGV[b + 5], ARGV[b + 6],
    ARGV[b + 7], ARGV[b + 8], ARGV[b + 9])
end
for j = 1, m do  -- a first request that succeeded, in its short form: id, token, a1, endpoint
  local b = 8 + 9 * n + (j - 1) * 4
  one(n + j, ARGV[b + 1], ARGV[b + 2], "succeeded", "0", nil, "", "", ARGV[b + 3], ARGV[b + 4])
end
zrem_all(KEYS[2], done)
if earliest ~= nil then  -- a retry due before anything else wakes the workers
  local head = redis.call("ZRANGE", KEYS[1], 0, 0, "WITHSCORES")
  if head[2] == nil or tonumber(head[2]) > earliest then wake = true end
end
zadd_all(KEYS[1], retry_at)
zadd_all(KEYS[3], ok_at)
zadd_all(KEYS[4], dead_at)
if wake then redis.call("PUBLISH", ARGV[1], "due") end
return res
