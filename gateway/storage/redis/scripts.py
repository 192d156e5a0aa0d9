"""The Lua scripts of the Redis store: each change to a record is one atomic step on the server.

Layout (``P`` = the store's prefix; see ``RedisKeys``):

- ``P:c:{id}`` hash: ``record`` (the JSON at creation), the fields that change (``status``,
  ``decision`` JSON, ``edit`` JSON of an approval that changed the call, ``decided_at``,
  ``owner``, ``ref:<key>``, the votes ``vote:<n>``, ``voter:<person>``, ``votes_n``, and
  ``approvals`` as created) and the execution ledger as
  ``x_state``, ``x_by``, ``x_lease``, ``x_attempts``, ``x_started``, ``x_finished``,
  ``x_result``. Floats travel as Python ``repr`` strings and are only compared here
  (``tonumber``), never formatted by Lua, which would round them to 14 digits.
- ``P:ev:{id}`` list: the audit trail, with the record's TTL.
- Sorted sets scored by ``created_at``: ``index``, ``session:{key}``, ``pending:{key}``,
  ``pending-all``, ``status:{status}`` (terminal ones), ``approved-waiting``,
  ``owned:{instance}`` (unsettled records it owns), ``claims:{instance}`` (its claims in
  flight). ``settled`` is scored by ``decided_at``; its members are ``id|status|session``
  so ``purge`` can clean the indexes of records whose TTL already ran out.
- ``P:instances`` hash (id -> JSON) and ``P:alive:{id}`` (a key with TTL = the lease).
- ``P:finished`` stream, the lifecycle feed (feed.py reads it): one entry
  ``id, kind, from`` per pending record created (``requested``), successful ``finish``
  (``resolved``), ``finish_execution`` (``executed``) and vote counted short of the
  approvals asked for (``voted``; the last one is ``resolved``); ``from`` names the store handle
  (the process) that wrote it. The name predates ``requested`` and ``executed``; it stays
  so that replicas of different versions share one feed during a rolling upgrade.

The scripts build index keys from the prefix (ARGV) beside the record key (KEYS[1]): on
Redis Cluster the prefix must carry a hash tag (``{gateway}``) so that all keys share a slot.
"""

from __future__ import annotations

# Shared Lua helpers, prepended to the scripts that need them.
_LIB = """
local function announce(stream, maxlen, id, kind, writer)
  if stream == '' then return end
  redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', 'id', id, 'kind', kind,
             'from', writer)
end
-- Audit events (JSON, one a line) onto the trail of id, which lives as long as its record.
local function add_events(p, id, rec, lines)
  if lines == '' then return end
  local ev = p .. ':ev:' .. id
  for line in string.gmatch(lines, '[^\\n]+') do redis.call('RPUSH', ev, line) end
  local ttl = redis.call('PTTL', rec)
  if ttl > 0 then redis.call('PEXPIRE', ev, ttl) end
end
local function unsettled(status, state)
  if status == 'pending' then return true end
  return status == 'approved' and (state == 'waiting' or state == 'claimed'
                                   or state == 'running')
end
local function settle(p, rec, id)
  local f = redis.call('HMGET', rec, 'status', 'session_key', 'decided_at', 'created_at')
  local at = f[3] or f[4]
  redis.call('ZADD', p .. ':settled', at, id .. '|' .. f[1] .. '|' .. f[2])
end
-- pending -> new (a decision, the expiry, a cancel, the last vote): the record, its
-- indexes, the ledger of an end that runs nothing, the TTL, the audit lines, the feed.
local function end_pending(p, id, rec, new, now, decision, ttl, lines, stream, maxlen,
                           writer)
  local f = redis.call('HMGET', rec, 'session_key', 'owner', 'created_at')
  redis.call('HSET', rec, 'status', new, 'decision', decision, 'decided_at', now)
  redis.call('ZREM', p .. ':pending:' .. f[1], id)
  redis.call('ZREM', p .. ':pending-all', id)
  redis.call('ZADD', p .. ':status:' .. new, f[3], id)
  if new == 'approved' then
    redis.call('ZADD', p .. ':approved-waiting', f[3], id)
  else
    redis.call('HSET', rec, 'x_state', 'skipped', 'x_finished', now)
    if f[2] then redis.call('ZREM', p .. ':owned:' .. f[2], id) end
    settle(p, rec, id)
  end
  redis.call('EXPIRE', rec, ttl)
  add_events(p, id, rec, lines)
  redis.call('EXPIRE', p .. ':ev:' .. id, ttl)
  announce(stream, maxlen, id, 'resolved', writer)
end
"""

# KEYS: record, then every index the new record joins (a pending one: KEYS[4] is
# pending-all, KEYS[5] its session's pending set). ARGV: id, created_at, ttl seconds, feed
# stream ('' for none: only a pending record is announced), its MAXLEN, writer, prefix,
# audit events (one a line), the pending caps per session and over all ('' '' for none:
# store.pending_limit), then field/value pairs of the hash.
# Returns 1 created, 0 the id is taken, -1 / -2 refused by the cap per session / over all.
CREATE = (
    _LIB
    + """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if ARGV[9] ~= '' then
  if redis.call('ZCARD', KEYS[5]) >= tonumber(ARGV[9]) then return -1 end
  if redis.call('ZCARD', KEYS[4]) >= tonumber(ARGV[10]) then return -2 end
end
local fields = {}
for i = 11, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(fields))
for i = 2, #KEYS do redis.call('ZADD', KEYS[i], ARGV[2], ARGV[1]) end
redis.call('EXPIRE', KEYS[1], ARGV[3])
add_events(ARGV[7], ARGV[1], KEYS[1], ARGV[8])
announce(ARGV[4], ARGV[5], ARGV[1], 'requested', ARGV[6])
return 1
"""
)

# KEYS: record. ARGV: prefix, id, new status, needs deadline ('1'/'0'), now, decision JSON,
# finished ttl seconds, feed stream, its MAXLEN, edited call JSON ('' = as asked), writer,
# audit events (one a line) written when it changes.
# Returns {code, HGETALL}: 0 missing, 1 changed, 2 already terminal, 3 past the deadline.
FINISH = (
    _LIB
    + """
local p, id, new, now = ARGV[1], ARGV[2], ARGV[3], ARGV[5]
local rec = KEYS[1]
local f = redis.call('HMGET', rec, 'status', 'expires_at')
if not f[1] then return {0, {}} end
if f[1] ~= 'pending' then return {2, redis.call('HGETALL', rec)} end
if ARGV[4] == '1' and not (tonumber(f[2]) > tonumber(now)) then
  return {3, redis.call('HGETALL', rec)}
end
if ARGV[10] ~= '' then redis.call('HSET', rec, 'edit', ARGV[10]) end
end_pending(p, id, rec, new, now, ARGV[6], ARGV[7], ARGV[12], ARGV[8], ARGV[9], ARGV[11])
return {1, redis.call('HGETALL', rec)}
"""
)

# model.vote_on in Lua. A vote is the hash field ``vote:<n>`` (its JSON, n counted by
# ``votes_n``) beside ``voter:<person>``, which refuses the same person's second vote; the
# ``approvals``-th vote ends the record as FINISH does with approved.
# KEYS: record. ARGV: prefix, id, now, person, vote JSON, decision JSON (of the approval),
# finished ttl seconds, feed stream, its MAXLEN, writer, audit events of the vote, audit
# events of the approval (one a line).
# Returns {code, HGETALL}: 0 missing, 1 counted, 2 not pending or past the deadline,
# 3 counted and approved, 4 this person voted already.
VOTE = (
    _LIB
    + """
local p, id, now = ARGV[1], ARGV[2], ARGV[3]
local rec = KEYS[1]
local f = redis.call('HMGET', rec, 'status', 'expires_at', 'approvals')
if not f[1] then return {0, {}} end
if f[1] ~= 'pending' or not (tonumber(f[2]) > tonumber(now)) then
  return {2, redis.call('HGETALL', rec)}
end
if redis.call('HEXISTS', rec, 'voter:' .. ARGV[4]) == 1 then
  return {4, redis.call('HGETALL', rec)}
end
local n = redis.call('HINCRBY', rec, 'votes_n', 1)
redis.call('HSET', rec, 'vote:' .. n, ARGV[5], 'voter:' .. ARGV[4], '1')
add_events(p, id, rec, ARGV[11])
if n < tonumber(f[3] or '0') then
  announce(ARGV[8], ARGV[9], id, 'voted', ARGV[10])
  return {1, redis.call('HGETALL', rec)}
end
end_pending(p, id, rec, 'approved', now, ARGV[6], ARGV[7], ARGV[12], ARGV[8], ARGV[9],
            ARGV[10])
return {3, redis.call('HGETALL', rec)}
"""
)

# KEYS: record; ARGV: ref key, ref value
SET_REF = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'ref:' .. ARGV[1], ARGV[2])
return 1
"""

# store.swap_detail: compare-and-set one ``detail:<key>`` field of the record's hash (codec
# merges it into ``details``), the events in the same step. KEYS: record. ARGV: field,
# expected JSON ('' absent), new JSON, prefix, id, events. Returns {changed, HGETALL} or nil.
SWAP_DETAIL = (
    _LIB
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return nil end
local now = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if now ~= ARGV[2] then return {0, redis.call('HGETALL', KEYS[1])} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
add_events(ARGV[4], ARGV[5], KEYS[1], ARGV[6])
return {1, redis.call('HGETALL', KEYS[1])}
"""
)

# store.may_claim in Lua: approved and waiting; or idempotent, in flight, claimed once and
# its lease ran out (its claimer died): once more.
# KEYS: record. ARGV: prefix, id, instance, now, lease_until. Returns HGETALL or nil.
CLAIM = """
local p, id, me, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local rec = KEYS[1]
local f = redis.call('HMGET', rec, 'status', 'x_state', 'idempotent', 'x_attempts',
                     'x_lease', 'x_by', 'created_at')
if f[1] ~= 'approved' then return nil end
local state, attempts = f[2], tonumber(f[4] or '0')
local ok = state == 'waiting'
if not ok and f[3] == '1' and (state == 'claimed' or state == 'running')
   and attempts == 1 and f[5] and tonumber(f[5]) <= tonumber(now) then
  ok = true
end
if not ok then return nil end
redis.call('HSET', rec, 'x_state', 'claimed', 'x_by', me, 'x_lease', ARGV[5],
           'x_attempts', tostring(attempts + 1))
redis.call('HDEL', rec, 'x_started')
redis.call('ZREM', p .. ':approved-waiting', id)
if f[6] then redis.call('ZREM', p .. ':claims:' .. f[6], id) end
redis.call('ZADD', p .. ':claims:' .. me, f[7], id)
return redis.call('HGETALL', rec)
"""

# KEYS: record. ARGV: instance, now. Returns HGETALL or nil.
START = """
local f = redis.call('HMGET', KEYS[1], 'x_state', 'x_by')
if f[1] ~= 'claimed' or f[2] ~= ARGV[1] then return nil end
redis.call('HSET', KEYS[1], 'x_state', 'running', 'x_started', ARGV[2])
return redis.call('HGETALL', KEYS[1])
"""

# KEYS: record. ARGV: prefix, id, instance, state, now, has result ('1'/'0'), result,
# feed stream, its MAXLEN, writer, audit events (one a line).
FINISH_EXECUTION = (
    _LIB
    + """
local p, id, me = ARGV[1], ARGV[2], ARGV[3]
local rec = KEYS[1]
local f = redis.call('HMGET', rec, 'x_state', 'x_by', 'owner')
if not (f[1] == 'claimed' or f[1] == 'running') or f[2] ~= me then return nil end
redis.call('HSET', rec, 'x_state', ARGV[4], 'x_finished', ARGV[5])
if ARGV[6] == '1' then
  redis.call('HSET', rec, 'x_result', ARGV[7])
else
  redis.call('HDEL', rec, 'x_result')
end
redis.call('ZREM', p .. ':claims:' .. me, id)
if f[3] then redis.call('ZREM', p .. ':owned:' .. f[3], id) end
settle(p, rec, id)
add_events(p, id, rec, ARGV[11])
announce(ARGV[8], ARGV[9], id, 'executed', ARGV[10])
return redis.call('HGETALL', rec)
"""
)

# KEYS: record. ARGV: prefix, id, from owner ('' = none), to owner. Returns HGETALL or nil.
ADOPT = (
    _LIB
    + """
local p, id, from, to = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local rec = KEYS[1]
local f = redis.call('HMGET', rec, 'status', 'owner', 'x_state', 'created_at')
if not f[1] or (f[2] or '') ~= from then return nil end
redis.call('HSET', rec, 'owner', to)
if from ~= '' then redis.call('ZREM', p .. ':owned:' .. from, id) end
if unsettled(f[1], f[3]) then redis.call('ZADD', p .. ':owned:' .. to, f[4], id) end
return redis.call('HGETALL', rec)
"""
)

# ARGV: prefix, instance id, instance JSON, lease in ms, lease_until.
HEARTBEAT = """
local p, me = ARGV[1], ARGV[2]
redis.call('SET', p .. ':alive:' .. me, ARGV[3], 'PX', ARGV[4])
redis.call('HSET', p .. ':instances', me, ARGV[3])
local ids = redis.call('ZRANGE', p .. ':claims:' .. me, 0, -1)
for _, id in ipairs(ids) do
  local rec = p .. ':c:' .. id
  local f = redis.call('HMGET', rec, 'x_state', 'x_by')
  if f[2] == me and (f[1] == 'claimed' or f[1] == 'running') then
    redis.call('HSET', rec, 'x_lease', ARGV[5])
  end
end
return #ids
"""

# KEYS: record. ARGV: prefix, id, event JSON. Only for a record that exists.
ADD_EVENT = (
    _LIB
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
add_events(ARGV[1], ARGV[2], KEYS[1], ARGV[3])
return 1
"""
)

# KEYS: record. ARGV: prefix, id, kind, event JSON. A nudge's line (add_event_once): only on
# a pending record, once per kind, remembered as the record's field ``once:<kind>``.
ADD_EVENT_ONCE = (
    _LIB
    + """
local rec = KEYS[1]
if redis.call('HGET', rec, 'status') ~= 'pending' then return 0 end
if redis.call('HSETNX', rec, 'once:' .. ARGV[3], '1') == 0 then return 0 end
add_events(ARGV[1], ARGV[2], rec, ARGV[4])
return 1
"""
)

# ARGV: prefix, before, batch size. Drops settled records decided before ``before`` with
# their events and index entries; returns {records dropped, members handled}.
PURGE = """
local p = ARGV[1]
local members = redis.call('ZRANGE', p .. ':settled', '-inf', '(' .. ARGV[2], 'BYSCORE',
                           'LIMIT', 0, tonumber(ARGV[3]))
local dropped = 0
for _, m in ipairs(members) do
  local id, status, session = string.match(m, '^([^|]*)|([^|]*)|(.*)$')
  dropped = dropped + redis.call('DEL', p .. ':c:' .. id)
  redis.call('DEL', p .. ':ev:' .. id)
  redis.call('ZREM', p .. ':index', id)
  redis.call('ZREM', p .. ':session:' .. session, id)
  redis.call('ZREM', p .. ':status:' .. status, id)
  redis.call('ZREM', p .. ':settled', m)
end
return {dropped, #members}
"""
