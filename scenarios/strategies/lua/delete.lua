-- lua-script-file delete: forget the notification, uncounting it if it was unread.
-- Returns -1 when unknown, else its former is_read (0 or 1).
-- KEYS[1] unread counter, KEYS[2] state hash; ARGV[1] the notification id
local s = redis.call('HGET', KEYS[2], ARGV[1])
if not s then return -1 end
redis.call('HDEL', KEYS[2], ARGV[1])
if s == '0' then redis.call('DECR', KEYS[1]) end
return tonumber(s)
