//! Rate limits: a GCRA bucket (governor) per user id on the seckill routes, so one user's
//! script cannot take the upstream's capacity from everyone else during a sale, and one per
//! client address on the routes anyone may call without a token.

use std::hash::Hash;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

use governor::clock::Clock;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use seckill_common::{ErrorCode, UserId};
use seckill_web::{ApiError, Lifecycle, Ticker};

use crate::configuration;

/// One limiter per kind of key for the whole process, shared by every worker.
pub struct KeyedRateLimiter<K: Hash + Eq + Clone> {
    limiter: DefaultKeyedRateLimiter<K>,
}

/// Keyed by user id.
pub type UserRateLimiter = KeyedRateLimiter<i64>;

/// Keyed by the client's address (see [`client_key`]).
pub type AddressRateLimiter = KeyedRateLimiter<IpAddr>;

impl UserRateLimiter {
    /// Takes one request from `user`'s bucket (see [`KeyedRateLimiter::take`]).
    pub fn check(&self, user: UserId) -> Result<(), ApiError> {
        self.take(&user.get())
    }
}

impl AddressRateLimiter {
    /// Takes one request from the bucket of the client at `ip`.
    pub fn check_address(&self, ip: IpAddr) -> Result<(), ApiError> {
        self.take(&client_key(ip))
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

impl<K: Hash + Eq + Clone + Send + Sync + 'static> KeyedRateLimiter<K> {
    pub fn new(quota: configuration::Quota) -> Self {
        let quota = Quota::per_second(quota.per_sec).allow_burst(quota.burst);
        Self { limiter: RateLimiter::keyed(quota) }
    }

    /// Takes one request from `key`'s bucket, or answers 429 `RATE_LIMITED` with
    /// `Retry-After`: when the bucket next lets a request through.
    pub fn take(&self, key: &K) -> Result<(), ApiError> {
        self.limiter.check_key(key).map_err(|not_until| {
            let wait = not_until.wait_time_from(self.limiter.clock().now());
            ApiError::new(ErrorCode::RateLimited, "too many requests, slow down and try again")
                .with_retry_after(wait)
        })
    }

    /// Keys remembered right now (those not back at a full bucket since the last clean-up).
    pub fn tracked(&self) -> usize {
        self.limiter.len()
    }

    /// Forgets idle keys: without this the keyed store keeps one entry per user or address
    /// that ever called, for the life of the process.
    pub fn forget_idle(&self) {
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
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

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;

    fn limiter(per_sec: u32, burst: u32) -> UserRateLimiter {
        UserRateLimiter::new(configuration::Quota {
            per_sec: NonZeroU32::new(per_sec).unwrap(),
            burst: NonZeroU32::new(burst).unwrap(),
        })
    }

    #[test]
    fn the_burst_passes_then_the_user_is_limited_alone() {
        let l = limiter(1, 3);
        let a = UserId::new(1).unwrap();
        let b = UserId::new(2).unwrap();
        for _ in 0..3 {
            l.check(a).unwrap();
        }
        let err = l.check(a).unwrap_err();
        assert_eq!(err.code, ErrorCode::RateLimited);
        // One request a second: the next is due within the second.
        assert_eq!(err.retry_after_secs, Some(1));
        l.check(b).unwrap();
        assert_eq!(l.tracked(), 2);
    }

    #[test]
    fn addresses_are_limited_alone_and_an_ipv6_block_shares_one_bucket() {
        let l = AddressRateLimiter::new(configuration::Quota {
            per_sec: NonZeroU32::new(1).unwrap(),
            burst: NonZeroU32::new(2).unwrap(),
        });
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        l.check_address(ip("192.0.2.1")).unwrap();
        // The same host written IPv4-mapped.
        l.check_address(ip("::ffff:192.0.2.1")).unwrap();
        assert_eq!(l.check_address(ip("192.0.2.1")).unwrap_err().code, ErrorCode::RateLimited);
        l.check_address(ip("192.0.2.2")).unwrap();
        l.check_address(ip("2001:db8:1:2::1")).unwrap();
        l.check_address(ip("2001:db8:1:2:ffff::9")).unwrap();
        assert!(l.check_address(ip("2001:db8:1:2::77")).is_err(), "same /64");
        l.check_address(ip("2001:db8:1:3::1")).unwrap();
        assert_eq!(l.tracked(), 4);
        l.forget_idle();
    }
}
