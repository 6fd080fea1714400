-- portal_create.lua: store a portal session's credential with its TTL, and, when an API key
-- opened it, note it under that key so that revoking the key ends the session too.
--
-- Called by Store.create_portal_session (relay/queue/auth.py), which builds these from keys.py.
--
-- KEYS[1] credential (string, JSON)   Keys.credential(token_hash)
-- KEYS[2] the opening key's sessions  Keys.key_sessions(key_id) (set of token hashes);
--         the operator opened it: KEYS[2] is not touched
-- KEYS[3] its branding (string, JSON)  Keys.portal_branding(token_hash); only written when
--         ARGV[5] is not ""
-- ARGV[1] credential JSON   ARGV[2] TTL of the record, ms   ARGV[3] token hash
-- ARGV[4] "1": note it in KEYS[2]   ARGV[5] branding JSON, or ""
--
-- Returns 1, or 0 when that token hash exists already (nothing written).
if redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2], "NX") == false then
  return 0
end
if ARGV[5] ~= "" then
  redis.call("SET", KEYS[3], ARGV[5], "PX", ARGV[2])
end
if ARGV[4] == "1" then
  redis.call("SADD", KEYS[2], ARGV[3])
  -- the set lives as long as its longest session record
  if redis.call("PTTL", KEYS[2]) < tonumber(ARGV[2]) then
    redis.call("PEXPIRE", KEYS[2], ARGV[2])
  end
end
return 1
