-- admitter: raise, extend or lower a decider's fence on a tenant (see state.lua for the
-- tenant's state; the fence is a key of its own beside it).
--
-- A fence says that forwards of the tenant were decided and are not yet confirmed stored
-- downstream. While any fence of the tenant stands, admit.lua admits none of its jobs (ingest
-- moves them to the lane, the lane's head waits): forwards decided while earlier ones are held
-- up (a NATS node that stopped answering, a stream electing a leader) would otherwise be stored
-- in the same instant as those, when the node answers again, beside what the limits refilled
-- meanwhile. The decider whose forwards are late raises its fence, extends it while it waits
-- and lowers it once they are stored (after charging what they were late for); a decider that
-- died leaves a fence that ends on its own. Each decider's fence is its own entry: the tenant
-- is fenced while any stands.
--
-- KEYS[1]  the tenant's fences: a sorted set, holder id -> end (µs)
-- ARGV[1]  packed int64s: now (µs, 0 = the server's TIME), life (µs; 0 lowers the fence),
--          extra key life (ms, 0 in production)
-- ARGV[2]  the holder's id
--
-- Reply: packed int64s {fences standing after the call}.
--
-- Redis commands: TIME, ZREM, or ZREMRANGEBYSCORE, ZADD, ZRANGE and PEXPIRE.
local now, life, pad = struct.unpack('<lll', ARGV[1])
if now == 0 then now = server_now() end
if life <= 0 then
  redis.call('ZREM', KEYS[1], ARGV[2])
  return struct.pack('<l', redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf'))
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + life, ARGV[2])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[1], math.ceil((tonumber(last[2]) - now) / 1000) + pad)
return struct.pack('<l', redis.call('ZCARD', KEYS[1]))
