-- lua-script-file mark_read: check and change in one atomic step. Returns 1 when this call
-- turned the notification from unread to read, 0 when it was read or unknown.
-- KEYS[1] unread counter, KEYS[2] state hash; ARGV[1] the notification id
if redis.call('HGET', KEYS[2], ARGV[1]) == '0' then
  redis.call('HSET', KEYS[2], ARGV[1], '1')
  redis.call('DECR', KEYS[1])
  return 1
end
return 0
