-- replay_job.lua: a reconciliation replay job's record: create, lease, save, cancel.
-- One script for one record, so every change of a job is atomic and fenced on its lease.
-- Called by Store.replay_job (relay/queue/replays.py).
--
-- KEYS[1]  the job (hash)            Keys.replay_job(replay_id)
-- KEYS[2]  every job (zset)          Keys.replay_jobs
-- KEYS[3]  running jobs (set)        Keys.replays_running
--
-- ARGV[1]  op: "create", "lease", "save" or "cancel"
-- ARGV[2]  job id   ARGV[3] owner (the worker's lease token; "" for create and cancel)
-- ARGV[4]  lease, ms   ARGV[5] n, the number of field/value pairs that follow
-- ARGV[6..5+2n] fields and values to set (create, save)
--
-- create: the job with state "running", indexed and marked running; returns {1}.
-- lease:  taken when the job is running and its lease is this owner's or has run out;
--         returns {1} (taken or renewed) or {0, state, owner}.
-- save:   only by the owner of a live lease on a running job: sets the fields, renews
--         the lease, and a state other than "running" takes the job off the running
--         set; returns {1}, or {0, state, owner} and changes nothing.
-- cancel: a running job becomes "cancelled" (its owner's next save is refused);
--         returns {1}, or {0, state, owner} for a job that is not running ("" unknown).
local now = now_ms()
local op = ARGV[1]
local id = ARGV[2]
local owner = ARGV[3]
local lease_ms = tonumber(ARGV[4])
local n = tonumber(ARGV[5])

local function set_fields()
  for i = 1, n do
    redis.call("HSET", KEYS[1], ARGV[4 + 2 * i], ARGV[5 + 2 * i])
  end
end

if op == "create" then
  set_fields()
  redis.call("HSET", KEYS[1], "id", id, "state", "running", "created_at", now,
    "updated_at", now, "owner", "", "lease_until", 0)
  redis.call("ZADD", KEYS[2], now, id)
  redis.call("SADD", KEYS[3], id)
  return {1}
end

local cur = redis.call("HMGET", KEYS[1], "state", "owner", "lease_until")
local state = cur[1] or ""
local holder = cur[2] or ""
local lease_until = tonumber(cur[3] or "0")
if state ~= "running" then
  if state == "" then redis.call("SREM", KEYS[3], id) end
  return {0, state, holder}
end

if op == "cancel" then
  redis.call("HSET", KEYS[1], "state", "cancelled", "finished_at", now, "updated_at", now)
  redis.call("SREM", KEYS[3], id)
  return {1}
end

local mine = holder == owner and lease_until >= now
if op == "lease" then
  if holder ~= owner and lease_until >= now then return {0, state, holder} end
  if holder ~= owner then redis.call("HINCRBY", KEYS[1], "takeovers", holder ~= "" and 1 or 0) end
  redis.call("HSET", KEYS[1], "owner", owner, "lease_until", now + lease_ms)
  return {1}
end

-- save
if not mine then return {0, state, holder} end
set_fields()
redis.call("HSET", KEYS[1], "lease_until", now + lease_ms, "updated_at", now)
local after = redis.call("HGET", KEYS[1], "state")
if after ~= "running" then
  redis.call("HSET", KEYS[1], "finished_at", now, "owner", "", "lease_until", 0)
  redis.call("SREM", KEYS[3], id)
end
return {1}
