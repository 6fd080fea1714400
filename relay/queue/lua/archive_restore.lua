-- archive_restore.lua: bring an archived delivery back into Redis as it was when it
-- finished (its hash, attempt log and index entries; its event when Redis has none), so
-- that replay.lua can replay it like any finished delivery. Nothing is written when
-- Redis holds the delivery already (a hash, or a due entry).
-- Called by Store.archive_restore (relay/queue/moving.py).
--
-- KEYS[1] the delivery's hash (ShardKeys.delivery)   KEYS[2] its attempt log (ShardKeys.log)
-- KEYS[3] its event (ShardKeys.event)   KEYS[4] events index (zset, ShardKeys.events)
-- KEYS[5] its finished index: succeeded or dead (zset)   KEYS[6] its endpoint's index
-- KEYS[7] due (zset)
-- ARGV[1] delivery id   ARGV[2] event id   ARGV[3] created (ms)   ARGV[4] finish time (ms)
-- ARGV[5] the event's stored form ("" when the archive has none)
-- ARGV[6] n, the number of hash fields   ARGV[7..6+2n] field, value pairs
-- ARGV[7+2n] m, the number of log entries   ARGV[8+2n..7+2n+m] log entries (JSON)
--
-- Returns 1 when restored, 0 when Redis has the delivery.
if redis.call("EXISTS", KEYS[1]) == 1 or redis.call("ZSCORE", KEYS[7], ARGV[1]) then
  return 0
end
local n = tonumber(ARGV[6])
local fields = {}
for i = 7, 6 + 2 * n do fields[#fields + 1] = ARGV[i] end
if #fields > 0 then redis.call("HSET", KEYS[1], unpack(fields)) end
local m = tonumber(ARGV[7 + 2 * n])
redis.call("DEL", KEYS[2])
for i = 8 + 2 * n, 7 + 2 * n + m do redis.call("RPUSH", KEYS[2], ARGV[i]) end
if ARGV[5] ~= "" and redis.call("SET", KEYS[3], ARGV[5], "NX") then
  redis.call("ZADD", KEYS[4], ARGV[3], ARGV[2])
end
redis.call("ZADD", KEYS[5], ARGV[4], ARGV[1])
redis.call("ZADD", KEYS[6], ARGV[3], ARGV[1])
return 1
