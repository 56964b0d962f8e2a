//! The buckets every gateway replica shares: one GCRA bucket per (class, user or address) in
//! Redis, taken by a script (`scripts::RATE_LIMIT`) on Redis' own clock.
//!
//! The requests do not call Redis one by one: they queue their asks, and one task sends every
//! ask waiting in one script call (on a cluster, one per group of buckets, `keys::rate_limit_group`,
//! sent at once), then the next batch once that call has answered. An idle
//! gateway sends a call per ask (no waiting added); under a spike a call carries several, which
//! share its fixed cost (Redis' read, script start and reply; the gateway's write and read).
//!
//! A replica may take a few tokens at once (`rate_limit.lease`) and spend them locally: fewer
//! asks for a client that keeps coming back to the same replica. Leased tokens are already
//! taken from the shared bucket, so a lease never lets more through than the limit; a lease
//! lives only as long as the shared bucket takes to earn its tokens back, so over any stretch
//! of time a user gets at most the limit plus one lease per replica. A request refused by
//! Redis takes from its replica's lease when one holds tokens: concurrent requests of one
//! user ask at once, and the first answer's lease serves the others.
//!
//! When Redis fails or does not answer an ask within `rate_limit.shared_timeout_ms`, this
//! replica's own bucket decides alone for [`OUTAGE_RETRY`], then asks try Redis again. The
//! switch is logged each way, `gateway_rate_limit_shared_up` shows the state and
//! `gateway_rate_limit_fallback_total` counts the requests decided without Redis.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use futures_util::future::join_all;
use redis::Script;
use seckill_common::keys::{RedisKeys, rate_limit_group};
use seckill_common::scripts;
use seckill_infra::redis::{Redis, RedisUse};
use tokio::sync::{mpsc, oneshot};

use super::{Class, Who};
use crate::configuration::Quota;

/// What the gateway runs on Redis: this one script (its Redis user allows exactly that,
/// crates/deploy-check). `invoke_async` sends EVALSHA, and SCRIPT LOAD when Redis lost it.
pub const REDIS_USE: RedisUse = RedisUse { scripts: &[scripts::RATE_LIMIT], commands: &[], channels: false };

/// How long a replica decides alone after a failed Redis call before trying again.
pub const OUTAGE_RETRY: Duration = Duration::from_secs(1);

/// Asks one call carries at most: a call holds Redis' one thread for about 5 µs an ask.
pub const MAX_BATCH: usize = 64;

/// Asks that may wait for the next call; beyond, a request waits for room (within its timeout).
const QUEUE: usize = 4 * MAX_BATCH;

pub struct SharedLimits {
    asks: mpsc::Sender<Ask>,
    keys: RedisKeys,
    /// Tokens asked for at once (1: one ask per request).
    lease: u32,
    timeout: Duration,
    leases: Arc<Leases>,
    outage: Arc<Outage>,
}

/// One request's ask, waiting for the next call.
struct Ask {
    bucket: (Class, Who),
    key: String,
    /// The key's hash tag (`keys::rate_limit_group`): on a cluster, one call per group.
    group: u16,
    interval_us: u64,
    burst: u32,
    want: u32,
    answer: oneshot::Sender<Answer>,
}

/// What the call said of one ask.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// The request passes (any further tokens granted went to the replica's lease).
    Pass,
    /// Refused: the bucket has room again in this many microseconds.
    Wait(u64),
    /// The call failed (logged by the outage); the replica decides alone.
    Failed,
}

impl SharedLimits {
    /// Starts the task that sends the asks; it ends when this is dropped.
    pub fn new(redis: Redis, keys: RedisKeys, lease: u32, timeout: Duration) -> Self {
        metrics::gauge!("gateway_rate_limit_shared_up").set(1.0);
        let outage = Arc::new(Outage::new());
        let leases = Arc::new(Leases::default());
        let (asks, queue) = mpsc::channel(QUEUE);
        let caller = Caller {
            redis,
            script: Script::new(REDIS_USE.scripts[0]),
            timeout,
            outage: outage.clone(),
            leases: leases.clone(),
        };
        tokio::spawn(caller.run(queue));
        Self { asks, keys, lease: lease.max(1), timeout, leases, outage }
    }

    /// Takes one request from the shared bucket (or this replica's lease of it); `Err` holds
    /// how long until one would pass. `Ok` without Redis while it is out (see the module).
    pub async fn take(&self, class: Class, who: Who, quota: Quota) -> Result<(), Duration> {
        if self.lease > 1 && self.leases.take(&(class, who)) {
            return Ok(());
        }
        if self.outage.ongoing() {
            return decided_alone();
        }
        let (answer, answered) = oneshot::channel();
        let who_text = who.to_string();
        let ask = Ask {
            bucket: (class, who),
            key: self.keys.rate_limit(class.name(), &who_text),
            group: rate_limit_group(&who_text),
            interval_us: 1_000_000 / u64::from(quota.per_sec.get()),
            burst: quota.burst.get(),
            want: self.lease.min(quota.burst.get()),
            answer,
        };
        let asked = async {
            self.asks.send(ask).await.ok()?;
            answered.await.ok()
        };
        match tokio::time::timeout(self.timeout, asked).await {
            Ok(Some(Answer::Pass)) => Ok(()),
            Ok(Some(Answer::Wait(wait_us))) => Err(Duration::from_micros(wait_us)),
            Ok(Some(Answer::Failed)) => decided_alone(),
            Ok(None) => {
                self.outage.begin("the shared rate-limit task stopped");
                decided_alone()
            }
            Err(_) => {
                self.outage.begin(&format!("no answer within {:?}", self.timeout));
                decided_alone()
            }
        }
    }

    /// Drops leases that ran out.
    pub fn forget_expired(&self) {
        self.leases.forget_expired();
    }
}

fn decided_alone() -> Result<(), Duration> {
    metrics::counter!("gateway_rate_limit_fallback_total").increment(1);
    Ok(())
}

/// Tokens this replica took from shared buckets and has not spent yet.
#[derive(Default)]
struct Leases(DashMap<(Class, Who), Lease>);

struct Lease {
    left: u32,
    until: Instant,
}

impl Leases {
    /// Spends one leased token of `bucket`, if one is left and still good.
    fn take(&self, bucket: &(Class, Who)) -> bool {
        match self.0.get_mut(bucket) {
            Some(mut lease) if lease.left > 0 && lease.until > Instant::now() => {
                lease.left -= 1;
                true
            }
            _ => false,
        }
    }

    /// Keeps `tokens` just taken from `bucket`'s shared bucket, good for `life` (the time the
    /// bucket takes to earn them back). Added to a lease still good, they expire with it: on
    /// the safe side.
    fn add(&self, bucket: (Class, Who), tokens: u32, life: Duration) {
        let until = Instant::now() + life.min(OUTAGE_RETRY);
        self.0
            .entry(bucket)
            .and_modify(|lease| {
                if lease.until > Instant::now() {
                    lease.left += tokens;
                } else {
                    *lease = Lease { left: tokens, until };
                }
            })
            .or_insert(Lease { left: tokens, until });
    }

    fn forget_expired(&self) {
        let now = Instant::now();
        self.0.retain(|_, lease| lease.until > now && lease.left > 0);
    }
}

/// The task that turns the queued asks into script calls, one call at a time.
struct Caller {
    redis: Redis,
    script: Script,
    timeout: Duration,
    outage: Arc<Outage>,
    leases: Arc<Leases>,
}

impl Caller {
    async fn run(self, mut queue: mpsc::Receiver<Ask>) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        while queue.recv_many(&mut batch, MAX_BATCH).await > 0 {
            // A request that gave up (its timeout) no longer takes a token.
            batch.retain(|ask| !ask.answer.is_closed());
            if self.redis.is_cluster() {
                // One call per group (a slot of its own), all at once.
                batch.sort_by_key(|ask| ask.group);
                let mut groups = Vec::new();
                while let Some(first) = batch.first().map(|ask| ask.group) {
                    let end = batch.iter().position(|ask| ask.group != first).unwrap_or(batch.len());
                    groups.push(batch.drain(..end).collect::<Vec<_>>());
                }
                join_all(groups.iter_mut().map(|group| self.call(group))).await;
            } else if !batch.is_empty() {
                self.call(&mut batch).await;
            }
            batch.clear();
        }
    }

    /// One script call for `batch`; every ask gets its answer, in order, so a lease granted to
    /// one ask is there for the refused asks of the same bucket after it.
    async fn call(&self, batch: &mut Vec<Ask>) {
        metrics::counter!("gateway_rate_limit_shared_calls_total").increment(1);
        metrics::counter!("gateway_rate_limit_shared_asks_total").increment(batch.len() as u64);
        let mut invocation = self.script.prepare_invoke();
        for ask in batch.iter() {
            invocation.key(&ask.key).arg(ask.interval_us).arg(ask.burst).arg(ask.want);
        }
        let mut conn = self.redis.clone();
        let flat =
            match tokio::time::timeout(self.timeout, invocation.invoke_async::<Vec<u64>>(&mut conn)).await {
                Ok(Ok(flat)) if flat.len() == 2 * batch.len() => {
                    self.outage.end();
                    Some(flat)
                }
                Ok(Ok(flat)) => {
                    self.outage.begin(&format!("{} values for {} asks", flat.len(), batch.len()));
                    None
                }
                Ok(Err(e)) => {
                    self.outage.begin(&e.to_string());
                    None
                }
                Err(_) => {
                    self.outage.begin(&format!("no answer within {:?}", self.timeout));
                    None
                }
            };
        for (i, ask) in batch.drain(..).enumerate() {
            let answer = match flat.as_deref() {
                None => Answer::Failed,
                Some(flat) => match (flat[2 * i], flat[2 * i + 1]) {
                    (0, wait_us) if !self.leases.take(&ask.bucket) => Answer::Wait(wait_us),
                    (0, _) => Answer::Pass,
                    (granted, _) => {
                        if granted > 1 {
                            let tokens = u32::try_from(granted - 1).unwrap_or(u32::MAX);
                            self.leases.add(
                                ask.bucket,
                                tokens,
                                Duration::from_micros(ask.interval_us * granted),
                            );
                        }
                        Answer::Pass
                    }
                },
            };
            // The request may have given up meanwhile: nothing to tell it.
            let _ = ask.answer.send(answer);
        }
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
