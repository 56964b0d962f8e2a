//! The named scenarios, driven through the gateway like real buyers: create the sale as an
//! admin, mint every user's token (untimed), then on a set number of keep-alive connections
//! fire path token + order per click (closed loop, or open loop at `rate` clicks/s), poll each
//! accepted user's result until it is final, and check the invariants from outside.
//! `hot-user` is one user hammering the buy button: the path token is fetched once, before
//! the clock, and every click is an order presenting it.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chrono::Utc;
use futures_util::future::join_all;
use hyper::header::{HeaderName, HeaderValue};
use seckill_common::api::{Goods, Order, SeckillResult, SeckillStatus, TokenResponse};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::{Notify, mpsc};
use tokio::task::{JoinHandle, JoinSet};

use crate::api::{create_sale, dev_token};
use crate::busy::{self, BusyRetry};
use crate::client::{Answer, Conn, Endpoint, Req, STATUS_ERROR, STATUS_TIMEOUT, bearer_header};
use crate::invariants::{self, Buyer, FinalState};
use crate::machine::{CpuReport, Involved, Watch};
use crate::memory::{ProcMemory, ProcTarget};
use crate::progress::Progress;
use crate::record::{Call, Clock, Event, outcome_label};
use crate::report::{self, BuySummary, DrainSummary, GatewayClicks, KIND_SCENARIO, LimitCheck, Report};
use crate::signal::{self, Signal};
use crate::stats;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// 1,000 users, 500 units: the original write-up's test.
    Seed,
    /// 20,000 users, 1,000 units, 500 connections.
    Spike,
    /// Hammering a sold-out sale for a while: the in-process flag.
    SoldOut,
    /// One user hammering the buy button: one path token (before the clock), then 1,000 order
    /// clicks with it.
    HotUser,
    /// 50,000 accepted requests on a big stock: the consumer's throughput.
    Drain,
}

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Self::Seed => "seed",
            Self::Spike => "spike",
            Self::SoldOut => "sold-out",
            Self::HotUser => "hot-user",
            Self::Drain => "drain",
        }
    }
}

/// Everything a scenario run needs; [`ScenarioConfig::new`] gives the scenario's defaults.
#[derive(Debug, Clone)]
pub struct ScenarioConfig {
    pub scenario: Scenario,
    /// The report's name (default: the scenario's).
    pub name: String,
    /// The gateway the sale is created and read back through, and the users' tokens minted.
    pub gateway: String,
    /// The gateways the load goes to: load connection k to the k-th of them (modulo their
    /// number), so one user's clicks are spread over them; the result polls go to the first.
    /// Empty: `gateway`.
    pub click_gateways: Vec<String>,
    /// The gateways' limit on the buy routes (`rate_limit.buy`), when the run is told it: the
    /// report then sets the calls the limit let through against what it allows.
    pub buy_limit: Option<BuyLimit>,
    /// Settings the gateways under load run with (`rate_limit.lease` = `4`...), as the caller
    /// says: recorded with the report, for the reader.
    pub gateway_settings: BTreeMap<String, String>,
    /// Distinct users (for `sold-out`: the pool the clicks cycle through).
    pub users: u64,
    pub stock: i64,
    pub connections: usize,
    /// `hot-user`: how many clicks the one user makes. Others: one click per user.
    pub clicks: Option<u64>,
    /// `sold-out`: how long to hammer.
    pub duration: Option<Duration>,
    /// Open loop: clicks per second on a fixed schedule (latency counted from the scheduled
    /// start). `None`: closed loop, each connection clicks again as soon as it is answered
    /// (after the `Retry-After` of a `503 BUSY` it retries: a connection is one buyer).
    pub rate: Option<f64>,
    /// Present a path token with each order (off for `seckill.require_token=false`).
    pub path_token: bool,
    /// With `path_token`: fetch each user's token once, before the clock, and present it on
    /// every click (`hot-user`), instead of asking for one at the start of each click.
    pub path_token_once: bool,
    /// How a click retries a call answered `503 BUSY` (after its `Retry-After`).
    pub busy: BusyRetry,
    /// The first user id; users are `first_user..first_user + users`.
    pub first_user: i64,
    pub poll_interval: Duration,
    pub poll_connections: usize,
    /// Poll results while the load runs (else only once it ended: the load is measured alone,
    /// and the drain's end comes from the order rows' creation times).
    pub poll_during_load: bool,
    /// How many orders' creation times to read back (`GET /api/orders/{id}`) to time the
    /// drain at the order rows themselves.
    pub order_samples: usize,
    /// Processes stopped (SIGSTOP) while the load runs and resumed (SIGCONT) when it ends:
    /// the order-service, to pile up a backlog and time the consumer on it alone.
    pub pause_pids: Vec<u32>,
    /// Buy on this existing sale instead of creating one (`stock` is then its units, for the
    /// checks): the expiry storm's buyers buying again.
    pub sale: Option<i64>,
    /// How long to keep polling after the load ended.
    pub final_timeout: Duration,
    pub request_timeout: Duration,
    pub progress: bool,
    pub procs: Vec<ProcTarget>,
    pub sample_every: Duration,
}

impl ScenarioConfig {
    pub fn new(scenario: Scenario, gateway: impl Into<String>) -> Self {
        let (users, stock, connections) = match scenario {
            Scenario::Seed => (1_000, 500, 200),
            Scenario::Spike => (20_000, 1_000, 500),
            Scenario::SoldOut => (10_000, 1, 200),
            Scenario::HotUser => (1, 10, 50),
            Scenario::Drain => (50_000, 100_000, 500),
        };
        let mut cfg = Self {
            scenario,
            name: scenario.name().into(),
            gateway: gateway.into(),
            click_gateways: Vec::new(),
            buy_limit: None,
            gateway_settings: BTreeMap::new(),
            users,
            stock,
            connections,
            clicks: (scenario == Scenario::HotUser).then_some(1_000),
            duration: (scenario == Scenario::SoldOut).then_some(Duration::from_secs(10)),
            rate: None,
            path_token: true,
            path_token_once: scenario == Scenario::HotUser,
            busy: BusyRetry::default(),
            first_user: 10_000,
            poll_interval: Duration::from_millis(50),
            poll_connections: 0,
            poll_during_load: scenario != Scenario::Drain,
            order_samples: 200,
            pause_pids: Vec::new(),
            sale: None,
            final_timeout: Duration::from_secs(if scenario == Scenario::Drain { 180 } else { 60 }),
            request_timeout: Duration::from_secs(10),
            progress: true,
            procs: Vec::new(),
            sample_every: Duration::from_millis(100),
        };
        cfg.poll_connections = default_poll_connections(cfg.connections);
        cfg
    }

    /// The gateways the load goes to.
    pub fn click_gateways(&self) -> Vec<String> {
        if self.click_gateways.is_empty() { vec![self.gateway.clone()] } else { self.click_gateways.clone() }
    }
}

/// A per-user token bucket's settings: `per_sec` tokens a second, at most `burst` saved.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BuyLimit {
    pub per_sec: f64,
    pub burst: f64,
}

impl BuyLimit {
    /// The most calls one user can get through in `elapsed_s` seconds: a full bucket at the
    /// start, then the refill.
    pub fn allowance(self, elapsed_s: f64) -> f64 {
        self.burst + self.per_sec * elapsed_s
    }
}

/// A quarter of the load's connections, between 4 and 64.
pub fn default_poll_connections(connections: usize) -> usize {
    (connections / 4).clamp(4, 64)
}

/// The paths of one sale.
struct Paths {
    token: String,
    orders: String,
    result: String,
}

impl Paths {
    fn new(g: i64) -> Self {
        Self {
            token: format!("/api/seckill/{g}/token"),
            orders: format!("/api/seckill/{g}/orders"),
            result: format!("/api/seckill/{g}/result"),
        }
    }
}

/// Hands out clicks: which user, and (open loop) when.
struct ClickSource {
    next: AtomicU64,
    limit: Option<u64>,
    deadline: Option<Instant>,
    users: u64,
    rate: Option<f64>,
    t0: Instant,
}

impl ClickSource {
    fn next(&self) -> Option<(usize, Option<Instant>)> {
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        if self.limit.is_some_and(|l| seq >= l) {
            return None;
        }
        let scheduled = self.rate.map(|r| self.t0 + Duration::from_secs_f64(seq as f64 / r));
        if let Some(deadline) = self.deadline
            && scheduled.unwrap_or_else(Instant::now) >= deadline
        {
            return None;
        }
        let user = (seq % self.users.max(1)) as usize;
        Some((user, scheduled))
    }
}

/// Where a click's path token comes from.
#[derive(Clone)]
enum PathTokens {
    /// None is presented (`seckill.require_token = false`).
    Off,
    /// Asked for at the start of each click (`POST .../token`, then the order).
    PerClick,
    /// Each user's token, fetched before the clock, presented on every click.
    Fetched(Arc<Vec<HeaderValue>>),
}

/// One click's outcome.
#[derive(Debug, Clone, Copy)]
struct Click {
    user: usize,
    /// Which of the click gateways answered it (its last call).
    gateway: usize,
    /// The status of the last call the click made (the path token's when it was refused).
    last: Call,
    status: u16,
    answered_us: u32,
    /// `503 BUSY` answers the click got, the retried ones and the last.
    busy_answers: u32,
    /// The click ended on a `503 BUSY`: still shed after all its retries.
    ended_busy: bool,
}

/// A click not ended yet: the call it makes next, and its BUSY answers so far.
#[derive(Clone)]
struct OpenClick {
    user: usize,
    next: Next,
    /// When its next call is due: the schedule (open loop) or the end of a `Retry-After`; the
    /// call's latency is counted from here. `None`: now (closed loop).
    due: Option<Instant>,
    /// BUSY answers so far, each of them retried.
    busy_answers: u32,
}

/// A click's next call.
#[derive(Clone)]
enum Next {
    /// Ask for a path token, then order with it.
    PathToken,
    /// Order, presenting this path token if any.
    Order(Option<HeaderValue>),
}

impl OpenClick {
    fn new(user: usize, due: Option<Instant>, path_tokens: &PathTokens) -> Self {
        let next = match path_tokens {
            PathTokens::Off => Next::Order(None),
            PathTokens::PerClick => Next::PathToken,
            PathTokens::Fetched(fetched) => Next::Order(Some(fetched[user].clone())),
        };
        Self { user, next, due, busy_answers: 0 }
    }
}

/// Where a click stands after [`Clicker::advance`].
enum Stepped {
    Ended(Click),
    /// Answered BUSY: to be tried again once `due`.
    Retry(OpenClick),
}

/// Clicks waiting out a BUSY answer's `Retry-After`, shared by the load's connections. The
/// connection that got the BUSY goes on with the next click; a timer hands the click back when
/// its wait is over, and the first free connection sends the retry. So in open loop a retry
/// never holds up the schedule, and N connections stay N sockets.
#[derive(Default)]
struct Retries {
    ready: Mutex<VecDeque<OpenClick>>,
    /// Clicks taken from the source and not ended: being sent, waiting, or ready.
    open: AtomicU64,
    /// A retry is ready, or the last open click ended.
    wake: Notify,
}

impl Retries {
    fn opened(&self) {
        self.open.fetch_add(1, Ordering::SeqCst);
    }

    fn closed(&self) {
        if self.open.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.wake.notify_waiters();
        }
    }

    /// No click is open: with the source dry, the load is over.
    fn idle(&self) -> bool {
        self.open.load(Ordering::SeqCst) == 0
    }

    /// Hands `click` back once its wait is over.
    fn wait_out(self: &Arc<Self>, click: OpenClick) {
        let retries = self.clone();
        tokio::spawn(async move {
            if let Some(due) = click.due {
                tokio::time::sleep_until(due.into()).await;
            }
            retries.ready.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push_back(click);
            retries.wake.notify_one();
        });
    }

    /// A retry whose wait is over, oldest first.
    fn take(&self) -> Option<OpenClick> {
        let mut ready = self.ready.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let click = ready.pop_front();
        if click.is_some() && !ready.is_empty() {
            // More are ready: pass the word on to another idle connection.
            self.wake.notify_one();
        }
        click
    }
}

impl Click {
    /// The order was accepted (202): the user is queued for a result.
    fn accepted(&self) -> bool {
        self.last == Call::Order && self.status == 202
    }
}

#[derive(Default)]
struct WorkerOut {
    events: Vec<Event>,
    clicks: Vec<Click>,
    reconnects: u64,
}

/// Runs a scenario against a running system and returns its report.
pub async fn run(cfg: &ScenarioConfig) -> anyhow::Result<Report> {
    let prepared = prepare(cfg).await?;
    Ok(run_prepared(cfg, prepared).await?.0)
}

/// A scenario set up and ready to start its clock: the expiry storm prepares its spike first,
/// then starts it at the instant it resumes the order-service.
pub(crate) struct Prepared {
    sale: Sale,
    clicking: Clicking,
}

impl Prepared {
    /// Opens every connection afresh, uncounted. A server drops a connection that carried no
    /// request for a few seconds (actix's client request timeout), so a scenario prepared well
    /// before its clock starts would otherwise reconnect on its first clicks, on the clock.
    pub(crate) async fn reopen(&mut self) -> anyhow::Result<()> {
        for conn in self.clicking.conns.iter_mut().chain(&mut self.clicking.poll_conns) {
            conn.connect().await.with_context(|| format!("connecting to {}", conn.endpoint().addr()))?;
            conn.reconnects = 0;
        }
        Ok(())
    }
}

/// Everything before the clock ([`set_up`]).
pub(crate) async fn prepare(cfg: &ScenarioConfig) -> anyhow::Result<Prepared> {
    if cfg.users == 0 || cfg.connections == 0 {
        bail!("users and connections must be at least 1");
    }
    let (sale, clicking) = set_up(cfg).await?;
    Ok(Prepared { sale, clicking })
}

/// The clock and the report of a prepared scenario, with every call's event (times from the
/// clock's start, the report's `started_at`).
pub(crate) async fn run_prepared(cfg: &ScenarioConfig, p: Prepared) -> anyhow::Result<(Report, Vec<Event>)> {
    let timed = run_timed_phase(cfg, &p.sale, p.clicking).await?;
    report_run(cfg, p.sale, timed).await
}

/// The sale under test and what the run learns about its users.
struct Sale {
    /// The admin's connection: it creates the sale, and reads the sale and the orders back
    /// after the run.
    admin: Conn,
    goods_id: i64,
    paths: Arc<Paths>,
    /// Every user's bearer header, by user index.
    tokens: Arc<Vec<HeaderValue>>,
    buyers: Vec<Buyer>,
    notes: Vec<String>,
}

/// The connections the timed phase clicks and polls on, and its path tokens.
struct Clicking {
    /// Connection k to click gateway k modulo `gateways`.
    conns: Vec<Conn>,
    gateways: usize,
    poll_conns: Vec<Conn>,
    path_tokens: PathTokens,
}

/// Before the clock: the sale created as an admin, every user's token minted, the
/// connections opened; for `sold-out` the stock sold, with `path_token_once` the path tokens
/// fetched.
async fn set_up(cfg: &ScenarioConfig) -> anyhow::Result<(Sale, Clicking)> {
    let endpoint = Endpoint::parse(&cfg.gateway)?;
    let click_endpoints =
        cfg.click_gateways().iter().map(|g| Endpoint::parse(g)).collect::<anyhow::Result<Vec<_>>>()?;
    let mut admin = Conn::new(endpoint.clone(), cfg.request_timeout);
    let goods_id = match cfg.sale {
        Some(g) => g,
        None => {
            let admin_token = dev_token(&mut admin, 1, "admin").await?;
            let label = format!("bench {}", cfg.name);
            let goods = create_sale(
                &mut admin,
                &admin_token,
                &label,
                cfg.stock,
                1,
                chrono::Duration::seconds(5),
                None,
            )
            .await?;
            goods.id.get()
        }
    };
    let user_ids: Vec<i64> = (0..cfg.users).map(|i| cfg.first_user + i as i64).collect();
    let tokens = Arc::new(
        mint_tokens(&endpoint, &user_ids, cfg.connections, cfg.request_timeout, cfg.progress).await?,
    );
    let mut conns = open_spread(&click_endpoints, cfg.connections, cfg.request_timeout).await?;
    let poll_conns =
        Conn::open_many(&click_endpoints[0], cfg.poll_connections.max(1), cfg.request_timeout).await?;
    let mut sale = Sale {
        admin,
        goods_id,
        paths: Arc::new(Paths::new(goods_id)),
        tokens,
        buyers: user_ids.iter().map(|u| Buyer { user_id: *u, ..Buyer::default() }).collect(),
        notes: Vec::new(),
    };
    if cfg.scenario == Scenario::SoldOut && cfg.stock > 0 {
        let sold = sell_out(cfg, &mut conns[0], &sale.tokens, &sale.paths, &mut sale.buyers).await?;
        sale.notes.push(format!(
            "before the clock: {sold} users bought the {} units (full buy path, polled to final)",
            cfg.stock
        ));
    }
    let path_tokens = choose_path_tokens(cfg, &mut conns[0], &mut sale).await?;
    Ok((sale, Clicking { conns, gateways: click_endpoints.len(), poll_conns, path_tokens }))
}

/// `n` connections spread over `endpoints`: connection k to endpoint k modulo their number.
async fn open_spread(endpoints: &[Arc<Endpoint>], n: usize, timeout: Duration) -> anyhow::Result<Vec<Conn>> {
    let mut conns = Vec::with_capacity(n);
    for k in 0..n {
        let endpoint = &endpoints[k % endpoints.len()];
        let mut c = Conn::new(endpoint.clone(), timeout);
        c.connect().await.with_context(|| format!("connecting to {}", endpoint.addr()))?;
        conns.push(c);
    }
    Ok(conns)
}

/// Where the clicks' path tokens come from; with `path_token_once` they are fetched now.
async fn choose_path_tokens(
    cfg: &ScenarioConfig,
    conn: &mut Conn,
    sale: &mut Sale,
) -> anyhow::Result<PathTokens> {
    Ok(match (cfg.path_token, cfg.path_token_once) {
        (false, _) => PathTokens::Off,
        (true, false) => PathTokens::PerClick,
        (true, true) => {
            let fetched = fetch_path_tokens(conn, &sale.tokens, &sale.paths).await?;
            let who = match fetched.len() {
                1 => "the user".to_owned(),
                n => format!("each of the {n} users"),
            };
            sale.notes.push(format!(
                "before the clock: {who} asked for a path token once (POST {}, one call of the per-user rate \
                 limit); every click was an order presenting it",
                sale.paths.token
            ));
            PathTokens::Fetched(Arc::new(fetched))
        }
    })
}

/// How many clicks the timed phase makes (`None`: until `duration` has passed).
fn total_clicks(cfg: &ScenarioConfig) -> Option<u64> {
    match cfg.scenario {
        Scenario::SoldOut => None,
        Scenario::HotUser => Some(cfg.clicks.unwrap_or(1_000)),
        _ => Some(cfg.users),
    }
}

/// What the timed phase saw.
struct Timed {
    t0_wall: chrono::DateTime<Utc>,
    total_clicks: Option<u64>,
    /// The load's calls (result polls are in `polled`).
    events: Vec<Event>,
    clicks: Vec<Click>,
    reconnects: u64,
    load_end_us: u32,
    /// Accepted users whose result the poller had not seen final when the load ended.
    backlog: u64,
    cpu: CpuReport,
    polled: PollOut,
    memory: Vec<ProcMemory>,
}

/// The clock: every load connection clicks while the poller follows the accepted users'
/// results until they are final; the paused processes are held stopped during the load, and
/// the machine's CPU and the processes' memory measured around it.
async fn run_timed_phase(cfg: &ScenarioConfig, sale: &Sale, clicking: Clicking) -> anyhow::Result<Timed> {
    let total_clicks = total_clicks(cfg);
    let progress = Progress::new(cfg.progress, total_clicks, cfg.scenario.name());
    let watch = Watch::start(cfg.procs.clone(), cfg.sample_every);
    let mut paused = Paused::stop(&cfg.pause_pids)?;
    let t0_wall = Utc::now();
    let clock = Clock::start();
    let (accepted_tx, accepted_rx) = mpsc::unbounded_channel();
    let finals_seen = Arc::new(AtomicU64::new(0));
    let poller = tokio::spawn(poll_results(
        PollSetup {
            conns: clicking.poll_conns,
            tokens: sale.tokens.clone(),
            path: sale.paths.result.clone(),
            clock,
            interval: cfg.poll_interval,
            final_timeout: cfg.final_timeout,
            finals_seen: finals_seen.clone(),
            defer: !cfg.poll_during_load,
        },
        accepted_rx,
    ));
    let clicker = Clicker {
        source: Arc::new(ClickSource {
            next: AtomicU64::new(0),
            limit: total_clicks,
            deadline: cfg.duration.map(|d| clock.t0() + d),
            users: cfg.users,
            rate: cfg.rate,
            t0: clock.t0(),
        }),
        tokens: sale.tokens.clone(),
        paths: sale.paths.clone(),
        accepted: accepted_tx,
        clock,
        path_tokens: clicking.path_tokens,
        busy: cfg.busy,
        retries: Arc::new(Retries::default()),
        done: progress.counter.clone(),
    };
    let load = click_on_every_connection(clicking.conns, clicking.gateways, clicker).await?;
    let load_end_us = clock.now_us();
    paused.resume();
    let cpu = watch.cpu(&Involved::system(cfg.procs.clone()));
    progress.finish();
    let accepted_so_far = load.clicks.iter().filter(|c| c.accepted()).count() as u64;
    let backlog = accepted_so_far.saturating_sub(finals_seen.load(Ordering::Relaxed));
    let polled = await_final_results(cfg.progress, poller, &finals_seen, backlog).await?;
    let memory = watch.memory();
    Ok(Timed {
        t0_wall,
        total_clicks,
        events: load.events,
        clicks: load.clicks,
        reconnects: load.reconnects,
        load_end_us,
        backlog,
        cpu,
        polled,
        memory,
    })
}

/// One [`buy_worker`] per connection until the click source runs dry; their outcomes merged.
/// Connection k goes to click gateway k modulo `gateways` (as [`open_spread`] opened them).
async fn click_on_every_connection(
    conns: Vec<Conn>,
    gateways: usize,
    clicker: Clicker,
) -> anyhow::Result<WorkerOut> {
    let mut workers = JoinSet::new();
    for (k, conn) in conns.into_iter().enumerate() {
        workers.spawn(buy_worker(conn, k % gateways.max(1), clicker.clone()));
    }
    // The poller stops waiting for arrivals once the last worker's sender is gone.
    drop(clicker);
    let mut all = WorkerOut::default();
    while let Some(done) = workers.join_next().await {
        let out = done.context("a load worker panicked")?;
        all.events.extend(out.events);
        all.clicks.extend(out.clicks);
        all.reconnects += out.reconnects;
    }
    Ok(all)
}

/// Waits for the poller to see the accepted results final (or give up), with a progress bar
/// over the `backlog` still queued when the load ended.
async fn await_final_results(
    show: bool,
    poller: JoinHandle<PollOut>,
    finals_seen: &Arc<AtomicU64>,
    backlog: u64,
) -> anyhow::Result<PollOut> {
    let polling = Progress::new(show && backlog > 0, Some(backlog), "results final");
    let ticker = {
        let (seen, counter, start) =
            (finals_seen.clone(), polling.counter.clone(), finals_seen.load(Ordering::Relaxed));
        tokio::spawn(async move {
            loop {
                counter.store(seen.load(Ordering::Relaxed).saturating_sub(start), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let polled = poller.await.context("the result poller panicked")?;
    ticker.abort();
    polling.finish();
    Ok(polled)
}

/// After the clock: what each user saw folded, the sale read back, the invariants checked and
/// the figures summed up.
async fn report_run(
    cfg: &ScenarioConfig,
    mut sale: Sale,
    timed: Timed,
) -> anyhow::Result<(Report, Vec<Event>)> {
    fold_outcomes(&mut sale.buyers, &timed.clicks, &timed.polled);
    let g = sale.goods_id;
    let stock_available = match goods_now(&mut sale.admin, g).await {
        Ok(goods) => Some(goods.stock_available),
        Err(e) => {
            sale.notes.push(format!("GET /api/goods/{g} after the run failed: {e:#}"));
            None
        }
    };
    let checks = invariants::check(&sale.buyers, cfg.stock, stock_available);
    let buy = buy_summary(cfg, g, stock_available, &sale.buyers, &timed);

    let winners = winners_by_order(&sale.buyers);
    let written =
        order_times(&mut sale.admin, &sale.tokens, &winners, timed.t0_wall, cfg.order_samples).await;
    if written.is_empty() && !winners.is_empty() {
        sale.notes.push("could not read the orders' creation times back".into());
    }
    let rows = OrderRows::new(&written, winners.len(), secs(timed.load_end_us));
    let final_times: Vec<u32> = timed.polled.finals.values().filter_map(|f| f.at_us).collect();
    let drain = drain_summary(&timed, &sale.buyers, &final_times, &rows, buy.success);

    let mut all_events = timed.events;
    all_events.extend_from_slice(&timed.polled.events);
    let span = all_events.iter().map(|e| u64::from(e.end_us)).max().unwrap_or(0);
    let mut marks = vec![("results seen final".to_owned(), final_times)];
    if written.len() >= 2 {
        marks.push(("orders written".to_owned(), spread_marks(&written)));
    }
    let timeline = stats::timeline(&all_events, &marks, stats::bucket_ms_for(span));
    let mut notes = sale.notes;
    if timed.reconnects > 0 {
        notes.push(format!("{} load connections were re-opened after an error or a close", timed.reconnects));
    }
    if timed.cpu.disturbed {
        notes.push(timed.cpu.disturbance());
    }
    let report = Report {
        kind: KIND_SCENARIO.into(),
        name: cfg.name.clone(),
        started_at: report::rfc3339(timed.t0_wall),
        command: report::this_command(),
        params: scenario_params(cfg, timed.total_clicks),
        duration_secs: secs(timed.load_end_us),
        calls: stats::call_stats(&all_events),
        buy: Some(buy),
        drain: Some(drain),
        sync: None,
        storm: None,
        room: None,
        push: None,
        invariants: checks,
        memory: timed.memory,
        cpu: Some(timed.cpu),
        timeline,
        notes,
    };
    Ok((report, all_events))
}

fn secs(us: u32) -> f64 {
    f64::from(us) / 1e6
}

/// Each user's clicks and final result, as the load and the poller saw them.
fn fold_outcomes(buyers: &mut [Buyer], clicks: &[Click], polled: &PollOut) {
    for c in clicks {
        let b = &mut buyers[c.user];
        b.clicks += 1;
        if c.accepted() {
            b.accepted += 1;
        } else {
            if c.ended_busy {
                b.busy_clicks += 1;
            } else if is_undecided(c.status) {
                b.undecided_clicks += 1;
            }
            b.answered_us = Some(b.answered_us.unwrap_or(0).max(c.answered_us));
        }
    }
    for (user, fin) in &polled.finals {
        let b = &mut buyers[*user];
        b.result = Some(fin.state);
        b.order_id = fin.order_id;
        b.answered_us = fin.at_us.map(|at| at.max(b.answered_us.unwrap_or(0)));
    }
}

/// Clicks, acceptances, final results and refusals by call and outcome.
fn buy_summary(
    cfg: &ScenarioConfig,
    goods_id: i64,
    stock_available: Option<i64>,
    buyers: &[Buyer],
    timed: &Timed,
) -> BuySummary {
    let mut refused: BTreeMap<String, u64> = BTreeMap::new();
    for c in timed.clicks.iter().filter(|c| !c.accepted()) {
        let label = format!("{} {}", c.last.name(), outcome_label(c.last, c.status));
        *refused.entry(label).or_default() += 1;
    }
    let count_result = |s: FinalState| buyers.iter().filter(|b| b.result == Some(s)).count() as u64;
    BuySummary {
        goods_id,
        stock: cfg.stock,
        stock_available,
        users: cfg.users,
        clicks: timed.clicks.len() as u64,
        accepted: buyers.iter().map(|b| u64::from(b.accepted)).sum(),
        success: count_result(FinalState::Success),
        failed: count_result(FinalState::Failed),
        still_queued: count_result(FinalState::Queued),
        refused,
        polls: timed.polled.events.len() as u64,
        busy_answers: timed.clicks.iter().map(|c| u64::from(c.busy_answers)).sum(),
        ended_busy: timed.clicks.iter().filter(|c| c.ended_busy).count() as u64,
        busy_retries: cfg.busy.retries,
        by_gateway: by_gateway(&cfg.click_gateways(), &timed.clicks),
        limit: cfg.buy_limit.map(|l| limit_check(l, &timed.events, cfg.users)),
    }
}

/// Clicks, and those the gateway's rate limit refused (429), per click gateway.
fn by_gateway(gateways: &[String], clicks: &[Click]) -> Vec<GatewayClicks> {
    gateways
        .iter()
        .enumerate()
        .map(|(k, g)| {
            let mine = clicks.iter().filter(|c| c.gateway == k);
            GatewayClicks {
                gateway: g.clone(),
                clicks: mine.clone().count() as u64,
                rate_limited: mine.filter(|c| c.status == 429).count() as u64,
            }
        })
        .collect()
}

/// The buy-route calls of the load (path tokens and orders) the limit let through, against
/// what it allows `users` users from the first such call's start to the last one's answer. A
/// call without an answer (connection error, timeout) is counted apart: nobody knows what the
/// limit did with it.
fn limit_check(limit: BuyLimit, events: &[Event], users: u64) -> LimitCheck {
    let buy = events.iter().filter(|e| matches!(e.call, Call::Order | Call::PathToken));
    let first = buy.clone().map(Event::start_us).min().unwrap_or(0);
    let elapsed_s = secs(buy.clone().map(|e| e.end_us).max().unwrap_or(0).saturating_sub(first));
    let unanswered = buy.clone().filter(|e| matches!(e.status, STATUS_ERROR | STATUS_TIMEOUT)).count() as u64;
    let rate_limited = buy.clone().filter(|e| e.status == 429).count() as u64;
    let calls = buy.count() as u64;
    LimitCheck {
        per_sec: limit.per_sec,
        burst: limit.burst,
        users,
        elapsed_s,
        allowance: users as f64 * limit.allowance(elapsed_s),
        calls,
        let_through: calls - rate_limited - unanswered,
        unanswered,
    }
}

/// `(order id, user)` of every user who got an order, by order id.
fn winners_by_order(buyers: &[Buyer]) -> Vec<(i64, usize)> {
    let mut winners: Vec<(i64, usize)> = buyers
        .iter()
        .enumerate()
        .filter(|(_, b)| b.result == Some(FinalState::Success))
        .filter_map(|(i, b)| b.order_id.map(|o| (o, i)))
        .collect();
    winners.sort_unstable();
    winners
}

/// How fast the accepted requests became orders: from the results seen final and, when they
/// could be read back, the order rows' creation times.
fn drain_summary(
    timed: &Timed,
    buyers: &[Buyer],
    final_times: &[u32],
    rows: &OrderRows,
    success: u64,
) -> DrainSummary {
    let accept_times: Vec<u32> =
        timed.events.iter().filter(|e| e.call == Call::Order && e.status == 202).map(|e| e.end_us).collect();
    let last_final = final_times.iter().copied().max();
    let first_accept = accept_times.iter().copied().min();
    let all_answered = if buyers.iter().any(|b| b.clicks > 0 && b.answered_us.is_none()) {
        None
    } else {
        buyers.iter().filter_map(|b| b.answered_us).max().map(secs)
    };
    let drain_window = match (first_accept, last_final) {
        (Some(a), Some(f)) if f > a => Some(secs(f - a)),
        _ => None,
    };
    DrainSummary {
        accepted_per_sec: stats::call_stats(
            &timed.events.iter().filter(|e| e.call == Call::Order).copied().collect::<Vec<_>>(),
        )
        .iter()
        .find(|r| r.outcome == "202")
        .map_or(0.0, |r| r.count as f64 / r.window_secs.max(1e-6)),
        first_request_to_last_final_s: last_final.map(secs),
        first_accept_to_last_final_s: drain_window,
        first_order_s: rows.first_s,
        last_order_s: rows.last_s,
        // First 202 to the last order row written; without rows, to the last result seen final.
        orders_per_sec: match (first_accept, rows.last_s) {
            (Some(a), Some(last)) if last > secs(a) => Some(stats::per_sec(success, last - secs(a))),
            _ => drain_window.map(|w| stats::per_sec(success, w)),
        },
        consumer_orders_per_sec: rows.consumer_per_sec,
        tail_orders_per_sec: rows.tail_per_sec,
        all_answered_within_s: all_answered,
        backlog_at_load_end: rows.backlog.unwrap_or(timed.backlog),
    }
}

/// The run's parameters, as the report records them.
fn scenario_params(cfg: &ScenarioConfig, total_clicks: Option<u64>) -> serde_json::Value {
    json!({
        "scenario": cfg.scenario.name(),
        "gateway": cfg.gateway,
        "gateways": cfg.click_gateways(),
        "buy_limit": cfg.buy_limit,
        "gateway_settings": cfg.gateway_settings,
        "users": cfg.users,
        "stock": cfg.stock,
        "connections": cfg.connections,
        "clicks": total_clicks,
        "duration_secs": cfg.duration.map(|d| d.as_secs_f64()),
        "rate": cfg.rate,
        "path_token": cfg.path_token,
        "path_token_once": cfg.path_token && cfg.path_token_once,
        "busy_retries": cfg.busy.retries,
        "busy_max_wait_s": cfg.busy.max_wait.as_secs_f64(),
        "first_user": cfg.first_user,
        "poll_interval_ms": cfg.poll_interval.as_millis() as u64,
        "poll_connections": cfg.poll_connections,
        "poll_during_load": cfg.poll_during_load,
        "paused_during_load": cfg.pause_pids,
    })
}

/// Processes held stopped while the load runs; resumed by [`Paused::resume`] or on drop,
/// whatever happens to the run.
pub(crate) struct Paused(Vec<u32>);

impl Paused {
    pub(crate) fn stop(pids: &[u32]) -> anyhow::Result<Self> {
        let mut paused = Self(Vec::new());
        for pid in pids {
            signal::send(*pid, Signal::STOP)?;
            paused.0.push(*pid);
        }
        Ok(paused)
    }

    pub(crate) fn resume(&mut self) {
        for pid in self.0.drain(..) {
            if let Err(e) = signal::send(pid, Signal::CONT) {
                eprintln!("seckill-bench: could not resume pid {pid}: {e:#}");
            }
        }
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        self.resume();
    }
}

/// A refusal that is not an answer about the sale: the click may be retried.
fn is_undecided(status: u16) -> bool {
    matches!(status, STATUS_ERROR | STATUS_TIMEOUT | 429) || status >= 500
}

/// What every load connection clicks with.
#[derive(Clone)]
struct Clicker {
    source: Arc<ClickSource>,
    tokens: Arc<Vec<HeaderValue>>,
    paths: Arc<Paths>,
    /// Accepted users, with when, for the poller.
    accepted: mpsc::UnboundedSender<(usize, u32)>,
    clock: Clock,
    path_tokens: PathTokens,
    busy: BusyRetry,
    retries: Arc<Retries>,
    /// Clicks ended, for the progress bar.
    done: Arc<AtomicU64>,
}

/// One load connection: a retry whose wait is over first, else the source's next click (open
/// loop: at its time, unless a retry gets ready meanwhile), until the source is dry and no
/// click is left open.
async fn buy_worker(mut conn: Conn, gateway: usize, clicker: Clicker) -> WorkerOut {
    let mut out = WorkerOut::default();
    let token_header = HeaderName::from_static(seckill_common::headers::SECKILL_TOKEN);
    let retries = clicker.retries.clone();
    let mut fresh: Option<OpenClick> = None;
    // Closed loop: the click this connection's buyer tries again after its Retry-After.
    let mut own_retry: Option<OpenClick> = None;
    let mut dry = false;
    loop {
        // Listening before looking: a retry made ready or the last click ended in between is
        // not missed.
        let wake = retries.wake.notified();
        tokio::pin!(wake);
        wake.as_mut().enable();
        let click = if let Some(retry) = own_retry.take() {
            if let Some(due) = retry.due {
                tokio::time::sleep_until(due.into()).await;
            }
            retry
        } else if let Some(retry) = retries.take() {
            retry
        } else {
            if fresh.is_none() && !dry {
                fresh = clicker.fresh();
                dry = fresh.is_none();
            }
            match fresh.take() {
                Some(click) => {
                    if let Some(at) = click.due.filter(|at| *at > Instant::now()) {
                        tokio::select! {
                            () = tokio::time::sleep_until(at.into()) => {}
                            () = &mut wake => {
                                fresh = Some(click);
                                continue;
                            }
                        }
                    }
                    click
                }
                None if retries.idle() => break,
                None => {
                    wake.await;
                    continue;
                }
            }
        };
        match clicker.advance(&mut conn, gateway, &token_header, click, &mut out.events).await {
            Stepped::Ended(click) => {
                out.clicks.push(click);
                clicker.done.fetch_add(1, Ordering::Relaxed);
                retries.closed();
            }
            // In closed loop a connection is one buyer, who waits out the Retry-After before
            // clicking again (going on with another click at once would make every refusal
            // a new request at once: a storm no browser makes).
            Stepped::Retry(click) if clicker.source.rate.is_none() => own_retry = Some(click),
            Stepped::Retry(click) => retries.wait_out(click),
        }
    }
    out.reconnects = conn.reconnects;
    out
}

impl Clicker {
    /// The source's next click, counted open; `None` when the source is dry.
    fn fresh(&self) -> Option<OpenClick> {
        // Opened before it is taken: no connection sees the source dry and nothing open while
        // another holds a click it has not counted yet.
        self.retries.opened();
        match self.source.next() {
            Some((user, scheduled)) => Some(OpenClick::new(user, scheduled, &self.path_tokens)),
            None => {
                self.retries.closed();
                None
            }
        }
    }

    /// A click's calls from the next one on: the path token when one is asked for per click,
    /// then the order; until the click ends or is answered BUSY with a retry left.
    async fn advance(
        &self,
        conn: &mut Conn,
        gateway: usize,
        token_header: &HeaderName,
        mut click: OpenClick,
        events: &mut Vec<Event>,
    ) -> Stepped {
        let bearer = &self.tokens[click.user];
        let mut start = click.due.unwrap_or_else(Instant::now);
        let presented = match click.next.clone() {
            Next::Order(presented) => presented,
            Next::PathToken => {
                let a = conn.send(Req::post(&self.paths.token).bearer(bearer)).await;
                let end = Instant::now();
                events.push(self.clock.event(Call::PathToken, a.status, start, end));
                if a.status != 200 {
                    return self.refused(click, gateway, Call::PathToken, &a, end);
                }
                start = end;
                serde_json::from_slice::<TokenResponse>(&a.body)
                    .ok()
                    .and_then(|t| HeaderValue::from_str(&t.token).ok())
            }
        };
        let mut req = Req::post(&self.paths.orders).bearer(bearer);
        if let Some(t) = presented.clone() {
            req = req.header(token_header.clone(), t);
        }
        let a = conn.send(req).await;
        let end = Instant::now();
        events.push(self.clock.event(Call::Order, a.status, start, end));
        if a.status == 202 {
            let answered_us = self.clock.us(end);
            let _ = self.accepted.send((click.user, answered_us));
            return Stepped::Ended(Click {
                user: click.user,
                gateway,
                last: Call::Order,
                status: a.status,
                answered_us,
                busy_answers: click.busy_answers,
                ended_busy: false,
            });
        }
        // A BUSY order was shed before the path token was looked at: the retry presents it again.
        click.next = Next::Order(presented);
        self.refused(click, gateway, Call::Order, &a, end)
    }

    /// `call` was not what the click wanted: retried after the wait when it was BUSY and a
    /// retry is left, else the click's end.
    fn refused(&self, mut click: OpenClick, gateway: usize, call: Call, a: &Answer, end: Instant) -> Stepped {
        if let Some(wait) = self.busy.decide(a, click.busy_answers) {
            click.busy_answers += 1;
            click.due = Some(end + wait);
            return Stepped::Retry(click);
        }
        let ended_busy = busy::is_busy(a);
        Stepped::Ended(Click {
            user: click.user,
            gateway,
            last: call,
            status: a.status,
            answered_us: self.clock.us(end),
            busy_answers: click.busy_answers + u32::from(ended_busy),
            ended_busy,
        })
    }
}

/// A user's result as last seen by the poller.
#[derive(Debug, Clone, Copy)]
struct Final {
    state: FinalState,
    order_id: Option<i64>,
    at_us: Option<u32>,
}

struct PollSetup {
    conns: Vec<Conn>,
    tokens: Arc<Vec<HeaderValue>>,
    path: String,
    clock: Clock,
    interval: Duration,
    final_timeout: Duration,
    finals_seen: Arc<AtomicU64>,
    /// Only collect arrivals until the load ends, then poll.
    defer: bool,
}

#[derive(Default)]
struct PollOut {
    events: Vec<Event>,
    finals: HashMap<usize, Final>,
}

struct Pending {
    user: usize,
    next: Instant,
}

/// Polls accepted users' results until each is final, oldest first. Results become final in
/// about the order the requests were accepted (one queue), so each round polls only a window
/// of the oldest pending users, each no more often than `interval` (also under the gateway's per-user
/// rate limit); the window doubles while most of it turns out final and halves when little
/// does, so the polls follow the consumer without flooding the system they share the cores with.
async fn poll_results(mut s: PollSetup, mut rx: mpsc::UnboundedReceiver<(usize, u32)>) -> PollOut {
    let mut out = PollOut::default();
    let mut pending: Vec<Pending> = Vec::new();
    let mut seen: HashSet<usize> = HashSet::new();
    let mut give_up: Option<Instant> = None;
    let c = s.conns.len().max(1);
    let mut window = c * 4;
    let mut arrive = |pending: &mut Vec<Pending>, user: usize| {
        if seen.insert(user) {
            pending.push(Pending { user, next: Instant::now() + s.interval });
        }
    };
    loop {
        loop {
            match rx.try_recv() {
                Ok((user, _)) => arrive(&mut pending, user),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    give_up.get_or_insert_with(|| Instant::now() + s.final_timeout);
                    break;
                }
            }
        }
        if (pending.is_empty() || s.defer) && give_up.is_none() {
            match rx.recv().await {
                Some((user, _)) => arrive(&mut pending, user),
                None => {
                    give_up.get_or_insert_with(|| Instant::now() + s.final_timeout);
                }
            }
            continue;
        }
        if pending.is_empty() {
            if give_up.is_some() {
                break;
            }
            match rx.recv().await {
                Some((user, _)) => arrive(&mut pending, user),
                None => {
                    give_up.get_or_insert_with(|| Instant::now() + s.final_timeout);
                }
            }
            continue;
        }
        let now = Instant::now();
        if give_up.is_some_and(|t| now >= t) {
            break;
        }
        // Only the oldest `window` pending users: beyond them, results are very likely still
        // queued, and polling them would only take CPU from the consumer.
        let head = &pending[..window.min(pending.len())];
        let batch: Vec<usize> =
            head.iter().enumerate().filter(|(_, p)| p.next <= now).map(|(i, _)| i).collect();
        if batch.is_empty() {
            let wake = head.iter().map(|p| p.next).min().unwrap_or(now + s.interval);
            let wake = give_up.map_or(wake, |g| wake.min(g));
            if give_up.is_none() {
                tokio::select! {
                    () = tokio::time::sleep_until(wake.into()) => {}
                    m = rx.recv() => match m {
                        Some((user, _)) => arrive(&mut pending, user),
                        None => { give_up.get_or_insert_with(|| Instant::now() + s.final_timeout); }
                    }
                }
            } else {
                tokio::time::sleep_until(wake.into()).await;
            }
            continue;
        }
        let users: Vec<usize> = batch.iter().map(|&i| pending[i].user).collect();
        let (tokens, path) = (&s.tokens, s.path.as_str());
        let answers = join_all(s.conns.iter_mut().enumerate().map(|(k, conn)| {
            let mine: Vec<usize> = users.iter().skip(k).step_by(c).copied().collect();
            async move {
                let mut got = Vec::with_capacity(mine.len());
                for user in mine {
                    let start = Instant::now();
                    let a = conn.send(Req::get(path).bearer(&tokens[user])).await;
                    got.push((user, a, start, Instant::now()));
                }
                got
            }
        }))
        .await;
        let mut done: HashSet<usize> = HashSet::new();
        for (user, a, start, end) in answers.into_iter().flatten() {
            out.events.push(s.clock.event(Call::Result, a.status, start, end));
            if let Some(state) = final_state(&a) {
                let order_id = serde_json::from_slice::<SeckillResult>(&a.body)
                    .ok()
                    .and_then(|r| r.order_id)
                    .map(|o| o.get());
                out.finals.insert(user, Final { state, order_id, at_us: Some(s.clock.us(end)) });
                done.insert(user);
            }
        }
        s.finals_seen.fetch_add(done.len() as u64, Ordering::Relaxed);
        let next = Instant::now() + s.interval;
        for &i in &batch {
            pending[i].next = next;
        }
        pending.retain(|p| !done.contains(&p.user));
        let polled = batch.len();
        if done.len() * 2 >= polled {
            window = (window * 2).min(1 << 16);
        } else if done.len() * 5 < polled {
            window = (window / 2).max(c);
        }
    }
    for p in pending {
        out.finals.insert(p.user, Final { state: FinalState::Queued, order_id: None, at_us: None });
    }
    out
}

/// `(rank, seconds since the first request)` of sampled winners' order rows: `samples`
/// orders evenly spread over the winners sorted by order id (ids grow in insertion order),
/// read back with their owner's token. `created_at` is the database's `now()` of the insert.
async fn order_times(
    conn: &mut Conn,
    tokens: &[HeaderValue],
    winners: &[(i64, usize)],
    t0_wall: chrono::DateTime<Utc>,
    samples: usize,
) -> Vec<(usize, f64)> {
    let n = winners.len();
    if n == 0 || samples == 0 {
        return Vec::new();
    }
    let picks: Vec<usize> = if n <= samples {
        (0..n).collect()
    } else {
        let mut p: Vec<usize> = (0..samples).map(|k| k * (n - 1) / (samples - 1).max(1)).collect();
        p.dedup();
        p
    };
    let mut out = Vec::with_capacity(picks.len());
    for rank in picks {
        let (order_id, user) = winners[rank];
        let a = conn.send(Req::get(&format!("/api/orders/{order_id}")).bearer(&tokens[user])).await;
        if a.status != 200 {
            continue;
        }
        if let Ok(order) = serde_json::from_slice::<Order>(&a.body) {
            let us = (order.created_at - t0_wall).num_microseconds().unwrap_or(0);
            out.push((rank, us as f64 / 1e6));
        }
    }
    out
}

/// The drain timed at the order rows, from [`order_times`].
#[derive(Debug, Default, PartialEq)]
struct OrderRows {
    first_s: Option<f64>,
    last_s: Option<f64>,
    /// Orders per second between the first and the last row written.
    consumer_per_sec: Option<f64>,
    /// Orders per second written after the load ended (the backlog alone), when at least 5%
    /// of the orders were written then.
    tail_per_sec: Option<f64>,
    /// Orders not yet written when the load ended.
    backlog: Option<u64>,
}

impl OrderRows {
    fn new(written: &[(usize, f64)], n: usize, load_end_s: f64) -> Self {
        let (Some(first), Some(last)) = (written.first(), written.last()) else {
            return Self::default();
        };
        // Times are those of whole insert batches: the earliest and latest stand for them.
        let first_s = written.iter().map(|w| w.1).fold(f64::INFINITY, f64::min);
        let last_s = written.iter().map(|w| w.1).fold(f64::NEG_INFINITY, f64::max);
        let span = last_s - first_s;
        let consumer_per_sec = (span > 0.0 && n > 1).then(|| (last.0 - first.0) as f64 / span);
        // Rank written by the end of the load, interpolated between samples.
        let done_by_end = written.iter().filter(|w| w.1 <= load_end_s).map(|w| w.0 + 1).max().unwrap_or(0);
        let backlog = n.saturating_sub(done_by_end) as u64;
        let tail = last_s - load_end_s;
        let tail_per_sec = (backlog as f64 >= 0.05 * n as f64 && tail > 0.0).then(|| backlog as f64 / tail);
        Self {
            first_s: Some(first_s),
            last_s: Some(last_s),
            consumer_per_sec,
            tail_per_sec,
            backlog: Some(backlog),
        }
    }
}

/// Synthetic per-order times (µs) from sampled ranks: the orders between two samples spread
/// evenly over the time between them, for the chart's "orders written" line.
fn spread_marks(written: &[(usize, f64)]) -> Vec<u32> {
    let mut marks = Vec::new();
    let us = |s: f64| (s.max(0.0) * 1e6) as u32;
    if let Some(first) = written.first() {
        marks.push(us(first.1));
    }
    for pair in written.windows(2) {
        let ((r0, t0), (r1, t1)) = (pair[0], pair[1]);
        let k = r1.saturating_sub(r0);
        for j in 1..=k {
            marks.push(us(t0 + (t1 - t0) * j as f64 / k as f64));
        }
    }
    marks
}

/// The final state in a result answer, or `None` while queued (or the poll failed).
fn final_state(a: &Answer) -> Option<FinalState> {
    if a.status != 200 {
        return None;
    }
    let r: SeckillResult = serde_json::from_slice(&a.body).ok()?;
    match r.status {
        SeckillStatus::Queued => None,
        SeckillStatus::Success => Some(FinalState::Success),
        SeckillStatus::Failed => Some(FinalState::Failed),
        SeckillStatus::None => Some(FinalState::None),
    }
}

/// `sold-out`: the first `stock` users buy every unit before the clock starts.
async fn sell_out(
    cfg: &ScenarioConfig,
    conn: &mut Conn,
    tokens: &[HeaderValue],
    paths: &Paths,
    buyers: &mut [Buyer],
) -> anyhow::Result<u64> {
    let token_header = HeaderName::from_static(seckill_common::headers::SECKILL_TOKEN);
    let mut sold = 0;
    for user in 0..buyers.len().min(usize::try_from(cfg.stock).unwrap_or(usize::MAX)) {
        let mut req = Req::post(&paths.orders).bearer(&tokens[user]);
        if cfg.path_token {
            let a = conn.send(Req::post(&paths.token).bearer(&tokens[user])).await;
            let t: TokenResponse = serde_json::from_slice(&a.body)
                .with_context(|| format!("path token before the sale sold out: HTTP {}", a.status))?;
            req = req.header(token_header.clone(), HeaderValue::from_str(&t.token)?);
        }
        let a = conn.send(req).await;
        if a.status != 202 {
            bail!("selling out the sale: an order was answered HTTP {}", a.status);
        }
        let deadline = Instant::now() + cfg.final_timeout;
        let b = &mut buyers[user];
        b.clicks += 1;
        b.accepted += 1;
        b.result = Some(FinalState::Queued);
        while Instant::now() < deadline {
            let a = conn.send(Req::get(&paths.result).bearer(&tokens[user])).await;
            if let Some(state) = final_state(&a) {
                b.result = Some(state);
                b.order_id = serde_json::from_slice::<SeckillResult>(&a.body)
                    .ok()
                    .and_then(|r| r.order_id)
                    .map(|o| o.get());
                b.answered_us = Some(0);
                break;
            }
            tokio::time::sleep(cfg.poll_interval).await;
        }
        sold += 1;
    }
    Ok(sold)
}

/// Each user's path token (`POST /api/seckill/{id}/token`), asked for once before the clock.
async fn fetch_path_tokens(
    conn: &mut Conn,
    tokens: &[HeaderValue],
    paths: &Paths,
) -> anyhow::Result<Vec<HeaderValue>> {
    let mut out = Vec::with_capacity(tokens.len());
    for bearer in tokens {
        let a = conn.send(Req::post(&paths.token).bearer(bearer)).await;
        if a.status != 200 {
            bail!(
                "the path token before the clock: HTTP {} ({})",
                a.status,
                String::from_utf8_lossy(&a.body)
            );
        }
        let t: TokenResponse = serde_json::from_slice(&a.body).context("the path token answer")?;
        out.push(HeaderValue::from_str(&t.token)?);
    }
    Ok(out)
}

/// `GET /api/goods/{g}`: the sale as the authority (stock-service) has it.
pub(crate) async fn goods_now(conn: &mut Conn, g: i64) -> anyhow::Result<Goods> {
    let a = conn.send(Req::get(&format!("/api/goods/{g}"))).await;
    if a.status != 200 {
        bail!("HTTP {}", a.status);
    }
    Ok(serde_json::from_slice(&a.body)?)
}

/// Every user's bearer header, minted through the gateway before the clock starts, on up to
/// 32 of `connections`.
pub(crate) async fn mint_tokens(
    endpoint: &Arc<Endpoint>,
    users: &[i64],
    connections: usize,
    timeout: Duration,
    progress: bool,
) -> anyhow::Result<Vec<HeaderValue>> {
    let n = connections.clamp(1, 32).min(users.len().max(1));
    let progress =
        Progress::new(progress && users.len() >= 5_000, Some(users.len() as u64), "minting tokens");
    let conns = Conn::open_many(endpoint, n, timeout).await?;
    let users = Arc::new(users.to_vec());
    let mut tasks = JoinSet::new();
    for (k, mut conn) in conns.into_iter().enumerate() {
        let (users, counter) = (users.clone(), progress.counter.clone());
        tasks.spawn(async move {
            let mut got = Vec::new();
            for i in (k..users.len()).step_by(n) {
                let mut last = None;
                for _ in 0..3 {
                    match dev_token(&mut conn, users[i], "user").await {
                        Ok(t) => {
                            last = Some(Ok(t));
                            break;
                        }
                        Err(e) => last = Some(Err(e)),
                    }
                }
                match last {
                    Some(Ok(t)) => got.push((i, bearer_header(&t)?)),
                    Some(Err(e)) => return Err(e),
                    None => bail!("no token for user {}", users[i]),
                }
                counter.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, anyhow::Error>(got)
        });
    }
    let mut tokens = vec![HeaderValue::from_static(""); users.len()];
    while let Some(done) = tasks.join_next().await {
        for (i, t) in done.context("minting tokens")?? {
            tokens[i] = t;
        }
    }
    progress.finish();
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drain_is_timed_at_the_order_rows() {
        // 1,000 orders: 200 written during a 1 s load, 800 in the 0.4 s after it.
        let written = [(0, 0.1), (199, 1.0), (599, 1.2), (999, 1.4)];
        let r = OrderRows::new(&written, 1_000, 1.0);
        assert_eq!((r.first_s, r.last_s), (Some(0.1), Some(1.4)));
        assert_eq!(r.backlog, Some(800));
        assert!((r.consumer_per_sec.unwrap() - 999.0 / 1.3).abs() < 1e-6);
        assert!((r.tail_per_sec.unwrap() - 2_000.0).abs() < 1e-6);
        // No backlog to speak of: no tail figure.
        let r = OrderRows::new(&[(0, 0.1), (999, 0.99)], 1_000, 1.0);
        assert_eq!((r.backlog, r.tail_per_sec), (Some(0), None));
        assert_eq!(OrderRows::new(&[], 0, 1.0), OrderRows::default());
    }

    #[test]
    fn sampled_orders_spread_into_marks() {
        let marks = spread_marks(&[(0, 0.0), (4, 0.4)]);
        assert_eq!(marks, [0, 100_000, 200_000, 300_000, 400_000]);
    }

    #[test]
    fn paused_processes_stop_until_resumed() {
        let state = |pid: u32| procfs::process::Process::new(pid as i32).unwrap().stat().unwrap().state;
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let mut paused = Paused::stop(&[pid]).unwrap();
        let wait_for = |want: fn(char) -> bool| {
            (0..100).any(|_| {
                std::thread::sleep(Duration::from_millis(10));
                want(state(pid))
            })
        };
        assert!(wait_for(|s| s == 'T'), "stopped");
        paused.resume();
        assert!(wait_for(|s| s != 'T'), "resumed");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    fn event(call: Call, status: u16, start_ms: u32, end_ms: u32) -> Event {
        Event { end_us: end_ms * 1_000, latency_us: (end_ms - start_ms) * 1_000, call, status }
    }

    #[test]
    fn the_limit_check_counts_buy_calls_past_the_limit() {
        let events = [
            event(Call::Order, 202, 10, 20),
            event(Call::Order, 409, 15, 30),
            event(Call::Order, 429, 20, 25),
            event(Call::Order, STATUS_TIMEOUT, 30, 410),
            event(Call::Result, 200, 0, 900),
        ];
        let l = limit_check(BuyLimit { per_sec: 5.0, burst: 10.0 }, &events, 1);
        assert_eq!((l.calls, l.let_through, l.unanswered), (4, 2, 1));
        assert!((l.elapsed_s - 0.4).abs() < 1e-9, "{l:?}: result polls are not buy calls");
        assert!((l.allowance - 12.0).abs() < 1e-9, "{l:?}");
        assert!(l.held());
        let l = limit_check(BuyLimit { per_sec: 1.0, burst: 1.0 }, &events, 1);
        assert!(!l.held(), "{l:?}");
    }

    #[test]
    fn clicks_are_counted_per_gateway() {
        let click = |gateway, status| Click {
            user: 0,
            gateway,
            last: Call::Order,
            status,
            answered_us: 0,
            busy_answers: 0,
            ended_busy: false,
        };
        let clicks = [click(0, 202), click(1, 429), click(1, 409), click(0, 429), click(0, 429)];
        let g = by_gateway(&["http://a:1".into(), "http://b:2".into()], &clicks);
        assert_eq!(
            g.iter().map(|g| (g.clicks, g.rate_limited, g.let_through())).collect::<Vec<_>>(),
            [(3, 2, 1), (2, 1, 1)]
        );
        assert_eq!(g[1].gateway, "http://b:2");
    }

    #[test]
    fn clicks_follow_the_schedule() {
        let t0 = Instant::now();
        let src = ClickSource {
            next: AtomicU64::new(0),
            limit: Some(3),
            deadline: None,
            users: 2,
            rate: Some(10.0),
            t0,
        };
        let got: Vec<_> = std::iter::from_fn(|| src.next()).collect();
        assert_eq!(got.len(), 3);
        assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), [0, 1, 0]);
        assert_eq!(got[2].1, Some(t0 + Duration::from_millis(200)));
    }

    /// A stand-in for the gateway's order route: each user's first `busy_first` orders are
    /// answered `503 BUSY` with `Retry-After: retry_after_s`, the next 202.
    async fn shedding_gateway(busy_first: u32, retry_after_s: u64) -> Arc<Endpoint> {
        use http_body_util::Full;
        use hyper::Response;
        use hyper::header::{AUTHORIZATION, RETRY_AFTER};

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let seen = seen.clone();
                tokio::spawn(async move {
                    let service =
                        hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                            let user = req.headers().get(AUTHORIZATION).unwrap().to_str().unwrap().to_owned();
                            let mut seen = seen.lock().unwrap();
                            let n = seen.entry(user).or_default();
                            *n += 1;
                            let res = if *n <= busy_first {
                                Response::builder().status(503).header(RETRY_AFTER, retry_after_s).body(
                                    Full::new(bytes::Bytes::from_static(br#"{"code":"BUSY","message":"m"}"#)),
                                )
                            } else {
                                Response::builder()
                                    .status(202)
                                    .body(Full::new(bytes::Bytes::from_static(b"{}")))
                            };
                            async move { res }
                        });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Endpoint::parse(&format!("http://{addr}")).unwrap()
    }

    /// `users` clicks (one each, at `rate` a second if given) on `connections` connections
    /// to `endpoint`, retrying BUSY `retries` times: the clicks and the calls' events.
    async fn click_through(
        endpoint: &Arc<Endpoint>,
        users: u64,
        connections: usize,
        rate: Option<f64>,
        retries: u32,
    ) -> (Vec<Click>, Vec<Event>, Clock) {
        let conns = Conn::open_many(endpoint, connections, Duration::from_secs(5)).await.unwrap();
        let clock = Clock::start();
        let (accepted, _accepted_rx) = mpsc::unbounded_channel();
        let clicker = Clicker {
            source: Arc::new(ClickSource {
                next: AtomicU64::new(0),
                limit: Some(users),
                deadline: None,
                users,
                rate,
                t0: clock.t0(),
            }),
            tokens: Arc::new((0..users).map(|u| bearer_header(&format!("user-{u}")).unwrap()).collect()),
            paths: Arc::new(Paths::new(1)),
            accepted,
            clock,
            path_tokens: PathTokens::Off,
            busy: BusyRetry::new(retries),
            retries: Arc::new(Retries::default()),
            done: Arc::default(),
        };
        let out = click_on_every_connection(conns, 1, clicker).await.unwrap();
        (out.clicks, out.events, clock)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_busy_click_is_retried_until_it_gets_through() {
        let gateway = shedding_gateway(2, 0).await;
        let (clicks, events, _) = click_through(&gateway, 30, 4, None, 3).await;
        assert_eq!(clicks.len(), 30, "one outcome per click");
        assert!(clicks.iter().all(|c| c.accepted() && c.busy_answers == 2 && !c.ended_busy));
        // Every answer is an event of its own: two fast 503s and the 202, per click.
        assert_eq!(events.len(), 90);
        assert_eq!(events.iter().filter(|e| e.status == 503).count(), 60);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_click_still_busy_after_its_retries_ends_busy() {
        let gateway = shedding_gateway(5, 0).await;
        let (clicks, events, _) = click_through(&gateway, 10, 2, None, 2).await;
        assert_eq!(clicks.len(), 10);
        assert!(clicks.iter().all(|c| c.ended_busy && c.status == 503 && c.busy_answers == 3), "{clicks:?}");
        assert_eq!(events.len(), 30, "the first try and two retries");
        let mut buyers: Vec<Buyer> = (0..10).map(|u| Buyer { user_id: u, ..Buyer::default() }).collect();
        fold_outcomes(&mut buyers, &clicks, &PollOut::default());
        assert!(buyers.iter().all(|b| b.busy_clicks == 1 && b.undecided_clicks == 0 && b.accepted == 0));

        // Retrying off: the first BUSY ends the click.
        let gateway = shedding_gateway(1, 0).await;
        let (clicks, events, _) = click_through(&gateway, 10, 2, None, 0).await;
        assert!(clicks.iter().all(|c| c.ended_busy && c.busy_answers == 1));
        assert_eq!(events.len(), 10);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn open_loop_a_retry_does_not_hold_up_the_schedule() {
        // 40 clicks at 400/s on one connection, each shed once with `Retry-After: 1`: the first
        // tries all go out on schedule (within 0.1 s), the retries a second later.
        let gateway = shedding_gateway(1, 1).await;
        let (clicks, events, clock) = click_through(&gateway, 40, 1, Some(400.0), 3).await;
        assert!(clicks.iter().all(|c| c.accepted() && c.busy_answers == 1), "{clicks:?}");
        let busy_ends: Vec<u32> = events.iter().filter(|e| e.status == 503).map(|e| e.end_us).collect();
        let retries: Vec<&Event> = events.iter().filter(|e| e.status == 202).collect();
        assert_eq!((busy_ends.len(), retries.len()), (40, 40));
        assert!(busy_ends.iter().all(|us| *us < 500_000), "first tries held up: {busy_ends:?}");
        // Each retry waited its Retry-After plus at most a quarter of jitter, counted from then.
        for r in retries {
            assert!((1_000_000..2_000_000).contains(&r.start_us()), "{r:?}");
            assert!(r.latency_us < 500_000, "{r:?}");
        }
        assert!(clock.now_us() < 3_000_000);
    }
}
