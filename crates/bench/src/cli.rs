//! The command line: the scenarios, the baselines, the whole run (`suite`, what
//! scripts/bench.sh runs) and the document written from its reports.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use clap::{Args, FromArgMatches, Parser, Subcommand};

use crate::baseline::{self, AmqpConfig, HttpConfig};
use crate::markdown;
use crate::memory::{self, ProcTarget};
use crate::report::Report;
use crate::scenario::{self, Scenario, ScenarioConfig};
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
    Seed(ScenarioConfig),
    /// 20,000 users, 1,000 units, 500 connections.
    Spike(ScenarioConfig),
    /// Sells a sale out (1 unit), then hammers it for --duration (10 s) on 200 connections,
    /// cycling through --users (10,000) so the per-user rate limit is not what answers.
    SoldOut(ScenarioConfig),
    /// One user hammering the buy button: one path token before the clock, then --clicks
    /// (1,000) orders presenting it on 50 connections: one 202, the rest refused (403 BAD_TOKEN
    /// once the token is used, 409 REPEATED without tokens, 429 RATE_LIMITED).
    HotUser(ScenarioConfig),
    /// 50,000 users on a 100,000-unit sale, 500 connections: accepted buys/s, then the
    /// drain (first 202 to the last order row written; with --pause-pid, the consumer alone).
    Drain(ScenarioConfig),
    /// The expiry storm: a spike on the quiet system (--spike-users 20,000, --spike-stock 1,000);
    /// --users (50,000) buyers, one unit each, on a sale of as many; order-service (--pause-pid)
    /// stopped just before the first of their orders comes due (--order-ttl-secs) and resumed
    /// once the last has, so every expiry waits in the broker; at the resume the same spike on
    /// another sale, while the sale is polled until every unit is back in PostgreSQL and in
    /// Redis (expiries/s); then every unit back, the audit agreeing, and --rebuy-sample (1,000)
    /// expired buyers buying again are checked.
    Storm(StormConfig),
    /// A sale behind a waiting room: --users (20,000) join, half before the opening; the status
    /// route polled as fast as answered for --poll-secs; then everyone polls with back-off and
    /// the admitted buy. Also Redis memory per waiting user, the join script run directly for
    /// --memory-users (1,000,000).
    Room(crate::room::RoomArgs),
    /// The synchronous design, for comparison: one transaction per buy (conditional stock
    /// update + order insert under a unique (goods_id, user_id) index) behind a minimal HTTP
    /// server in this tool, in a throw-away database on the same PostgreSQL; --buys (50,000)
    /// new users on --connections (500), closed loop; the database checked afterwards.
    Sync(SyncConfig),
    /// Plain GET load at a URL with N connections for D seconds.
    Http(HttpConfig),
    /// Serves a small fixed JSON body to any request (a trivial upstream for the gateway).
    Upstream(UpstreamArgs),
    /// Persistent publishes with publisher confirms to a scratch queue (deleted afterwards).
    AmqpPublish(AmqpConfig),
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

/// Where the report goes, and which processes to watch: every load command's options.
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
    /// The processes to watch: those of `--run-dir` that are alive, and the `--pid`s.
    pub fn procs(&self) -> Vec<ProcTarget> {
        memory::discover(&self.run_dir, &self.pids)
    }

    pub fn progress(&self) -> bool {
        !self.no_progress
    }
}

/// A configuration from `args` alone, as its subcommand would parse them: clap's defaults
/// where unset. The library's callers (the storm's sub-runs, the tests) start from it, so
/// that each default is written once, in its `#[arg]`.
pub fn parse_options<T: Args + FromArgMatches>(args: &[&str]) -> Result<T, clap::Error> {
    let command = T::augment_args(clap::Command::new("seckill-bench"));
    T::from_arg_matches(
        &command.try_get_matches_from(std::iter::once("seckill-bench").chain(args.iter().copied()))?,
    )
}

/// `--gateway`: one base URL or a comma-separated list of them.
#[derive(Debug, Clone, PartialEq)]
pub struct GatewayList(pub Vec<String>);

pub(crate) fn gateway_list(list: &str) -> Result<GatewayList, String> {
    client::split_gateways(list).map(GatewayList).map_err(|e| format!("{e:#}"))
}

pub(crate) fn one_gateway(url: &str) -> Result<String, String> {
    match gateway_list(url)?.0.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(format!("`{url}`: one gateway here, not a list")),
    }
}

pub(crate) fn key_value(item: &str) -> Result<(String, String), String> {
    match item.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.trim().to_owned())),
        _ => Err(format!("`{item}`: expected key=value")),
    }
}

/// Seconds, fractions allowed (`--duration 2.5`).
pub(crate) fn secs(value: &str) -> Result<Duration, String> {
    let secs: f64 = value.parse().map_err(|e| format!("`{value}`: {e}"))?;
    Duration::try_from_secs_f64(secs).map_err(|e| format!("`{value}`: {e}"))
}

/// Milliseconds (`--timeout-ms 500`).
pub(crate) fn millis(value: &str) -> Result<Duration, String> {
    value.parse().map(Duration::from_millis).map_err(|e| format!("`{value}`: {e}"))
}

/// An open loop's rate: above zero (without the option, the loop is closed).
pub(crate) fn per_sec(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(rate) if rate > 0.0 && rate.is_finite() => Ok(rate),
        _ => Err(format!("`{value}`: a rate above 0 (leave the option out for a closed loop)")),
    }
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
        Command::Seed(c) => run_scenario(Scenario::Seed, c).await,
        Command::Spike(c) => run_scenario(Scenario::Spike, c).await,
        Command::SoldOut(c) => run_scenario(Scenario::SoldOut, c).await,
        Command::HotUser(c) => run_scenario(Scenario::HotUser, c).await,
        Command::Drain(c) => run_scenario(Scenario::Drain, c).await,
        Command::Storm(c) => finish(&crate::storm::run(&c).await?, &c.out),
        Command::Room(a) => finish(&crate::room::run(&a).await?, &a.out),
        Command::Sync(c) => finish(&crate::sync::run(&c).await?, &c.out),
        Command::Http(c) => finish(&baseline::http_load(&c).await?, &c.out),
        Command::Upstream(a) => {
            let listener = tokio::net::TcpListener::bind((a.host.as_str(), a.port))
                .await
                .with_context(|| format!("binding {}:{}", a.host, a.port))?;
            println!("seckill-bench upstream listening on http://{}", listener.local_addr()?);
            baseline::serve_upstream(listener, Bytes::from(a.body), seckill_common::shutdown_signal()).await;
            Ok(ExitCode::SUCCESS)
        }
        Command::AmqpPublish(c) => finish(&baseline::amqp_publish(&c).await?, &c.out),
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
        Command::Push(a) => finish(&crate::push::run(&a).await?, &a.out),
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

async fn run_scenario(scenario: Scenario, cfg: ScenarioConfig) -> anyhow::Result<ExitCode> {
    let cfg = ScenarioConfig { scenario, ..cfg };
    finish(&scenario::run(&cfg).await?, &cfg.out)
}

/// Prints the report and writes its files; success, or [`EXIT_INVARIANT`] when a check of
/// the run broke.
fn finish(report: &Report, out: &Output) -> anyhow::Result<ExitCode> {
    if !out.quiet {
        println!("{}", report.render());
    }
    if let Some(path) = &out.json {
        report.write_json(path)?;
    }
    if let Some(path) = &out.chart {
        chart::write_svg(report, path)?;
    }
    if report.invariants_hold() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("seckill-bench: an invariant is broken (see above)");
        Ok(ExitCode::from(EXIT_INVARIANT))
    }
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
    use crate::busy::BusyRetry;
    use crate::scenario::BuyLimit;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    fn scenario(name: &str, args: &[&str]) -> Result<ScenarioConfig, clap::Error> {
        let cli = Cli::try_parse_from(["seckill-bench", name].iter().chain(args))?;
        let (scenario, c) = match cli.command {
            Command::Seed(c) => (Scenario::Seed, c),
            Command::HotUser(c) => (Scenario::HotUser, c),
            Command::Drain(c) => (Scenario::Drain, c),
            _ => panic!("not a scenario this test parses"),
        };
        Ok(ScenarioConfig { scenario, ..c })
    }

    fn hot_user(args: &[&str]) -> Result<ScenarioConfig, clap::Error> {
        scenario("hot-user", args)
    }

    #[test]
    fn flags_override_the_scenario_defaults() {
        let c = scenario(
            "seed",
            &["--users", "60", "--stock", "20", "-c", "10", "--no-path-token", "--pid", "gateway=1"],
        )
        .unwrap();
        assert_eq!((c.users(), c.stock(), c.connections()), (60, 20, 10));
        assert!(!c.path_token);
        assert_eq!(c.poll_connections(), 4);
        assert_eq!(c.name(), "seed");
        let d = ScenarioConfig::new(Scenario::Spike, "http://x");
        assert_eq!((d.users(), d.stock(), d.connections(), d.poll_connections()), (20_000, 1_000, 500, 64));
        let d = ScenarioConfig::new(Scenario::HotUser, "http://x");
        assert_eq!((d.users(), d.clicks), (1, 1_000));
        assert!(d.path_token && d.path_token_once());
        assert!(!ScenarioConfig::new(Scenario::Spike, "http://x").path_token_once());
        let d = ScenarioConfig::new(Scenario::SoldOut, "http://x");
        assert_eq!((d.stock(), d.duration()), (1, Some(Duration::from_secs(10))));
        let d = scenario("drain", &[]).unwrap();
        assert_eq!(
            (d.users(), d.poll_during_load(), d.final_timeout()),
            (50_000, false, Duration::from_secs(180))
        );
        let d = scenario("drain", &["--poll-during-load", "true", "--final-timeout", "2.5"]).unwrap();
        assert_eq!((d.poll_during_load(), d.final_timeout()), (true, Duration::from_millis(2_500)));
        assert_eq!(c.gateway(), "http://127.0.0.1:8080");
        assert_eq!(c.click_gateways(), ["http://127.0.0.1:8080"]);
        assert_eq!(c.buy_limit, None);
        assert_eq!(c.busy, BusyRetry::new(3));
        assert_eq!((c.first_user, c.order_samples), (10_000, 200));
        assert_eq!(
            (c.poll_interval, c.request_timeout),
            (Duration::from_millis(50), Duration::from_secs(10))
        );
    }

    #[test]
    fn an_open_loop_needs_a_rate_above_zero() {
        assert_eq!(hot_user(&["--rate", "200"]).unwrap().rate, Some(200.0));
        for bad in ["--rate=0", "--rate=-1", "--rate=inf"] {
            let e = hot_user(&[bad]).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation, "{bad}: {e}");
        }
    }

    fn storm(args: &[&str]) -> Result<StormConfig, clap::Error> {
        let cli = Cli::try_parse_from(["seckill-bench", "storm"].iter().chain(args))?;
        let Command::Storm(c) = cli.command else { panic!("not storm") };
        Ok(c)
    }

    #[test]
    fn storm_takes_its_sizes_and_needs_the_order_service() {
        let c = storm(&["--pause-pid", "42", "--order-ttl-secs", "60"]).unwrap();
        assert_eq!((c.users, c.connections, c.spike_users, c.spike_stock), (50_000, 500, 20_000, 1_000));
        assert_eq!((c.pause_pids.as_slice(), c.order_ttl), (&[42][..], Duration::from_secs(60)));
        assert_eq!((c.rebuy_sample, c.margin, c.path_token), (1_000, Duration::from_secs(2), true));
        assert_eq!(
            (c.storm_timeout, c.first_user, c.name.as_str()),
            (Duration::from_secs(300), 8_000_000, "storm")
        );
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
        let Command::Sync(c) = cli.command else { panic!("not sync") };
        assert_eq!((c.buys, c.stock, c.connections, c.pool_size), (20_000, 1_000, 200, 32));
        assert_eq!((c.database.as_str(), c.name.as_str()), ("seckill_bench_sync", "sync"));
    }

    #[test]
    fn busy_retries_can_be_set_or_turned_off() {
        assert_eq!(hot_user(&["--busy-retries", "5"]).unwrap().busy.retries, 5);
        assert_eq!(hot_user(&["--busy-retries", "0"]).unwrap().busy.retries, 0);
    }

    #[test]
    fn clicks_go_to_every_gateway_of_a_list() {
        let c = hot_user(&["--gateway", "http://127.0.0.1:8080,http://127.0.0.1:18280"]).unwrap();
        assert_eq!(c.click_gateways(), ["http://127.0.0.1:8080", "http://127.0.0.1:18280"]);
        assert_eq!(c.gateway(), "http://127.0.0.1:8080", "the sale goes through the first");

        let c =
            hot_user(&["--gateway", "http://127.0.0.1:18080", "--admin-gateway", "http://127.0.0.1:8080/"])
                .unwrap();
        assert_eq!(
            (c.gateway(), c.click_gateways()),
            ("http://127.0.0.1:8080", &["http://127.0.0.1:18080".to_owned()][..])
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
        for half in [&["--buy-per-sec", "5"][..], &["--buy-burst", "10"]] {
            let e = hot_user(half).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::MissingRequiredArgument, "{half:?}: {e}");
        }
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
        let settings = c.gateway_settings();
        assert_eq!(settings.get("rate_limit.lease").map(String::as_str), Some("4"));
        assert_eq!(settings.get("rate_limit.shared").map(String::as_str), Some("false"));
        for bad in ["rate_limit.lease", "=4"] {
            let e = hot_user(&["--gateway-setting", bad]).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation, "{bad}: {e}");
        }
    }
}
