-- apikey_revoke.lua: revoke an API key: its credential, rate state, record, index entry and
-- the portal sessions it opened go.
--
-- Fenced on the token hash read beforehand: the credential deleted is the one this key
-- record names (the caller read it with HGET; the script checks it is still the same).
--
-- Called by Store.revoke_api_key (relay/queue/auth.py), which builds these from keys.py.
--
-- KEYS[1] key record (hash)         Keys.api_key(key_id)
-- KEYS[2] credential (string, JSON) Keys.credential(token_hash)
-- KEYS[3] rate TAT (string)         Keys.api_rate(token_hash)
-- KEYS[4] key index (zset)          Keys.api_keys
-- KEYS[5] its portal sessions (set)  Keys.key_sessions(key_id)
-- KEYS[6..5+n] the credentials of those sessions (Keys.credential), as the caller read them
-- ARGV[1] key id   ARGV[2] token hash the caller read   ARGV[3] n
--
-- Returns 1 revoked, 0 no such key (or its record changed meanwhile: nothing written).
if redis.call("HGET", KEYS[1], "token_hash") ~= ARGV[2] then
  return 0
end
redis.call("DEL", KEYS[1], KEYS[2], KEYS[3], KEYS[5])
redis.call("ZREM", KEYS[4], ARGV[1])
-- the portal sessions this key opened end with it
for i = 1, tonumber(ARGV[3]) do
  redis.call("DEL", KEYS[5 + i])
end
return 1
