-- endpoints_for_app.lua: every endpoint of one app, in one round trip (read only).
--
-- Called by Store.list_endpoints (relay/queue/endpoints.py) for one app.
--
-- KEYS[1] endpoints (hash id -> JSON)   Keys.endpoints
-- KEYS[2] the app's set                 Keys.app(app)
-- Returns a list of endpoint JSON strings.
local ids = redis.call("SMEMBERS", KEYS[2])
if #ids == 0 then return {} end
local vals = redis.call("HMGET", KEYS[1], unpack(ids))
local out = {}
for _, v in ipairs(vals) do
  if v then out[#out + 1] = v end
end
return out
