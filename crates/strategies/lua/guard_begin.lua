-- Reconciler guard, before an op's SQL step: count the op in flight and bump the user's
-- sequence, so a repair that started earlier sees the change and stands down.
-- KEYS[1] inflight, KEYS[2] seq
redis.call('INCR', KEYS[1])
return redis.call('INCR', KEYS[2])
