-- lua-script-file create: the new notification is unread in the user's state hash and counted.
-- KEYS[1] unread counter, KEYS[2] state hash (id -> '0' unread / '1' read); ARGV[1] the new id
redis.call('HSET', KEYS[2], ARGV[1], '0')
return redis.call('INCR', KEYS[1])
