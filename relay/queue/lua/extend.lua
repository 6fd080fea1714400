-- extend.lua: extend the leases of sends still in flight (a heartbeat, batched).
--
-- KEYS[1] processing (zset)   KEYS[2..] delivery hashes, one per item
-- ARGV[1] lease, ms   ARGV[2..] claim tokens, one per item (same order as KEYS[2..])
-- ARGV[n+2..] delivery ids, one per item
--
-- Returns one integer per item: 1 extended, 0 the claim is no longer ours.
local t = redis.call("TIME")
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local until_ms = now + tonumber(ARGV[1])
local n = #KEYS - 2  -- the last key is the slot guard (relay/scripts.py)
local res = {}
for i = 1, n do
  if redis.call("HGET", KEYS[1 + i], "claim") == ARGV[1 + i] then
    redis.call("ZADD", KEYS[1], "XX", until_ms, ARGV[1 + n + i])
    redis.call("HSET", KEYS[1 + i], "lease_until", until_ms)
    res[i] = 1
  else
    res[i] = 0
  end
end
return res
