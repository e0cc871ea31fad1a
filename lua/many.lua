-- admitter: decide the queued jobs of several tenants in one call: admit.lua once per batch, in
-- the order given (lua.go wraps admit.lua as admit_one(KEYS, ARGV)), under one reading of the
-- server's clock. A backend sends the batches of many tenants together so that the fixed cost
-- of a script call is paid once for all of them; on Redis Cluster every batch of a call is of
-- one tenant's (its keys share a hash slot).
--
-- KEYS     every batch's keys in turn: its state, then for modes 4 and 5 its shadow state
-- ARGV[1]  packed int64s: b batches, then per batch its number of keys (1 or 2)
-- ARGV[2..b+1]  each batch's argument (admit.lua's ARGV[1])
--
-- Reply: an array {replies, why_1, ..., why_b}: replies is every batch's admit.lua reply,
-- concatenated in order (each one's length follows from its number of jobs and its mode); why_i
-- is "" when batch i was decided, otherwise the error that stopped it (its reply is then absent
-- from replies). An error in one batch does not stop the others.
local head = ARGV[1]
local b = struct.unpack('<l', head)
if b ~= #ARGV - 1 or #head ~= 8 * (1 + b) then
  return redis.error_reply('ERR admitter: many.lua wants ARGV[1] = b and b key counts, then b arguments')
end
local replies, whys = {}, {}
local k = 0
for i = 1, b do
  local nk = struct.unpack('<l', head, 1 + 8 * i)
  local keys = {}
  for j = 1, nk do keys[j] = KEYS[k + j] end
  k = k + nk
  local ok, res = pcall(admit_one, keys, {ARGV[1 + i]})
  if ok then
    replies[#replies + 1], whys[i] = res, ''
  elseif type(res) == 'table' and res.err then
    whys[i] = res.err
  else
    whys[i] = tostring(res)
  end
end
local out = {table.concat(replies)}
for i = 1, b do out[1 + i] = whys[i] end
return out
