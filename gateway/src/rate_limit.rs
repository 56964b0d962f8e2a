//! Rate limits, one class of routes at a time: buying, polling a result, orders, admin (per
//! user id) and the routes anyone may call without a token (per client address).
//!
//! Two layers. Each replica keeps a GCRA bucket per key in memory (governor) with the whole
//! limit: it refuses a client hammering this replica without any network call. What passes it
//! is taken from the bucket every replica shares in Redis ([`shared`]), so a user spread over
//! N gateways still gets one limit, not N. While that Redis does not answer, the replica's own
//! bucket is the limit (said in a metric and a log line, see [`shared`]): a limit per replica
//! is better than none and better than refusing buyers for a broken counter.

pub mod shared;

use std::fmt;
use std::hash::Hash;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

use governor::clock::Clock;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use seckill_common::{ErrorCode, UserId};
use seckill_web::{ApiError, Lifecycle, Ticker};

use self::shared::SharedLimits;
use crate::configuration;

/// The classes of routes, each limited on its own: polling a result must not eat the clicks
/// of the buy button, and an admin's page must not be limited like a buyer's script.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// `POST /api/seckill/{id}/token`, `POST /api/seckill/{id}/orders`.
    Buy,
    /// `GET /api/seckill/{id}/result`.
    Poll,
    /// `/api/orders...`: list, read, pay, cancel.
    Orders,
    /// `/api/admin/...`.
    Admin,
    /// The routes without a token, per client address: `GET /api/goods[/{id}]`,
    /// `POST /api/auth/dev-token`.
    Anonymous,
    /// Joining a sale's waiting room, per client address (besides the user's buy limit): one
    /// address joining for many users is a farm of accounts.
    Join,
    /// `GET /api/seckill/{id}/events` and its ticket.
    Stream,
}

impl Class {
    pub const ALL: [Class; 7] =
        [Class::Buy, Class::Poll, Class::Orders, Class::Admin, Class::Anonymous, Class::Join, Class::Stream];

    /// The class's name in settings (`rate_limit.<name>.*`), metrics and Redis keys.
    pub fn name(self) -> &'static str {
        match self {
            Class::Buy => "buy",
            Class::Poll => "poll",
            Class::Orders => "orders",
            Class::Admin => "admin",
            Class::Anonymous => "anonymous",
            Class::Join => "join",
            Class::Stream => "stream",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Whose bucket: a user's, or a client address's (see [`client_key`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Who {
    User(i64),
    Address(IpAddr),
}

impl Who {
    pub fn user(user: UserId) -> Self {
        Who::User(user.get())
    }

    pub fn address(ip: IpAddr) -> Self {
        Who::Address(client_key(ip))
    }
}

impl fmt::Display for Who {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Who::User(id) => write!(f, "u{id}"),
            Who::Address(ip) => write!(f, "a{ip}"),
        }
    }
}

/// The key of a client address: an IPv4 address (also when written IPv4-mapped) as it is, an
/// IPv6 address by its /64, the block one subscriber usually holds whole: keyed by the full
/// address, one host could take a fresh bucket for every request.
pub fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(v6.to_bits() & !u128::from(u64::MAX))),
        },
    }
}

/// Every class's limit: this replica's buckets, then the shared ones when configured.
pub struct Limits {
    local: Vec<KeyedRateLimiter<Who>>,
    quotas: Vec<configuration::Quota>,
    shared: Option<SharedLimits>,
}

impl Limits {
    /// `quota(class)` for every class; `shared` None keeps the limits per replica.
    pub fn new<E>(
        quota: impl Fn(Class) -> Result<configuration::Quota, E>,
        shared: Option<SharedLimits>,
    ) -> Result<Self, E> {
        let quotas = Class::ALL.iter().map(|&c| quota(c)).collect::<Result<Vec<_>, E>>()?;
        let local = quotas.iter().map(|&q| KeyedRateLimiter::new(q)).collect();
        Ok(Self { local, quotas, shared })
    }

    /// Takes one request from `who`'s bucket of `class`, or answers 429 `RATE_LIMITED` with
    /// `Retry-After`. Never a 5xx: a shared store that fails leaves this replica's decision.
    pub async fn take(&self, class: Class, who: Who) -> Result<(), ApiError> {
        self.take_local(class, who)?;
        self.take_shared(class, who).await
    }

    /// This replica's bucket alone: for an answer that costs this replica and nothing shared
    /// (a waiting room's status from memory, `crate::rooms`).
    pub fn take_local(&self, class: Class, who: Who) -> Result<(), ApiError> {
        self.local[class.index()].take(&who).map_err(|wait| refused(class, wait))
    }

    /// The bucket every replica shares, once this replica's let the request through.
    pub async fn take_shared(&self, class: Class, who: Who) -> Result<(), ApiError> {
        match &self.shared {
            Some(shared) => {
                shared.take(class, who, self.quotas[class.index()]).await.map_err(|wait| refused(class, wait))
            }
            None => Ok(()),
        }
    }

    /// Keys this replica's buckets remember, all classes together.
    pub fn tracked(&self) -> usize {
        self.local.iter().map(KeyedRateLimiter::tracked).sum()
    }

    /// Forgets keys back at a full bucket and leases run out: without this the stores keep one
    /// entry per user or address that ever called, for the life of the process.
    pub fn forget_idle(&self) {
        for limiter in &self.local {
            limiter.forget_idle();
        }
        if let Some(shared) = &self.shared {
            shared.forget_expired();
        }
    }

    /// Runs `forget_idle` every `every` until the lifecycle is cancelled.
    pub fn spawn_cleanup(self: Arc<Self>, lifecycle: &Lifecycle, every: Duration) {
        let cancel = lifecycle.cancel.clone();
        lifecycle.spawn(async move {
            let mut ticker = Ticker::new(every);
            while ticker.tick(&cancel).await {
                self.forget_idle();
            }
            tracing::debug!("rate-limit clean-up stopped");
        });
    }
}

fn refused(class: Class, wait: Duration) -> ApiError {
    metrics::counter!("gateway_rate_limited_total", "class" => class.name()).increment(1);
    ApiError::new(ErrorCode::RateLimited, "too many requests, slow down and try again").with_retry_after(wait)
}

/// One replica's buckets of one class, keyed by `K`.
pub struct KeyedRateLimiter<K: Hash + Eq + Clone> {
    limiter: DefaultKeyedRateLimiter<K>,
}

impl<K: Hash + Eq + Clone> KeyedRateLimiter<K> {
    pub fn new(quota: configuration::Quota) -> Self {
        let quota = Quota::per_second(quota.per_sec).allow_burst(quota.burst);
        Self { limiter: RateLimiter::keyed(quota) }
    }

    /// Takes one request from `key`'s bucket, or says how long until it would let one through.
    pub fn take(&self, key: &K) -> Result<(), Duration> {
        self.limiter.check_key(key).map_err(|not_until| not_until.wait_time_from(self.limiter.clock().now()))
    }

    /// Keys remembered right now (those not back at a full bucket since the last clean-up).
    pub fn tracked(&self) -> usize {
        self.limiter.len()
    }

    pub fn forget_idle(&self) {
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;

    fn quota(per_sec: u32, burst: u32) -> configuration::Quota {
        configuration::Quota {
            per_sec: NonZeroU32::new(per_sec).unwrap(),
            burst: NonZeroU32::new(burst).unwrap(),
        }
    }

    fn user(id: i64) -> Who {
        Who::user(UserId::new(id).unwrap())
    }

    #[tokio::test]
    async fn the_burst_passes_then_the_user_is_limited_alone_in_that_class() {
        let limits = Limits::new(|_| Ok::<_, ()>(quota(1, 3)), None).unwrap();
        for _ in 0..3 {
            limits.take(Class::Buy, user(1)).await.unwrap();
        }
        let err = limits.take(Class::Buy, user(1)).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::RateLimited);
        // One request a second: the next is due within the second.
        assert_eq!(err.retry_after_secs, Some(1));
        limits.take(Class::Buy, user(2)).await.unwrap();
        // Another class of the same user has its own bucket.
        limits.take(Class::Poll, user(1)).await.unwrap();
        assert_eq!(limits.tracked(), 3);
    }

    #[tokio::test]
    async fn addresses_are_limited_alone_and_an_ipv6_block_shares_one_bucket() {
        let limits = Limits::new(|_| Ok::<_, ()>(quota(1, 2)), None).unwrap();
        let take = |s: &str| limits.take(Class::Anonymous, Who::address(s.parse().unwrap()));
        take("192.0.2.1").await.unwrap();
        // The same host written IPv4-mapped.
        take("::ffff:192.0.2.1").await.unwrap();
        assert_eq!(take("192.0.2.1").await.unwrap_err().code, ErrorCode::RateLimited);
        take("192.0.2.2").await.unwrap();
        take("2001:db8:1:2::1").await.unwrap();
        take("2001:db8:1:2:ffff::9").await.unwrap();
        assert!(take("2001:db8:1:2::77").await.is_err(), "same /64");
        take("2001:db8:1:3::1").await.unwrap();
        assert_eq!(limits.tracked(), 4);
        limits.forget_idle();
    }

    #[test]
    fn keys_name_their_kind() {
        assert_eq!(user(7).to_string(), "u7");
        assert_eq!(Who::address("::ffff:10.0.0.1".parse().unwrap()).to_string(), "a10.0.0.1");
        assert_eq!(Who::address("2001:db8:1:2::9".parse().unwrap()).to_string(), "a2001:db8:1:2::");
    }
}
