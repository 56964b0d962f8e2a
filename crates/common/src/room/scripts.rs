//! The waiting room's Lua scripts, each on the keys of one sale (`keys::RedisKeys::room*`,
//! one hash slot).
//!
//! The room's hash (`RedisKeys::room`) holds: `before`, `after` (join numbers handed out so
//! far in each phase) and `before_cap`, `after_cap` (how far stock-service has leased them:
//! no number at or past a cap is handed out, so a Redis that loses everything starts again
//! from the caps and reissues none); `closed` (joins go to the back from now on); `drawn` (how
//! many joined before the opening, fixed by the draw); `admitted_milli` (places admitted,
//! times 1000, so a rate below one a tick still moves), `admitted_cap` (how far stock-service
//! has leased the admissions), `paused_until` (no admission before this instant, Unix ms),
//! `at` (the last advance, Unix ms), `rate` (places a second now) and `busy` (buy requests
//! of admitted buyers refused `BUSY` since the last look, for the `auto` rate).
//!
//! Numbers are written with `%.0f`: Lua's numbers are doubles, and `tostring` would write a
//! large one in exponent form.

/// A join code after the opening: the back of the queue, in arrival order. Codes below it
/// are joins before the opening, placed by the draw.
pub const AFTER_BASE: u64 = 1 << 40;

/// Replies of [`JOIN`] other than a code.
pub const JOIN_NOT_LOADED: i64 = -1;
pub const JOIN_LEASE_BEFORE: i64 = -2;
pub const JOIN_LEASE_AFTER: i64 = -3;
/// A new place needs proof of work and none came; or its challenge was used before.
pub const JOIN_WORK_NEEDED: i64 = -4;
pub const JOIN_WORK_USED: i64 = -5;

/// A buyer's place: the one they hold, or, presenting a ticket (a code this room signed), that
/// one, or a new one at the end of the current phase (before the opening until the first call
/// at or after it, or the draw, closes it).
/// A new place on a room that asks for proof of work takes a challenge's nonce, once.
/// KEYS: room, the user's member group, the challenge's key (`RedisKeys::room_work`; any key
/// of the room when none). ARGV: user id, now (ms), the sale's start (ms), the ticket's code
/// or '', '1' when a new place needs work, the challenge's time to live (ms) or '' when none
/// came.
/// Returns the code, or JOIN_WORK_* (403), or JOIN_NOT_LOADED (the room is not in Redis: load
/// it from stock-service's marks), or JOIN_LEASE_* (the phase's leased numbers are used up:
/// lease more, raise the cap). The challenge is taken last, so a join that must lease first
/// keeps it for its next round.
pub const JOIN: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
  return tonumber(ARGV[4])
end
local have = redis.call('HGET', KEYS[2], ARGV[1])
if have then return tonumber(have) end
if ARGV[5] == '1' and ARGV[6] == '' then return -4 end
local phase = 'before'
if redis.call('HEXISTS', KEYS[1], 'closed') == 1 or tonumber(ARGV[2]) >= tonumber(ARGV[3]) then
  redis.call('HSET', KEYS[1], 'closed', '1')
  phase = 'after'
end
local n = tonumber(redis.call('HGET', KEYS[1], phase) or '0')
if n >= tonumber(redis.call('HGET', KEYS[1], phase .. '_cap') or '0') then
  if phase == 'before' then return -2 else return -3 end
end
if ARGV[5] == '1' and not redis.call('SET', KEYS[3], '1', 'NX', 'PX', ARGV[6]) then return -5 end
redis.call('HSET', KEYS[1], phase, string.format('%.0f', n + 1))
local code = n
if phase == 'after' then code = n + 1099511627776 end
redis.call('HSET', KEYS[2], ARGV[1], string.format('%.0f', code))
return code
";

/// Puts a room into Redis from stock-service's marks, unless it is there. Every count starts
/// at what was leased (an upper bound of what was handed out), so no number is given twice
/// and no place admitted twice; admissions wait until the lease's instant. The marks come
/// back from the leader's marks stock-service kept (`<instant>:<admitted>`, oldest first), and
/// the places admitted past them get a mark of this instant.
/// KEYS: room, marks. ARGV: joins_before, joins_after, drawn or '', admitted, admitted_at_ms,
/// now, start (ms), then the kept marks. Returns 1 if loaded by this call.
pub const LOAD: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'before', ARGV[1], 'before_cap', ARGV[1], 'after', ARGV[2],
  'after_cap', ARGV[2], 'admitted_milli', string.format('%.0f', tonumber(ARGV[4]) * 1000),
  'admitted_cap', ARGV[4], 'paused_until', ARGV[5], 'at', ARGV[6])
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'drawn', ARGV[3]) end
if ARGV[3] ~= '' or tonumber(ARGV[6]) >= tonumber(ARGV[7]) then redis.call('HSET', KEYS[1], 'closed', '1') end
for i = 8, #ARGV do redis.call('RPUSH', KEYS[2], ARGV[i]) end
if tonumber(ARGV[4]) > 0 then redis.call('RPUSH', KEYS[2], ARGV[6] .. ':' .. ARGV[4]) end
return 1
";

/// Raises a cap (`before_cap`, `after_cap` or `admitted_cap`) to what stock-service leased.
/// KEYS: room. ARGV: field, value. Returns 0 if the room is not in Redis.
pub const RAISE_CAP: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local cap = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if tonumber(ARGV[2]) > cap then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
return 1
";

/// Closes the joins before the opening and says how many there were: the size of the draw.
/// KEYS: room. Returns the count, or -1 if the room is not in Redis.
pub const CLOSE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
redis.call('HSET', KEYS[1], 'closed', '1')
return tonumber(redis.call('HGET', KEYS[1], 'before') or '0')
";

/// Records the draw's size, as stock-service kept it (the first draw wins there).
/// KEYS: room. ARGV: drawn. Returns 0 if the room is not in Redis.
pub const DRAWN: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'drawn', ARGV[1])
return 1
";

/// Whether this replica leads the room (moves its admissions): it takes the lead if nobody
/// holds it, keeps it if it does.
/// KEYS: leader. ARGV: replica id, lease (ms). Returns 1 when this replica leads.
pub const LEAD: &str = r"
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
";

/// Moves the admissions on at `rate` a second since the last advance: never past the places
/// that exist (no credit saved up while the queue is empty), never past the leased cap, never
/// before `paused_until`, and crediting at most `most_ms` since the last advance (a leader
/// that takes over from a dead one, or one whose ticks were late, does not let in at once what
/// the gap would have). Records a mark (instant, places admitted) when a place came up, the
/// last `keep` marks kept. Reads and clears the busy count.
/// KEYS: room, marks, busy. ARGV: now (ms), rate (places a second), keep, most_ms.
/// Returns {admitted, admitted_cap, busy}, or {-1, 0, 0} before the draw or if not loaded.
pub const ADVANCE: &str = r"
local h = redis.call('HMGET', KEYS[1], 'drawn', 'after', 'admitted_milli', 'admitted_cap', 'paused_until', 'at')
if not h[1] then return {-1, 0, 0} end
local now = tonumber(ARGV[1])
local total = tonumber(h[1]) + tonumber(h[2] or '0')
local w = tonumber(h[3] or '0')
local cap = tonumber(h[4] or '0')
local from = math.max(tonumber(h[6] or ARGV[1]), tonumber(h[5] or '0'), now - tonumber(ARGV[4]))
local moved = w
if now > from then moved = w + tonumber(ARGV[2]) * (now - from) end
moved = math.max(w, math.min(moved, total * 1000, cap * 1000))
redis.call('HSET', KEYS[1], 'admitted_milli', string.format('%.0f', moved), 'at', ARGV[1], 'rate', ARGV[2])
local busy = tonumber(redis.call('GET', KEYS[3]) or '0')
redis.call('DEL', KEYS[3])
local places = math.floor(moved / 1000)
if places > math.floor(w / 1000) then
  redis.call('RPUSH', KEYS[2], ARGV[1] .. ':' .. string.format('%.0f', places))
  redis.call('LTRIM', KEYS[2], -tonumber(ARGV[3]), -1)
end
return {places, cap, busy}
";

/// A room's state for every replica's memory: HMGET of `drawn`, `after`, `admitted_milli`,
/// `rate`, then the last [`RECENT_MARKS`] marks (no script: two commands in one pipeline).
pub const VIEW_FIELDS: [&str; 4] = ["drawn", "after", "admitted_milli", "rate"];
/// Marks a replica reads each tick: the leader's of the last 3 seconds, so a replica that
/// missed some ticks still learns the instant of every place that came up.
pub const RECENT_MARKS: isize = 32;
