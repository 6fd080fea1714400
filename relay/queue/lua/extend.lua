-- extend.lua: extend the leases of sends still in flight (a heartbeat, batched).
--
-- Called by Store.extend (relay/queue/transitions.py).
--
-- KEYS[1] processing (zset; the lease's expiry is the score)   ShardKeys.processing
-- KEYS[2..1+n] delivery hashes, one per item   ShardKeys.delivery(id)
-- ARGV[1] lease, ms   ARGV[2] n, the number of items
-- ARGV[3..2+n] claim tokens, one per item (same order as the hashes)
-- ARGV[3+n..2+2n] delivery ids, one per item
--
-- A claim is ours while the hash's claim is its token and its status "delivering" (the
-- claim field stays after the outcome is written: record.lua).
--
-- Returns one integer per item: 1 extended, 0 the claim is no longer ours.
local now = now_ms()
local until_ms = string.format("%d", now + tonumber(ARGV[1]))
local n = tonumber(ARGV[2])
local res = {}
for i = 1, n do
  local f = redis.call("HMGET", KEYS[1 + i], "claim", "status")
  if f[1] == ARGV[2 + i] and f[2] == "delivering" then
    redis.call("ZADD", KEYS[1], "XX", until_ms, ARGV[2 + n + i])
    res[i] = 1
  else
    res[i] = 0
  end
end
return res
