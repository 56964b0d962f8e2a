//! `seckill-bench idle`: what a shop's history costs at rest. For each count of ended sales
//! asked (100 and 10,000 by default) a fresh system: the four release binaries (started by the
//! fault suite's [`Fleet`], under names of this run's own on the servers given, so the shared
//! development servers are safe), that many sales that ended long ago put straight into its
//! stock database, a few live sales created through the gateway, seckill-service restarted so
//! its warm-up meets the whole history, the storefront's lists asked once; then, after a
//! settling pause, each service's CPU over a minute of nothing happening (its process's user
//! and system ticks, from `/proc`), and the number of sales seckill-service's reconciler looks
//! after. Flat figures from 100 to 10,000 ended sales are the point: ended sales cost nothing
//! at rest. Everything the run made (databases, Redis keys, queues) is removed at its end.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
use seckill_common::api::Role;
use serde::Serialize;

use crate::api::{GOODS, create_sale, dev_token};
use crate::client::{Conn, Endpoint, Req};
use crate::fleet::{Backends, Fleet};
use crate::fleet::{Svc, Unit};

#[derive(Debug, Clone, Args)]
pub struct IdleArgs {
    /// Ended sales in each run, comma-separated; each run is a fresh system.
    #[arg(long, value_delimiter = ',', default_value = "100,10000")]
    pub ended: Vec<u32>,
    /// Live sales next to them (created through the gateway, loaded into Redis).
    #[arg(long, default_value_t = 3)]
    pub live: u32,
    /// Seconds measured in each run.
    #[arg(long, default_value_t = 60)]
    pub secs: u64,
    /// Seconds left to the system after the set-up, before the measurement.
    #[arg(long, default_value_t = 15)]
    pub settle_secs: u64,
    /// Where gateway, seckill-service, order-service and stock-service are.
    #[arg(long, default_value = "target/release")]
    pub bin_dir: PathBuf,
    /// The services' working directory, logs and pid files.
    #[arg(long, default_value = "run/idle")]
    pub scratch: PathBuf,
    /// PostgreSQL without a database name: each run creates two databases of its own there.
    #[arg(long, default_value = "postgres://postgres:postgres@127.0.0.1:5432")]
    pub pg_url: String,
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    pub redis_url: String,
    #[arg(long, default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
    pub amqp_url: String,
    /// The gateway's port; the other services take the next three, the gateway's admin
    /// listener the one after.
    #[arg(long, default_value_t = 29080)]
    pub http_port: u16,
    /// Write the figures as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One run's figures.
#[derive(Debug, Clone, Serialize)]
pub struct IdleRun {
    pub ended_sales: u32,
    pub live_sales: u32,
    pub measured_secs: f64,
    /// Each service's CPU at rest, in percent of one core.
    pub cpu_percent: Vec<(String, f64)>,
    /// seckill-service's `seckill_reconciler_sales_watched` at the end.
    pub reconciler_sales_watched: Option<f64>,
    /// Bytes of the storefront's `/` and of `GET /api/goods`.
    pub list_page_bytes: usize,
    pub api_list_bytes: usize,
}

pub async fn run(args: &IdleArgs) -> anyhow::Result<Vec<IdleRun>> {
    let mut runs = Vec::new();
    for &ended in &args.ended {
        let prefix = format!("idle_{}_{ended}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        let backends = Backends {
            pg_url: args.pg_url.clone(),
            redis_url: args.redis_url.clone(),
            amqp_url: args.amqp_url.clone(),
            prefix: Some(prefix.clone()),
        };
        let mut fleet =
            Fleet::new(&args.bin_dir, &args.scratch.join(&prefix), args.http_port, backends.clone())?;
        let measured = measure(args, ended, &mut fleet, &backends).await;
        fleet.stop_all().await;
        crate::cleanup::remove_quietly(&backends, &[]).await;
        let run = measured?;
        print(&run);
        runs.push(run);
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&runs)?)
            .with_context(|| format!("{}", path.display()))?;
    }
    Ok(runs)
}

async fn measure(
    args: &IdleArgs,
    ended: u32,
    fleet: &mut Fleet,
    backends: &Backends,
) -> anyhow::Result<IdleRun> {
    eprintln!("idle: {ended} ended sales: starting the system");
    fleet.ensure_all(1).await?;
    insert_ended(&format!("{}/{}", backends.pg_url, backends.database("stock")), ended).await?;
    let gateway = Endpoint::parse(&fleet.url(Unit::first(Svc::Gateway)))?;
    let mut conn = Conn::new(gateway, Duration::from_secs(30));
    let admin = dev_token(&mut conn, 1, Role::Admin).await?;
    for k in 0..args.live {
        create_sale(&mut conn, &admin, &format!("idle live {k}"), 100, 1, chrono::Duration::minutes(1), None)
            .await?;
    }
    // Its warm-up meets the whole history.
    let seckill = Unit::first(Svc::Seckill);
    fleet.term(seckill).await?;
    fleet.start(seckill).await?;
    let list_page_bytes = conn.send(Req::get("/")).await.body.len();
    let _ = conn.send(Req::get("/ended")).await;
    let api_list_bytes = conn.send(Req::get(GOODS)).await.body.len();
    eprintln!("idle: {ended} ended sales: settling {} s, then measuring {} s", args.settle_secs, args.secs);
    tokio::time::sleep(Duration::from_secs(args.settle_secs)).await;

    let units: Vec<Unit> = Svc::ALL.iter().map(|s| Unit::first(*s)).collect();
    let ticks = |fleet: &Fleet| -> anyhow::Result<Vec<u64>> {
        units
            .iter()
            .map(|u| {
                let pid = fleet.pid(*u).with_context(|| format!("{u} is not running"))?;
                let stat = procfs::process::Process::new(i32::try_from(pid)?)?.stat()?;
                Ok(stat.utime + stat.stime)
            })
            .collect()
    };
    let before = ticks(fleet)?;
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.secs)).await;
    let after = ticks(fleet)?;
    let wall = started.elapsed().as_secs_f64();
    let per_sec = procfs::ticks_per_second() as f64;
    let cpu_percent = units
        .iter()
        .zip(before.iter().zip(&after))
        .map(|(u, (b, a))| (u.svc.name().to_owned(), a.saturating_sub(*b) as f64 / per_sec / wall * 100.0))
        .collect();
    let metrics = fleet.get(seckill, "/metrics").await;
    let reconciler_sales_watched = String::from_utf8_lossy(&metrics.body)
        .lines()
        .find_map(|l| l.strip_prefix("seckill_reconciler_sales_watched "))
        .and_then(|v| v.trim().parse().ok());
    if reconciler_sales_watched.is_none() {
        eprintln!(
            "idle: seckill-service's /metrics (HTTP {}) has no seckill_reconciler_sales_watched: {}",
            metrics.status,
            String::from_utf8_lossy(&metrics.body)
                .lines()
                .filter(|l| l.contains("reconciler"))
                .collect::<Vec<_>>()
                .join(" | ")
        );
    }
    Ok(IdleRun {
        ended_sales: ended,
        live_sales: args.live,
        measured_secs: wall,
        cpu_percent,
        reconciler_sales_watched,
        list_page_bytes,
        api_list_bytes,
    })
}

/// `n` sales that ended a day or more ago, in one statement (as the tests' `insert_ended_sales`).
async fn insert_ended(db_url: &str, n: u32) -> anyhow::Result<()> {
    let mut conn =
        AsyncPgConnection::establish(db_url).await.with_context(|| format!("connecting to {db_url}"))?;
    conn.batch_execute(&format!(
        "INSERT INTO goods (name, price_cents, seckill_price_cents, stock_total, stock_available, start_at, end_at) \
         SELECT 'ended ' || k, 1000, 500, 10, 10, now() - interval '2 days' - (k / 3) * interval '1 minute', \
                now() - interval '1 day' - (k / 3) * interval '1 minute' \
         FROM generate_series(1, {n}) AS k"
    ))
    .await
    .context("inserting the ended sales")?;
    Ok(())
}

/// Drops the databases of a fleet under `prefix`, deletes its Redis keys and its queues; best
/// effort, each failure said (`seckill-bench push` also calls it before its start, for what an
/// interrupted run left).
fn print(run: &IdleRun) {
    println!(
        "{} ended + {} live sales, {:.0} s at rest: {}; reconciler watches {}; / is {} bytes, GET /api/goods {} bytes",
        run.ended_sales,
        run.live_sales,
        run.measured_secs,
        run.cpu_percent.iter().map(|(s, c)| format!("{s} {c:.2}%")).collect::<Vec<_>>().join(", "),
        run.reconciler_sales_watched.map_or("?".to_owned(), |n| n.to_string()),
        run.list_page_bytes,
        run.api_list_bytes,
    );
}
