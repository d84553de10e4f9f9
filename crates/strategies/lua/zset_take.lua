-- zset-buffer's claim, as the seed design writes it with MULTI/EXEC (ZSCORE + ZREM): the
-- delta leaves Redis here, before the SQL commit. Returns the delta or false.
-- KEYS[1] pending ; ARGV[1] user
local d = redis.call('ZSCORE', KEYS[1], ARGV[1])
if d then redis.call('ZREM', KEYS[1], ARGV[1]) end
return d
