#include "shared_state_scripts.h"

namespace shoal::scheduler::scripts {

const char* const heartbeat = R"lua(
local epoch = redis.call('GET', KEYS[5])
if not epoch then return {'noepoch'} end
local rec = redis.call('HMGET', KEYS[1], 'seq', 'synced', 'endpoint', 'log', 'ns')
local v
if ARGV[4] == '1' then v = 'full'
elseif not rec[1] or rec[2] ~= '1' then v = 'unknown_node'
elseif ARGV[2] ~= epoch then v = 'epoch'
elseif tonumber(ARGV[3]) ~= tonumber(rec[1]) + 1 then v = 'gap'
elseif rec[3] and rec[3] ~= '' and rec[3] ~= ARGV[5] then v = 'moved'
else v = 'ok' end
local base = 11
local nadd = tonumber(ARGV[base])
local remat = base + 2 * nadd + 1
if v == 'full' then redis.call('DEL', KEYS[2]) end
if v == 'full' or v == 'ok' then
  local i = base + 1
  while i < remat do
    local j = math.min(i + 999, remat - 1)
    redis.call('HSET', KEYS[2], unpack(ARGV, i, j))
    i = j + 1
  end
  local last = remat + tonumber(ARGV[remat])
  i = remat + 1
  while i <= last do
    local j = math.min(i + 999, last)
    redis.call('HDEL', KEYS[2], unpack(ARGV, i, j))
    i = j + 1
  end
  redis.call('HSET', KEYS[1], 'seq', ARGV[3], 'synced', '1')
else
  redis.call('HSET', KEYS[1], 'synced', '0')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'endpoint', ARGV[5], 'inv', ARGV[6], 'seen', now)
local ns = '='
if ARGV[10] ~= '=' and rec[5] ~= ARGV[10] then
  redis.call('HSET', KEYS[1], 'ns', ARGV[10])
  ns = ARGV[10]
end
redis.call('SADD', KEYS[4], ARGV[1])
redis.call('ZADD', KEYS[6], now, ARGV[1])
local id = redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[8], '*',
                      'f', '1', 't', 'hb', 'v', v, 'r', ARGV[9], 'n', ARGV[1], 'm', ARGV[7],
                      'ns', ns)
redis.call('HSET', KEYS[1], 'log', id)
return {v, id, epoch, rec[4] or ''}
)lua";

// KEYS: lease, alive, up_since. ARGV: replica id, lease ttl ms, longest gap ms. Returns
// {1 if this replica holds the lease else 0, ms the schedulers have served without a gap}.
// Every replica calls it: `alive` is the last time any replica did (Redis's clock); a call after
// a longer gap than ARGV[3] (every replica gone) starts the service's `up_since` again.
const char* const renew = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local held = 0
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  held = 1
elseif not cur then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  held = 1
end
local alive = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local since = tonumber(redis.call('GET', KEYS[3]) or '0') or 0
if since == 0 or now - alive > tonumber(ARGV[3]) or since > now then
  since = now
  redis.call('SET', KEYS[3], since)
end
redis.call('SET', KEYS[2], now)
return {held, now - since}
)lua";

const char* const expire = R"lua(
local seen = redis.call('HGET', KEYS[1], 'seen')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if seen and now - tonumber(seen) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[4], seen, ARGV[1])
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('SREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
return 1
)lua";

const char* const origins = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cap = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
local full = 0
if ARGV[1] ~= '' then
  if redis.call('ZSCORE', KEYS[1], ARGV[1]) or redis.call('ZCARD', KEYS[1]) < cap then
    redis.call('ZADD', KEYS[1], now, ARGV[1])
  else
    full = 1
  end
end
return {full, redis.call('ZRANGE', KEYS[1], 0, cap - 1)}
)lua";

}  // namespace shoal::scheduler::scripts
