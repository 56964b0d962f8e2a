//! Redis key names, in one place.
//!
//! Every key of one sale carries the hash tag `{<goods_id>}`, so all of them hash to one Redis
//! Cluster slot and the gate script, which touches several, stays legal on a cluster. A sale
//! whose stock is split into buckets has one such set of keys per bucket, each bucket its own
//! tag and slot ([`SaleBucket`]).

use crate::ids::{GoodsId, UserId};

/// Hashes a waiting room's members are spread over (see [`RedisKeys::room_members`]).
pub const ROOM_MEMBER_GROUPS: u32 = 65_536;

/// Groups of rate-limit buckets, each its own hash slot on a cluster: enough to spread the
/// buckets over the primaries, few enough that a batch of asks still shares calls.
pub const RATE_LIMIT_GROUPS: u16 = 16;

/// A rate-limit bucket's group (`0..RATE_LIMIT_GROUPS`), from the user id or address alone:
/// every gateway replica puts one bucket in one group. FNV-1a, stable across builds.
pub fn rate_limit_group(who: &str) -> u16 {
    let hash =
        who.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    u16::try_from(hash % u64::from(RATE_LIMIT_GROUPS)).unwrap_or_default()
}

/// One bucket of a sale whose stock is split over several keys, each its own hash slot, so a
/// sale too hot for one Redis Cluster shard spreads over several. Bucket 0 is the sale's own
/// tag (`{<goods id>}`: a sale of one bucket is any sale); bucket `b` is tagged
/// `{<goods id>:b<b>}`, which no sale's tag (digits alone) can be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SaleBucket {
    pub goods: GoodsId,
    pub bucket: u8,
}

impl SaleBucket {
    pub fn new(goods: GoodsId, bucket: u8) -> Self {
        Self { goods, bucket }
    }

    /// The bucket that serves user `u` in a sale of `buckets` buckets: always the same one, so
    /// one-per-user stays a check on one bucket.
    pub fn of_user(goods: GoodsId, buckets: u8, u: UserId) -> Self {
        let n = u64::from(buckets.max(1));
        Self { goods, bucket: u8::try_from(u.get().unsigned_abs() % n).unwrap_or_default() }
    }

    /// Every bucket of a sale of `buckets` buckets, bucket 0 first.
    pub fn all(goods: GoodsId, buckets: u8) -> impl Iterator<Item = Self> + Clone {
        (0..buckets.max(1)).map(move |bucket| Self { goods, bucket })
    }

    /// The hash tag's content, written straight into the key (no string of its own: the key
    /// names are built on every click).
    fn tag(self) -> BucketTag {
        BucketTag(self)
    }
}

struct BucketTag(SaleBucket);

impl std::fmt::Display for BucketTag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.bucket {
            0 => write!(f, "{}", self.0.goods),
            b => write!(f, "{}:b{b}", self.0.goods),
        }
    }
}

/// Builds key names under an optional prefix (tests give each run its own).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RedisKeys {
    prefix: String,
}

impl RedisKeys {
    pub fn new(prefix: impl Into<String>) -> Self {
        Self { prefix: prefix.into() }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The gateway's shared rate-limit bucket of one class of routes for one user id or client
    /// address (`scripts::RATE_LIMIT`). Its hash tag is the bucket's group
    /// ([`rate_limit_group`]): one script call takes many buckets, and on a cluster all the
    /// keys of one call must share a slot, so the gateway makes one call per group.
    pub fn rate_limit(&self, class: &str, who: &str) -> String {
        format!("{}seckill:rl:{{rl{}}}:{class}:{who}", self.prefix, rate_limit_group(who))
    }

    /// Units left to reserve (an integer).
    pub fn stock(&self, g: GoodsId) -> String {
        self.bucket_stock(SaleBucket::new(g, 0))
    }

    /// Hash of the users holding a reservation: user id -> the request id that holds it, bare
    /// while only reserved, `c:<id>` once the order consumer has claimed it, `o:<id>` once it is
    /// an order.
    pub fn users(&self, g: GoodsId) -> String {
        self.bucket_users(SaleBucket::new(g, 0))
    }

    /// Sorted set of reservations not yet confirmed by the broker, scored by reservation time
    /// in milliseconds: what the reconciler looks at.
    pub fn pending(&self, g: GoodsId) -> String {
        self.bucket_pending(SaleBucket::new(g, 0))
    }

    /// A user's result: `queued`, `success:<order id>` or `failed`.
    pub fn result(&self, g: GoodsId, u: UserId) -> String {
        self.bucket_result(SaleBucket::new(g, 0), u)
    }

    /// The sale's pub/sub channel of notices to the gateways (`crate::push::Notice`): results
    /// as order-service writes them, sold out as seckill-service sees it.
    pub fn sale_events(&self, g: GoodsId) -> String {
        format!("{}seckill:{{{g}}}:events", self.prefix)
    }

    /// Marks a gateway stream ticket spent (its nonce), for the ticket's life.
    pub fn stream_ticket(&self, g: GoodsId, nonce: &str) -> String {
        format!("{}seckill:{{{g}}}:stream:{nonce}", self.prefix)
    }

    /// The sale whose channel [`RedisKeys::sale_events`] named `channel`.
    pub fn sale_of_events(&self, channel: &str) -> Option<GoodsId> {
        let id = channel
            .strip_prefix(self.prefix.as_str())?
            .strip_prefix("seckill:{")?
            .strip_suffix("}:events")?;
        GoodsId::new(id.parse().ok()?)
    }

    /// A user's path token for one sale.
    pub fn token(&self, g: GoodsId, u: UserId) -> String {
        self.bucket_token(SaleBucket::new(g, 0), u)
    }

    /// The sale's epoch: a new value each time its data is loaded into Redis, carried by each
    /// reservation's message, so the order consumer can tell a reservation given back (same
    /// epoch) from one Redis lost (the epoch changed or is gone). See `scripts::Epoch`.
    pub fn epoch(&self, g: GoodsId) -> String {
        self.bucket_epoch(SaleBucket::new(g, 0))
    }

    /// Present while the sale recovers from a loss of its Redis data: the units held back for
    /// accepted requests that were still in the queue when it happened (an upper bound, from the
    /// broker's count), so that nobody is accepted for a unit one of them will take.
    pub fn holdback(&self, g: GoodsId) -> String {
        self.bucket_holdback(SaleBucket::new(g, 0))
    }

    /// Held by the one instance rebuilding the sale's data from the authorities.
    pub fn rebuild_lock(&self, g: GoodsId) -> String {
        format!("{}seckill:{{{g}}}:rebuilding", self.prefix)
    }

    /// The stock of one bucket of a sale (see [`SaleBucket`]); a sale's own keys above are
    /// those of its bucket 0.
    pub fn bucket_stock(&self, at: SaleBucket) -> String {
        format!("{}seckill:{{{}}}:stock", self.prefix, at.tag())
    }

    /// As [`RedisKeys::users`], for one bucket of a sale.
    pub fn bucket_users(&self, at: SaleBucket) -> String {
        format!("{}seckill:{{{}}}:users", self.prefix, at.tag())
    }

    /// As [`RedisKeys::pending`], for one bucket of a sale.
    pub fn bucket_pending(&self, at: SaleBucket) -> String {
        format!("{}seckill:{{{}}}:pending", self.prefix, at.tag())
    }

    /// As [`RedisKeys::result`], for one bucket of a sale.
    pub fn bucket_result(&self, at: SaleBucket, u: UserId) -> String {
        format!("{}seckill:{{{}}}:result:{u}", self.prefix, at.tag())
    }

    /// As [`RedisKeys::token`], for one bucket of a sale.
    pub fn bucket_token(&self, at: SaleBucket, u: UserId) -> String {
        format!("{}seckill:{{{}}}:token:{u}", self.prefix, at.tag())
    }

    /// As [`RedisKeys::holdback`], for one bucket of a sale: each bucket rebuilt after a loss
    /// holds its own count, which the order consumer's claim of a lost request in that bucket
    /// takes from.
    pub fn bucket_holdback(&self, at: SaleBucket) -> String {
        format!("{}seckill:{{{}}}:holdback", self.prefix, at.tag())
    }

    /// As [`RedisKeys::epoch`], for one bucket of a sale.
    pub fn bucket_epoch(&self, at: SaleBucket) -> String {
        format!("{}seckill:{{{}}}:epoch", self.prefix, at.tag())
    }

    /// Units a bucket gave away and the bucket they went to has not yet been seen to hold:
    /// hash transfer id -> `<to bucket>|<units>|<taken at, ms>`. An entry lives from the take
    /// to the settle; one left behind (the process died between) is what the reconciler
    /// finishes (`scripts::TRANSFER_GIVE`, then `TRANSFER_SETTLE`).
    pub fn transfers_out(&self, at: SaleBucket) -> String {
        format!("{}seckill:{{{}}}:transfers:out", self.prefix, at.tag())
    }

    /// The transfers a bucket has received: sorted set of transfer ids scored by when (ms), so
    /// a transfer given twice (a reconciler and the process that took it) adds its units once.
    pub fn transfers_in(&self, at: SaleBucket) -> String {
        format!("{}seckill:{{{}}}:transfers:in", self.prefix, at.tag())
    }

    /// A sale's waiting room: its counts, caps and admissions (`room::scripts` names the
    /// fields).
    pub fn room(&self, g: GoodsId) -> String {
        format!("{}seckill:{{{g}}}:room", self.prefix)
    }

    /// One of the room's member groups: a hash of user id -> join code (`room::scripts::JOIN`).
    /// A room's members are spread over [`ROOM_MEMBER_GROUPS`] small hashes by a hash of the
    /// user id: Redis keeps a hash of up to 128 entries as one compact list (listpack), about
    /// 20 bytes a member instead of some 80 in a big hash's table, so a million waiting buyers
    /// (15 a group) cost some 20 MB, and up to 8 million stay compact.
    pub fn room_members(&self, g: GoodsId, u: UserId) -> String {
        let hash = u.get().unsigned_abs().wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 48;
        format!("{}seckill:{{{g}}}:room:m:{}", self.prefix, hash % u64::from(ROOM_MEMBER_GROUPS))
    }

    /// List of `<instant ms>:<places admitted>`, one each time a place came up: when each
    /// admission began, so every replica gives it the same end.
    pub fn room_marks(&self, g: GoodsId) -> String {
        format!("{}seckill:{{{g}}}:room:marks", self.prefix)
    }

    /// A proof-of-work challenge already used to join (its nonce, hex), until it expires.
    pub fn room_work(&self, g: GoodsId, nonce: &str) -> String {
        format!("{}seckill:{{{g}}}:room:pow:{nonce}", self.prefix)
    }

    /// Buy requests of admitted buyers refused `BUSY` since the leader last looked (the
    /// `auto` rate slows down on them).
    pub fn room_busy(&self, g: GoodsId) -> String {
        format!("{}seckill:{{{g}}}:room:busy", self.prefix)
    }

    /// The replica that moves the room's admissions on (a short lease).
    pub fn room_leader(&self, g: GoodsId) -> String {
        format!("{}seckill:{{{g}}}:room:leader", self.prefix)
    }

    /// A pattern matching every key under this prefix (for clean-up in tests and tools).
    pub fn all_pattern(&self) -> String {
        format!("{}seckill:*", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sales_channel_names_its_sale_back() {
        let k = RedisKeys::new("t1:");
        let g = GoodsId::new(7).unwrap();
        assert_eq!(k.sale_events(g), "t1:seckill:{7}:events");
        assert_eq!(k.sale_of_events(&k.sale_events(g)), Some(g));
        for other in
            ["seckill:{7}:events", "t1:seckill:{x}:events", "t1:seckill:{0}:events", "t1:seckill:{7}:stock"]
        {
            assert_eq!(k.sale_of_events(other), None, "{other}");
        }
    }

    #[test]
    fn keys_of_one_sale_share_a_hash_tag() {
        let k = RedisKeys::new("t1:");
        let g = GoodsId::new(7).unwrap();
        let u = UserId::new(42).unwrap();
        assert_eq!(k.stock(g), "t1:seckill:{7}:stock");
        assert_eq!(k.users(g), "t1:seckill:{7}:users");
        assert_eq!(k.result(g, u), "t1:seckill:{7}:result:42");
        assert_eq!(k.token(g, u), "t1:seckill:{7}:token:42");
        assert_eq!(k.epoch(g), "t1:seckill:{7}:epoch");
        assert_eq!(k.holdback(g), "t1:seckill:{7}:holdback");
        assert_eq!(RedisKeys::default().stock(g), "seckill:{7}:stock");
    }

    #[test]
    fn a_rooms_members_spread_evenly_over_small_hashes_of_the_sales_slot() {
        let k = RedisKeys::new("t1:");
        let g = GoodsId::new(7).unwrap();
        let mut per_group = std::collections::HashMap::new();
        // A million users, sequential ids or ids with a stride: no group near a listpack's 128.
        for u in (1..=1_000_000).chain((1..=100_000).map(|n| n * 4_096)) {
            let key = k.room_members(g, UserId::new(u).unwrap());
            assert!(key.starts_with("t1:seckill:{7}:room:m:"), "{key}");
            *per_group.entry(key).or_insert(0u32) += 1;
        }
        assert_eq!(per_group.len(), ROOM_MEMBER_GROUPS as usize);
        let most = per_group.values().max().unwrap();
        assert!(*most < 64, "{most} members in one group");
    }

    #[test]
    fn a_rate_limit_bucket_is_in_one_group_whatever_the_replica() {
        let k = RedisKeys::new("t1:");
        let group = rate_limit_group("42");
        assert_eq!(k.rate_limit("buy", "42"), format!("t1:seckill:rl:{{rl{group}}}:buy:42"));
        // Spread over the groups: 1,000 users land in every one of them.
        let used: std::collections::BTreeSet<u16> =
            (0..1_000).map(|u| rate_limit_group(&u.to_string())).collect();
        assert_eq!(used.len(), usize::from(RATE_LIMIT_GROUPS));
        assert_eq!(rate_limit_group("203.0.113.9"), rate_limit_group("203.0.113.9"));
    }

    #[test]
    fn bucket_zero_is_the_sale_and_the_others_have_tags_of_their_own() {
        let k = RedisKeys::new("t1:");
        let g = GoodsId::new(7).unwrap();
        let zero = SaleBucket::new(g, 0);
        let u = UserId::new(42).unwrap();
        assert_eq!(
            [k.bucket_stock(zero), k.bucket_users(zero), k.bucket_pending(zero), k.bucket_epoch(zero)],
            [k.stock(g), k.users(g), k.pending(g), k.epoch(g)]
        );
        assert_eq!([k.bucket_result(zero, u), k.bucket_token(zero, u)], [k.result(g, u), k.token(g, u)]);
        assert_eq!(k.bucket_users(SaleBucket::new(g, 2)), "t1:seckill:{7:b2}:users");
        assert_eq!(k.bucket_stock(SaleBucket::new(g, 3)), "t1:seckill:{7:b3}:stock");
        assert_eq!(k.transfers_out(SaleBucket::new(g, 3)), "t1:seckill:{7:b3}:transfers:out");
        assert_eq!(k.transfers_in(SaleBucket::new(g, 0)), "t1:seckill:{7}:transfers:in");
        assert_eq!(k.bucket_holdback(zero), k.holdback(g));
    }

    #[test]
    fn a_buyer_is_served_by_one_bucket() {
        let g = GoodsId::new(7).unwrap();
        let user = |n| UserId::new(n).unwrap();
        assert_eq!(SaleBucket::of_user(g, 1, user(42)), SaleBucket::new(g, 0));
        assert_eq!(SaleBucket::of_user(g, 4, user(42)), SaleBucket::new(g, 2));
        assert_eq!(SaleBucket::of_user(g, 0, user(42)), SaleBucket::new(g, 0), "0 buckets is read as 1");
        let used: std::collections::BTreeSet<u8> =
            (1..=100).map(|n| SaleBucket::of_user(g, 8, user(n)).bucket).collect();
        assert_eq!(used, (0..8).collect());
        assert_eq!(SaleBucket::all(g, 3).map(|b| b.bucket).collect::<Vec<_>>(), [0, 1, 2]);
    }
}
