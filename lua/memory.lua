-- admitter: the marker that tells a Redis server that never knew admitter from one that forgot.
-- Not part of a tenant's state: one marker per server (on Redis Cluster, per master, under a
-- hash tag of a slot it owns), read and rewritten by every replica once a second (bucket/born.go).
--
-- A server without the marker never held admitter's state, or lost it. Which of the two the
-- caller says in ARGV[1] (it knows whether this deployment has marked a Redis before: its own
-- memory, and a record kept outside Redis). A server with the marker kept its data, unless the
-- marker came back from a snapshot older than the server's start: then what was written after
-- the snapshot is lost. The first call to find a loss writes it into the marker, so every
-- replica, whenever it looks, adopts the same time.
--
-- KEYS[1]  the marker: a hash of created, beat (its last rewrite) and lost (when the server last
--          lost admitter's state; 0: never), µs of server time
-- ARGV[1]  1 when this deployment has marked a Redis before (an absent marker is a loss), else 0
-- ARGV[2]  since: the earliest the loss can have happened (µs): the server's start, or the last
--          time this caller saw the marker on the same run of the server
-- ARGV[3]  the server's start (µs); ARGV[4] 1 when it keeps an append-only file; ARGV[5] gap
--          (µs): a marker last rewritten more than gap before the server started came back from
--          an old snapshot (without an append-only file)
--
-- Reply: {lost, found, now}: the marker's lost time after the call, found 1 when this call
-- recorded a new loss (0 otherwise), the server's time.
--
-- Redis commands: TIME, HMGET, HSET.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
-- numbers go to HSET as their exact decimal text (a Lua number's own text has 14 digits)
local function txt(x) return string.format('%.0f', x) end
local used, since, start, aof, gap = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local v = redis.call('HMGET', KEYS[1], 'created', 'beat', 'lost')
if not v[1] then
  local lost, found = 0, 0
  if used == 1 then lost, found = math.min(since, now), 1 end
  redis.call('HSET', KEYS[1], 'created', txt(now), 'beat', txt(now), 'lost', txt(lost))
  return {lost, found, now}
end
local created, beat, lost = tonumber(v[1]), tonumber(v[2]) or 0, tonumber(v[3]) or 0
local found = 0
if aof == 0 and created < start and beat < start - gap and beat > lost then
  lost, found = beat, 1
  redis.call('HSET', KEYS[1], 'lost', txt(lost))
end
redis.call('HSET', KEYS[1], 'beat', txt(now))
return {lost, found, now}
