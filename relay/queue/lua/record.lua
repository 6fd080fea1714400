-- record.lua: record the outcomes of a batch of sends, each fenced on its claim token.
--
-- A worker whose claim was superseded (its lease ran out and another worker took the
-- delivery) changes nothing but the attempt log: its request is appended there with
-- the next free number and "fenced": true, and the current owner's state stands.
--
-- Called by Store.record (relay/queue/transitions.py), which builds these from keys.py.
--
-- KEYS[1] due (zset)   KEYS[2] processing (zset)   KEYS[3] succeeded (zset)   KEYS[4] dead (zset)
-- KEYS[5..4+2n] per item, two keys: ShardKeys.delivery(id), ShardKeys.log(id) (a list)
-- KEYS[5+2n] queued index (zset)   KEYS[6+2n] blocked lanes (zset)   ShardKeys.queued/blocked
-- KEYS[7+2n] dead-letter tallies (zset)   ShardKeys.dead_tally_index
--
-- ARGV[1] wake channel (ShardKeys.wake)   ARGV[2] n, the number of items
-- ARGV[3..2+8n] per item, eight values: delivery id, claim token,
--           outcome ("succeeded" | "retry" | "dead" | "defer"), retry delay ms,
--           status code ("" for none), error ("" for none),
--           attempt log entry: a JSON object without its "n" (and "fenced") field,
--           its short form ("" for none; relay/domain/attemptlog.py)
-- ARGV[3+8n] lane key prefix (ShardKeys.lane_prefix)
-- ARGV[4+8n] delivery key prefix (ShardKeys.delivery_prefix), for the next one of a lane
-- ARGV[5+8n] dead-letter tally prefix (ShardKeys.dead_tally_prefix)
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
-- A retry of a write that did run (its reply was lost to a timeout) finds its own token
-- in "recorded" and changes nothing: 1, as the first time, no second log entry.
--
-- Returns one integer per item: 1 recorded, 0 fenced (claim superseded).
local t = redis.call("TIME")
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local res = {}
local wake = false
local n = tonumber(ARGV[2])
local lane_prefix = ARGV[3 + 8 * n]
local dlv_prefix = ARGV[4 + 8 * n]
local queued = KEYS[5 + 2 * n]
local blocked = KEYS[6 + 2 * n]
local tally_index = KEYS[7 + 2 * n]
local tally_prefix = ARGV[5 + 8 * n]

-- Operational events: a dead letter is counted in its endpoint's tally in this shard
-- (relay/connectors/opsevents.py cuts ripe tallies into delivery.dead summaries).
local function dead_tally(dkey, id)
  local ep = redis.call("HGET", dkey, "endpoint_id")
  if not ep then return end
  local tk = tally_prefix .. ep
  redis.call("ZADD", tally_index, "NX", now, ep)
  redis.call("HINCRBY", tk, "n", 1)
  redis.call("HSETNX", tk, "first_id", id)
  redis.call("HSETNX", tk, "first_at", now)
  redis.call("HSET", tk, "last_id", id, "last_at", now)
end

-- The finished head `id` leaves its lane; the next one becomes pending, due now.
local function lane_next(lane, id)
  local lane_key = lane_prefix .. lane
  if redis.call("LINDEX", lane_key, 0) ~= id then return end
  redis.call("LPOP", lane_key)
  redis.call("ZREM", blocked, lane)
  local nxt = redis.call("LINDEX", lane_key, 0)
  if nxt then
    redis.call("HSET", dlv_prefix .. nxt, "status", "pending", "next_attempt_at", now,
      "updated_at", now)
    redis.call("ZREM", queued, nxt)
    local head = redis.call("ZRANGE", KEYS[1], 0, 0, "WITHSCORES")
    if head[2] == nil or tonumber(head[2]) > now then wake = true end
    redis.call("ZADD", KEYS[1], now, nxt)
  end
end

-- A head that reached succeeded or dead: promote the next one, or block the lane.
local function lane_done(dkey, id, outcome, err)
  local f = redis.call("HMGET", dkey, "lane", "on_dead")
  if not f[1] or redis.call("LINDEX", lane_prefix .. f[1], 0) ~= id then return end
  if outcome == "dead" and f[2] == "block" and err ~= "endpoint_deleted" then
    redis.call("HSET", dkey, "blocking", "1")
    redis.call("ZADD", blocked, now, f[1])
  else
    lane_next(f[1], id)
  end
end

for i = 1, n do
  local dkey = KEYS[3 + 2 * i]
  local lkey = KEYS[4 + 2 * i]
  local b = 2 + (i - 1) * 8
  local id, token, outcome = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3]
  local entry = ARGV[b + 7]
  local mine = redis.call("HGET", dkey, "claim") == token
  if not mine and redis.call("HGET", dkey, "recorded") == token then
    res[i] = 1  -- this very outcome was written already: a retried write
  elseif outcome == "defer" then
    if mine then
      local at = now + tonumber(ARGV[b + 4])
      redis.call("HINCRBY", dkey, "attempts", -1)
      redis.call("HDEL", dkey, "claim", "lease_until")
      redis.call("HSET", dkey, "status", "pending", "next_attempt_at", at, "updated_at", now,
        "recorded", token)
      redis.call("ZREM", KEYS[2], id)
      redis.call("ZADD", KEYS[1], at, id)
    end
    res[i] = mine and 1 or 0
  elseif not mine then
    if redis.call("EXISTS", dkey) == 0 then
      res[i] = 0
    else
      local num = redis.call("HINCRBY", dkey, "log_n", 1)
      redis.call("RPUSH", lkey, '{"n":' .. num .. ',"fenced":true,' .. string.sub(entry, 2))
      res[i] = 0
    end
  else
    local num = redis.call("HINCRBY", dkey, "log_n", 1)
    if num == 1 and outcome == "succeeded" and ARGV[b + 8] ~= "" then
      redis.call("HSET", dkey, "a1", ARGV[b + 8])
    else
      redis.call("RPUSH", lkey, '{"n":' .. num .. ',' .. string.sub(entry, 2))
    end
    redis.call("ZREM", KEYS[2], id)
    redis.call("HDEL", dkey, "claim", "lease_until")
    redis.call("HSET", dkey, "status", outcome, "updated_at", now, "last_attempt_at", now,
      "last_status_code", ARGV[b + 5], "last_error", ARGV[b + 6], "recorded", token)
    if outcome == "retry" then
      local at = now + tonumber(ARGV[b + 4])
      redis.call("HSET", dkey, "status", "pending", "next_attempt_at", at)
      local head = redis.call("ZRANGE", KEYS[1], 0, 0, "WITHSCORES")
      if head[2] == nil or tonumber(head[2]) > at then wake = true end
      redis.call("ZADD", KEYS[1], at, id)
    elseif outcome == "succeeded" then
      redis.call("HSET", dkey, "finished_at", now)
      redis.call("HDEL", dkey, "next_attempt_at")
      redis.call("ZADD", KEYS[3], now, id)
      lane_done(dkey, id, outcome, "")
    else
      redis.call("HSET", dkey, "finished_at", now)
      redis.call("HDEL", dkey, "next_attempt_at")
      redis.call("ZADD", KEYS[4], now, id)
      dead_tally(dkey, id)
      lane_done(dkey, id, outcome, ARGV[b + 6])
    end
    res[i] = 1
  end
end
if wake then redis.call("PUBLISH", ARGV[1], "due") end
return res
