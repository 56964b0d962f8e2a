//! `seckill-bench gate`: the gate alone, the way seckill-service calls it: the reserve script
//! (`scripts::RESERVE`) on one hot sale, from many concurrent callers sharing one connection
//! (a cluster: one per node), each call a new buyer. No HTTP, no broker: what one Redis server
//! or a Redis Cluster can give one sale, with its stock in one bucket or split over several
//! (`keys::SaleBucket`, each its own slot; a buyer's bucket is their user id modulo the
//! count). Every bucket holds a stock that never runs out, so every call takes the decrement
//! path.
//!
//! Also read from each node before and after: the CPU time Redis' main thread spent and the
//! script calls it served (`INFO cpu`, `INFO commandstats`), so the report gives the CPU one
//! gate call costs a node here, which bounds what a shard can do on a core of its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use futures_util::future::join_all;
use hdrhistogram::Histogram;
use redis::AsyncCommands;
use seckill_common::config::RedisSettings;
use seckill_common::keys::{RedisKeys, SaleBucket};
use seckill_common::{GoodsId, UserId, scripts};
use serde::Serialize;

#[derive(Debug, Clone, Args)]
pub struct GateArgs {
    /// The Redis server, or a cluster's nodes (comma-separated, every primary: their CPU is
    /// read).
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    pub redis: String,
    /// `--redis` is a Redis Cluster.
    #[arg(long)]
    pub cluster: bool,
    /// Buckets the sale's stock is split over.
    #[arg(long, default_value_t = 1)]
    pub buckets: u8,
    /// Concurrent callers (calls in flight).
    #[arg(long, short = 'c', default_value_t = 64)]
    pub connections: usize,
    /// Seconds of load.
    #[arg(long, default_value_t = 5.0)]
    pub secs: f64,
    /// Key prefix of the run's keys (deleted at the end).
    #[arg(long, default_value = "seckill-bench-gate:")]
    pub prefix: String,
    /// A label for the report's row (e.g. "cluster of 3").
    #[arg(long, default_value = "")]
    pub label: String,
}

/// One run's figures.
#[derive(Debug, Serialize)]
pub struct GateReport {
    pub label: String,
    pub nodes: usize,
    pub cluster: bool,
    pub buckets: u8,
    pub connections: usize,
    pub calls: u64,
    pub errors: u64,
    pub secs: f64,
    pub calls_per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Script calls each node served during the run.
    pub calls_per_node: Vec<u64>,
    /// CPU of Redis' main thread per script call, over all nodes (µs).
    pub cpu_us_per_call: f64,
}

/// A node's CPU seconds (main thread, user + system) and script calls so far.
pub(crate) async fn node_counters(url: &str) -> anyhow::Result<(f64, u64)> {
    let mut conn = redis::Client::open(url)?.get_multiplexed_async_connection().await?;
    let cpu: String = redis::cmd("INFO").arg("cpu").query_async(&mut conn).await?;
    let stats: String = redis::cmd("INFO").arg("commandstats").query_async(&mut conn).await?;
    let field = |text: &str, name: &str| -> f64 {
        text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok()).unwrap_or(0.0)
    };
    let seconds = field(&cpu, "used_cpu_user_main_thread") + field(&cpu, "used_cpu_sys_main_thread");
    let seconds =
        if seconds > 0.0 { seconds } else { field(&cpu, "used_cpu_user") + field(&cpu, "used_cpu_sys") };
    // cmdstat_evalsha:calls=N,usec=...
    let calls = stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0);
    Ok((seconds, calls))
}

pub async fn run(a: &GateArgs) -> anyhow::Result<GateReport> {
    anyhow::ensure!(a.buckets >= 1, "--buckets must be at least 1");
    let nodes = seckill_common::config::split_urls(&a.redis);
    let settings = RedisSettings {
        url: a.redis.clone(),
        cluster: a.cluster,
        key_prefix: a.prefix.clone(),
        timeout_ms: 5_000,
    };
    settings.validate()?;
    let redis = seckill_infra::redis::connect(&settings)?;
    let keys = RedisKeys::new(a.prefix.clone());
    let g = GoodsId::new(1).expect("a goods id");
    for node in &nodes {
        seckill_infra::redis::delete_matching(node, &format!("{}*", a.prefix))
            .await
            .with_context(|| format!("clean {node}"))?;
    }
    let mut conn = redis.clone();
    for b in 0..a.buckets {
        let at = SaleBucket::new(g, b);
        let _: () = conn.set(keys.bucket_stock(at), 1_000_000_000_i64).await?;
        let _: () = conn.set(keys.bucket_epoch(at), "1").await?;
    }
    let script = Arc::new(redis::Script::new(scripts::RESERVE));
    let before = join_all(nodes.iter().map(|n| node_counters(n))).await;

    let next_user = Arc::new(AtomicU64::new(1));
    let errors = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(a.secs);
    let workers = (0..a.connections).map(|_| {
        let (redis, keys, script) = (redis.clone(), keys.clone(), script.clone());
        let (next_user, errors) = (next_user.clone(), errors.clone());
        let buckets = a.buckets;
        tokio::spawn(async move {
            let mut latency = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
            let mut conn = redis;
            while Instant::now() < deadline {
                let n = next_user.fetch_add(1, Ordering::Relaxed);
                let user = UserId::new(i64::try_from(n).unwrap_or(i64::MAX)).expect("a positive user id");
                // The bucket the service serves this buyer from.
                let at = SaleBucket::of_user(g, buckets, user);
                let call = Instant::now();
                let answer: redis::RedisResult<(i64, Option<String>)> = script
                    .key(keys.bucket_stock(at))
                    .key(keys.bucket_users(at))
                    .key(keys.bucket_pending(at))
                    .key(keys.bucket_result(at, user))
                    .key(keys.bucket_token(at, user))
                    .key(keys.bucket_epoch(at))
                    .arg(user.get())
                    .arg(n)
                    .arg(0)
                    .arg("")
                    .invoke_async(&mut conn)
                    .await;
                match answer {
                    Ok((left, _)) if left >= 0 => {
                        let _ = latency.record(u64::try_from(call.elapsed().as_micros()).unwrap_or(u64::MAX));
                    }
                    _ => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            latency
        })
    });
    let mut latency = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
    for h in join_all(workers).await {
        latency.add(h?)?;
    }
    let secs = started.elapsed().as_secs_f64();
    let after = join_all(nodes.iter().map(|n| node_counters(n))).await;

    let mut calls_per_node = Vec::new();
    let (mut cpu, mut node_calls) = (0.0, 0);
    for (b, a) in before.into_iter().zip(after) {
        let ((cpu0, calls0), (cpu1, calls1)) = (b?, a?);
        calls_per_node.push(calls1.saturating_sub(calls0));
        cpu += cpu1 - cpu0;
        node_calls += calls1.saturating_sub(calls0);
    }
    for node in &nodes {
        seckill_infra::redis::delete_matching(node, &format!("{}*", a.prefix))
            .await
            .with_context(|| format!("clean {node}"))?;
    }
    let calls = latency.len();
    Ok(GateReport {
        label: a.label.clone(),
        nodes: nodes.len(),
        cluster: a.cluster,
        buckets: a.buckets,
        connections: a.connections,
        calls,
        errors: errors.load(Ordering::Relaxed),
        secs,
        calls_per_sec: calls as f64 / secs,
        p50_ms: latency.value_at_quantile(0.5) as f64 / 1_000.0,
        p99_ms: latency.value_at_quantile(0.99) as f64 / 1_000.0,
        calls_per_node,
        cpu_us_per_call: if node_calls > 0 { cpu * 1e6 / node_calls as f64 } else { 0.0 },
    })
}
