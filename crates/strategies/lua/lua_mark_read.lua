-- lua-script mark_read: check and change in one atomic step. Returns 1 when this call
-- turned the notification from unread to read, 0 when it was read or unknown.
-- KEYS[1] unread, KEYS[2] state, KEYS[3] inflight ; ARGV[1] id, ARGV[2] '1' when the guard is on
local s = redis.call('HGET', KEYS[2], ARGV[1])
local changed = 0
if s == '0' then
  redis.call('HSET', KEYS[2], ARGV[1], '1')
  redis.call('DECR', KEYS[1])
  changed = 1
end
if ARGV[2] == '1' then redis.call('DECR', KEYS[3]) end
return changed
