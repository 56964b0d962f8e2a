//! Per-user rate limit on the seckill routes: a GCRA bucket per user id (governor), so one
//! user's script cannot take the upstream's capacity from everyone else during a sale.

use std::sync::Arc;
use std::time::Duration;

use governor::clock::Clock;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use seckill_common::{ErrorCode, UserId};
use seckill_web::{ApiError, Lifecycle};

use crate::configuration;

/// One limiter for the whole process, shared by every worker.
pub struct UserRateLimiter {
    limiter: DefaultKeyedRateLimiter<i64>,
}

impl UserRateLimiter {
    pub fn new(quota: configuration::Quota) -> Self {
        let quota = Quota::per_second(quota.per_sec).allow_burst(quota.burst);
        Self { limiter: RateLimiter::keyed(quota) }
    }

    /// Takes one request from `user`'s bucket, or answers 429 `RATE_LIMITED` with
    /// `Retry-After`: when the bucket next lets a request through.
    pub fn check(&self, user: UserId) -> Result<(), ApiError> {
        self.limiter.check_key(&user.get()).map_err(|not_until| {
            let wait = not_until.wait_time_from(self.limiter.clock().now());
            ApiError::new(ErrorCode::RateLimited, "too many requests, slow down and try again")
                .with_retry_after(wait)
        })
    }

    /// Users remembered right now (those not back at a full bucket since the last clean-up).
    pub fn tracked_users(&self) -> usize {
        self.limiter.len()
    }

    /// Forgets idle users: without this the keyed store keeps one entry per user who ever
    /// called, for the life of the process.
    pub fn forget_idle(&self) {
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
    }

    /// Runs `forget_idle` every `every` until the lifecycle is cancelled.
    pub fn spawn_cleanup(self: Arc<Self>, lifecycle: &Lifecycle, every: Duration) {
        let cancel = lifecycle.cancel.clone();
        lifecycle.spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = cancel.cancelled() => break,
                    _ = ticks.tick() => self.forget_idle(),
                }
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
        assert_eq!(l.tracked_users(), 2);
    }
}
