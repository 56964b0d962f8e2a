//! `seckill-bench push`: what buyers' event streams (`GET /api/seckill/{id}/events`) cost and
//! how fast they tell. A fresh system of the four release binaries, started by the fault
//! suite's [`Fleet`] on the servers given, under names of the run's own (`--prefix`: databases
//! `<prefix>_stock` and `<prefix>_order`, Redis keys under `<prefix>:`, queues under
//! `<prefix>.`; removed before the start, should an interrupted run have left them, and at the
//! end). One gateway replica with its defaults (`push.max_streams` 50,000; `rate_limit.stream`
//! is per user, and every buyer is a user of its own). The open-file limit is raised for the
//! streams (the services inherit it); where its hard limit cannot be raised, the streams are as
//! many as it lets the gateway hold (two descriptors each), and the report says so. In one run:
//!
//! 1. `--streams` (20,000) buyers of a sale of as many units open their stream, each on an
//!    HTTP/1.1 connection of its own (a small hyper client, 200 being opened at a time, until
//!    all are open or none opened for 30 s), and read its first event (their result, `none`).
//!    Memory per stream: the gateway's RSS (`/proc`) after `--rest-secs` with them open minus
//!    its RSS before the first (every token minted already), over the streams open; the load
//!    generator's own likewise. CPU at rest: the gateway's and seckill-service's ticks over
//!    those `--rest-secs` (20 s) of nothing but open streams (heartbeats; a stream at rest
//!    re-reads its result through seckill-service once a minute).
//! 2. The buyers whose stream opened buy (path token, then order), open loop at `--rate`
//!    (5,000) a second on `--connections` keep-alive connections (later when every one is busy:
//!    the rate reached is reported). Each `success` event's arrival on the buyer's socket is
//!    set against its order's `created_at`, read from the fleet's order database: p50 and p99
//!    of commit to event. `created_at` is the insert's time (PostgreSQL's `now()`, its
//!    transaction's start), a little before the commit: the figures are a little long.
//! 3. A spike: `--spike-buyers` (4,000) on a sale of a quarter as many units, at the same rate,
//!    order-service frozen (SIGSTOP) for its first `--backlog-secs` (3) as under a real
//!    spike's backlog.
//!    Each accepted buyer follows its result as the storefront's page does: the even ones on a
//!    stream opened after the 202 (one `GET .../events`, no poll; polls only if it ends without
//!    a final word), the odd ones polling `GET .../result` (after 200 ms, doubling to 2 s, until
//!    final). Requests per buyer of each half (path token + order + stream or polls), over all
//!    of its buyers and over its accepted ones.
//!
//! Baselines: what an idle keep-alive connection that has served one `GET /healthz` costs a
//! gateway (a second replica, started for it and stopped after, as many connections as
//! streams): the part of a stream's memory that is the HTTP server's own. And the gateway's own
//! hop of the latency: the bench listens on the sale's Redis channel too, and each `success`
//! event is set against its notice's arrival there (notice to socket), the rest being
//! order-service's (commit to notice).
//!
//! Checks: every stream opened; every buyer accepted in phase 2 told `success` on its stream,
//! and its order row found; every accepted buyer of the spike told a final result.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use chrono::{DateTime, Utc};
use clap::Args;
use diesel::{ExpressionMethods, QueryDsl};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use http_body_util::BodyExt;
use hyper::header::HeaderValue;
use seckill_common::api::{Role, SeckillResult, SeckillStatus};
use seckill_common::ids::GoodsId;
use seckill_common::keys::RedisKeys;
use seckill_common::push::{EventKind, Notice, SseReader};
use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;

use crate::api::{SalePaths, create_sale, dev_token};
use crate::cli::Output;
use crate::client::{Conn, Endpoint, Req, STATUS_ERROR, STATUS_TIMEOUT, open_events};
use crate::fleet::{Backends, Fleet};
use crate::fleet::{Svc, Unit};
use crate::invariants::Check;
use crate::machine::{Involved, Watch};
use crate::memory::ProcTarget;
use crate::progress::Progress;
use crate::record::{Call, Clock, Event};
use crate::report::{KIND_SCENARIO, Report, now_rfc3339};
use crate::scenario::mint_tokens;
use crate::signal::Signal;
use crate::stats::{Latency, latency_of, per_sec};

const TIMEOUT: Duration = Duration::from_secs(10);
/// How long a buyer waits for its final word (the page gives up after 120 s).
const FINAL_WAIT: Duration = Duration::from_secs(60);
/// Streams being opened at a time; opening ends when none has opened for this long.
const OPENING: usize = 200;
const STALL: Duration = Duration::from_secs(30);
/// Tries of a stream's opening answered 503.
const OPEN_TRIES: u32 = 5;
const FIRST_USER: i64 = 40_000_000;

diesel::table! {
    /// order-service's orders: the columns read here.
    orders (id) {
        id -> BigInt,
        goods_id -> BigInt,
        created_at -> Timestamptz,
    }
}

#[derive(Debug, Clone, Args, Serialize)]
pub struct PushArgs {
    /// Streams open at once on the one gateway replica; their buyers buy afterwards.
    #[arg(long, default_value_t = 20_000)]
    pub streams: u64,
    /// Seconds at rest with the streams open (the CPU is measured over them).
    #[arg(long, default_value_t = 20)]
    pub rest_secs: u64,
    /// Buys a second asked for (path token + order), of the streams' buyers and in the spike.
    #[arg(long, default_value_t = 5_000.0)]
    pub rate: f64,
    /// Keep-alive connections the buys go out on.
    #[arg(long, short = 'c', default_value_t = 500)]
    pub connections: usize,
    /// The spike's buyers, half following on streams, half polling; a quarter as many units.
    #[arg(long, default_value_t = 4_000)]
    pub spike_buyers: u64,
    /// Seconds order-service is frozen (SIGSTOP) from the spike's start: the backlog of a real
    /// spike, during which a polling page asks again and again and a stream waits.
    #[arg(long, default_value_t = 3)]
    pub backlog_secs: u64,
    /// Where gateway, seckill-service, order-service and stock-service are.
    #[arg(long, default_value = "target/release")]
    pub bin_dir: PathBuf,
    /// The services' working directory, logs and pid files.
    #[arg(long, default_value = "run/push")]
    pub scratch: PathBuf,
    /// The run's names on the servers: all under them is deleted before and after.
    #[arg(long, default_value = "seckill_bench_push")]
    pub prefix: String,
    /// The servers (from the environment, so no password is in the report); PostgreSQL
    /// without a database name.
    #[arg(long, env = "SECKILL_PG_URL", default_value = "postgres://postgres:postgres@127.0.0.1:5432")]
    #[serde(skip)]
    pub pg_url: String,
    #[arg(long, env = "SECKILL_REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    #[serde(skip)]
    pub redis_url: String,
    #[arg(long, env = "SECKILL_AMQP_URL", default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
    #[serde(skip)]
    pub amqp_url: String,
    /// The gateway's port; the other services take the next three, its admin listener the next.
    #[arg(long, default_value_t = 29180)]
    pub http_port: u16,
    #[command(flatten)]
    #[serde(skip)]
    pub out: Output,
}

/// The run's figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PushSummary {
    /// Streams asked for, opened (their first event read), and the seconds opening them took.
    pub streams: u64,
    pub opened: u64,
    pub open_secs: f64,
    /// The gateway's RSS before the first stream and with them open (MiB), and per stream (KiB).
    pub gateway_rss_before_mib: f64,
    pub gateway_rss_open_mib: f64,
    pub gateway_kib_per_stream: f64,
    /// The load generator's own memory per stream (KiB).
    pub bench_kib_per_stream: f64,
    /// The baseline: a gateway's memory per idle keep-alive connection that served one
    /// `GET /healthz` (KiB), over `idle_connections`.
    pub idle_connections: u64,
    pub idle_connection_kib: f64,
    /// CPU at rest with the streams open over `rest_secs`, percent of one core.
    pub rest_secs: f64,
    pub gateway_rest_cpu_pct: f64,
    pub seckill_rest_cpu_pct: f64,
    /// Buys a second asked for; the buyers (those whose stream opened), their orders accepted
    /// (202), the rate reached.
    pub rate: f64,
    pub buyers: u64,
    pub accepted: u64,
    pub accepted_per_sec: f64,
    /// `success` events whose order row was found, and its `created_at` to the event's arrival.
    pub told: u64,
    pub commit_to_event: Latency,
    /// The same events split at their notice's arrival on the sale's Redis channel (a listener
    /// of the bench's own): order-service's part (commit to notice) and the gateway's (notice
    /// to the event on the buyer's socket), over the `noticed` events whose notice was heard.
    pub noticed: u64,
    pub commit_to_notice: Latency,
    pub notice_to_event: Latency,
    /// The spike: buyers following their result on a stream, and polling.
    pub stream_half: SpikeHalf,
    pub poll_half: SpikeHalf,
}

/// Half of the spike's buyers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SpikeHalf {
    pub buyers: u64,
    pub accepted: u64,
    /// Accepted buyers told a final result.
    pub finals: u64,
    /// Path tokens, orders, streams opened and result polls; per buyer, per accepted buyer.
    pub requests: u64,
    pub per_buyer: f64,
    pub per_accepted: f64,
}

/// What every task of the run shares.
struct Ctx {
    endpoint: Arc<Endpoint>,
    clock: Clock,
    events: Mutex<Vec<Event>>,
    /// Streams that read their first event, and those refused or broken before it.
    opened: Arc<AtomicU64>,
    refused: AtomicU64,
    /// Each `success` event: when its bytes were read, and its order.
    told: Mutex<Vec<(Instant, i64)>>,
    /// The streams' buyers whose stream told its first event.
    streaming: Vec<AtomicBool>,
    /// Each order's `success` notice: when the bench's own listener heard it on the channel.
    noticed: Mutex<HashMap<i64, Instant>>,
}

impl Ctx {
    fn record(&self, call: Call, status: u16, start: Instant) {
        let e = self.clock.event(call, status, start, Instant::now());
        self.events.lock().unwrap_or_else(PoisonError::into_inner).push(e);
    }

    /// A stream's first event read (200), or its refusal.
    fn first_event(&self, status: u16, start: Instant) {
        self.record(Call::Events, status, start);
        let counter = if status == 200 { &*self.opened } else { &self.refused };
        counter.fetch_add(1, Relaxed);
    }
}

/// A buyer's stream on a connection of its own until a final result (true) or its end. With a
/// gate, buyer k of the streams: opened holding a permit (none once the gate is closed) until
/// its first event, when it is marked `streaming`.
async fn listen(
    ctx: Arc<Ctx>,
    sale: Arc<SalePaths>,
    bearer: HeaderValue,
    gate: Option<(Arc<Semaphore>, usize)>,
) -> bool {
    let (permit, k) = match gate {
        Some((g, k)) => match g.acquire_owned().await {
            Ok(permit) => (Some(permit), Some(k)),
            Err(_) => return false,
        },
        None => (None, None),
    };
    let start = Instant::now();
    // A 503 (the gateway or seckill-service shedding a burst of opens) is tried again, as a
    // client does, a few times.
    let mut tries = 0;
    let (mut body, mut first) = loop {
        tries += 1;
        let opened =
            tokio::time::timeout(TIMEOUT, open_events(&ctx.endpoint, &sale.events, &bearer, None)).await;
        match opened.map_or(Err(STATUS_TIMEOUT), |o| o.map_err(|a| a.status)) {
            Ok(body) => break (body, Some(permit)),
            Err(503) if tries < OPEN_TRIES => tokio::time::sleep(Duration::from_secs(1)).await,
            Err(status) => {
                ctx.first_event(status, start);
                return false;
            }
        }
    };
    let mut reader = SseReader::default();
    while let Some(Ok(frame)) = body.frame().await {
        let at = Instant::now();
        let text = frame.data_ref().map(|d| String::from_utf8_lossy(d).into_owned()).unwrap_or_default();
        for event in reader.push(&text).into_iter().filter(|e| e.kind() == Some(EventKind::Result)) {
            let Ok(result) = serde_json::from_str::<SeckillResult>(&event.data) else { continue };
            if first.take().is_some() {
                ctx.first_event(200, start);
                if let Some(streaming) = k.and_then(|k| ctx.streaming.get(k)) {
                    streaming.store(true, Relaxed);
                }
            }
            match (result.status, result.order_id) {
                (SeckillStatus::Success, Some(order)) => {
                    ctx.told.lock().unwrap_or_else(PoisonError::into_inner).push((at, order.get()));
                    return true;
                }
                (SeckillStatus::Success | SeckillStatus::Failed, _) => return true,
                _ => {}
            }
        }
    }
    if first.is_some() {
        ctx.first_event(STATUS_ERROR, start);
    }
    false
}

/// One buyer's buy: its index, the order's status (or the path token's, when refused), calls made.
struct Bought {
    k: usize,
    status: u16,
    calls: u64,
}

/// Path token, then order.
async fn buy(ctx: &Ctx, conn: &mut Conn, sale: &SalePaths, k: usize, bearer: &HeaderValue) -> Bought {
    let start = Instant::now();
    let a = conn.send(Req::post(&sale.token).bearer(bearer)).await;
    ctx.record(Call::PathToken, a.status, start);
    let Some(token) = a.path_token() else {
        return Bought { k, status: a.status, calls: 1 };
    };
    let (start, order) = (Instant::now(), Req::post(&sale.orders).bearer(bearer));
    let a = conn.send(order.path_token(token)).await;
    ctx.record(Call::Order, a.status, start);
    Bought { k, status: a.status, calls: 2 }
}

/// Every buyer of `bearers` buys, buyer k `k / rate` s from now (later when every connection
/// is busy), on `conns`; each buy is sent on `bought`.
async fn buy_paced(
    ctx: &Arc<Ctx>,
    sale: &Arc<SalePaths>,
    conns: Vec<Conn>,
    bearers: &Arc<[HeaderValue]>,
    rate: f64,
    bought: mpsc::UnboundedSender<Bought>,
) -> Vec<Conn> {
    let (start, next) = (Instant::now(), Arc::new(AtomicU64::new(0)));
    let mut tasks = JoinSet::new();
    for mut conn in conns {
        let (ctx, sale, bearers, next, bought) =
            (ctx.clone(), sale.clone(), bearers.clone(), next.clone(), bought.clone());
        tasks.spawn(async move {
            loop {
                let k = next.fetch_add(1, Relaxed) as usize;
                let Some(bearer) = bearers.get(k) else { return conn };
                tokio::time::sleep_until((start + Duration::from_secs_f64(k as f64 / rate)).into()).await;
                let _ = bought.send(buy(&ctx, &mut conn, &sale, k, bearer).await);
            }
        });
    }
    tasks.join_all().await
}

/// An accepted buyer of the spike following its result as the page does: on a stream (polls
/// only when it ends without a final word), or polling. The requests it made, and whether it
/// was told a final result.
async fn follow(ctx: Arc<Ctx>, sale: Arc<SalePaths>, bearer: HeaderValue, on_stream: bool) -> (u64, bool) {
    let mut requests = u64::from(on_stream);
    if on_stream && listen(ctx.clone(), sale.clone(), bearer.clone(), None).await {
        return (requests, true);
    }
    let mut conn = Conn::new(ctx.endpoint.clone(), TIMEOUT);
    let (mut delay, give_up) = (Duration::from_millis(200), Instant::now() + FINAL_WAIT);
    while Instant::now() < give_up {
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(2));
        let (start, a) = (Instant::now(), conn.send(Req::get(&sale.result).bearer(&bearer)).await);
        ctx.record(Call::Result, a.status, start);
        requests += 1;
        match a.json::<SeckillResult>() {
            Some(r) if r.status != SeckillStatus::Queued => return (requests, true),
            _ if (400..500).contains(&a.status) => break,
            _ => {}
        }
    }
    (requests, false)
}

/// The spike: every buyer of `bearers` buys at `rate`; the accepted follow their result, the
/// even ones on a stream, the odd ones polling.
async fn spike(
    ctx: &Arc<Ctx>,
    sale: &Arc<SalePaths>,
    conns: Vec<Conn>,
    bearers: &Arc<[HeaderValue]>,
    rate: f64,
) -> anyhow::Result<[SpikeHalf; 2]> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Bought>();
    let (c, s, b) = (ctx.clone(), sale.clone(), bearers.clone());
    let followers = tokio::spawn(async move {
        let (mut halves, mut followed, mut set) = ([SpikeHalf::default(); 2], [0u64; 2], JoinSet::new());
        while let Some(x) = rx.recv().await {
            let h = x.k % 2;
            halves[h].requests += x.calls;
            if x.status == 202 {
                halves[h].accepted += 1;
                let f = follow(c.clone(), s.clone(), b[x.k].clone(), h == 0);
                set.spawn(async move { (h, f.await) });
            }
        }
        while let Some(Ok((h, (requests, told)))) = set.join_next().await {
            followed[h] += requests;
            halves[h].finals += u64::from(told);
        }
        for (h, half) in halves.iter_mut().enumerate() {
            half.buyers = (b.len() + 1 - h) as u64 / 2;
            half.requests += followed[h];
            half.per_buyer = half.requests as f64 / half.buyers.max(1) as f64;
            half.per_accepted = (2 * half.accepted + followed[h]) as f64 / half.accepted.max(1) as f64;
        }
        halves
    });
    buy_paced(ctx, sale, conns, bearers, rate, tx).await;
    followers.await.context("the spike's followers")
}

/// Each order of sale `g` and its `created_at`, from the order database at `db`.
async fn created_at(db: &str, g: i64) -> anyhow::Result<HashMap<i64, DateTime<Utc>>> {
    use diesel_async::RunQueryDsl;
    let mut pg = AsyncPgConnection::establish(db).await.with_context(|| format!("connecting to {db}"))?;
    let query = orders::table.filter(orders::goods_id.eq(g)).select((orders::id, orders::created_at));
    let rows: Vec<(i64, DateTime<Utc>)> = query.load(&mut pg).await.context("reading the orders")?;
    Ok(rows.into_iter().collect())
}

/// The baseline of a stream's memory: `n` keep-alive connections, each having served one
/// `GET /healthz` and left idle, on a gateway of their own (replica 1, stopped after): its RSS
/// growth per connection (KiB).
async fn idle_connection_kib(fleet: &mut Fleet, n: usize) -> anyhow::Result<f64> {
    let unit = Unit::new(Svc::Gateway, 1);
    fleet.start(unit).await?;
    let pid = fleet.pid(unit).context("the baseline's gateway is not running")?;
    let endpoint = Endpoint::parse(&fleet.url(unit))?;
    let before = proc_now(pid)?.1;
    let mut conns = Conn::open_many(&endpoint, n, TIMEOUT).await?;
    for conn in &mut conns {
        let status = conn.send(Req::get("/healthz")).await.status;
        ensure!(status == 200, "the baseline gateway's /healthz answered {status}");
    }
    let after = proc_now(pid)?.1;
    drop(conns);
    fleet.kill9(&[unit]).await?;
    Ok(after.saturating_sub(before) as f64 / n.max(1) as f64)
}

/// Listens on sale `g`'s notice channel, as a gateway does, and notes when each `success`
/// notice arrives, until the returned task is aborted.
async fn hear_notices(
    ctx: &Arc<Ctx>,
    redis_url: &str,
    keys: &RedisKeys,
    g: i64,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    use futures_util::StreamExt;
    let goods = GoodsId::new(g).context("the sale's id")?;
    let mut pubsub = redis::Client::open(redis_url)?.get_async_pubsub().await?;
    pubsub.subscribe(keys.sale_events(goods)).await?;
    let ctx = ctx.clone();
    Ok(tokio::spawn(async move {
        let mut messages = pubsub.into_on_message();
        while let Some(message) = messages.next().await {
            let at = Instant::now();
            if let Some(Notice::Result { result: SeckillResult { order_id: Some(order), .. }, .. }) =
                Notice::parse(message.get_payload_bytes())
            {
                ctx.noticed.lock().unwrap_or_else(PoisonError::into_inner).insert(order.get(), at);
            }
        }
    }))
}

/// A process's CPU ticks (user + system) and resident memory (KiB).
fn proc_now(pid: u32) -> anyhow::Result<(u64, u64)> {
    let p = procfs::process::Process::new(i32::try_from(pid)?)?;
    let stat = p.stat()?;
    Ok((stat.utime + stat.stime, p.status()?.vmrss.unwrap_or(0)))
}

pub async fn run(a: &PushArgs) -> anyhow::Result<Report> {
    ensure!(a.streams > 0 && a.rate > 0.0 && a.connections > 0, "--streams, --rate and -c must be positive");
    let p = &a.prefix;
    ensure!(
        p.starts_with(|c: char| c.is_ascii_lowercase())
            && p.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
        "--prefix `{p}`: lower-case letters, digits and `_`, a letter first"
    );
    let streams = streams_that_fit(a)?;
    let backends = Backends {
        pg_url: a.pg_url.trim_end_matches('/').to_owned(),
        redis_url: a.redis_url.clone(),
        amqp_url: a.amqp_url.clone(),
        prefix: Some(p.clone()),
    };
    crate::cleanup::remove_quietly(&backends, &[]).await;
    let mut fleet = Fleet::new(&a.bin_dir, &a.scratch, a.http_port, backends.clone())?;
    let measured = measure(a, streams, &mut fleet, &backends).await;
    fleet.stop_all().await;
    crate::cleanup::remove_quietly(&backends, &[]).await;
    measured
}

/// Raises the open-file limit (the services inherit it) for `--streams`, as far as allowed:
/// how many streams fit. The gateway holds two descriptors a connection (its keep-alive
/// watchdog keeps a duplicate of each socket), the buys' connections among them.
fn streams_that_fit(a: &PushArgs) -> anyhow::Result<u64> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let spare = 2 * a.connections as u64 + 1_024;
    let (want, Rlimit { current, maximum }) = (2 * a.streams + spare, getrlimit(Resource::Nofile));
    if current.is_some_and(|now| now < want) {
        // Raising the hard limit takes CAP_SYS_RESOURCE; without it, up to the hard limit.
        let raised = Rlimit { current: Some(want), maximum: maximum.map(|m| m.max(want)) };
        if setrlimit(Resource::Nofile, raised).is_err() {
            setrlimit(Resource::Nofile, Rlimit { current: maximum.map(|m| m.min(want)), maximum })?;
        }
    }
    let now = getrlimit(Resource::Nofile).current.unwrap_or(want);
    ensure!(now > spare + 2, "the open-file limit, {now}, leaves no room for a stream");
    Ok(a.streams.min((now - spare) / 2))
}

async fn measure(
    a: &PushArgs,
    streams: u64,
    fleet: &mut Fleet,
    backends: &Backends,
) -> anyhow::Result<Report> {
    eprintln!("push: starting the system");
    fleet.ensure_all(1).await?;
    eprintln!("push: the baseline, {streams} idle keep-alive connections on a gateway of their own");
    let idle_kib = idle_connection_kib(fleet, streams as usize).await?;
    let pid = |svc| fleet.pid(Unit::first(svc)).with_context(|| format!("{} is not running", svc.name()));
    let (gateway, seckill, me) = (pid(Svc::Gateway)?, pid(Svc::Seckill)?, std::process::id());
    let procs = Svc::ALL.iter().map(|&s| Ok(ProcTarget { name: s.name().into(), pid: pid(s)? }));
    let procs = procs.collect::<anyhow::Result<Vec<_>>>()?;
    let (watch, started_at) = (Watch::start(procs.clone(), Duration::from_millis(500)), now_rfc3339());
    let endpoint = Endpoint::parse(&fleet.url(Unit::first(Svc::Gateway)))?;
    let mut admin = Conn::new(endpoint.clone(), TIMEOUT);
    let admin_token = dev_token(&mut admin, 1, Role::Admin).await?;
    let (n, m, progress) = (streams as usize, a.spike_buyers as usize, a.out.progress());
    let users: Vec<i64> = (0..n + m).map(|i| FIRST_USER + i as i64).collect();
    let mut bearers = mint_tokens(&endpoint, &users, 32, TIMEOUT, progress).await?;
    let spike_bearers: Arc<[HeaderValue]> = bearers.split_off(n).into();
    let bearers: Arc<[HeaderValue]> = bearers.into();
    let (ago, units) = (chrono::Duration::seconds(1), (m as i64 / 4).max(1));
    let goods = create_sale(&mut admin, &admin_token, "bench push", n as i64, 1, ago, None).await?;
    let sale = Arc::new(SalePaths::new(goods.id.get()));

    // 1. The streams, opened and left at rest.
    let opening = Progress::new(progress, Some(n as u64), "opening streams");
    let (clock, t0_wall) = (Clock::start(), Utc::now());
    let ctx = Arc::new(Ctx {
        endpoint: endpoint.clone(),
        clock,
        events: Mutex::new(Vec::new()),
        opened: opening.counter.clone(),
        refused: AtomicU64::new(0),
        told: Mutex::new(Vec::new()),
        streaming: (0..n).map(|_| AtomicBool::new(false)).collect(),
        noticed: Mutex::default(),
    });
    let (gateway_before, me_before) = (proc_now(gateway)?.1, proc_now(me)?.1);
    let (gate, opened_at, mut listening) =
        (Arc::new(Semaphore::new(OPENING)), Instant::now(), JoinSet::new());
    for (k, b) in bearers.iter().enumerate() {
        listening.spawn(listen(ctx.clone(), sale.clone(), b.clone(), Some((gate.clone(), k))));
    }
    // Until every stream opened or was refused, or none did for STALL; no more are opened then.
    let (mut seen, mut moved) = (0, Instant::now());
    while seen < streams && moved.elapsed() < STALL {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let done = ctx.opened.load(Relaxed) + ctx.refused.load(Relaxed);
        (seen, moved) = if done > seen { (done, Instant::now()) } else { (seen, moved) };
    }
    gate.close();
    let (open_secs, opened) = (moved.duration_since(opened_at).as_secs_f64(), ctx.opened.load(Relaxed));
    opening.finish();
    eprintln!("push: {opened} streams open in {open_secs:.1} s; {} s at rest", a.rest_secs);
    let (g0, s0, rest) = (proc_now(gateway)?.0, proc_now(seckill)?.0, Instant::now());
    tokio::time::sleep(Duration::from_secs(a.rest_secs)).await;
    let (g1, s1, rest_secs) = (proc_now(gateway)?, proc_now(seckill)?.0, rest.elapsed().as_secs_f64());
    let me_open = proc_now(me)?.1;
    let pct = |ticks: u64| ticks as f64 / procfs::ticks_per_second() as f64 / rest_secs * 100.0;
    let per_stream = |after: u64, before: u64| after.saturating_sub(before) as f64 / opened.max(1) as f64;

    // 2. The buyers whose stream is open buy; each `success` event against its order's row.
    let buyers: Arc<[HeaderValue]> =
        bearers.iter().zip(&ctx.streaming).filter(|(_, s)| s.load(Relaxed)).map(|(b, _)| b.clone()).collect();
    eprintln!("push: {} buyers buying at {} a second", buyers.len(), a.rate);
    let (conns, (tx, mut rx)) =
        (Conn::open_many(&endpoint, a.connections, TIMEOUT).await?, mpsc::unbounded_channel());
    let hearing = hear_notices(&ctx, &backends.redis_url, &backends.redis_keys(), sale.goods_id).await?;
    let buying = Instant::now();
    let conns = buy_paced(&ctx, &sale, conns, &buyers, a.rate, tx).await;
    let buy_secs = buying.elapsed().as_secs_f64();
    let mut accepted = 0;
    while let Ok(b) = rx.try_recv() {
        accepted += u64::from(b.status == 202);
    }
    let told = || ctx.told.lock().unwrap_or_else(PoisonError::into_inner).len() as u64;
    let deadline = Instant::now() + FINAL_WAIT;
    while told() < accepted && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(listening);
    hearing.abort();
    let told = std::mem::take(&mut *ctx.told.lock().unwrap_or_else(PoisonError::into_inner));
    let noticed = std::mem::take(&mut *ctx.noticed.lock().unwrap_or_else(PoisonError::into_inner));
    let created =
        created_at(&format!("{}/{}", backends.pg_url, backends.database("order")), sale.goods_id).await?;
    // Microseconds from an order's `created_at` to an instant of this process.
    let since_created = |at: Instant, id: i64| {
        let wall = t0_wall + chrono::Duration::from_std(at.duration_since(ctx.clock.t0())).ok()?;
        Some((wall - *created.get(&id)?).num_microseconds()?.max(0) as u64)
    };
    let commit_us: Vec<u64> = told.iter().filter_map(|&(at, id)| since_created(at, id)).collect();
    let split: Vec<(u64, u64)> = told
        .iter()
        .filter_map(|&(at, id)| {
            let heard = *noticed.get(&id)?;
            Some((since_created(heard, id)?, at.saturating_duration_since(heard).as_micros() as u64))
        })
        .collect();

    // 3. The spike.
    eprintln!("push: a spike of {m} buyers, half on streams, half polling");
    let spike_sale = create_sale(&mut admin, &admin_token, "bench push spike", units, 1, ago, None).await?;
    let order = pid(Svc::Order)?;
    crate::signal::send(order, Signal::STOP)?;
    let backlog = Duration::from_secs(a.backlog_secs);
    let thaw = tokio::spawn(async move {
        tokio::time::sleep(backlog).await;
        crate::signal::send(order, Signal::CONT)
    });
    let spiked =
        spike(&ctx, &Arc::new(SalePaths::new(spike_sale.id.get())), conns, &spike_bearers, a.rate).await;
    thaw.await.context("thawing order-service")??;
    let [stream_half, poll_half] = spiked?;

    let p = PushSummary {
        streams,
        opened,
        open_secs,
        gateway_rss_before_mib: gateway_before as f64 / 1_024.0,
        gateway_rss_open_mib: g1.1 as f64 / 1_024.0,
        gateway_kib_per_stream: per_stream(g1.1, gateway_before),
        bench_kib_per_stream: per_stream(me_open, me_before),
        idle_connections: streams,
        idle_connection_kib: idle_kib,
        rest_secs,
        gateway_rest_cpu_pct: pct(g1.0.saturating_sub(g0)),
        seckill_rest_cpu_pct: pct(s1.saturating_sub(s0)),
        rate: a.rate,
        buyers: buyers.len() as u64,
        accepted,
        accepted_per_sec: per_sec(accepted, buy_secs),
        told: commit_us.len() as u64,
        commit_to_event: latency_of(commit_us),
        noticed: split.len() as u64,
        commit_to_notice: latency_of(split.iter().map(|s| s.0)),
        notice_to_event: latency_of(split.iter().map(|s| s.1)),
        stream_half,
        poll_half,
    };
    let check = |name: &str, ok: bool, detail: String| Check { name: name.into(), ok, detail };
    let finals = |h: &SpikeHalf| format!("{} of {} accepted", h.finals, h.accepted);
    let invariants = vec![
        check("every stream opened", opened == streams, format!("{opened} of {streams} streams")),
        check(
            "every accepted buyer told success on its stream, its order found",
            p.told == p.accepted,
            format!("{} of {} accepted ({} success events)", p.told, p.accepted, told.len()),
        ),
        check(
            "every accepted buyer of the spike told a final result",
            stream_half.finals == stream_half.accepted && poll_half.finals == poll_half.accepted,
            format!("on a stream {}; polling {}", finals(&stream_half), finals(&poll_half)),
        ),
    ];
    let reached = p.accepted_per_sec;
    let mut notes: Vec<String> = (reached < 0.9 * a.rate)
        .then(|| {
            format!(
                "{:.0} buys a second asked for; this machine reached {reached:.0} accepted a second.",
                a.rate
            )
        })
        .into_iter()
        .collect();
    if streams < a.streams {
        notes.push(format!(
            "{} streams asked for; the open-file limit here (its hard limit could not be raised) lets the \
             gateway hold {streams}: two descriptors a stream, its keep-alive watchdog duplicating each socket.",
            a.streams
        ));
    }
    let cpu = watch.cpu(&Involved::system(procs));
    notes.extend(cpu.disturbed.then(|| cpu.disturbance()));
    let events = std::mem::take(&mut *ctx.events.lock().unwrap_or_else(PoisonError::into_inner));
    let (params, end) = (serde_json::to_value(a)?, ctx.clock.now_us());
    Ok(Report {
        push: Some(p),
        invariants,
        memory: watch.memory(),
        cpu: Some(cpu),
        notes,
        ..Report::of_calls(KIND_SCENARIO, "push", started_at, params, &events, end)
    })
}
