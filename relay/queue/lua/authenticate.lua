-- authenticate.lua: find the credential behind a token's hash and charge its API rate limit.
--
-- One call per API request made with an API key or a portal session token (the operator's
-- tokens are checked in the API process, without Redis). No cache anywhere: a revoked key
-- (its credential deleted) is refused by the very next request, on every API replica.
--
-- Called by Store.authenticate (relay/queue/auth.py), which builds these from keys.py.
--
-- KEYS[1] credential (string, JSON)   Keys.credential(token_hash)
-- KEYS[2] rate TAT (string)           Keys.api_rate(token_hash)
-- ARGV[1] rate limit, requests/s ("0" = none)   ARGV[2] burst (requests)
--
-- Returns {0} unknown; {2, record} expired (a portal session past its expires_at, kept a
-- while only to say so); {1, record, 0} allowed; {1, record, ms} rate limited: retry in ms.
local now = now_ms()
local raw = redis.call("GET", KEYS[1])
if not raw then return {0} end
local record = cjson.decode(raw)
local expires = tonumber(record["expires_at"] or 0)
if expires > 0 and now >= expires then return {2, raw} end
local rate = tonumber(ARGV[1])
if rate <= 0 then return {1, raw, 0} end
-- GCRA, as admit.lua's endpoint rate limit: a theoretical arrival time, a burst tolerance
local interval = 1000 / rate
local tolerance = (tonumber(ARGV[2]) - 1) * interval
local tat = math.max(tonumber(redis.call("GET", KEYS[2]) or 0), now)
if tat - now > tolerance then
  return {1, raw, math.max(1, math.ceil(tat - tolerance - now))}
end
tat = tat + interval
redis.call("SET", KEYS[2], tostring(tat), "PX", math.min(math.ceil(tat - now + 1000), 86400000))
return {1, raw, 0}
