//! The named scenarios, driven through the gateway like real buyers: create the sale as an
//! admin, mint every user's token (untimed), then on a set number of keep-alive connections
//! fire path token + order per click (closed loop, or open loop at `rate` clicks/s), poll each
//! accepted user's result until it is final, and check the invariants from outside.
//! `hot-user` is one user hammering the buy button: the path token is fetched once, before
//! the clock, and every click is an order presenting it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chrono::Utc;
use hyper::header::HeaderValue;
use seckill_common::api::Role;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

use crate::api::{self, SalePaths, create_sale, dev_token};
use crate::busy::BusyRetry;
use crate::cli::{self, GatewayList, Output};
use crate::client::{Conn, Endpoint, Req};
use crate::invariants::{self, Buyer, FinalState};
use crate::machine::{CpuReport, Involved, Watch};
use crate::memory::ProcMemory;
use crate::progress::Progress;
use crate::record::{Clock, Event};
use crate::report::{self, KIND_SCENARIO, LoadShape, Report};
use crate::signal::{self, Signal};
use crate::stats;

mod click;
mod poll;
mod summary;

use self::click::{Click, ClickSource, Clicker, PathTokens, Retries, WorkerOut, buy_worker};
use self::poll::{PollOut, PollSetup, final_state, poll_results};
use self::summary::{
    OrderRows, buy_summary, drain_summary, fold_outcomes, order_times, scenario_params, secs, spread_marks,
    winners_by_order,
};

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

/// Everything a scenario run needs: the scenario subcommands' options. Those the scenarios
/// differ in are `Option`s, unset taken from [`Scenario::defaults`] (the accessors of the same
/// names); every other default is in its `#[arg]`.
#[derive(Debug, Clone, clap::Args)]
pub struct ScenarioConfig {
    /// Which scenario: the subcommand's (a parse yields `seed`; the caller sets it).
    #[arg(skip = Scenario::Seed)]
    pub scenario: Scenario,
    /// The gateway's base URL, or several, comma-separated: the load's connections are spread
    /// over them (connection k to the k-th, modulo their number), so one user's clicks go to
    /// every one of them; the sale is created and read back through the first.
    #[arg(long = "gateway", value_name = "GATEWAY", default_value = "http://127.0.0.1:8080", value_parser = cli::gateway_list)]
    pub gateways: GatewayList,
    /// Create the sale, mint the tokens and read the sale back through this gateway instead
    /// of the first --gateway (e.g. when the gateways under load send /api/goods elsewhere).
    #[arg(long, value_parser = cli::one_gateway)]
    pub admin_gateway: Option<String>,
    #[command(flatten)]
    pub buy_limit: Option<BuyLimit>,
    /// A setting the gateways under load run with, `key=value` (e.g. `rate_limit.lease=4`),
    /// recorded with the report for the reader (repeatable).
    #[arg(long = "gateway-setting", value_name = "KEY=VALUE", value_parser = cli::key_value)]
    pub gateway_settings: Vec<(String, String)>,
    /// Distinct users (sold-out: the pool its clicks cycle through).
    #[arg(long)]
    pub users: Option<u64>,
    /// Units on sale.
    #[arg(long)]
    pub stock: Option<i64>,
    /// Keep-alive connections firing clicks.
    #[arg(long, short = 'c')]
    pub connections: Option<usize>,
    /// hot-user: how many clicks the user makes (the others: one click per user).
    #[arg(long, default_value_t = 1_000)]
    pub clicks: u64,
    /// sold-out: seconds of hammering.
    #[arg(long, value_parser = cli::secs)]
    pub duration: Option<Duration>,
    /// Open loop: clicks per second on a fixed schedule (latency counted from the scheduled
    /// start). Without it: closed loop, as fast as the connections are answered (after the
    /// `Retry-After` of a `503 BUSY` a click retries: a connection is one buyer).
    #[arg(long, value_parser = cli::per_sec)]
    pub rate: Option<f64>,
    /// Order without a path token (for seckill.require_token=false).
    #[arg(long = "no-path-token", action = clap::ArgAction::SetFalse)]
    pub path_token: bool,
    #[command(flatten)]
    pub busy: BusyRetry,
    /// The first user id (users are consecutive from it).
    #[arg(long, default_value_t = 10_000)]
    pub first_user: i64,
    /// Least time between two polls of one user's result.
    #[arg(long = "poll-interval-ms", value_name = "POLL_INTERVAL_MS", default_value = "50", value_parser = cli::millis)]
    pub poll_interval: Duration,
    /// Connections polling results (default: a quarter of --connections, 4 to 64).
    #[arg(long)]
    pub poll_connections: Option<usize>,
    /// Poll results while the load runs (default true; false for drain: polls start when the
    /// load ends, so the load is measured alone, and the drain's end comes from the order
    /// rows' creation times).
    #[arg(long, value_name = "BOOL")]
    pub poll_during_load: Option<bool>,
    /// Orders whose creation time is read back to time the drain at the order rows.
    #[arg(long, default_value_t = 200)]
    pub order_samples: usize,
    /// Stop this process (SIGSTOP) while the load runs and resume it (SIGCONT) when the load
    /// ends, e.g. the order-service's pid: the consumer then drains a backlog alone
    /// (repeatable).
    #[arg(long = "pause-pid")]
    pub pause_pids: Vec<u32>,
    /// Seconds to keep polling after the load ends before calling a result stuck.
    #[arg(long, value_parser = cli::secs)]
    pub final_timeout: Option<Duration>,
    /// Per-request timeout.
    #[arg(long = "timeout-ms", value_name = "TIMEOUT_MS", default_value = "10000", value_parser = cli::millis)]
    pub request_timeout: Duration,
    /// The report's name (default: the scenario's).
    #[arg(long)]
    pub name: Option<String>,
    /// Buy on this existing sale instead of creating one (`stock` is then its units, for the
    /// checks): the expiry storm's buyers buying again.
    #[arg(skip)]
    pub sale: Option<i64>,
    #[command(flatten)]
    pub out: Output,
}

/// What the scenarios differ in, where the command line leaves it unset.
pub struct Defaults {
    pub users: u64,
    pub stock: i64,
    pub connections: usize,
    pub duration: Option<Duration>,
    pub poll_during_load: bool,
    pub final_timeout: Duration,
}

impl Scenario {
    pub fn defaults(self) -> Defaults {
        let (users, stock, connections) = match self {
            Self::Seed => (1_000, 500, 200),
            Self::Spike => (20_000, 1_000, 500),
            Self::SoldOut => (10_000, 1, 200),
            Self::HotUser => (1, 10, 50),
            Self::Drain => (50_000, 100_000, 500),
        };
        Defaults {
            users,
            stock,
            connections,
            duration: (self == Self::SoldOut).then_some(Duration::from_secs(10)),
            poll_during_load: self != Self::Drain,
            final_timeout: Duration::from_secs(if self == Self::Drain { 180 } else { 60 }),
        }
    }
}

impl ScenarioConfig {
    /// The scenario's defaults, its load going to `gateway`.
    pub fn new(scenario: Scenario, gateway: impl Into<String>) -> Self {
        let cfg: Self = cli::parse_options(&[]).expect("the defaults parse");
        Self { scenario, gateways: GatewayList(vec![gateway.into()]), ..cfg }
    }

    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or(self.scenario.name())
    }

    /// The gateway the sale is created and read back through, and the users' tokens minted.
    pub fn gateway(&self) -> &str {
        self.admin_gateway.as_deref().unwrap_or(&self.gateways.0[0])
    }

    /// The gateways the load goes to: load connection k to the k-th of them (modulo their
    /// number); the result polls go to the first.
    pub fn click_gateways(&self) -> &[String] {
        &self.gateways.0
    }

    pub fn users(&self) -> u64 {
        self.users.unwrap_or(self.scenario.defaults().users)
    }

    pub fn stock(&self) -> i64 {
        self.stock.unwrap_or(self.scenario.defaults().stock)
    }

    pub fn connections(&self) -> usize {
        self.connections.unwrap_or(self.scenario.defaults().connections)
    }

    pub fn duration(&self) -> Option<Duration> {
        self.duration.or(self.scenario.defaults().duration)
    }

    /// A quarter of the load's connections, between 4 and 64, unless set.
    pub fn poll_connections(&self) -> usize {
        self.poll_connections.unwrap_or((self.connections() / 4).clamp(4, 64))
    }

    pub fn poll_during_load(&self) -> bool {
        self.poll_during_load.unwrap_or(self.scenario.defaults().poll_during_load)
    }

    pub fn final_timeout(&self) -> Duration {
        self.final_timeout.unwrap_or(self.scenario.defaults().final_timeout)
    }

    /// With a path token: fetch each user's once, before the clock, and present it on every
    /// click (`hot-user`), instead of asking for one at the start of each click.
    pub fn path_token_once(&self) -> bool {
        self.path_token && self.scenario == Scenario::HotUser
    }

    /// The settings the gateways under load run with, as recorded in the report.
    pub fn gateway_settings(&self) -> BTreeMap<String, String> {
        self.gateway_settings.iter().cloned().collect()
    }
}

/// A per-user token bucket's settings: `per_sec` tokens a second, at most `burst` saved. On
/// the command line, the gateways' limit on the buy routes (`rate_limit.buy`), both or neither:
/// the report then sets the buy calls let through against what it allows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, clap::Args)]
pub struct BuyLimit {
    /// The gateways' limit on the buy routes, tokens per second (`rate_limit.buy.per_sec`):
    /// with --buy-burst, the report sets the buy calls let through against what it allows.
    #[arg(long = "buy-per-sec", value_name = "BUY_PER_SEC", required = false, requires = "burst")]
    pub per_sec: f64,
    /// The gateways' burst on the buy routes (`rate_limit.buy.burst`).
    #[arg(long = "buy-burst", value_name = "BUY_BURST", required = false, requires = "per_sec")]
    pub burst: f64,
}

impl BuyLimit {
    /// The most calls one user can get through in `elapsed_s` seconds: a full bucket at the
    /// start, then the refill.
    pub fn allowance(self, elapsed_s: f64) -> f64 {
        self.burst + self.per_sec * elapsed_s
    }
}

/// How often the watched processes' memory is sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

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
    if cfg.users() == 0 || cfg.connections() == 0 {
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
    paths: Arc<SalePaths>,
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
    let endpoint = Endpoint::parse(cfg.gateway())?;
    let click_endpoints =
        cfg.click_gateways().iter().map(|g| Endpoint::parse(g)).collect::<anyhow::Result<Vec<_>>>()?;
    let mut admin = Conn::new(endpoint.clone(), cfg.request_timeout);
    let goods_id = match cfg.sale {
        Some(g) => g,
        None => {
            let admin_token = dev_token(&mut admin, 1, Role::Admin).await?;
            let label = format!("bench {}", cfg.name());
            let goods = create_sale(
                &mut admin,
                &admin_token,
                &label,
                cfg.stock(),
                1,
                chrono::Duration::seconds(5),
                None,
            )
            .await?;
            goods.id.get()
        }
    };
    let user_ids: Vec<i64> = (0..cfg.users()).map(|i| cfg.first_user + i as i64).collect();
    let tokens = Arc::new(
        mint_tokens(&endpoint, &user_ids, cfg.connections(), cfg.request_timeout, cfg.out.progress()).await?,
    );
    let mut conns = open_spread(&click_endpoints, cfg.connections(), cfg.request_timeout).await?;
    let poll_conns =
        Conn::open_many(&click_endpoints[0], cfg.poll_connections().max(1), cfg.request_timeout).await?;
    let mut sale = Sale {
        admin,
        goods_id,
        paths: Arc::new(SalePaths::new(goods_id)),
        tokens,
        buyers: user_ids.iter().map(|u| Buyer { user_id: *u, ..Buyer::default() }).collect(),
        notes: Vec::new(),
    };
    if cfg.scenario == Scenario::SoldOut && cfg.stock() > 0 {
        let sold = sell_out(cfg, &mut conns[0], &sale.tokens, &sale.paths, &mut sale.buyers).await?;
        sale.notes.push(format!(
            "before the clock: {sold} users bought the {} units (full buy path, polled to final)",
            cfg.stock()
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
    Ok(match (cfg.path_token, cfg.path_token_once()) {
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
        Scenario::HotUser => Some(cfg.clicks),
        _ => Some(cfg.users()),
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
    let progress = Progress::new(cfg.out.progress(), total_clicks, cfg.scenario.name());
    let procs = cfg.out.procs();
    let watch = Watch::start(procs.clone(), SAMPLE_EVERY);
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
            final_timeout: cfg.final_timeout(),
            finals_seen: finals_seen.clone(),
            defer: !cfg.poll_during_load(),
        },
        accepted_rx,
    ));
    let clicker = Clicker {
        source: Arc::new(ClickSource {
            next: AtomicU64::new(0),
            limit: total_clicks,
            deadline: cfg.duration().map(|d| clock.t0() + d),
            users: cfg.users(),
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
    let cpu = watch.cpu(&Involved::system(procs));
    progress.finish();
    let accepted_so_far = load.clicks.iter().filter(|c| c.accepted()).count() as u64;
    let backlog = accepted_so_far.saturating_sub(finals_seen.load(Ordering::Relaxed));
    let polled = await_final_results(cfg.out.progress(), poller, &finals_seen, backlog).await?;
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
    let stock_available = match api::goods(&mut sale.admin, g).await {
        Ok(goods) => Some(goods.stock_available),
        Err(e) => {
            sale.notes.push(format!("after the run: {e}"));
            None
        }
    };
    let checks = invariants::check(&sale.buyers, cfg.stock(), stock_available);
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
        name: cfg.name().to_owned(),
        started_at: report::rfc3339(timed.t0_wall),
        command: report::this_command(),
        params: scenario_params(cfg, timed.total_clicks),
        load: LoadShape {
            connections: cfg.connections() as u64,
            rate: cfg.rate,
            gateways: cfg.click_gateways().to_vec(),
            gateway_settings: cfg.gateway_settings(),
        },
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

/// `sold-out`: the first `stock` users buy every unit before the clock starts.
async fn sell_out(
    cfg: &ScenarioConfig,
    conn: &mut Conn,
    tokens: &[HeaderValue],
    paths: &SalePaths,
    buyers: &mut [Buyer],
) -> anyhow::Result<u64> {
    let mut sold = 0;
    for user in 0..buyers.len().min(usize::try_from(cfg.stock()).unwrap_or(usize::MAX)) {
        let mut req = Req::post(&paths.orders).bearer(&tokens[user]);
        if cfg.path_token {
            let a = conn.send(Req::post(&paths.token).bearer(&tokens[user])).await;
            let t = a.path_token();
            req = req.path_token(
                t.with_context(|| format!("path token before the sale sold out: HTTP {}", a.status))?,
            );
        }
        let a = conn.send(req).await;
        if a.status != 202 {
            bail!("selling out the sale: an order was answered HTTP {}", a.status);
        }
        let deadline = Instant::now() + cfg.final_timeout();
        let b = &mut buyers[user];
        b.clicks += 1;
        b.accepted += 1;
        b.result = Some(FinalState::Queued);
        while Instant::now() < deadline {
            let a = conn.send(Req::get(&paths.result).bearer(&tokens[user])).await;
            if let Some((state, order_id)) = final_state(&a) {
                b.result = Some(state);
                b.order_id = order_id;
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
    paths: &SalePaths,
) -> anyhow::Result<Vec<HeaderValue>> {
    let mut out = Vec::with_capacity(tokens.len());
    for bearer in tokens {
        let a = conn.send(Req::post(&paths.token).bearer(bearer)).await;
        let Some(t) = a.path_token() else {
            bail!(
                "the path token before the clock: HTTP {} ({})",
                a.status,
                String::from_utf8_lossy(&a.body)
            );
        };
        out.push(t);
    }
    Ok(out)
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
                // Three tries: a token refused once (a connection reset) is not a failed run.
                let mut tries = 0;
                let bearer = loop {
                    tries += 1;
                    match dev_token(&mut conn, users[i], Role::User).await {
                        Ok(bearer) => break bearer,
                        Err(e) if tries == 3 => return Err(e),
                        Err(_) => {}
                    }
                };
                got.push((i, bearer));
                counter.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, api::Refused>(got)
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
    use std::collections::HashMap;
    use std::sync::Mutex;

    use crate::client::{STATUS_TIMEOUT, bearer_header};
    use crate::record::Call;

    use super::summary::{by_gateway, limit_check};
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
            paths: Arc::new(SalePaths::new(1)),
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
