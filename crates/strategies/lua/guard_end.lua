-- Reconciler guard, after an op that changed nothing in Redis (or failed): no longer
-- in flight. KEYS[1] inflight
return redis.call('DECR', KEYS[1])
