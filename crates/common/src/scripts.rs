//! The Redis Lua scripts of the buy path, in one place: seckill-service reserves and undoes,
//! order-service claims and settles. Each runs atomically on the keys of one sale (one hash
//! slot; see `keys`). Reservations are recorded as `users[user] = request_id`, turned into
//! `c:<request_id>` when the order consumer claims them, so a late undo can never take back a
//! reservation that is already becoming an order.

/// Reserve one unit.
/// KEYS: stock, users, pending, result, token. ARGV: user, request id, now (ms), path token
/// (empty when not required).
/// Returns the units left after this reservation (>= 0), or a refusal code below.
/// Order of checks: the sale is loaded (else nothing is touched, not even the token, so the
/// caller can load it and call again); repeat (a buyer who holds a unit is told so whatever
/// token the click carries, and a repeat click never touches the token or the stock); token
/// (a wrong one consumes nothing); stock, which never goes below zero.
pub const RESERVE: &str = r"
local stock = tonumber(redis.call('GET', KEYS[1]))
if stock == nil then return -2 end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return -1 end
if ARGV[4] ~= '' then
  if redis.call('GET', KEYS[5]) ~= ARGV[4] then return -3 end
  redis.call('DEL', KEYS[5])
end
if stock <= 0 then return -4 end
redis.call('DECR', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1] .. ':' .. ARGV[2])
redis.call('SET', KEYS[4], 'queued')
return stock - 1
";

pub const RESERVE_REPEATED: i64 = -1;
pub const RESERVE_NOT_LOADED: i64 = -2;
pub const RESERVE_BAD_TOKEN: i64 = -3;
pub const RESERVE_SOLD_OUT: i64 = -4;

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
/// KEYS: users, pending. ARGV: user, request id.
/// Returns 1 when the reservation is this request's (claimed now or before), 0 when it was
/// given back (the publisher's confirm failed, or the reconciler undid it): drop the message.
pub const CLAIM: &str = r"
local held = redis.call('HGET', KEYS[1], ARGV[1])
if held == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], 'c:' .. ARGV[2])
  redis.call('ZREM', KEYS[2], ARGV[1] .. ':' .. ARGV[2])
  return 1
end
if held == 'c:' .. ARGV[2] then return 1 end
return 0
";

/// A claimed request that ends without an order: the user may try again; the unit goes back to
/// the Redis stock only when it exists at the authority (`give_back` = '1').
/// KEYS: stock, users, result. ARGV: user, request id, give_back.
/// Also takes an unclaimed reservation of the same request (a message that ran out of tries
/// before its claim succeeded).
pub const FAIL_CLAIMED: &str = r"
local held = redis.call('HGET', KEYS[2], ARGV[1])
if held == 'c:' .. ARGV[2] or held == ARGV[2] then
  redis.call('HDEL', KEYS[2], ARGV[1])
  if ARGV[3] == '1' then redis.call('INCR', KEYS[1]) end
end
redis.call('SET', KEYS[3], 'failed')
return 1
";

/// An order's unit came back at the authority (cancelled or expired): back to the Redis stock,
/// and the buyer may try again. Idempotent: only the reservation of that request is undone.
/// KEYS: stock, users, result. ARGV: user, request id. Returns 1 if restored now.
pub const RESTORE: &str = r"
if redis.call('HGET', KEYS[2], ARGV[1]) ~= 'c:' .. ARGV[2] then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('INCR', KEYS[1])
redis.call('DEL', KEYS[3])
return 1
";

/// The path token: the same unused token while it lives, a new one after.
/// KEYS: token. ARGV: new token, ttl seconds. Returns the token to hand out.
pub const PATH_TOKEN: &str = r"
local current = redis.call('GET', KEYS[1])
if current then return current end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return ARGV[1]
";

/// The value of a result key, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoredResult {
    Queued,
    Success(i64),
    Failed,
}

impl StoredResult {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "queued" => Some(Self::Queued),
            "failed" => Some(Self::Failed),
            _ => s.strip_prefix("success:").and_then(|id| id.parse().ok()).map(Self::Success),
        }
    }

    pub fn encode(self) -> String {
        match self {
            Self::Queued => "queued".into(),
            Self::Success(id) => format!("success:{id}"),
            Self::Failed => "failed".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_results_round_trip() {
        for r in [StoredResult::Queued, StoredResult::Success(42), StoredResult::Failed] {
            assert_eq!(StoredResult::parse(&r.encode()), Some(r));
        }
        assert_eq!(StoredResult::parse("success:x"), None);
    }
}
