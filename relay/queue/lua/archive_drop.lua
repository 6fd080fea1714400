-- archive_drop.lua: remove finished deliveries the archive (PostgreSQL) has committed,
-- and every index entry that points at them; an event goes with its last delivery.
-- Called by Store.archive_drop (relay/queue/moving.py), fenced by the shard's
-- archive lease: a mover whose lease another took removes nothing. An item goes only
-- while it is as the archive holds it: still in its finished index with the same score
-- and, when its hash has one, the same updated_at (a delivery replayed, discarded or
-- finished again since it was read stays, and is moved again later).
--
-- KEYS[1] succeeded (zset)   KEYS[2] dead (zset)   KEYS[3] events index (zset)
-- KEYS[4] due (zset)   KEYS[5] queued index (zset)   KEYS[6] blocked lanes (zset)
-- KEYS[7] the shard's archive lease (string: the mover's token)   ShardKeys.archiving
-- ARGV[1] delivery key prefix        ShardKeys.delivery_prefix        (relay:v3:{s0}:dlv:)
-- ARGV[2] attempt log prefix         ShardKeys.log_prefix             (relay:v3:{s0}:log:)
-- ARGV[3] event key prefix           ShardKeys.event_prefix           (relay:v3:{s0}:evt:)
-- ARGV[4] endpoint index prefix      ShardKeys.endpoint_index_prefix  (relay:v3:{s0}:ep:)
-- ARGV[5] lane key prefix            ShardKeys.lane_prefix            (relay:v3:{s0}:lane:)
-- ARGV[6] wake channel (ShardKeys.wake)
-- ARGV[7] the mover's lease token   ARGV[8] ms to extend the lease by (0: release it)
-- ARGV[9] n, the number of items
-- ARGV[10..9+4n] per item: delivery id, status (succeeded or dead), index score,
--   updated_at as archived (a hash without one is not compared)
--
-- Returns {deliveries removed, events removed}, or {-1, 0} when the lease is not held.
if redis.call("GET", KEYS[7]) ~= ARGV[7] then return {-1, 0} end
local dlv_prefix = ARGV[1]
local n = tonumber(ARGV[9])
local ok, dead = {}, {}
for i = 0, n - 1 do
  local id, status = ARGV[10 + 4 * i], ARGV[11 + 4 * i]
  local score, updated = ARGV[12 + 4 * i], ARGV[13 + 4 * i]
  local zkey = KEYS[1]
  if status == "dead" then zkey = KEYS[2] end
  local now_score = redis.call("ZSCORE", zkey, id)
  if now_score and tonumber(now_score) == tonumber(score) then
    local at = redis.call("HGET", dlv_prefix .. id, "updated_at")
    if not at or tonumber(at) == tonumber(updated) then
      if status == "dead" then dead[#dead + 1] = id else ok[#ok + 1] = id end
    end
  end
end
local removed, gone, promoted = 0, 0, 0
local function drop(zkey, ids)
  if #ids == 0 then return end
  zrem_all(zkey, ids)
  local got = drop_finished(KEYS[4], KEYS[5], KEYS[6], KEYS[3], ARGV[1], ARGV[2], ARGV[3],
    ARGV[4], ARGV[5], ids)
  removed = removed + got[1]
  gone = gone + got[2]
  promoted = math.max(promoted, got[3])
end
drop(KEYS[1], ok)
drop(KEYS[2], dead)
if tonumber(ARGV[8]) > 0 then
  redis.call("PEXPIRE", KEYS[7], ARGV[8])
else
  redis.call("DEL", KEYS[7])
end
if promoted == 1 then redis.call("PUBLISH", ARGV[6], "due") end
return {removed, gone}
