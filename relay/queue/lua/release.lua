-- release.lua: hand claims back without charging an attempt (graceful shutdown).
--
-- The sends were interrupted by the worker's shutdown: each may or may not have reached
-- the receiver, so each gets an attempt-log entry ("handed_back") like any request made.
--
-- Called by Store.release (relay/queue/transitions.py).
--
-- KEYS[1] due (zset)   KEYS[2] processing (zset)
-- KEYS[3..2+2n] per item, two keys: ShardKeys.delivery(id), ShardKeys.log(id) (a list)
-- ARGV[1] wake channel   ARGV[2] worker id   ARGV[3] n, the number of items
-- ARGV[4..3+2n] per item, two values: claim token, delivery id
--
-- A claim is ours while the hash's claim is its token and its status "delivering".
-- Returns one integer per item: 1 handed back, 0 the claim was no longer ours.
local now = now_ms()
local n = tonumber(ARGV[3])
local res = {}
local any = false
for i = 1, n do
  local dkey = KEYS[1 + 2 * i]
  local lkey = KEYS[2 + 2 * i]
  local token, id = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  local f = redis.call("HMGET", dkey, "claim", "status", "attempts")
  if f[1] == token and f[2] == "delivering" then
    local attempt = f[3]
    local num = redis.call("HINCRBY", dkey, "log_n", 1)
    redis.call("RPUSH", lkey, cjson.encode({n = num, attempt = tonumber(attempt), at = now,
      error = "shutdown", outcome = "handed_back", worker = ARGV[2],
      detail = "send interrupted by worker shutdown; handed back without charging an attempt"}))
    redis.call("HINCRBY", dkey, "attempts", -1)
    redis.call("HDEL", dkey, "claim", "lease_until")
    redis.call("HSET", dkey, "status", "pending", "updated_at", now)
    redis.call("ZREM", KEYS[2], id)
    redis.call("ZADD", KEYS[1], now, id)
    res[i] = 1
    any = true
  else
    res[i] = 0
  end
end
if any then redis.call("PUBLISH", ARGV[1], "due") end
return res
