-- lua-script-file mark_all_read: mark every unread notification of the user read and
-- return their ids, so the SQL step updates exactly those rows (not ones created since).
-- KEYS[1] unread counter, KEYS[2] state hash
local all = redis.call('HGETALL', KEYS[2])
local ids = {}
for i = 1, #all, 2 do
  if all[i + 1] == '0' then
    redis.call('HSET', KEYS[2], all[i], '1')
    ids[#ids + 1] = all[i]
  end
end
if #ids > 0 then redis.call('DECRBY', KEYS[1], #ids) end
return ids
