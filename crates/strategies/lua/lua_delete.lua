-- lua-script delete: forget the notification, uncounting it if it was unread.
-- Returns -1 when unknown, else its former is_read (0 or 1).
-- KEYS[1] unread, KEYS[2] state, KEYS[3] inflight ; ARGV[1] id, ARGV[2] '1' when the guard is on
local s = redis.call('HGET', KEYS[2], ARGV[1])
local r = -1
if s then
  redis.call('HDEL', KEYS[2], ARGV[1])
  if s == '0' then redis.call('DECR', KEYS[1]) end
  r = tonumber(s)
end
if ARGV[2] == '1' then redis.call('DECR', KEYS[3]) end
return r
