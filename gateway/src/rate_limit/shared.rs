//! The buckets every gateway replica shares: one GCRA bucket per (class, user or address) in
//! Redis, taken by one script call (`scripts::RATE_LIMIT`) on Redis' own clock.
//!
//! A replica may take a few tokens at once (`rate_limit.lease`) and spend them locally: fewer
//! Redis calls for a client that keeps coming back to the same replica. Leased tokens are
//! already taken from the shared bucket, so a lease never lets more through than the limit; a
//! lease lives only as long as the shared bucket takes to earn its tokens back, so over any
//! stretch of time a user gets at most the limit plus one lease per replica.
//!
//! When Redis fails or answers later than `rate_limit.shared_timeout_ms`, this replica's own
//! bucket decides alone for [`OUTAGE_RETRY`], then one call tries Redis again. The switch is
//! logged each way, `gateway_rate_limit_shared_up` shows the state and
//! `gateway_rate_limit_fallback_total` counts the requests decided without Redis.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use redis::Script;
use seckill_common::keys::RedisKeys;
use seckill_common::scripts;
use seckill_infra::redis::{Redis, RedisUse};

use super::{Class, Who};
use crate::configuration::Quota;

/// What the gateway runs on Redis: this one script (its Redis user allows exactly that,
/// crates/deploy-check). `invoke_async` sends EVALSHA, and SCRIPT LOAD when Redis lost it.
pub const REDIS_USE: RedisUse = RedisUse { scripts: &[scripts::RATE_LIMIT], commands: &[] };

/// How long a replica decides alone after a failed Redis call before trying again.
pub const OUTAGE_RETRY: Duration = Duration::from_secs(1);

pub struct SharedLimits {
    redis: Redis,
    keys: RedisKeys,
    script: Script,
    /// Tokens asked for in one call (1: one call per request).
    lease: u32,
    timeout: Duration,
    leases: DashMap<(Class, Who), Lease>,
    outage: Outage,
}

/// Tokens taken from the shared bucket and not spent yet.
struct Lease {
    left: u32,
    until: Instant,
}

impl SharedLimits {
    pub fn new(redis: Redis, keys: RedisKeys, lease: u32, timeout: Duration) -> Self {
        metrics::gauge!("gateway_rate_limit_shared_up").set(1.0);
        Self {
            redis,
            keys,
            script: Script::new(REDIS_USE.scripts[0]),
            lease: lease.max(1),
            timeout,
            leases: DashMap::new(),
            outage: Outage::new(),
        }
    }

    /// Takes one request from the shared bucket (or this replica's lease of it); `Err` holds
    /// how long until one would pass. `Ok` without Redis while it is out (see the module).
    pub async fn take(&self, class: Class, who: Who, quota: Quota) -> Result<(), Duration> {
        let now = Instant::now();
        if self.lease > 1
            && let Some(mut lease) = self.leases.get_mut(&(class, who))
            && lease.left > 0
            && lease.until > now
        {
            lease.left -= 1;
            return Ok(());
        }
        if self.outage.ongoing() {
            metrics::counter!("gateway_rate_limit_fallback_total").increment(1);
            return Ok(());
        }
        let interval_us = 1_000_000 / u64::from(quota.per_sec.get());
        let want = self.lease.min(quota.burst.get());
        let call = async {
            let mut conn = self.redis.clone();
            self.script
                .key(self.keys.rate_limit(class.name(), &who.to_string()))
                .arg(interval_us)
                .arg(quota.burst.get())
                .arg(want)
                .invoke_async::<(u32, u64)>(&mut conn)
                .await
        };
        let answer = match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => return self.decide_alone(&e.to_string()),
            Err(_) => return self.decide_alone(&format!("no answer within {:?}", self.timeout)),
        };
        self.outage.end();
        match answer {
            (0, wait_us) => Err(Duration::from_micros(wait_us)),
            (granted, _) => {
                if granted > 1 {
                    // The lease lives as long as the bucket takes to earn it back.
                    let life = Duration::from_micros(interval_us * u64::from(granted)).min(OUTAGE_RETRY);
                    self.leases.insert((class, who), Lease { left: granted - 1, until: now + life });
                }
                Ok(())
            }
        }
    }

    fn decide_alone(&self, why: &str) -> Result<(), Duration> {
        self.outage.begin(why);
        metrics::counter!("gateway_rate_limit_fallback_total").increment(1);
        Ok(())
    }

    /// Drops leases that ran out.
    pub fn forget_expired(&self) {
        let now = Instant::now();
        self.leases.retain(|_, lease| lease.until > now && lease.left > 0);
    }
}

/// Whether Redis is out for the limiter, and until when no call tries it.
struct Outage {
    start: Instant,
    /// Milliseconds since `start` before which no call tries Redis.
    retry_at_ms: AtomicU64,
    down: AtomicBool,
}

impl Outage {
    fn new() -> Self {
        Self { start: Instant::now(), retry_at_ms: AtomicU64::new(0), down: AtomicBool::new(false) }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn ongoing(&self) -> bool {
        self.now_ms() < self.retry_at_ms.load(Ordering::Relaxed)
    }

    fn begin(&self, why: &str) {
        let retry_ms = u64::try_from(OUTAGE_RETRY.as_millis()).unwrap_or(u64::MAX);
        self.retry_at_ms.store(self.now_ms() + retry_ms, Ordering::Relaxed);
        if !self.down.swap(true, Ordering::Relaxed) {
            metrics::gauge!("gateway_rate_limit_shared_up").set(0.0);
            tracing::warn!(
                error = why,
                "shared rate limit unavailable: each gateway replica limits alone until Redis answers"
            );
        }
    }

    fn end(&self) {
        if self.down.swap(false, Ordering::Relaxed) {
            metrics::gauge!("gateway_rate_limit_shared_up").set(1.0);
            tracing::info!("shared rate limit back: the limits hold across gateway replicas again");
        }
    }
}
