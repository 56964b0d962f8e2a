//! The Redis Lua scripts of the buy path, in one place: seckill-service reserves and undoes,
//! order-service claims and settles. Each runs atomically on the keys of one sale, or of one
//! bucket of a sale split into several (one hash slot; see `keys`). Reservations are recorded as `users[user] = request_id`, turned into
//! `c:<request_id>` when the order consumer claims them, so a late undo can never take back a
//! reservation that is already becoming an order, and into `o:<request_id>` once it is one.
//! Every script that gives a unit back checks the stock key exists: after Redis lost its data,
//! only a load (with its epoch) may create it.

/// Reserve one unit.
/// KEYS: stock, users, pending, result, token, epoch. ARGV: user, request id, now (ms), path
/// token (empty when not required).
/// Returns `{code, epoch}`: code is the units left after this reservation (>= 0) or a refusal
/// code below; epoch is the sale's epoch, which the request's message carries.
/// Order of checks: the sale is loaded (else nothing is touched, not even the token, so the
/// caller can load it and call again); repeat (a buyer who holds a unit is told so whatever
/// token the click carries, and a repeat click never touches the token or the stock); token
/// (a wrong one consumes nothing); stock, which never goes below zero.
pub const RESERVE: &str = r"
local stock = tonumber(redis.call('GET', KEYS[1]))
if stock == nil then return {-2, false} end
local epoch = redis.call('GET', KEYS[6])
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return {-1, epoch} end
if ARGV[4] ~= '' then
  if redis.call('GET', KEYS[5]) ~= ARGV[4] then return {-3, epoch} end
  redis.call('DEL', KEYS[5])
end
if stock <= 0 then return {-4, epoch} end
redis.call('DECR', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1] .. ':' .. ARGV[2])
redis.call('SET', KEYS[4], 'queued')
return {stock - 1, epoch}
";

pub const RESERVE_REPEATED: i64 = -1;
pub const RESERVE_NOT_LOADED: i64 = -2;
pub const RESERVE_BAD_TOKEN: i64 = -3;
pub const RESERVE_SOLD_OUT: i64 = -4;

/// Load a sale's data into Redis, unless its stock is there already (then nothing changes).
/// KEYS: stock, epoch, holdback. ARGV: stock, new epoch, units held back ('' when none: a
/// sale loaded for the first time has nothing in flight).
/// Returns 1 if loaded now. The stock key goes last: until it exists the reserve script
/// answers "not loaded", so nobody reserves against a half-written sale.
pub const LOAD: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
if ARGV[3] == '' then redis.call('DEL', KEYS[3]) else redis.call('SET', KEYS[3], ARGV[3]) end
redis.call('SET', KEYS[1], ARGV[1])
return 1
";

/// Give back a reservation that no order consumer has claimed.
/// KEYS: stock, users, pending, result. ARGV: user, request id, result to leave (empty: delete).
/// Returns 1 if given back, 0 if it was claimed (or is gone): then it is the consumer's.
pub const UNDO: &str = r"
redis.call('ZREM', KEYS[3], ARGV[1] .. ':' .. ARGV[2])
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('INCR', KEYS[1])
if ARGV[3] == '' then redis.call('DEL', KEYS[4]) else redis.call('SET', KEYS[4], ARGV[3]) end
return 1
";

/// The order consumer claims the reservation its message stands for.
/// KEYS: users, pending, epoch, stock, holdback. ARGV: user, request id, the message's epoch
/// ('' from a producer older than epochs).
/// Returns [`CLAIMED`] when the reservation is this request's (claimed now or before),
/// [`GIVEN_BACK`] when it was given back in the epoch it was taken in (the publisher's confirm
/// failed): drop the message; [`LOST`] when Redis lost it (the sale was reloaded since, or is
/// not loaded): the request is served against the authorities. A lost request of a buyer who
/// holds nothing is registered as claimed, so a repeat click is told REPEATED and a rebuild
/// counts it in flight; once the sale is loaded again, its unit comes out of the units held
/// back (or, past those, the stock).
pub const CLAIM: &str = r"
local held = redis.call('HGET', KEYS[1], ARGV[1])
if held == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], 'c:' .. ARGV[2])
  redis.call('ZREM', KEYS[2], ARGV[1] .. ':' .. ARGV[2])
  return 1
end
if held == 'c:' .. ARGV[2] or held == 'o:' .. ARGV[2] then return 1 end
local epoch = redis.call('GET', KEYS[3])
if ARGV[3] == '' or epoch == ARGV[3] then return 0 end
if not held then
  redis.call('HSET', KEYS[1], ARGV[1], 'c:' .. ARGV[2])
  if not epoch then return 2 end
  if (tonumber(redis.call('GET', KEYS[5])) or 0) > 0 then
    redis.call('DECR', KEYS[5])
  elseif (tonumber(redis.call('GET', KEYS[4])) or 0) > 0 then
    redis.call('DECR', KEYS[4])
  end
end
return 2
";

pub const CLAIMED: i64 = 1;
pub const GIVEN_BACK: i64 = 0;
pub const LOST: i64 = 2;

/// A request became an order: the buyer's result, and their reservation marked as an order
/// (unless the buyer holds another request's reservation, which settles on its own).
/// KEYS: users, result. ARGV: user, request id, order id, the sale's notice channel.
/// The result scripts publish their result on the channel (`crate::push::Notice`) in the same
/// atomic step that writes it: no notice of a result Redis does not hold.
pub const SUCCEED: &str = r"
redis.call('SET', KEYS[2], 'success:' .. ARGV[3])
local held = redis.call('HGET', KEYS[1], ARGV[1])
if held == ARGV[2] or held == 'c:' .. ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], 'o:' .. ARGV[2])
end
redis.call('PUBLISH', ARGV[4], ARGV[1] .. ':s:' .. ARGV[3])
return 1
";

/// A claimed request that ends without an order: the user may try again; the unit goes back to
/// the Redis stock only when it exists at the authority (`give_back` = '1').
/// KEYS: stock, users, result. ARGV: user, request id, give_back, the sale's notice channel.
/// Also takes an unclaimed reservation of the same request (a message that ran out of tries
/// before its claim succeeded).
pub const FAIL_CLAIMED: &str = r"
local held = redis.call('HGET', KEYS[2], ARGV[1])
if held == 'c:' .. ARGV[2] or held == ARGV[2] then
  redis.call('HDEL', KEYS[2], ARGV[1])
  if ARGV[3] == '1' and redis.call('EXISTS', KEYS[1]) == 1 then redis.call('INCR', KEYS[1]) end
end
redis.call('SET', KEYS[3], 'failed')
redis.call('PUBLISH', ARGV[4], ARGV[1] .. ':f')
return 1
";

/// A request whose buyer already holds another active order of the sale (its deduction was
/// released at the authority): the buyer's result is that order, their reservation becomes
/// it, and the unit this request held in Redis goes back to the stock.
/// KEYS: stock, users, result. ARGV: user, request id, the order's request id, the order's id,
/// the sale's notice channel.
pub const SUPERSEDE: &str = r"
local held = redis.call('HGET', KEYS[2], ARGV[1])
if held == ARGV[2] or held == 'c:' .. ARGV[2] then
  if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('INCR', KEYS[1]) end
  redis.call('HSET', KEYS[2], ARGV[1], 'o:' .. ARGV[3])
end
redis.call('SET', KEYS[3], 'success:' .. ARGV[4])
redis.call('PUBLISH', ARGV[5], ARGV[1] .. ':s:' .. ARGV[4])
return 1
";

/// Orders' units came back at the authority (cancelled or expired): back to the Redis stock,
/// and their buyers may try again. Idempotent: only the reservation of each named request is
/// undone, so a repeated or stale pair is a no-op.
/// KEYS: stock, users, then the result key of each pair's user. ARGV: user, request id, for
/// each pair. Returns how many were restored now.
pub const RESTORE: &str = r"
local n = 0
for i = 1, #ARGV, 2 do
  local held = redis.call('HGET', KEYS[2], ARGV[i])
  if held == 'c:' .. ARGV[i + 1] or held == 'o:' .. ARGV[i + 1] then
    redis.call('HDEL', KEYS[2], ARGV[i])
    redis.call('DEL', KEYS[2 + (i + 1) / 2])
    n = n + 1
  end
end
if n > 0 and redis.call('EXISTS', KEYS[1]) == 1 then redis.call('INCRBY', KEYS[1], n) end
return n
";

/// A consistent look at one bucket of a sale's Redis data (a sale of one bucket: the sale),
/// for the audit and the repair.
/// KEYS: stock, users, pending, epoch, holdback, transfers out.
/// Returns strings: stock, epoch, holdback (each false when absent), the number of
/// reservations that are orders, the number of pending entries, the units this bucket gave
/// and nobody has settled (in transit), then the request id of every reservation that is not
/// an order yet (reserved or claimed).
/// O(reservations): a sale's audit or repair, never a request's path.
pub const SNAPSHOT: &str = r"
local out = {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[4]), redis.call('GET', KEYS[5]), '0',
  tostring(redis.call('ZCARD', KEYS[3])), '0'}
local ordered = 0
for _, v in ipairs(redis.call('HVALS', KEYS[2])) do
  local kind = string.sub(v, 1, 2)
  if kind == 'o:' then ordered = ordered + 1
  elseif kind == 'c:' then out[#out + 1] = string.sub(v, 3)
  else out[#out + 1] = v end
end
out[4] = tostring(ordered)
local transit = 0
for _, v in ipairs(redis.call('HVALS', KEYS[6])) do
  transit = transit + (tonumber(string.match(v, '^%d+|(%d+)|')) or 0)
end
out[6] = tostring(transit)
return out
";

/// Corrects a sale's Redis stock by `delta` (computed from a snapshot and the authority), unless
/// the sale was reloaded since the snapshot; never below zero. `end_recovery` = '1' also ends
/// the recovery (the held-back units are in the corrected count).
/// KEYS: stock, epoch, holdback. ARGV: the snapshot's epoch, delta, end_recovery.
/// Returns the new stock, or false when nothing was changed.
pub const ADJUST: &str = r"
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return false end
local s = tonumber(redis.call('GET', KEYS[1]))
if s == nil then return false end
s = s + tonumber(ARGV[2])
if s < 0 then s = 0 end
redis.call('SET', KEYS[1], s)
if ARGV[3] == '1' then redis.call('DEL', KEYS[3]) end
return s
";

/// Moves units between two buckets of one sale (`keys::SaleBucket`), each on its own slot, so
/// no one script can touch both: a transfer is three scripts, and a unit is never lost or
/// counted twice whichever of them a dying process did not run. TAKE takes the units from the
/// giving bucket and logs the transfer there; GIVE adds them to the receiving bucket unless it
/// has seen the transfer already; SETTLE drops the log entry. The units of a logged transfer
/// are in transit: in neither bucket's stock until GIVE ran, and the reconciler runs GIVE and
/// SETTLE for an entry that stays (it reads them with HGETALL).
///
/// TAKE. KEYS: the giving bucket's stock, its transfers out. ARGV: transfer id, the receiving
/// bucket, most units to take, now (ms).
/// Takes half of what the bucket holds (rounded up), at most the most asked: a bucket that
/// ran dry is given enough for its buyers for a while, and the giving one keeps the rest of
/// its own. Returns the units taken; 0 when the bucket is empty and sends nothing;
/// [`TRANSFER_EMPTY_SENDING`] when it is empty but a transfer it took less than a second ago
/// is still between its steps (its units maybe on their way to the asking bucket: not yet a
/// reason to say sold out); [`TRANSFER_EMPTY_STRANDED`] when it is empty and only older
/// transfers are unfinished (their process died between the steps: the caller may finish
/// them, as the reconciler would); [`TRANSFER_NOT_LOADED`] (-1) when it is not loaded.
pub const TRANSFER_TAKE: &str = r"
local s = tonumber(redis.call('GET', KEYS[1]))
if s == nil then return -1 end
local k = math.min(tonumber(ARGV[3]), math.floor((s + 1) / 2))
if k <= 0 then
  local stranded = 0
  for _, v in ipairs(redis.call('HVALS', KEYS[2])) do
    local at = tonumber(string.match(v, '|(%d+)$')) or 0
    if tonumber(ARGV[4]) - at < 1000 then return -2 end
    stranded = -3
  end
  return stranded
end
redis.call('DECRBY', KEYS[1], k)
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. '|' .. k .. '|' .. ARGV[4])
return k
";

pub const TRANSFER_NOT_LOADED: i64 = -1;
pub const TRANSFER_EMPTY_SENDING: i64 = -2;
pub const TRANSFER_EMPTY_STRANDED: i64 = -3;

/// GIVE. KEYS: the receiving bucket's stock, its transfers in. ARGV: transfer id, units, now
/// (ms). Returns 1 when the units were added now, 0 when this transfer was given before, -1
/// when the bucket is not loaded (the units stay in transit: a load of the bucket counts them
/// out, and the reconciler gives them once it is loaded).
pub const TRANSFER_GIVE: &str = r"
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then return 0 end
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
redis.call('INCRBY', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
return 1
";

/// SETTLE. KEYS: the giving bucket's transfers out. ARGV: transfer id. The transfer is done.
pub const TRANSFER_SETTLE: &str = r"
return redis.call('HDEL', KEYS[1], ARGV[1])
";

/// The path token: the same unused token while it lives, a new one after.
/// KEYS: token. ARGV: new token, ttl seconds. Returns the token to hand out.
pub const PATH_TOKEN: &str = r"
local current = redis.call('GET', KEYS[1])
if current then return current end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return ARGV[1]
";

/// The gateway's shared rate limit: a GCRA bucket per (class, user or address), kept in Redis so
/// every gateway replica takes from the same one. The clock is Redis' own (`TIME`): the
/// replicas' clocks may disagree, the bucket's may not.
///
/// One call serves a batch of requests (the gateway gathers those waiting while its previous
/// call was out): one script run and one `TIME` for all of them, the cost of a call shared.
/// A key may appear more than once; each takes from the bucket as the ones before it left it.
/// KEYS: the buckets. ARGV: per key, three values: emission interval (µs, 1 s / rate), burst,
/// tokens wanted (>= 1). Returns per key two integers, `granted, wait_us`: granted tokens (0 to
/// wanted, as many as conform now; each moves the bucket's theoretical arrival time one
/// interval on), and when none is granted how long until one would be. A key lives as long as
/// its bucket is not full again.
pub const RATE_LIMIT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {}
for i, key in ipairs(KEYS) do
  local interval = tonumber(ARGV[3 * i - 2])
  local tolerance = (tonumber(ARGV[3 * i - 1]) - 1) * interval
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < now then tat = now end
  local room = tolerance - (tat - now)
  if room < 0 then
    out[2 * i - 1] = 0
    out[2 * i] = -room
  else
    local granted = math.min(tonumber(ARGV[3 * i]), math.floor(room / interval) + 1)
    tat = tat + granted * interval
    redis.call('SET', key, string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000) + 1)
    out[2 * i - 1] = granted
    out[2 * i] = 0
  end
end
return out
";

/// The value of a result key, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoredResult {
    Queued,
    Success(i64),
    Failed,
    /// The order authority had no order of this buyer when asked (kept a few seconds, so a
    /// buyer polling a sale Redis knows nothing of does not query the database each time).
    NoOrder,
}

impl StoredResult {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "queued" => Some(Self::Queued),
            "failed" => Some(Self::Failed),
            "none" => Some(Self::NoOrder),
            _ => s.strip_prefix("success:").and_then(|id| id.parse().ok()).map(Self::Success),
        }
    }

    pub fn encode(self) -> String {
        match self {
            Self::Queued => "queued".into(),
            Self::Success(id) => format!("success:{id}"),
            Self::Failed => "failed".into(),
            Self::NoOrder => "none".into(),
        }
    }
}

/// A sale's epoch: a new one each time the sale's data is loaded into Redis. Its high bits are
/// the load time in Unix milliseconds (how long a recovery has lasted), its low bits random
/// (two replicas loading in the same millisecond differ). Stored and compared as a decimal
/// string, never as a Lua number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Epoch(u64);

impl Epoch {
    const RANDOM_BITS: u32 = 12;

    pub fn new(now_ms: i64) -> Self {
        let random = u64::from(uuid::Uuid::new_v4().as_u128() as u16) & ((1 << Self::RANDOM_BITS) - 1);
        Self((u64::try_from(now_ms).unwrap_or(0) << Self::RANDOM_BITS) | random)
    }

    pub fn parse(s: &str) -> Option<Self> {
        s.parse().ok().map(Self)
    }

    /// When the sale was loaded, Unix milliseconds.
    pub fn loaded_at_ms(self) -> i64 {
        i64::try_from(self.0 >> Self::RANDOM_BITS).unwrap_or(i64::MAX)
    }
}

impl std::fmt::Display for Epoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_results_round_trip() {
        for r in
            [StoredResult::Queued, StoredResult::Success(42), StoredResult::Failed, StoredResult::NoOrder]
        {
            assert_eq!(StoredResult::parse(&r.encode()), Some(r));
        }
        assert_eq!(StoredResult::parse("success:x"), None);
    }

    #[test]
    fn epochs_carry_their_load_time_and_differ() {
        let now = 1_764_500_000_000;
        let a = Epoch::new(now);
        assert_eq!(a.loaded_at_ms(), now);
        assert_eq!(Epoch::parse(&a.to_string()), Some(a));
        assert!((0..20).map(|_| Epoch::new(now)).any(|b| b != a), "random low bits");
    }
}
