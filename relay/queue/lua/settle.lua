-- settle.lua: record the results of sends to one endpoint in its breaker, free their slots.
-- Called by Store.settle (relay/queue/endpoints.py). Consecutive failures are counted
-- here for all workers together: the breaker opens on exactly the threshold-th; a failed
-- half-open probe reopens it with a longer cooldown (doubling, capped); a success closes
-- it. Opening and recovering append ops events; a deleted endpoint (its tombstone)
-- settles nothing. Design notes: docs/design/lua.md.
--
-- KEYS[1] breaker (hash)   EndpointKeys.breaker   KEYS[2] in-flight slots (zset)   EndpointKeys.inflight
-- KEYS[3] ops outbox (list)  EndpointKeys.ops   KEYS[4] tombstone (string)  EndpointKeys.deleted
-- KEYS[5] attempt counters of this hour (hash)  Keys.endpoint_stats(endpoint id, hour)
-- ARGV[1] threshold   ARGV[2] base cooldown, ms   ARGV[3] max cooldown, ms
-- ARGV[4] n, the number of results
-- ARGV[5..4+2n] per result, two values: claim token, "1" success / "0" failure (or
--           "0@<ms>": a failure and when its request was sent, worker clock) / "-" neutral
--           (neutral: no verdict on the endpoint's health, e.g. 429 pacing)
-- ARGV[5+2n] ops entry id (fresh per call)   ARGV[6+2n] endpoint id
-- ARGV[7+2n] the counters' field prefix: "<minute of the hour>:"   ARGV[8+2n] their TTL, ms
-- ARGV[9+2n] m, the number of counters to add to (0: KEYS[5] is not touched)
-- ARGV[10+2n..9+2n+2m] per counter, two values: its name (relay/domain/endpointstats.py)
--           and what to add
--
-- Returns {state, consecutive failures, open_until, failing_since (ms or 0), last_success_at,
--          ops entries appended}
if redis.call("EXISTS", KEYS[4]) == 1 then
  redis.call("DEL", KEYS[1], KEYS[2])
  return {"closed", 0, 0, 0, 0, 0}
end
local now, now_s = now_ms()
local threshold = tonumber(ARGV[1])
local b = KEYS[1]
local n = tonumber(ARGV[4])
local ops_id, ops_ep, ops = ARGV[5 + 2 * n], ARGV[6 + 2 * n], 0
local function ops_event(kind, fields)
  ops = ops + 1
  fields.id = ops_id .. "-" .. ops
  fields.type = kind
  fields.endpoint_id = ops_ep
  fields.at = now
  redis.call("RPUSH", KEYS[3], cjson.encode(fields))
end

-- The breaker, read once; changes are applied to this copy and written back at the end.
local names = {"state", "failures", "last_success_at", "failing_since", "probe", "probe_until",
  "probe_back", "open_until", "cooldown", "opened_at", "opened"}
local got = redis.call("HMGET", b, unpack(names))
local cur, dirty = {}, {}
for i, k in ipairs(names) do cur[k] = got[i] end
local function set(k, v)
  v = tostring(v)
  if cur[k] ~= v then
    cur[k] = v
    dirty[k] = true
  end
end
local function del(...)
  for _, k in ipairs({...}) do
    if cur[k] then
      cur[k] = false
      dirty[k] = true
    end
  end
end

local tokens = {}
for i = 1, n do
  local token = ARGV[3 + 2 * i]
  local verdict = ARGV[4 + 2 * i]
  tokens[i] = token
  local sent = nil
  if string.sub(verdict, 1, 2) == "0@" then
    sent = tonumber(string.sub(verdict, 3))
    verdict = "0"
  end
  local state = cur.state or "closed"
  local is_probe = cur.probe == token
  if verdict == "0" and sent and state == "closed" and not is_probe
      and tonumber(cur.last_success_at or "0") > sent then
    verdict = "-"  -- sent before the last success: no verdict on the endpoint's health
  end
  if verdict == "1" then
    if state ~= "closed" then
      ops_event("endpoint.recovered", {opened_at = tonumber(cur.opened_at)})
    end
    set("state", "closed")
    set("failures", "0")
    set("last_success_at", now_s)
    del("probe", "probe_until", "probe_back", "open_until", "cooldown", "failing_since")
  elseif verdict == "0" then
    local failures = tonumber(cur.failures or "0") + 1
    set("failures", failures)
    -- the first failure since the last success (or since an operator re-enabled it)
    if not cur.failing_since then set("failing_since", now_s) end
    if state == "half_open" and is_probe then
      local cooldown = math.min(tonumber(cur.cooldown or ARGV[2]) * 2, tonumber(ARGV[3]))
      set("state", "open")
      set("cooldown", cooldown)
      set("open_until", now + cooldown)
      set("opened_at", now)
      del("probe", "probe_until", "probe_back")
    elseif state == "closed" and failures >= threshold then
      set("state", "open")
      set("cooldown", ARGV[2])
      set("open_until", now + tonumber(ARGV[2]))
      set("opened_at", now)
      set("opened", tonumber(cur.opened or "0") + 1)
      ops_event("endpoint.failing", {failures = failures, open_until = now + tonumber(ARGV[2])})
    end
  elseif is_probe then
    -- a neutral probe result (e.g. 429) lets the next probe go
    del("probe", "probe_until", "probe_back")
  end
end

if n > 0 then redis.call("ZREM", KEYS[2], unpack(tokens)) end
local field_prefix, m = ARGV[7 + 2 * n], tonumber(ARGV[9 + 2 * n])
for i = 1, m do
  local at = 8 + 2 * n + 2 * i
  redis.call("HINCRBY", KEYS[5], field_prefix .. ARGV[at], ARGV[at + 1])
end
if m > 0 then redis.call("PEXPIRE", KEYS[5], ARGV[8 + 2 * n]) end
local write, gone = {}, {}
for _, k in ipairs(names) do
  if dirty[k] then
    if cur[k] then
      write[#write + 1] = k
      write[#write + 1] = cur[k]
    else
      gone[#gone + 1] = k
    end
  end
end
if #write > 0 then redis.call("HSET", b, unpack(write)) end
if #gone > 0 then redis.call("HDEL", b, unpack(gone)) end
return {cur.state or "closed", cur.failures or 0, cur.open_until or 0, cur.failing_since or 0,
  cur.last_success_at or 0, ops}
