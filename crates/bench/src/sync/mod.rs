//! `sync`: the synchronous design flash-sale write-ups compare against, measured on the same
//! PostgreSQL as the system: one transaction per buy (a conditional stock update and an order
//! insert guarded by a unique (goods_id, user_id) index, commit), behind a minimal HTTP server
//! inside this tool ([`server`]) with a pool of connections, in a throw-away database of its
//! own ([`db`]). The tool's own client drives it on N keep-alive connections, closed loop, a
//! new user per buy, like the accept-path measurement (drain-backlog); afterwards the database
//! is checked: orders = min(stock, buyers), no user twice, available + orders = total.

pub mod db;
pub mod server;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::task::JoinSet;

use crate::baseline::redact;
use crate::cli::{self, Output};
use crate::client::{Conn, Endpoint, Req};
use crate::invariants::Check;
use crate::machine::{Involved, Watch};
use crate::progress::Progress;
use crate::record::{Call, Clock, Event};
use crate::report::{self, KIND_SCENARIO, LoadShape, Report};
use db::{GOODS_ID, Scratch, Tally};

/// Everything a `sync` run needs: the `sync` subcommand's options. The defaults: 50,000 buys
/// of a 100,000-unit sale (nothing sells out: every buy is an order, like the accept path's
/// run), 500 connections, a pool of 32.
#[derive(Debug, Clone, clap::Args)]
pub struct SyncConfig {
    /// The PostgreSQL server (a database name in the URL is replaced by --database).
    #[arg(long, env = "SECKILL_PG_URL", default_value = "postgres://postgres@127.0.0.1:5432")]
    pub pg_url: String,
    /// The throw-away database: dropped if an interrupted run left it, created, dropped at the end.
    #[arg(long, default_value = "seckill_bench_sync")]
    pub database: String,
    /// Buy requests, each by a new user.
    #[arg(long, default_value_t = 50_000)]
    pub buys: u64,
    /// Units on sale.
    #[arg(long, default_value_t = 100_000)]
    pub stock: i64,
    /// Keep-alive connections firing buys.
    #[arg(long, short = 'c', default_value_t = 500)]
    pub connections: usize,
    /// The server's PostgreSQL connections.
    #[arg(long, default_value_t = 32)]
    pub pool_size: usize,
    /// The first user id (users are consecutive from it).
    #[arg(long, default_value_t = 1)]
    pub first_user: i64,
    #[arg(long = "timeout-ms", value_name = "TIMEOUT_MS", default_value = "10000", value_parser = cli::millis)]
    pub request_timeout: Duration,
    /// The report's name.
    #[arg(long, default_value = "sync")]
    pub name: String,
    #[command(flatten)]
    pub out: Output,
}

/// What a `sync` run found, for the report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SyncSummary {
    pub buys: u64,
    pub stock: i64,
    pub connections: usize,
    pub pool_size: usize,
    /// Answered 200: an order committed.
    pub accepted: u64,
    /// Answered 410.
    pub sold_out: u64,
    /// Answered 409.
    pub repeated: u64,
    /// Any other answer, or none (errors, timeouts).
    pub other: u64,
    /// 200s per second, from the first 200's start to the last one's answer (while units
    /// lasted).
    pub accepted_per_sec: f64,
    /// Read back from the database after the run.
    pub orders: i64,
    pub distinct_users: i64,
    pub available: i64,
    pub total: i64,
}

/// Creates the database, measures, checks, and drops the database whatever happened.
pub async fn run(cfg: &SyncConfig) -> anyhow::Result<Report> {
    if cfg.buys == 0 || cfg.connections == 0 {
        anyhow::bail!("buys and connections must be at least 1");
    }
    let scratch = Scratch::create(&cfg.pg_url, &cfg.database, cfg.stock).await?;
    let measured = measure(cfg, &scratch).await;
    let dropped = scratch.drop_now().await;
    let mut report = measured?;
    if let Err(e) = dropped {
        report.notes.push(format!("the database {} could not be dropped: {e:#}", cfg.database));
    }
    Ok(report)
}

async fn measure(cfg: &SyncConfig, scratch: &Scratch) -> anyhow::Result<Report> {
    let pool = db::pool(&scratch.url()?, cfg.pool_size).await?;
    let server = server::start(pool.clone(), GOODS_ID).await?;
    let endpoint = Endpoint::parse(&format!("http://{}", server.addr()))?;
    let conns = Conn::open_many(&endpoint, cfg.connections, cfg.request_timeout).await?;

    let progress = Progress::new(cfg.out.progress(), Some(cfg.buys), &cfg.name);
    let procs = cfg.out.procs();
    let watch = Watch::start(procs.clone(), Duration::from_millis(100));
    let started_at = report::now_rfc3339();
    let clock = Clock::start();
    let (events, reconnects) = buy_on_every_connection(cfg, conns, clock, &progress.counter).await?;
    let end_us = clock.now_us();
    progress.finish();
    let cpu = watch.cpu(&Involved::only(&["postgres", "seckill-bench", "seckill_bench-"], procs));
    let memory = watch.memory();

    // Transactions whose client gave up still run: the database is read once they are done.
    let settled = server.settle(cfg.request_timeout).await;
    server.stop().await;
    let mut conn = pool.get().await.context("a connection to read the sale back")?;
    let tally = db::tally(&mut conn, GOODS_ID).await.context("reading the sale back")?;
    drop(conn);
    drop(pool);

    let summary = summarize(cfg, &events, tally);
    let mut notes = vec![format!(
        "one transaction per buy (UPDATE stock SET available = available - 1 WHERE goods_id = $1 AND available > 0; \
         INSERT INTO orders, unique (goods_id, user_id); COMMIT) behind a minimal HTTP/1.1 server in seckill-bench, \
         {} PostgreSQL connections, in the throw-away database {}",
        cfg.pool_size, cfg.database
    )];
    if !settled {
        notes.push("some buys were still running when the sale was read back".into());
    }
    if reconnects > 0 {
        notes.push(format!("{reconnects} connections were re-opened after an error or a close"));
    }
    if cpu.disturbed {
        notes.push(cpu.disturbance());
    }
    let params = json!({
        "scenario": "sync",
        "pg_url": redact(&cfg.pg_url),
        "database": cfg.database,
        "buys": cfg.buys,
        "stock": cfg.stock,
        "connections": cfg.connections,
        "pool_size": cfg.pool_size,
        "first_user": cfg.first_user,
    });
    Ok(Report {
        load: LoadShape {
            connections: cfg.connections as u64,
            rate: None,
            gateways: Vec::new(),
            ..LoadShape::default()
        },
        invariants: checks(&summary, settled),
        sync: Some(summary),
        memory,
        cpu: Some(cpu),
        notes,
        ..Report::of_calls(KIND_SCENARIO, &cfg.name, started_at, params, &events, end_us)
    })
}

/// Closed loop: every connection buys as soon as it is answered, a new user each time, until
/// `buys` were sent. Returns the events and the connections re-opened.
async fn buy_on_every_connection(
    cfg: &SyncConfig,
    conns: Vec<Conn>,
    clock: Clock,
    done: &Arc<AtomicU64>,
) -> anyhow::Result<(Vec<Event>, u64)> {
    let next = Arc::new(AtomicU64::new(0));
    let mut workers = JoinSet::new();
    for mut conn in conns {
        let (next, done, buys, first_user) = (next.clone(), done.clone(), cfg.buys, cfg.first_user);
        workers.spawn(async move {
            let mut events = Vec::new();
            loop {
                let seq = next.fetch_add(1, Ordering::Relaxed);
                if seq >= buys {
                    break;
                }
                let path = format!("/buy/{}", first_user + seq as i64);
                let start = Instant::now();
                let a = conn.send(Req::post(&path)).await;
                events.push(clock.event(Call::Buy, a.status, start, Instant::now()));
                done.fetch_add(1, Ordering::Relaxed);
            }
            (events, conn.reconnects)
        });
    }
    let mut events = Vec::with_capacity(usize::try_from(cfg.buys).unwrap_or(0));
    let mut reconnects = 0;
    while let Some(finished) = workers.join_next().await {
        let (e, r) = finished.context("a load worker panicked")?;
        events.extend(e);
        reconnects += r;
    }
    Ok((events, reconnects))
}

/// The answers counted, the accepted rate, and the database's figures.
fn summarize(cfg: &SyncConfig, events: &[Event], tally: Tally) -> SyncSummary {
    let count = |status: u16| events.iter().filter(|e| e.status == status).count() as u64;
    let (accepted, sold_out, repeated) = (count(200), count(410), count(409));
    // While units lasted: a sold-out sale's 410s after them are not buys.
    let window_secs = {
        let ok = events.iter().filter(|e| e.status == 200);
        let first = ok.clone().map(Event::start_us).min().unwrap_or(0);
        let last = ok.map(|e| e.end_us).max().unwrap_or(0);
        f64::from(last.saturating_sub(first)) / 1e6
    };
    SyncSummary {
        buys: cfg.buys,
        stock: cfg.stock,
        connections: cfg.connections,
        pool_size: cfg.pool_size,
        accepted,
        sold_out,
        repeated,
        other: events.len() as u64 - accepted - sold_out - repeated,
        accepted_per_sec: crate::stats::per_sec(accepted, window_secs),
        orders: tally.orders,
        distinct_users: tally.distinct_users,
        available: tally.available,
        total: tally.total,
    }
}

pub const ORDERS: &str = "orders = min(stock, buyers)";
pub const NO_USER_TWICE: &str = "no user ordered twice";
pub const STOCK_ADDS_UP: &str = "available + orders = total";
pub const ANSWERS_AGREE: &str = "every 200 is an order row, every order row a 200";

/// The sale's checks, from the database. Buyers are the users who sent a buy (one each);
/// `settled`: no transaction was still running when the database was read.
fn checks(s: &SyncSummary, settled: bool) -> Vec<Check> {
    let buyers = s.buys as i64;
    let want = s.stock.min(buyers);
    let unsettled = if settled { String::new() } else { " (some buys were still running)".into() };
    vec![
        Check {
            name: ORDERS.into(),
            ok: s.orders == want,
            detail: format!("{} orders, expected min({}, {buyers}) = {want}{unsettled}", s.orders, s.stock),
        },
        Check {
            name: NO_USER_TWICE.into(),
            ok: s.orders == s.distinct_users,
            detail: format!("{} orders of {} distinct users", s.orders, s.distinct_users),
        },
        Check {
            name: STOCK_ADDS_UP.into(),
            ok: s.available + s.orders == s.total,
            detail: format!(
                "available {} + orders {} = {}, total {}",
                s.available,
                s.orders,
                s.available + s.orders,
                s.total
            ),
        },
        Check {
            name: ANSWERS_AGREE.into(),
            // A buy without an answer (error, timeout) may have committed: then only at most.
            ok: if s.other == 0 { s.accepted as i64 == s.orders } else { s.accepted as i64 <= s.orders },
            detail: format!(
                "{} answered 200, {} order rows; {} answered 410, {} answered 409, {} other or none",
                s.accepted, s.orders, s.sold_out, s.repeated, s.other
            ),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(orders: i64, available: i64) -> SyncSummary {
        SyncSummary {
            buys: 2_000,
            stock: 300,
            accepted: 300,
            sold_out: 1_700,
            orders,
            distinct_users: orders,
            available,
            total: 300,
            ..SyncSummary::default()
        }
    }

    fn failing(checks: &[Check]) -> Vec<&str> {
        checks.iter().filter(|c| !c.ok).map(|c| c.name.as_str()).collect()
    }

    #[test]
    fn a_clean_sale_passes_and_broken_ones_fail() {
        assert!(failing(&checks(&summary(300, 0), true)).is_empty());
        // Oversold: more rows than units, and the stock does not add up.
        assert_eq!(failing(&checks(&summary(301, 0), true)), [ORDERS, STOCK_ADDS_UP, ANSWERS_AGREE]);
        // A user twice.
        let twice = SyncSummary { distinct_users: 299, ..summary(300, 0) };
        assert_eq!(failing(&checks(&twice, true)), [NO_USER_TWICE]);
        // Unanswered buys may have committed; a 200 without a row never is right.
        let unanswered = SyncSummary { accepted: 298, other: 2, sold_out: 1_700, ..summary(300, 0) };
        assert!(failing(&checks(&unanswered, true)).is_empty());
        let lost = SyncSummary { accepted: 301, ..summary(300, 0) };
        assert_eq!(failing(&checks(&lost, true)), [ANSWERS_AGREE]);
        // Fewer buyers than units: every buyer gets one.
        let plenty =
            SyncSummary { stock: 5_000, total: 5_000, accepted: 2_000, sold_out: 0, ..summary(2_000, 3_000) };
        assert!(failing(&checks(&plenty, true)).is_empty(), "{:#?}", checks(&plenty, true));
    }
}
