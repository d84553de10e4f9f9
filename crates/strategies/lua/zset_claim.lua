-- zset-buffer-durable's claim: move the user's pending delta into the processing hash
-- under a fresh claim id, atomically. The entry stays until the SQL transaction that
-- records the claim id has committed, so a crash in between loses nothing and a replay
-- cannot apply it twice. Refuses while an older claim of the user is unresolved.
-- KEYS[1] pending, KEYS[2] processing, KEYS[3] claim sequence ; ARGV[1] user
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return false end
local d = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not d then return false end
redis.call('ZREM', KEYS[1], ARGV[1])
local id = redis.call('INCR', KEYS[3])
redis.call('HSET', KEYS[2], ARGV[1], id .. ':' .. d)
return id .. ':' .. d
