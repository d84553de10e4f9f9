-- zset-buffer-durable's claim: move the user's pending delta into the processing hash
-- under the claim id the flusher chose, atomically. The entry stays until the SQL
-- transaction that records the claim id has committed, so a crash in between loses
-- nothing and a replay cannot apply it twice. Refuses while an older claim of the user
-- is unresolved. The id comes from the flusher, not from a Redis counter: a data loss
-- would reset such a counter and reissue ids already recorded in SQL.
-- KEYS[1] pending, KEYS[2] processing ; ARGV[1] user, ARGV[2] claim id
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return false end
local d = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not d then return false end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. ':' .. d)
return ARGV[2] .. ':' .. d
