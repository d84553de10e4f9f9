-- A run's key expiry (redis/ttl.rs): each key in KEYS that has no expiry, or one this
-- run set (ARGV[2..]: the deadlines it set, unix ms), gets the deadline ARGV[1] (unix
-- ms), or loses its expiry when ARGV[1] is 0 (--keep). A key with an expiry of its own (a
-- design's EXPIRE), or gone meanwhile, is left alone. Needs Redis 7 (PEXPIRETIME).
-- Returns how many keys changed.
local new = tonumber(ARGV[1])
local ours = {}
for i = 2, #ARGV do ours[tonumber(ARGV[i])] = true end
local changed = 0
for _, k in ipairs(KEYS) do
  local t = redis.call('PEXPIRETIME', k)
  if t == -1 or ours[t] then
    if new > 0 then
      redis.call('PEXPIREAT', k, new)
      changed = changed + 1
    elseif t ~= -1 then
      redis.call('PERSIST', k)
      changed = changed + 1
    end
  end
end
return changed
