-- ops_cut.lua: turn the shard's ripe dead-letter tallies into delivery.dead summaries.
--
-- record.lua and reclaim.lua count every dead letter in its endpoint's tally (in the
-- same call that makes it dead); an endpoint's tally opens with its first dead letter
-- and is ripe once its window has passed. This moves each ripe tally, atomically, into
-- the shard's ops outbox as one "delivery.dead" entry (count, first and last ids and
-- times) and deletes it: at most one summary per endpoint, shard and window, and every
-- dead letter in exactly one summary, whichever worker cuts.
--
-- Called by Store.ops_cut (relay/queue/opsbox.py).
--
-- KEYS[1] dead-letter tallies (zset)   ShardKeys.dead_tally_index
-- KEYS[2] ops outbox (list)            ShardKeys.ops
-- ARGV[1] tally prefix (ShardKeys.dead_tally_prefix)   ARGV[2] window, ms
-- ARGV[3] ops entry id (fresh per call)   ARGV[4] most tallies cut by one call
--
-- Returns the number of summaries appended.
local now = now_ms()
local ripe = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", now - tonumber(ARGV[2]),
  "LIMIT", 0, tonumber(ARGV[4]))
local tally_prefix = ARGV[1]
for i, ep in ipairs(ripe) do
  local tk = tally_prefix .. ep
  local f = redis.call("HMGET", tk, "n", "first_id", "first_at", "last_id", "last_at")
  if f[1] then
    redis.call("RPUSH", KEYS[2], cjson.encode({id = ARGV[3] .. "-" .. i,
      type = "delivery.dead", endpoint_id = ep, count = tonumber(f[1]),
      first_id = f[2], first_at = tonumber(f[3]), last_id = f[4], last_at = tonumber(f[5]),
      window_start = tonumber(redis.call("ZSCORE", KEYS[1], ep)), at = now}))
  end
  redis.call("DEL", tk)
  redis.call("ZREM", KEYS[1], ep)
end
return #ripe
