-- apikey_create.lua: store a new API key: its record, its credential and its index entry.
--
-- The token itself is never stored: the credential is found by the token's SHA-256.
--
-- Called by Store.create_api_key (relay/queue/auth.py), which builds these from keys.py.
--
-- KEYS[1] key record (hash)         Keys.api_key(key_id)
-- KEYS[2] credential (string, JSON) Keys.credential(token_hash)
-- KEYS[3] key index (zset)          Keys.api_keys
-- ARGV[1] key id   ARGV[2] app   ARGV[3] scopes (comma-separated)   ARGV[4] name
-- ARGV[5] token hash   ARGV[6] credential JSON
--
-- Returns the creation time (ms), or 0 when that id or token hash is taken (nothing written).
local now = now_ms()
if redis.call("EXISTS", KEYS[1]) == 1 or redis.call("EXISTS", KEYS[2]) == 1 then
  return 0
end
redis.call("HSET", KEYS[1], "id", ARGV[1], "app", ARGV[2], "scopes", ARGV[3],
  "name", ARGV[4], "created_at", now, "token_hash", ARGV[5])
redis.call("SET", KEYS[2], ARGV[6])
redis.call("ZADD", KEYS[3], now, ARGV[1])
return now
