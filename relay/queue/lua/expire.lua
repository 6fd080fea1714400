-- expire.lua: remove finished deliveries past their retention, and every index entry
-- that points at them; an event goes with its last delivery.
-- Called by Store.expire_shard (relay/queue/transitions.py). At most ARGV[7] deliveries
-- per call; many sweepers may run it at once (each id is taken with ZREM). Only ids in
-- succeeded or dead are touched. Design notes: docs/design/lua.md.
--
-- KEYS[1] succeeded (zset, score = finish time)   KEYS[2] dead (zset, score = time of death)
-- KEYS[3] events index (zset)   ShardKeys.events: an event leaves it with its last delivery
-- KEYS[4] due (zset)   KEYS[5] queued index (zset)   KEYS[6] blocked lanes (zset)
-- ARGV[1] delivery key prefix        ShardKeys.delivery_prefix        (relay:v3:{s0}:dlv:)
-- ARGV[2] attempt log prefix         ShardKeys.log_prefix             (relay:v3:{s0}:log:)
-- ARGV[3] event key prefix           ShardKeys.event_prefix           (relay:v3:{s0}:evt:)
-- ARGV[4] endpoint index prefix      ShardKeys.endpoint_index_prefix  (relay:v3:{s0}:ep:)
-- ARGV[5] succeeded cutoff, ms: succeeded deliveries finished at or before it go ("-1": none)
-- ARGV[6] dead cutoff, ms: dead deliveries that died at or before it go ("-1": none)
-- ARGV[7] most deliveries to remove in this call
-- ARGV[8] lane key prefix (ShardKeys.lane_prefix)   ARGV[9] wake channel (ShardKeys.wake)
--
-- Returns {deliveries removed, events removed, 1 when the limit cut this call short else 0}
local budget = tonumber(ARGV[7])
local removed, gone, more, promoted = 0, 0, 0, 0

local function sweep(zkey, cutoff)
  if cutoff < 0 or budget <= 0 then return end
  local ids = redis.call("ZRANGEBYSCORE", zkey, "-inf", cutoff, "LIMIT", 0, budget)
  if #ids == 0 then return end
  if #ids == budget then more = 1 end
  budget = budget - #ids
  zrem_all(zkey, ids)
  local got = drop_finished(KEYS[4], KEYS[5], KEYS[6], KEYS[3], ARGV[1], ARGV[2], ARGV[3],
    ARGV[4], ARGV[8], ids)
  removed = removed + got[1]
  gone = gone + got[2]
  promoted = math.max(promoted, got[3])
end

sweep(KEYS[1], tonumber(ARGV[5]))
sweep(KEYS[2], tonumber(ARGV[6]))
if promoted == 1 then redis.call("PUBLISH", ARGV[9], "due") end
return {removed, gone, more}
