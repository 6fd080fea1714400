-- claim.lua: take up to N due deliveries of one shard, atomically, under a lease.
--
-- The Redis form of SELECT ... FOR UPDATE SKIP LOCKED: ZRANGEBYSCORE + ZREM in one
-- script, so two claimers can never take the same delivery. Each claim mints a claim
-- token that fences every later transition of it, and the attempt is counted here, at
-- claim, so a delivery that kills its worker every time still runs out of attempts.
-- Called by Store.claim (relay/queue/transitions.py), which builds these from keys.py.
--
-- KEYS[1]  due queue (zset, score = next attempt, ms)       ShardKeys.due
-- KEYS[2]  processing leases (zset, score = lease expiry)   ShardKeys.processing
--
-- ARGV[1]  delivery key prefix   ShardKeys.delivery_prefix  (relay:v3:{s0}:dlv:)
-- ARGV[2]  event key prefix      ShardKeys.event_prefix     (relay:v3:{s0}:evt:)
--          The due ids are only known in here, so their delivery and event keys are
--          prefix .. id; they share the shard's hash tag, hence the slot of KEYS[1].
-- ARGV[3]  batch limit   ARGV[4] lease, ms
-- ARGV[5]  claim token prefix (unique per call); token i is ARGV[5] .. i in base 32
-- ARGV[6]  worker id
--
-- A delivery claimed for the first time has no hash yet (publish.lua writes none): its
-- id names its event and its place in the event's header (relay/domain/ids.py), which
-- names its endpoint, app, type and attempt budget; the hash starts here, in one HSET,
-- with its endpoint (app and type stay in the header: readers take them from there).
-- The lease's expiry is the delivery's score in processing, and only there.
-- Commands per delivery: EXISTS, GET and HSET (and HMGET once it has a hash); the ZREM
-- from due and the ZADD to processing are one command each for the whole batch.
--
-- Returns {now, next_due or -1, next_lease_expiry or -1, n,
--          then n groups of 7: id, token, attempts, max_attempts, event_id, endpoint_id,
--          the event as stored (relay/domain/eventrecord.py: a header line, the body)}
-- Times and counts go to Redis as strings made once per call: a Lua number passed to
-- redis.call is formatted with "%.17g" each time, which cost more than the commands.
local t = redis.call("TIME")
local now_s = t[1] .. string.sub(string.rep("0", 6 - #t[2]) .. t[2], 1, 3)  -- ms
local now = tonumber(now_s)
local dlv_prefix = ARGV[1]
local evt_prefix = ARGV[2]
local lease_until = now + tonumber(ARGV[4])
local lease_s = string.format("%d", lease_until)
local DIGITS = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  -- Crockford base32 (relay/domain/ids.py)
-- never a delivery id: 256 bytes, past any sensible zset-max-listpack-value (64 default)
local SKIPLIST_PAD = "relay:skiplist-pad:" .. string.rep("-", 237)
local B32 = {}  -- digit -> value
for k = 1, 32 do B32[string.sub(DIGITS, k, k)] = k - 1 end
local function b32(i)  -- i in base 32: a token's suffix, with no number formatting
  local s = ""
  repeat
    local d = i % 32
    s = string.sub(DIGITS, d + 1, d + 1) .. s
    i = (i - d) / 32
  until i == 0
  return s
end

local ids = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", now, "LIMIT", 0, tonumber(ARGV[3]))
if #ids > 0 then
  redis.call("ZREM", KEYS[1], unpack(ids))
end

-- The header of an event, as far as a claim needs it: max_attempts and d. Read with
-- plain string.find (no patterns) when it has the shape eventrecord.pack writes,
--   {"type":"..","app":"..","max_attempts":N,"d":["ep_..",...]...
-- (`,"` is never inside a JSON string, where every quote is escaped); anything else (a
-- [delivery id, endpoint id] pair in d, an escape) is decoded with cjson. ~4,000 fewer
-- Redis instructions per delivery than cjson for all (bench/instructions.py --redis-only).
local find, sub, byte = string.find, string.sub, string.byte
local function read_header(event)
  local nl = find(event, "\n", 1, true)
  local _, b = find(event, ',"max_attempts":', 1, true)
  local c = b and b < nl and find(event, ",", b + 1, true)
  local max = c and tonumber(sub(event, b + 1, c - 1))
  if max and sub(event, c, c + 5) == ',"d":[' then
    local d, pos = {}, c + 6
    while byte(event, pos) == 34 do  -- an entry that is a string: "ep_.."
      local q = find(event, '"', pos + 1, true)
      local endpoint_id = sub(event, pos + 1, q - 1)
      if find(endpoint_id, "\\", 1, true) then break end  -- an escape: cjson's to read
      d[#d + 1] = endpoint_id
      local after = byte(event, q + 1)
      if after == 93 then return {max_attempts = max, d = d} end  -- "]": the last entry
      if after ~= 44 then break end  -- not ","
      pos = q + 2
    end
  end
  return cjson.decode(sub(event, 1, nl - 1))
end

-- (cached: a fan-out's deliveries share it)
local headers = {}
local function header_of(event_id, event)
  local h = headers[event_id]
  if h == nil then
    h = read_header(event)
    headers[event_id] = h
  end
  return h
end

local out = {now, -1, -1, 0}  -- the reply; its head is filled in last
local leases = {}
local n = 0
for i, id in ipairs(ids) do
  local dkey = dlv_prefix .. id
  local token = ARGV[5] .. b32(i)
  local event_id, endpoint_id, max, attempts, event
  if redis.call("EXISTS", dkey) == 1 then
    local f = redis.call("HMGET", dkey, "event_id", "endpoint_id", "max_attempts", "attempts")
    event_id = f[1] or ("evt_" .. string.sub(id, 5, 28) .. "00")
    endpoint_id = f[2]
    event = redis.call("GET", evt_prefix .. event_id) or ""
    attempts = (tonumber(f[4]) or 0) + 1
    redis.call("HSET", dkey, "status", "delivering", "attempts", attempts, "claim", token,
      "worker", ARGV[6], "updated_at", now_s)
    max = f[3] or (event ~= "" and header_of(event_id, event).max_attempts) or attempts
  else
    -- as published: the id is the event's 24 characters and its index (two base32)
    event_id = "evt_" .. string.sub(id, 5, 28) .. "00"
    event = redis.call("GET", evt_prefix .. event_id)
    local h = event and header_of(event_id, event)
    local hi = B32[string.sub(id, 29, 29)]
    local lo = B32[string.sub(id, 30, 30)]
    endpoint_id = h and hi and lo and h.d[hi * 32 + lo + 1]
    if type(endpoint_id) == "string" then
      attempts = 1
      max = h.max_attempts
      redis.call("HSET", dkey, "endpoint_id", endpoint_id, "status", "delivering",
        "attempts", "1", "claim", token, "worker", ARGV[6], "updated_at", now_s)
    else
      event = nil  -- no such delivery (its event is gone): dropped from due, as before
    end
  end
  if event then
    n = n + 1
    leases[#leases + 1] = lease_s
    leases[#leases + 1] = id
    out[#out + 1] = id
    out[#out + 1] = token
    out[#out + 1] = attempts
    out[#out + 1] = max
    out[#out + 1] = event_id
    out[#out + 1] = endpoint_id
    out[#out + 1] = event
  end
end
if #leases > 0 then
  if redis.call("EXISTS", KEYS[2]) == 0 then
    -- A new processing set is made a skiplist, not a listpack: a member longer than any
    -- zset-max-listpack-value is added with the first leases and removed at once. Redis
    -- never turns a skiplist back while the set lives, and a listpack of ~100 leases
    -- costs a scan of the whole set for each lease added (the newest expiry is last):
    -- 13% of Redis's instructions per delivery (bench/instructions.py --redis-only).
    redis.call("ZADD", KEYS[2], "+inf", SKIPLIST_PAD, unpack(leases))
    redis.call("ZREM", KEYS[2], SKIPLIST_PAD)
  else
    redis.call("ZADD", KEYS[2], unpack(leases))
  end
end

local head = redis.call("ZRANGE", KEYS[1], 0, 0, "WITHSCORES")
local lease = redis.call("ZRANGE", KEYS[2], 0, 0, "WITHSCORES")
out[2], out[3], out[4] = head[2] or -1, lease[2] or -1, n
return out
