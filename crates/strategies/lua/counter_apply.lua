-- redis-counter's last step: move the user's counter by the delta the SQL decided, and
-- (when the reconciler guard is on) leave the in-flight count in the same atomic step.
-- KEYS[1] unread, KEYS[2] inflight ; ARGV[1] delta, ARGV[2] '1' when the guard is on
local v = redis.call('INCRBY', KEYS[1], ARGV[1])
if ARGV[2] == '1' then redis.call('DECR', KEYS[2]) end
return v
