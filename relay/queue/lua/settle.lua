-- settle.lua: record the results of sends to one endpoint in its breaker, free their slots.
--
-- Consecutive failures are counted here, atomically, for all workers together: the
-- breaker opens on exactly the threshold-th consecutive failure. Consecutive in the order
-- the requests were sent: a failure that carries its send time ("0@<ms>") and was sent
-- before the endpoint's last success is not counted while the breaker is closed (the
-- endpoint answered after it was sent): the timeouts of a few hung requests, landing
-- together after the successes sent beside them, are no outage. A failed half-open probe
-- reopens it with a longer cooldown (doubling, capped); a success closes it.
--
-- Called by Store.settle (relay/queue/endpoints.py).
--
-- KEYS[1] breaker (hash)   EndpointKeys.breaker   KEYS[2] in-flight slots (zset)   EndpointKeys.inflight
-- KEYS[3] ops outbox (list)  EndpointKeys.ops
-- ARGV[1] threshold   ARGV[2] base cooldown, ms   ARGV[3] max cooldown, ms
-- ARGV[4] n, the number of results
-- ARGV[5..4+2n] per result, two values: claim token, "1" success / "0" failure (or
--           "0@<ms>": a failure and when its request was sent, worker clock) / "-" neutral
--           (neutral: no verdict on the endpoint's health, e.g. 429 pacing)
-- ARGV[5+2n] ops entry id (fresh per call)   ARGV[6+2n] endpoint id
--
-- Operational events: the breaker opening (closed -> open) appends "endpoint.failing" to
-- the ops outbox, a success closing an open or half-open breaker "endpoint.recovered",
-- in this same call, so each transition is recorded once across all workers
-- (relay/connectors/opsevents.py publishes them into the ops app).
--
-- Returns {state, consecutive failures, open_until, failing_since (ms or 0), last_success_at,
--          ops entries appended}
local t = redis.call("TIME")
local now = t[1] * 1000 + math.floor(t[2] / 1000)
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
for i = 1, n do
  local token = ARGV[3 + 2 * i]
  local verdict = ARGV[4 + 2 * i]
  local sent = nil
  if string.sub(verdict, 1, 2) == "0@" then
    sent = tonumber(string.sub(verdict, 3))
    verdict = "0"
  end
  redis.call("ZREM", KEYS[2], token)
  local state = redis.call("HGET", b, "state") or "closed"
  local is_probe = redis.call("HGET", b, "probe") == token
  if verdict == "0" and sent and state == "closed" and not is_probe
      and tonumber(redis.call("HGET", b, "last_success_at") or "0") > sent then
    verdict = "-"  -- sent before the last success: no verdict on the endpoint's health
  end
  if verdict == "1" then
    if state ~= "closed" then
      ops_event("endpoint.recovered", {opened_at = tonumber(redis.call("HGET", b, "opened_at"))})
    end
    redis.call("HSET", b, "state", "closed", "failures", 0, "last_success_at", now)
    redis.call("HDEL", b, "probe", "probe_until", "probe_back", "open_until", "cooldown",
      "failing_since")
  elseif verdict == "0" then
    local failures = redis.call("HINCRBY", b, "failures", 1)
    -- the first failure since the last success (or since an operator re-enabled it)
    redis.call("HSETNX", b, "failing_since", now)
    if state == "half_open" and is_probe then
      local cooldown = math.min(tonumber(redis.call("HGET", b, "cooldown") or ARGV[2]) * 2,
        tonumber(ARGV[3]))
      redis.call("HSET", b, "state", "open", "cooldown", cooldown, "open_until", now + cooldown,
        "opened_at", now)
      redis.call("HDEL", b, "probe", "probe_until", "probe_back")
    elseif state == "closed" and failures >= threshold then
      redis.call("HSET", b, "state", "open", "cooldown", ARGV[2],
        "open_until", now + tonumber(ARGV[2]), "opened_at", now)
      redis.call("HINCRBY", b, "opened", 1)
      ops_event("endpoint.failing", {failures = failures, open_until = now + tonumber(ARGV[2])})
    end
  elseif is_probe then
    -- a neutral probe result (e.g. 429) lets the next probe go
    redis.call("HDEL", b, "probe", "probe_until", "probe_back")
  end
end
local f = redis.call("HMGET", b, "state", "failures", "open_until", "failing_since",
  "last_success_at")
return {f[1] or "closed", f[2] or 0, f[3] or 0, f[4] or 0, f[5] or 0, ops}
