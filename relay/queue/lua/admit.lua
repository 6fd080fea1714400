-- admit.lua: decide, for all workers together, which claimed sends to one endpoint may go now.
--
-- One call per endpoint per claim batch. Applies, atomically and in this order:
--   circuit breaker: open -> everything waits for the reopen time; half-open -> exactly one
--     probe goes (across all workers), the rest wait for the probe's outcome;
--   max_in_flight: live slots are members of the in-flight zset (scored by expiry, so a slot
--     held by a worker that died frees itself);
--   rate_limit: GCRA over a theoretical arrival time (TAT), with a small burst.
-- Deferred sends are spread out (one interval apart) so a deep backlog comes back gradually
-- instead of all at once: no busy loop, no head-of-line blocking.
--
-- Called by Store.admit (relay/queue/endpoints.py), which builds these from keys.py.
--
-- KEYS[1] breaker (hash)    EndpointKeys.breaker   (relay:v3:{ep_X}:breaker)
-- KEYS[2] rate TAT (string) EndpointKeys.rate      (relay:v3:{ep_X}:rate)
-- KEYS[3] in-flight slots   EndpointKeys.inflight  (zset, member = claim token, score = slot expiry ms)
-- ARGV[1] rate limit, requests/s ("0" = none)   ARGV[2] burst (requests)
-- ARGV[3] max in flight ("0" = none)           ARGV[4] slot hold, ms (send timeout + margin)
-- ARGV[5] expected send time, ms: spreads in-flight deferrals, paces waits for a probe
-- ARGV[6] n, the number of tokens   ARGV[7..6+n] claim tokens, in send order
--
-- Returns {state, then per token: 0 = send now, or how long (ms) to wait before trying again}.
local now = now_ms()
local n = tonumber(ARGV[6])
local res = {}
local state = redis.call("HGET", KEYS[1], "state") or "closed"

local first_allowed = 1
if state == "open" then
  local reopen = tonumber(redis.call("HGET", KEYS[1], "open_until") or 0)
  if now < reopen then
    for i = 1, n do res[i] = reopen - now + (i - 1) * 10 end
    table.insert(res, 1, state)
    return res
  end
  state = "half_open"
  redis.call("HSET", KEYS[1], "state", state)
  redis.call("HDEL", KEYS[1], "probe", "probe_until", "probe_back")
end
if state == "half_open" then
  local probe_until = tonumber(redis.call("HGET", KEYS[1], "probe_until") or 0)
  if probe_until > now then
    -- a probe is out: come back when it has likely answered, or failing that when its
    -- slot ends (so each delivery is turned away at most twice per probe, never spun)
    local back = tonumber(redis.call("HGET", KEYS[1], "probe_back") or 0)
    if back <= now then back = probe_until end
    for i = 1, n do res[i] = back - now + (i - 1) * 10 end
    table.insert(res, 1, state)
    return res
  end
  -- exactly one probe: the first token; the rest come back once it has likely answered
  -- (twice the usual send time, at least 100 ms, at most the slot hold): soon after a
  -- success, and a failure has reopened the breaker by then.
  local settle_in = math.min(tonumber(ARGV[4]), math.max(100, 2 * tonumber(ARGV[5])))
  redis.call("HSET", KEYS[1], "probe", ARGV[7], "probe_until", now + tonumber(ARGV[4]),
    "probe_back", now + settle_in)
  for i = 2, n do res[i] = settle_in + (i - 2) * 10 end
  n = 1
end

local cap = tonumber(ARGV[3])
local room = 1e18
if cap > 0 then
  redis.call("ZREMRANGEBYSCORE", KEYS[3], "-inf", now)
  room = cap - redis.call("ZCARD", KEYS[3])
end
local rate = tonumber(ARGV[1])
local interval, tolerance, tat = 0, 0, now
if rate > 0 then
  -- the bounds the API validates (relay.domain.schema.RATE_LIMIT_MIN/MAX): a record that
  -- got past them (written by hand, an older version) still gets whole-ms expiries below
  rate = math.min(math.max(rate, 0.01), 100000)
  interval = 1000 / rate
  tolerance = (tonumber(ARGV[2]) - 1) * interval
  tat = math.max(tonumber(redis.call("GET", KEYS[2]) or 0), now)
end
local spread = math.max(tonumber(ARGV[5]), 1)
local waiting_slot, waiting_rate = 0, 0
for i = 1, n do
  local token = ARGV[6 + i]
  if room <= 0 then
    waiting_slot = waiting_slot + 1
    res[i] = math.ceil(waiting_slot / cap) * spread
  elseif rate > 0 and tat - now > tolerance then
    waiting_rate = waiting_rate + 1
    res[i] = math.max(1, math.ceil(tat - tolerance + (waiting_rate - 1) * interval - now))
  else
    if rate > 0 then tat = tat + interval end
    if cap > 0 then
      redis.call("ZADD", KEYS[3], now + tonumber(ARGV[4]), token)
      room = room - 1
    end
    res[i] = 0
  end
end
if rate > 0 then
  -- at most a day: a whole number of ms that Redis accepts (never 1e+20)
  redis.call("SET", KEYS[2], tostring(tat), "PX", math.min(math.ceil(tat - now + 1000), 86400000))
end
table.insert(res, 1, state)
return res
