-- endpoint_put.lua: create or replace an endpoint and keep its app index true.
--
-- With an expected value it is a compare-and-set: a change computed from a read (PATCH,
-- rotate-secret, auto-disable) is written only if nobody wrote in between, so two
-- concurrent changes cannot silently drop one another.
--
-- Called by Store._endpoint_put (relay/queue/endpoints.py), for create and for change.
--
-- KEYS[1] endpoints (hash id -> JSON)   Keys.endpoints
-- KEYS[2] new app's set   KEYS[3] old app's set   Keys.app(app)
-- KEYS[4] ops outbox (list)   Keys.ops
-- KEYS[5] placement marker (string)   Keys.placement: "0" when unset, as an endpoint
--         written by this layout means no keyed event was placed by app before it
-- (the slot guard follows, relay/queue/scripts.py)
-- ARGV[1] endpoint id   ARGV[2] endpoint JSON
-- ARGV[3] change channel (Keys.endpoints_changed): API replicas that cache endpoints
--         drop their cache on it
-- ARGV[4] the JSON it must still hold, else nothing is written ("": no expectation)
-- ARGV[5] ops entry id (fresh per call)
--
-- Operational events: a write that turns "enabled" from true to false appends
-- "endpoint.disabled" (with its disabled_reason) to the ops outbox, false to true
-- "endpoint.enabled", in this same call: once per transition, whoever writes it.
-- Returns 1 when written, 0 when the expected value no longer matched.
local old = redis.call("HGET", KEYS[1], ARGV[1])
if ARGV[4] ~= "" and old ~= ARGV[4] then
  return 0
end
if old then
  local was, now_ep = cjson.decode(old), cjson.decode(ARGV[2])
  local before, after = was.enabled ~= false, now_ep.enabled ~= false
  if before ~= after then
    local ev = {id = ARGV[5] .. "-1", endpoint_id = ARGV[1], app = now_ep.app, at = now_ms()}
    if after then
      ev.type = "endpoint.enabled"
    else
      ev.type = "endpoint.disabled"
      -- auto-disable writes its reason; an operator's PATCH writes none
      local why = now_ep.disabled_reason
      ev.reason = type(why) == "string" and why or "manual"
    end
    redis.call("RPUSH", KEYS[4], cjson.encode(ev))
  end
end
redis.call("HSET", KEYS[1], ARGV[1], ARGV[2])
if KEYS[3] ~= KEYS[2] then redis.call("SREM", KEYS[3], ARGV[1]) end
redis.call("SADD", KEYS[2], ARGV[1])
redis.call("SET", KEYS[5], "0", "NX")
redis.call("PUBLISH", ARGV[3], ARGV[1])
return 1
