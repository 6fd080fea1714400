-- record.lua: record the outcomes of a batch of sends, each fenced on its claim token.
--
-- A worker whose claim was superseded (its lease ran out and another worker took the
-- delivery) changes nothing but the attempt log: its request is appended there with
-- the next free number and "fenced": true, and the current owner's state stands.
--
-- Called by Store.record (relay/queue/transitions.py), which builds these from keys.py.
--
-- KEYS[1] due (zset)   KEYS[2] processing (zset)   KEYS[3] succeeded (zset)   KEYS[4] dead (zset)
-- KEYS[5] queued index (zset)   KEYS[6] blocked lanes (zset)   ShardKeys.queued/blocked
-- KEYS[7] dead-letter tallies (zset)   ShardKeys.dead_tally_index
-- An item's delivery hash and attempt log are prefix .. id (ARGV below), in the shard's
-- slot: passed as KEYS, two per item, they cost more than the commands on them.
--
-- ARGV[1] wake channel (ShardKeys.wake)
-- ARGV[2] lane key prefix (ShardKeys.lane_prefix)
-- ARGV[3] delivery key prefix (ShardKeys.delivery_prefix)
-- ARGV[4] dead-letter tally prefix (ShardKeys.dead_tally_prefix)
-- ARGV[5] attempt log key prefix (ShardKeys.log_prefix)
-- ARGV[6] event key prefix (ShardKeys.event_prefix)
-- ARGV[7] n, the number of full items
-- ARGV[8..7+9n] per full item, nine values: delivery id, claim token,
--           outcome ("succeeded" | "retry" | "dead" | "defer"), retry delay ms,
--           status code ("" for none), error ("" for none),
--           attempt log entry: a JSON object without its "n" (and "fenced") field,
--           ("" when it has a short form: made from that where it is needed),
--           its short form ("" for none; relay/domain/attemptlog.py),
--           its endpoint id ("": read from its event's header when the hash has none)
-- ARGV[8+9n] m, the number of short items: a request that succeeded and has a short
--           form, which says the rest (its status code; no error, entry or delay);
--           then per short item four values: delivery id, claim token, short form,
--           endpoint id (as above)
--
-- The attempt log: a delivery's first request, when it succeeded and has a short form,
-- is kept in the delivery hash as "a1" rather than in a list of its own (a list of one
-- entry costs ~390 bytes); every other request is appended to the list.
--
-- Ordered lanes (a delivery hash with a "lane"): "retry" and "defer" keep it the head
-- (back in due, its lane untouched). "succeeded" pops it off its lane and makes the next
-- one pending and due now, in this same call; so does "dead", unless its lane blocks on
-- a dead head ("on_dead" = "block"): then it stays the head, marked "blocking", and the
-- lane is in the blocked set until a replay or discard (a deleted endpoint never blocks).
--
-- "defer" means no request was made (the endpoint is disabled or must be paced): the
-- delivery goes back to due after the delay, its attempt refunded, nothing logged.
--
-- The fence: the outcome is this claim's to write while the hash's "claim" is its token
-- and its status is "delivering". The claim field stays once the outcome is written (a
-- status other than "delivering" says it was), so the common case writes one HSET and
-- deletes nothing; a later claim moves it to "recorded" (claim.lua). A retry of a write
-- that did run (its reply was lost to a timeout) finds its own token in "claim" or
-- "recorded" and changes nothing: 1, as the first time, no second log entry.
--
-- The first claim writes no endpoint id (claim.lua reads no event); the outcome writes it
-- into the hash, as given, or read from the event's header for a caller that gave none.
--
-- Layout v3 keeps what can be read elsewhere out of the hash: a finished delivery's
-- finished_at and next_attempt_at are the scores of its index (succeeded, dead, due), and
-- a first request that succeeded keeps no last_attempt_at, last_status_code or
-- last_error (a1 says when, what and who). Commands per outcome: one HMGET and one HSET
-- (an HDEL only for a last_* field a later request has no value for, and the log's RPUSH
-- but for a1); the ZREM from processing and the ZADDs to due, succeeded and dead are one
-- command each for the whole batch.
--
-- Returns one integer per item, the full items' first: 1 recorded, 0 fenced (claim
-- superseded). Store.record puts them back in its callers' order.
-- The time goes to Redis as a string made once (now_s): a Lua number passed to
-- redis.call is formatted with "%.17g" each time, which cost more than the commands.
local t = redis.call("TIME")
local now_s = t[1] .. string.sub(string.rep("0", 6 - #t[2]) .. t[2], 1, 3)  -- ms
local now = tonumber(now_s)
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

-- The attempt-log entry (JSON, without "n") a short form stands for, as
-- attemptlog.expand reads it: an outcome with a short form is sent without its entry,
-- which only a request that is not its delivery's first in the log needs.
local function entry_of(a1)
  local sub = string.sub
  local p1, p2, p3, p4 = spaces(a1)
  local detail = p4 and cjson.encode(sub(a1, p4 + 1)) or "null"
  return '{"attempt":1,"at":' .. sub(a1, 1, p1 - 1) .. ',"duration_ms":' .. sub(a1, p1 + 1, p2 - 1)
    .. ',"status_code":' .. sub(a1, p2 + 1, p3 - 1) .. ',"error":null,"detail":' .. detail
    .. ',"outcome":"succeeded","worker":' .. cjson.encode(sub(a1, p3 + 1, (p4 or 0) - 1)) .. '}'
end

-- The status code a short form says (its third field: a short form always has one).
local function code_of(a1)
  local _, p2, p3 = spaces(a1)
  return string.sub(a1, p2 + 1, p3 - 1)
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

-- Operational events: a dead letter is counted in its endpoint's tally in this shard
-- (relay/connectors/opsevents.py cuts ripe tallies into delivery.dead summaries).
local function dead_tally(ep, id)
  if not ep then return end
  local tk = tally_prefix .. ep
  redis.call("ZADD", tally_index, "NX", now_s, ep)
  redis.call("HINCRBY", tk, "n", 1)
  redis.call("HSETNX", tk, "first_id", id)
  redis.call("HSETNX", tk, "first_at", now_s)
  redis.call("HSET", tk, "last_id", id, "last_at", now_s)
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

-- One command for many members (in chunks: Lua's unpack has a stack limit).
local function zrem_all(key, members)
  for i = 1, #members, 1000 do
    redis.call("ZREM", key, unpack(members, i, math.min(i + 999, #members)))
  end
end
local function zadd_all(key, pairs)
  for i = 1, #pairs, 1000 do
    redis.call("ZADD", key, unpack(pairs, i, math.min(i + 999, #pairs)))
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
      dead_tally(ep, id)
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
