//! The command line: the scenarios, the baselines, the whole run (`suite`, what
//! scripts/bench.sh runs) and the document written from its reports.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use clap::{Args, Parser, Subcommand};

use crate::baseline::{self, AmqpConfig, HttpConfig};
use crate::busy::{self, BusyRetry};
use crate::markdown;
use crate::memory::{self, ProcTarget};
use crate::report::Report;
use crate::scenario::{self, BuyLimit, Scenario, ScenarioConfig};
use crate::storm::StormConfig;
use crate::sync::SyncConfig;
use crate::{chart, client};

/// Exit status when a scenario ran but an invariant broke.
pub const EXIT_INVARIANT: u8 = 3;

#[derive(Debug, Parser)]
#[command(
    name = "seckill-bench",
    version,
    about = "Load generator and benchmarks of the seckill system, driven through the gateway",
    long_about = "Load generator and benchmarks of the seckill system, driven through the gateway.\n\n\
        Scenarios create their own sale with an admin dev token, mint every user's token before the clock \
        starts, fire path token + order per click on a set number of keep-alive connections (hot-user: one \
        path token before the clock, then order clicks presenting it), poll each accepted user's result \
        until it is final, check the invariants from outside, and report per call and outcome (requests/s, \
        latency p50/p90/p99/p99.9/max), the drain, and each service's memory."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// 1,000 users, 500 units (default 200 connections).
    Seed(ScenarioArgs),
    /// 20,000 users, 1,000 units, 500 connections.
    Spike(ScenarioArgs),
    /// Sells a sale out (1 unit), then hammers it for --duration (10 s) on 200 connections,
    /// cycling through --users (10,000) so the per-user rate limit is not what answers.
    SoldOut(ScenarioArgs),
    /// One user hammering the buy button: one path token before the clock, then --clicks
    /// (1,000) orders presenting it on 50 connections: one 202, the rest refused (403 BAD_TOKEN
    /// once the token is used, 409 REPEATED without tokens, 429 RATE_LIMITED).
    HotUser(ScenarioArgs),
    /// 50,000 users on a 100,000-unit sale, 500 connections: accepted buys/s, then the
    /// drain (first 202 to the last order row written; with --pause-pid, the consumer alone).
    Drain(ScenarioArgs),
    /// The expiry storm: a spike on the quiet system (--spike-users 20,000, --spike-stock 1,000);
    /// --users (50,000) buyers, one unit each, on a sale of as many; order-service (--pause-pid)
    /// stopped just before the first of their orders comes due (--order-ttl-secs) and resumed
    /// once the last has, so every expiry waits in the broker; at the resume the same spike on
    /// another sale, while the sale is polled until every unit is back in PostgreSQL and in
    /// Redis (expiries/s); then every unit back, the audit agreeing, and --rebuy-sample (1,000)
    /// expired buyers buying again are checked.
    Storm(StormArgs),
    /// A sale behind a waiting room: --users (20,000) join, half before the opening; the status
    /// route polled as fast as answered for --poll-secs; then everyone polls with back-off and
    /// the admitted buy. Also Redis memory per waiting user, the join script run directly for
    /// --memory-users (1,000,000).
    Room(crate::room::RoomArgs),
    /// The synchronous design, for comparison: one transaction per buy (conditional stock
    /// update + order insert under a unique (goods_id, user_id) index) behind a minimal HTTP
    /// server in this tool, in a throw-away database on the same PostgreSQL; --buys (50,000)
    /// new users on --connections (500), closed loop; the database checked afterwards.
    Sync(SyncArgs),
    /// Plain GET load at a URL with N connections for D seconds.
    Http(HttpArgs),
    /// Serves a small fixed JSON body to any request (a trivial upstream for the gateway).
    Upstream(UpstreamArgs),
    /// Persistent publishes with publisher confirms to a scratch queue (deleted afterwards).
    AmqpPublish(AmqpArgs),
    /// The gate alone: the reserve script on one hot sale, --connections (64) callers for
    /// --secs (5), on one Redis server or a cluster (--cluster), the stock in --buckets (1)
    /// buckets; calls/s, latency, each node's share and the CPU a call costs a node. One JSON
    /// line on stdout.
    Gate(crate::gate_load::GateArgs),
    /// The gate over private Redis setups (scripts/bench-scaling.sh): one server and clusters
    /// of 1 to 3 primaries, the stock in 1 to 8 buckets; Markdown tables on stdout.
    Scaling(crate::scaling::ScalingArgs),
    /// Writes BENCHMARKS.md from a directory of reports (a run's docs/bench/).
    Markdown(MarkdownArgs),
    /// The whole benchmark run (scripts/bench.sh): a system of the four release binaries
    /// under scratch names, every scenario and baseline beside it, then docs/bench/ and
    /// docs/BENCHMARKS.md.
    Suite(crate::suite::SuiteArgs),
    /// What a shop's history costs at rest: per count of ended sales (100 and 10,000 by
    /// default), a fresh system of the four release binaries under names of its own, that many
    /// ended sales and a few live ones; each service's CPU over a minute of nothing happening.
    Idle(crate::idle::IdleArgs),
    /// Buyers' event streams, on a fresh system of the four release binaries under --prefix
    /// names: --streams (20,000) open on one gateway replica (its memory per stream, its CPU at
    /// rest); their buyers buying at --rate (5,000/s): order commit to `success` event, p50 and
    /// p99; a spike of --spike-buyers, half following on streams, half polling: requests per buyer.
    Push(crate::push::PushArgs),
}

/// Where the report goes, and which processes to watch.
#[derive(Debug, Clone, Args)]
pub struct Output {
    /// Write the report as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write a chart of throughput and latency over time (SVG) to this file.
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
    /// Do not print the tables.
    #[arg(long)]
    pub quiet: bool,
    /// Directory of `<name>.pid` files (scripts/up.sh writes run/): those processes' memory
    /// is sampled during the run.
    #[arg(long, default_value = "run")]
    pub run_dir: PathBuf,
    /// Another process to watch, `name=PID` (repeatable).
    #[arg(long = "pid", value_parser = ProcTarget::parse)]
    pub pids: Vec<ProcTarget>,
}

impl Output {
    pub(crate) fn procs(&self) -> Vec<ProcTarget> {
        memory::discover(&self.run_dir, &self.pids)
    }
}

#[derive(Debug, Clone, Args)]
pub struct ScenarioArgs {
    /// The gateway's base URL, or several, comma-separated: the load's connections are spread
    /// over them (connection k to the k-th, modulo their number), so one user's clicks go to
    /// every one of them; the sale is created and read back through the first.
    #[arg(long, default_value = "http://127.0.0.1:8080", value_parser = gateway_list)]
    pub gateway: GatewayList,
    /// Create the sale, mint the tokens and read the sale back through this gateway instead
    /// of the first --gateway (e.g. when the gateways under load send /api/goods elsewhere).
    #[arg(long, value_parser = one_gateway)]
    pub admin_gateway: Option<String>,
    /// The gateways' limit on the buy routes, tokens per second (`rate_limit.buy.per_sec`):
    /// with --buy-burst, the report sets the buy calls let through against what it allows.
    #[arg(long, requires = "buy_burst")]
    pub buy_per_sec: Option<f64>,
    /// The gateways' burst on the buy routes (`rate_limit.buy.burst`).
    #[arg(long, requires = "buy_per_sec")]
    pub buy_burst: Option<f64>,
    /// A setting the gateways under load run with, `key=value` (e.g. `rate_limit.lease=4`),
    /// recorded with the report for the reader (repeatable).
    #[arg(long = "gateway-setting", value_name = "KEY=VALUE", value_parser = key_value)]
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
    /// hot-user: how many clicks the user makes.
    #[arg(long)]
    pub clicks: Option<u64>,
    /// sold-out: seconds of hammering.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Open loop: clicks per second on a fixed schedule (latency counted from the scheduled
    /// start). Without it: closed loop, as fast as the connections are answered.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Order without a path token (for seckill.require_token=false).
    #[arg(long)]
    pub no_path_token: bool,
    /// Retries of a click's call answered `503 BUSY`, each after its `Retry-After` (capped at
    /// 5 s) plus a little jitter, as a browser or an app would (0: a BUSY answer ends the click).
    #[arg(long, default_value_t = busy::DEFAULT_RETRIES)]
    pub busy_retries: u32,
    /// The first user id (users are consecutive from it).
    #[arg(long)]
    pub first_user: Option<i64>,
    /// Least time between two polls of one user's result.
    #[arg(long)]
    pub poll_interval_ms: Option<u64>,
    /// Connections polling results (default: a quarter of --connections, 4 to 64).
    #[arg(long)]
    pub poll_connections: Option<usize>,
    /// Poll results while the load runs (default true; false for drain: polls start when the
    /// load ends, so the load is measured alone).
    #[arg(long, value_name = "BOOL")]
    pub poll_during_load: Option<bool>,
    /// Orders whose creation time is read back to time the drain at the order rows.
    #[arg(long)]
    pub order_samples: Option<usize>,
    /// Stop this process (SIGSTOP) while the load runs and resume it (SIGCONT) when the load
    /// ends, e.g. the order-service's pid: the consumer then drains a backlog alone
    /// (repeatable).
    #[arg(long = "pause-pid")]
    pub pause_pids: Vec<u32>,
    /// Seconds to keep polling after the load ends before calling a result stuck.
    #[arg(long)]
    pub final_timeout: Option<f64>,
    /// Per-request timeout.
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,
    /// The report's name (default: the scenario's).
    #[arg(long)]
    pub name: Option<String>,
    #[command(flatten)]
    pub out: Output,
}

/// `--gateway`: one base URL or a comma-separated list of them.
#[derive(Debug, Clone, PartialEq)]
pub struct GatewayList(pub Vec<String>);

fn gateway_list(list: &str) -> Result<GatewayList, String> {
    client::split_gateways(list).map(GatewayList).map_err(|e| format!("{e:#}"))
}

fn key_value(item: &str) -> Result<(String, String), String> {
    match item.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.trim().to_owned())),
        _ => Err(format!("`{item}`: expected key=value")),
    }
}

fn one_gateway(url: &str) -> Result<String, String> {
    match gateway_list(url)?.0.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(format!("`{url}`: one gateway here, not a list")),
    }
}

impl ScenarioArgs {
    pub fn config(&self, scenario: Scenario) -> ScenarioConfig {
        let gateways = self.gateway.0.clone();
        let admin = self.admin_gateway.clone().or_else(|| gateways.first().cloned()).unwrap_or_default();
        let mut c = ScenarioConfig::new(scenario, admin);
        c.click_gateways = gateways;
        c.buy_limit =
            self.buy_per_sec.zip(self.buy_burst).map(|(per_sec, burst)| BuyLimit { per_sec, burst });
        c.gateway_settings = self.gateway_settings.iter().cloned().collect();
        if let Some(v) = &self.name {
            c.name = v.clone();
        }
        if let Some(v) = self.users {
            c.users = v;
        }
        if let Some(v) = self.stock {
            c.stock = v;
        }
        if let Some(v) = self.connections {
            c.connections = v;
            c.poll_connections = scenario::default_poll_connections(v);
        }
        if self.clicks.is_some() {
            c.clicks = self.clicks;
        }
        if let Some(v) = self.duration {
            c.duration = Some(Duration::from_secs_f64(v));
        }
        c.rate = self.rate.filter(|r| *r > 0.0);
        c.path_token = !self.no_path_token;
        c.busy = BusyRetry::new(self.busy_retries);
        if let Some(v) = self.first_user {
            c.first_user = v;
        }
        if let Some(v) = self.poll_interval_ms {
            c.poll_interval = Duration::from_millis(v);
        }
        if let Some(v) = self.poll_connections {
            c.poll_connections = v;
        }
        if let Some(v) = self.poll_during_load {
            c.poll_during_load = v;
        }
        c.pause_pids = self.pause_pids.clone();
        if let Some(v) = self.order_samples {
            c.order_samples = v;
        }
        if let Some(v) = self.final_timeout {
            c.final_timeout = Duration::from_secs_f64(v);
        }
        c.request_timeout = Duration::from_millis(self.timeout_ms);
        c.progress = !self.out.no_progress;
        c.procs = self.out.procs();
        c
    }
}

#[derive(Debug, Clone, Args)]
pub struct StormArgs {
    /// The gateway's base URL (everything goes through it).
    #[arg(long, default_value = "http://127.0.0.1:8080", value_parser = one_gateway)]
    pub gateway: String,
    /// Buyers of the sale whose orders expire together, one unit each.
    #[arg(long, default_value_t = 50_000)]
    pub users: u64,
    /// Keep-alive connections firing clicks (the sale's buyers, each spike, the buyers again).
    #[arg(long, short = 'c', default_value_t = 500)]
    pub connections: usize,
    /// Users of each spike (without the storm, and during it).
    #[arg(long, default_value_t = 20_000)]
    pub spike_users: u64,
    /// Units of each spike's sale.
    #[arg(long, default_value_t = 1_000)]
    pub spike_stock: i64,
    /// The order-service's pid (repeatable: every replica's): stopped (SIGSTOP) while the orders
    /// come due, resumed (SIGCONT) when the storm starts.
    #[arg(long = "pause-pid", required = true)]
    pub pause_pids: Vec<u32>,
    /// The order-service's `order.ttl_secs` (SECKILL__ORDER__TTL_SECS), checked against an
    /// order: the orders must not come due before every buyer has one.
    #[arg(long)]
    pub order_ttl_secs: u64,
    /// Seconds after the last order came due before order-service is resumed.
    #[arg(long, default_value_t = 2.0)]
    pub margin_secs: f64,
    /// Expired buyers who buy again after the storm (all must be accepted and end in success).
    #[arg(long, default_value_t = 1_000)]
    pub rebuy_sample: u64,
    /// Seconds to wait, from the resume, for every unit to be back.
    #[arg(long, default_value_t = 300.0)]
    pub storm_timeout: f64,
    /// Order without a path token (for seckill.require_token=false).
    #[arg(long)]
    pub no_path_token: bool,
    /// Retries of a click's call answered `503 BUSY` (as the other scenarios).
    #[arg(long, default_value_t = busy::DEFAULT_RETRIES)]
    pub busy_retries: u32,
    /// The sale's first buyer (buyers are consecutive from it; each spike's users follow).
    #[arg(long, default_value_t = 8_000_000)]
    pub first_user: i64,
    /// Per-request timeout.
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,
    /// The report's name.
    #[arg(long, default_value = "storm")]
    pub name: String,
    #[command(flatten)]
    pub out: Output,
}

impl StormArgs {
    pub fn config(&self) -> StormConfig {
        let mut c = StormConfig::new(
            self.gateway.clone(),
            self.pause_pids.clone(),
            Duration::from_secs(self.order_ttl_secs),
        );
        c.name = self.name.clone();
        c.users = self.users;
        c.connections = self.connections;
        c.spike_users = self.spike_users;
        c.spike_stock = self.spike_stock;
        c.margin = Duration::from_secs_f64(self.margin_secs.max(0.0));
        c.rebuy_sample = self.rebuy_sample;
        c.storm_timeout = Duration::from_secs_f64(self.storm_timeout.max(1.0));
        c.path_token = !self.no_path_token;
        c.busy = BusyRetry::new(self.busy_retries);
        c.first_user = self.first_user;
        c.request_timeout = Duration::from_millis(self.timeout_ms);
        c.progress = !self.out.no_progress;
        c.procs = self.out.procs();
        c
    }
}

#[derive(Debug, Clone, Args)]
pub struct SyncArgs {
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
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,
    /// The report's name.
    #[arg(long, default_value = "sync")]
    pub name: String,
    #[command(flatten)]
    pub out: Output,
}

impl SyncArgs {
    pub fn config(&self) -> SyncConfig {
        SyncConfig {
            name: self.name.clone(),
            pg_url: self.pg_url.clone(),
            database: self.database.clone(),
            buys: self.buys,
            stock: self.stock,
            connections: self.connections,
            pool_size: self.pool_size,
            first_user: self.first_user,
            request_timeout: Duration::from_millis(self.timeout_ms),
            progress: !self.out.no_progress,
            procs: self.out.procs(),
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct HttpArgs {
    /// The URL to GET (plain http).
    #[arg(long)]
    pub url: String,
    #[arg(long, short = 'c', default_value_t = 200)]
    pub connections: usize,
    /// Seconds of load.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Open loop at this many requests per second.
    #[arg(long)]
    pub rate: Option<f64>,
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,
    /// The report's name.
    #[arg(long, default_value = "http")]
    pub name: String,
    #[command(flatten)]
    pub out: Output,
}

#[derive(Debug, Clone, Args)]
pub struct UpstreamArgs {
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0: any free port, printed).
    #[arg(long, default_value_t = 18083)]
    pub port: u16,
    /// The JSON body to answer.
    #[arg(long, default_value = baseline::UPSTREAM_BODY)]
    pub body: String,
}

#[derive(Debug, Clone, Args)]
pub struct AmqpArgs {
    #[arg(long, env = "SECKILL_AMQP_URL", default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
    pub amqp_url: String,
    #[arg(long, default_value_t = 20_000)]
    pub messages: u64,
    /// Publishes waiting for their confirm at most.
    #[arg(long, default_value_t = 1_000)]
    pub in_flight: usize,
    /// Message size (an order request message is about 150 bytes).
    #[arg(long, default_value_t = 150)]
    pub body_bytes: usize,
    #[arg(long, default_value = "amqp-publish")]
    pub name: String,
    /// The scratch queue's name (default: `seckill-bench.scratch.<random>`).
    #[arg(long)]
    pub queue: Option<String>,
    #[command(flatten)]
    pub out: Output,
}

#[derive(Debug, Clone, Args)]
pub struct MarkdownArgs {
    #[arg(long, default_value = "docs/bench")]
    pub dir: PathBuf,
    #[arg(long, default_value = "docs/BENCHMARKS.md")]
    pub out: PathBuf,
}

/// Parses the command line, runs it on a multi-thread runtime, and maps failures to an exit
/// status.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("seckill-bench: no tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("seckill-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

pub async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Seed(a) => run_scenario(Scenario::Seed, &a).await,
        Command::Spike(a) => run_scenario(Scenario::Spike, &a).await,
        Command::SoldOut(a) => run_scenario(Scenario::SoldOut, &a).await,
        Command::HotUser(a) => run_scenario(Scenario::HotUser, &a).await,
        Command::Drain(a) => run_scenario(Scenario::Drain, &a).await,
        Command::Storm(a) => {
            let report = crate::storm::run(&a.config()).await?;
            emit(&report, &a.out)?;
            Ok(invariant_status(&report))
        }
        Command::Room(a) => {
            let report = crate::room::run(&a).await?;
            emit(&report, &a.out)?;
            Ok(invariant_status(&report))
        }
        Command::Sync(a) => {
            let report = crate::sync::run(&a.config()).await?;
            emit(&report, &a.out)?;
            Ok(invariant_status(&report))
        }
        Command::Http(a) => {
            let cfg = HttpConfig {
                name: a.name.clone(),
                url: a.url.clone(),
                connections: a.connections,
                duration: Duration::from_secs_f64(a.duration.max(0.1)),
                rate: a.rate.filter(|r| *r > 0.0),
                request_timeout: Duration::from_millis(a.timeout_ms),
                progress: !a.out.no_progress,
                procs: a.out.procs(),
            };
            let report = baseline::http_load(&cfg).await?;
            emit(&report, &a.out)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Upstream(a) => {
            let listener = tokio::net::TcpListener::bind((a.host.as_str(), a.port))
                .await
                .with_context(|| format!("binding {}:{}", a.host, a.port))?;
            println!("seckill-bench upstream listening on http://{}", listener.local_addr()?);
            baseline::serve_upstream(listener, Bytes::from(a.body), seckill_common::shutdown_signal()).await;
            Ok(ExitCode::SUCCESS)
        }
        Command::AmqpPublish(a) => {
            let cfg = AmqpConfig {
                name: a.name.clone(),
                url: a.amqp_url.clone(),
                messages: a.messages,
                in_flight: a.in_flight,
                body_bytes: a.body_bytes,
                queue: a.queue.clone(),
                progress: !a.out.no_progress,
                procs: a.out.procs(),
            };
            let report = baseline::amqp_publish(&cfg).await?;
            emit(&report, &a.out)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Gate(a) => {
            let report = crate::gate_load::run(&a).await?;
            eprintln!(
                "gate: {} {} node(s), {} bucket(s): {:.0} calls/s, p50 {:.2} ms, p99 {:.2} ms, {:.1} µs of Redis CPU a call, per node {:?}, {} errors",
                report.label,
                report.nodes,
                report.buckets,
                report.calls_per_sec,
                report.p50_ms,
                report.p99_ms,
                report.cpu_us_per_call,
                report.calls_per_node,
                report.errors
            );
            println!("{}", serde_json::to_string(&report)?);
            Ok(if report.errors == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        Command::Idle(a) => crate::idle::run(&a).await.map(|_| ExitCode::SUCCESS),
        Command::Scaling(a) => crate::scaling::run(&a).await.map(|()| ExitCode::SUCCESS),
        Command::Suite(a) => crate::suite::run(&a).await.map(|()| ExitCode::SUCCESS),
        Command::Push(a) => {
            let report = crate::push::run(&a).await?;
            emit(&report, &a.out)?;
            Ok(invariant_status(&report))
        }
        Command::Markdown(a) => {
            markdown::write(&a.dir, &a.out)?;
            let c = markdown::Collected::read(&a.dir)?;
            for t in markdown::targets(&c)? {
                // Rows for context have no goal.
                let figures: Vec<String> = [
                    t.ratio.map(|r| format!("ratio {r:.2}")),
                    (!t.goal.is_empty()).then(|| format!("goal {}", t.goal)),
                ]
                .into_iter()
                .flatten()
                .collect();
                println!(
                    "{:<5} {} : {}{}",
                    match t.met {
                        Some(true) => "met",
                        Some(false) => "MISS",
                        None => "-",
                    },
                    t.what,
                    t.measured,
                    if figures.is_empty() { String::new() } else { format!(" ({})", figures.join(", ")) }
                );
            }
            println!("wrote {}", a.out.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn run_scenario(scenario: Scenario, args: &ScenarioArgs) -> anyhow::Result<ExitCode> {
    let cfg = args.config(scenario);
    let report = scenario::run(&cfg).await?;
    emit(&report, &args.out)?;
    Ok(invariant_status(&report))
}

/// Success, or [`EXIT_INVARIANT`] when a check of the run broke.
fn invariant_status(report: &Report) -> ExitCode {
    if report.invariants_hold() {
        ExitCode::SUCCESS
    } else {
        eprintln!("seckill-bench: an invariant is broken (see above)");
        ExitCode::from(EXIT_INVARIANT)
    }
}

fn emit(report: &Report, out: &Output) -> anyhow::Result<()> {
    if !out.quiet {
        println!("{}", report.render());
    }
    if let Some(path) = &out.json {
        report.write_json(path)?;
    }
    if let Some(path) = &out.chart {
        chart::write_svg(report, path)?;
    }
    Ok(())
}

pub(crate) fn write_json(path: &std::path::Path, value: &impl serde::Serialize) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, serde_json::to_string_pretty(value)? + "\n")
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn flags_override_the_scenario_defaults() {
        let cli = Cli::try_parse_from([
            "seckill-bench",
            "seed",
            "--users",
            "60",
            "--stock",
            "20",
            "-c",
            "10",
            "--no-path-token",
            "--pid",
            "gateway=1",
        ])
        .unwrap();
        let Command::Seed(a) = cli.command else { panic!("not seed") };
        let c = a.config(Scenario::Seed);
        assert_eq!((c.users, c.stock, c.connections), (60, 20, 10));
        assert!(!c.path_token);
        assert_eq!(c.poll_connections, 4);
        let d = ScenarioConfig::new(Scenario::Spike, "http://x");
        assert_eq!((d.users, d.stock, d.connections), (20_000, 1_000, 500));
        let d = ScenarioConfig::new(Scenario::HotUser, "http://x");
        assert_eq!((d.users, d.clicks), (1, Some(1_000)));
        assert!(d.path_token && d.path_token_once);
        assert!(!ScenarioConfig::new(Scenario::Spike, "http://x").path_token_once);
        assert_eq!(c.gateway, "http://127.0.0.1:8080");
        assert_eq!(c.click_gateways(), ["http://127.0.0.1:8080"]);
        assert_eq!(c.buy_limit, None);
        assert_eq!(c.busy, BusyRetry::new(3));
    }

    fn storm(args: &[&str]) -> Result<StormConfig, clap::Error> {
        let cli = Cli::try_parse_from(["seckill-bench", "storm"].iter().chain(args))?;
        let Command::Storm(a) = cli.command else { panic!("not storm") };
        Ok(a.config())
    }

    #[test]
    fn storm_takes_its_sizes_and_needs_the_order_service() {
        let c = storm(&["--pause-pid", "42", "--order-ttl-secs", "60"]).unwrap();
        assert_eq!((c.users, c.connections, c.spike_users, c.spike_stock), (50_000, 500, 20_000, 1_000));
        assert_eq!((c.pause_pids.as_slice(), c.order_ttl), (&[42][..], Duration::from_secs(60)));
        assert_eq!((c.rebuy_sample, c.margin, c.path_token), (1_000, Duration::from_secs(2), true));
        c.check().unwrap();

        let c = storm(&[
            "--users",
            "5000",
            "--order-ttl-secs",
            "20",
            "--pause-pid",
            "1",
            "--pause-pid",
            "2",
            "--no-path-token",
            "--rebuy-sample",
            "100",
            "--spike-users",
            "2000",
            "--margin-secs",
            "0.5",
        ])
        .unwrap();
        assert_eq!((c.users, c.rebuy_sample, c.spike_users, c.pause_pids.len()), (5_000, 100, 2_000, 2));
        assert_eq!(c.margin, Duration::from_millis(500));
        assert!(!c.path_token);
        c.check().unwrap();

        // Without the order-service's pid or its TTL there is no storm to make.
        for missing in [&["--order-ttl-secs", "60"][..], &["--pause-pid", "42"]] {
            let e = storm(missing).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::MissingRequiredArgument, "{missing:?}: {e}");
        }
    }

    #[test]
    fn sync_takes_its_sizes() {
        let cli = Cli::try_parse_from([
            "seckill-bench",
            "sync",
            "--pg-url",
            "postgres://postgres@127.0.0.1:5432",
            "--buys",
            "20000",
            "--stock",
            "1000",
            "-c",
            "200",
        ])
        .unwrap();
        let Command::Sync(a) = cli.command else { panic!("not sync") };
        let c = a.config();
        assert_eq!((c.buys, c.stock, c.connections, c.pool_size), (20_000, 1_000, 200, 32));
        assert_eq!((c.database.as_str(), c.name.as_str()), ("seckill_bench_sync", "sync"));
    }

    #[test]
    fn busy_retries_can_be_set_or_turned_off() {
        assert_eq!(hot_user(&["--busy-retries", "5"]).unwrap().busy.retries, 5);
        assert_eq!(hot_user(&["--busy-retries", "0"]).unwrap().busy.retries, 0);
    }

    fn hot_user(args: &[&str]) -> Result<ScenarioConfig, clap::Error> {
        let cli = Cli::try_parse_from(["seckill-bench", "hot-user"].iter().chain(args))?;
        let Command::HotUser(a) = cli.command else { panic!("not hot-user") };
        Ok(a.config(Scenario::HotUser))
    }

    #[test]
    fn clicks_go_to_every_gateway_of_a_list() {
        let c = hot_user(&["--gateway", "http://127.0.0.1:8080,http://127.0.0.1:18280"]).unwrap();
        assert_eq!(c.click_gateways(), ["http://127.0.0.1:8080", "http://127.0.0.1:18280"]);
        assert_eq!(c.gateway, "http://127.0.0.1:8080", "the sale goes through the first");

        let c =
            hot_user(&["--gateway", "http://127.0.0.1:18080", "--admin-gateway", "http://127.0.0.1:8080/"])
                .unwrap();
        assert_eq!(
            (c.gateway.as_str(), c.click_gateways()),
            ("http://127.0.0.1:8080", vec!["http://127.0.0.1:18080".to_owned()])
        );

        for bad in [
            &["--gateway", "http://a:1,,http://b:2"][..],
            &["--gateway", "http://a:1,http://a:1"],
            &["--gateway", "127.0.0.1:8080"],
            &["--admin-gateway", "http://a:1,http://b:2"],
        ] {
            let e = hot_user(bad).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation, "{bad:?}: {e}");
        }
    }

    #[test]
    fn the_buy_limit_takes_both_figures() {
        let c = hot_user(&["--buy-per-sec", "5", "--buy-burst", "10"]).unwrap();
        assert_eq!(c.buy_limit, Some(BuyLimit { per_sec: 5.0, burst: 10.0 }));
        assert_eq!(c.buy_limit.unwrap().allowance(0.4), 12.0);
        let e = hot_user(&["--buy-per-sec", "5"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::MissingRequiredArgument);
    }

    #[test]
    fn gateway_settings_are_recorded_as_given() {
        let c = hot_user(&[
            "--gateway-setting",
            "rate_limit.lease=4",
            "--gateway-setting",
            "rate_limit.shared = false",
        ])
        .unwrap();
        assert_eq!(c.gateway_settings.get("rate_limit.lease").map(String::as_str), Some("4"));
        assert_eq!(c.gateway_settings.get("rate_limit.shared").map(String::as_str), Some("false"));
        for bad in ["rate_limit.lease", "=4"] {
            let e = hot_user(&["--gateway-setting", bad]).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation, "{bad}: {e}");
        }
    }
}
