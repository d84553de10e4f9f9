-- lua-script create: the new notification is unread in the user's state hash and counted.
-- KEYS[1] unread, KEYS[2] state, KEYS[3] inflight ; ARGV[1] id, ARGV[2] '1' when the guard is on
redis.call('HSET', KEYS[2], ARGV[1], '0')
local v = redis.call('INCR', KEYS[1])
if ARGV[2] == '1' then redis.call('DECR', KEYS[3]) end
return v
