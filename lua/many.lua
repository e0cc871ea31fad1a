-- admitter: run a script several times in one call, for several tenants: lua.go wraps admit.lua
-- or decide.lua as the function one(KEYS, ARGV), and this calls it once per batch (admit.lua: a
-- batch of one tenant's queued jobs; decide.lua: one request), in the order given, under one
-- reading of the server's clock. A backend sends the batches of many tenants together so that
-- the fixed cost of a script call is paid once for all of them; on Redis Cluster a call carries
-- one batch (a script's keys must share a hash slot).
--
-- KEYS     every batch's keys in turn (the script's own KEYS)
-- ARGV[1]  packed int64s: b batches, then per batch its number of keys
-- ARGV[2..b+1]  each batch's argument (the script's ARGV[1])
--
-- Reply: an array {replies, why_1, ..., why_b}: replies is every batch's reply, concatenated in
-- order (each one's length follows from what it asked); why_i is "" when batch i was decided,
-- otherwise the error that stopped it (its reply is then absent from replies). An error in one
-- batch does not stop the others.
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
  local ok, res = pcall(one, keys, {ARGV[1 + i]})
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
