-- Reconciler repair of one user: only when no op is in flight and none started since the
-- reconciler read the sequence (before it read the SQL truth), set the counter (and, for
-- lua-script, the state hash) to the truth. Returns 1 repaired/confirmed, 0 stood down.
-- KEYS[1] unread, KEYS[2] seq, KEYS[3] inflight, KEYS[4] state
-- ARGV[1] expected seq, ARGV[2] truth, ARGV[3] '1' to rewrite the state hash,
-- ARGV[4] '1' to skip the guard (only when the load has stopped: nothing is in flight,
-- and guards may be off after a data loss), ARGV[5..] id, is_read pairs (lua-script)
local inflight = tonumber(redis.call('GET', KEYS[3]) or '0')
local seq = redis.call('GET', KEYS[2]) or '0'
if ARGV[4] ~= '1' and (inflight ~= 0 or seq ~= ARGV[1]) then return 0 end
if ARGV[4] == '1' then redis.call('SET', KEYS[3], '0') end
redis.call('SET', KEYS[1], ARGV[2])
if ARGV[3] == '1' then
  redis.call('DEL', KEYS[4])
  for i = 5, #ARGV, 2 do redis.call('HSET', KEYS[4], ARGV[i], ARGV[i + 1]) end
end
return 1
