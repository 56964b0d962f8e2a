//! `seckill-bench suite`: the whole benchmark run, what scripts/bench.sh runs. It measures the
//! flash sale side by side with this machine's limits in ONE run and writes docs/bench/ (one
//! JSON file per measurement, SVG charts) and docs/BENCHMARKS.md.
//!
//! The system is the four release binaries, started by the harness's [`Fleet`] with their
//! built-in defaults (the settings config/*.toml leaves as they are) on the servers given,
//! under scratch names of its own: databases `seckill_bench_stock` and `seckill_bench_order`,
//! Redis keys `seckill_bench:*`, queues `seckill_bench.*` (removed at the start, should an
//! interrupted run have left them, and at the end). Beside it, the processes the baselines
//! need: a trivial upstream (`seckill-bench upstream`) and three more gateways, each a replica
//! of the system's with settings of its own (see [`Extra`]). Each measurement is a
//! `seckill-bench` command of its own, run as a child process, so its report records the
//! command that reproduces it. In order:
//!
//! 1. Phase A, path tokens required: seed, spike, hot-user (600 clicks at 200/s), the same
//!    over two gateways sharing their limits.
//! 2. Phase B, seckill-service restarted with `seckill.require_token = false` (the accepted
//!    buys figures need it): `--repeat` times, interleaved so drift hits all alike, the
//!    gateway's /healthz, the trivial upstream alone, the hop, sold-out through the system's
//!    gateway, the per-replica-limits gateway and the forwarding one; then room, push (a
//!    system of its own), RabbitMQ publishing with confirms, redis-benchmark and pgbench
//!    ([`baselines`]), drain, drain-backlog (order-service paused during the load), sync,
//!    accept-at-rate (0.6 x RabbitMQ's figure), accept-sustained (0.8 x drain's accepted rate),
//!    overload and overload-5x (2 x and 5 x drain's, 2,000 connections).
//! 3. Phase C, order-service restarted with a short order TTL: the expiry storm.
//! 4. The run's facts (machine, versions, notes), then docs/BENCHMARKS.md.
//!
//! A measurement that fails is noted in the document, not fatal; a broken invariant too.

mod baselines;
mod system;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Instant;

use anyhow::Context;
use clap::Args;

use crate::cli::EXIT_INVARIANT;
use crate::markdown::{self, KIND_MACHINE, Metric, RunInfo, names};
use crate::report::now_rfc3339;
use system::{Extra, System};

/// The fleet's names on the shared servers (databases `<prefix>_stock` and `_order`, Redis
/// keys `<prefix>:`, queues `<prefix>.`).
const PREFIX: &str = "seckill_bench";
/// The push scenario's system of its own.
const PUSH_PREFIX: &str = "seckill_bench_push";
/// The storm's order TTL, full run and quick run: long enough for its orders to be written
/// before the first comes due (50,000 took about 20 s here), short enough not to wait long.
const STORM_TTL_SECS: [u64; 2] = [60, 30];

#[derive(Debug, Clone, Args)]
pub struct SuiteArgs {
    /// Smaller sizes and one run of each baseline (a few minutes instead of about twelve).
    #[arg(long, env = "BENCH_QUICK", value_parser = clap::builder::FalseyValueParser::new())]
    pub quick: bool,
    /// Runs of each repeated baseline (default 3, quick 1).
    #[arg(long, env = "BENCH_REPEAT")]
    pub repeat: Option<u32>,
    /// Seconds of each http and sold-out run (default 8, quick 3).
    #[arg(long, env = "BENCH_SECS")]
    pub secs: Option<f64>,
    /// Where the release binaries are (this tool among them).
    #[arg(long, default_value = "target/release")]
    pub bin_dir: PathBuf,
    /// The services' working directory, logs and pid files.
    #[arg(long, default_value = "run/bench")]
    pub scratch: PathBuf,
    /// The reports and charts (emptied first).
    #[arg(long, default_value = "docs/bench")]
    pub out: PathBuf,
    /// The document written from them.
    #[arg(long, default_value = "docs/BENCHMARKS.md")]
    pub doc: PathBuf,
    /// PostgreSQL without a database name.
    #[arg(long, env = "SECKILL_PG_URL", default_value = "postgres://postgres@127.0.0.1:5432")]
    pub pg_url: String,
    #[arg(long, env = "SECKILL_REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    pub redis_url: String,
    #[arg(long, env = "SECKILL_AMQP_URL", default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
    pub amqp_url: String,
    /// The system's gateway; the other services take the next three ports, the gateway's
    /// admin listener the one after, the trivial upstream the one after that; the extra
    /// gateways are replicas 1 to 3 (port + 10, + 20, + 30).
    #[arg(long, env = "BENCH_PORT", default_value_t = 18080)]
    pub port: u16,
    /// The push scenario's gateway (its services take the next four ports).
    #[arg(long, env = "BENCH_PUSH_PORT", default_value_t = 29180)]
    pub push_port: u16,
}

/// How big each measurement is.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    repeat: u32,
    secs: f64,
    spike_users: u64,
    sold_users: u64,
    drain_users: u64,
    rate_users: u64,
    storm_users: u64,
    room_users: u64,
    push_streams: u64,
    amqp_messages: u64,
    redis_calls: u64,
    pg_secs: u64,
    storm_ttl_secs: u64,
}

impl Sizes {
    fn of(a: &SuiteArgs) -> Self {
        let q = a.quick;
        let pick = |full: u64, quick: u64| if q { quick } else { full };
        Self {
            repeat: a.repeat.unwrap_or(if q { 1 } else { 3 }).max(1),
            secs: a.secs.unwrap_or(if q { 3.0 } else { 8.0 }),
            spike_users: pick(20_000, 5_000),
            sold_users: pick(10_000, 5_000),
            drain_users: pick(50_000, 10_000),
            rate_users: pick(20_000, 5_000),
            storm_users: pick(50_000, 10_000),
            room_users: pick(20_000, 5_000),
            push_streams: pick(20_000, 5_000),
            amqp_messages: pick(100_000, 20_000),
            redis_calls: pick(200_000, 50_000),
            pg_secs: pick(10, 4),
            storm_ttl_secs: STORM_TTL_SECS[usize::from(q)],
        }
    }
}

/// One `seckill-bench` command line.
#[derive(Debug, Clone)]
struct Cmd(Vec<String>);

impl Cmd {
    fn new(subcommand: &str) -> Self {
        Self(vec![subcommand.to_owned()])
    }

    fn arg(mut self, flag: &str, value: impl std::fmt::Display) -> Self {
        self.0.extend([flag.to_owned(), value.to_string()]);
        self
    }

    fn flag(mut self, flag: &str) -> Self {
        self.0.push(flag.to_owned());
        self
    }

    fn args<D: std::fmt::Display>(self, flag: &str, values: impl IntoIterator<Item = D>) -> Self {
        values.into_iter().fold(self, |c, v| c.arg(flag, v))
    }

    /// `--gateway-setting key=value` for each, as the report records them.
    fn gateway_settings(self, settings: &[(&str, &str)]) -> Self {
        self.args("--gateway-setting", settings.iter().map(|(k, v)| format!("{k}={v}")))
    }
}

/// The run in progress: where its reports go, its notes.
struct Run {
    bench: PathBuf,
    out: PathBuf,
    /// The servers' URLs, handed to every measurement through the environment (a password
    /// stays out of the recorded commands).
    env: Vec<(&'static str, String)>,
    notes: Vec<String>,
}

impl Run {
    /// Runs one measurement, `name` (its `k`-th run when repeated), its report written to
    /// `<out>/<name>[.<k>].json` and, when `chart`, its chart to `<out>/<name>.svg`; its failure
    /// becomes a note.
    async fn measure(&mut self, cmd: Cmd, name: &str, k: Option<u32>, chart: bool) {
        let (label, stem) = match k {
            Some(k) => (format!("{name} #{k}"), format!("{name}.{k}")),
            None => (name.to_owned(), name.to_owned()),
        };
        let cmd = cmd.arg("--json", self.out.join(format!("{stem}.json")).display());
        let cmd =
            if chart { cmd.arg("--chart", self.out.join(format!("{name}.svg")).display()) } else { cmd };
        eprintln!("\nbench: {label}: seckill-bench {}", cmd.0.join(" "));
        let status = tokio::process::Command::new(&self.bench)
            .args(&cmd.0)
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .status()
            .await;
        match status.map(|s| s.code()) {
            Ok(Some(0)) => {}
            Ok(Some(code)) if code == i32::from(EXIT_INVARIANT) => {
                self.notes.push(format!("{label}: an invariant broke (see its section)."));
            }
            Ok(code) => self.notes.push(format!(
                "{label}: seckill-bench failed (exit {}); its figure is missing.",
                code.map_or("by a signal".to_owned(), |c| c.to_string())
            )),
            Err(e) => self.notes.push(format!("{label}: seckill-bench did not start ({e}).")),
        }
    }

    /// A figure of a measurement already written, or a note that it is missing.
    fn figure(&mut self, name: &str, metric: Metric, needed_by: &str) -> Option<f64> {
        match markdown::figure(&self.out, name, metric) {
            Ok(v) if v > 0.0 => Some(v),
            _ => {
                self.notes.push(format!("{needed_by} skipped: no {name} figure to set its rate from."));
                None
            }
        }
    }
}

pub async fn run(a: &SuiteArgs) -> anyhow::Result<()> {
    let started_at = now_rfc3339();
    let load_at_start = load_average();
    let sizes = Sizes::of(a);
    let bench = std::env::current_exe().context("this program's path")?;
    std::fs::create_dir_all(&a.out).with_context(|| a.out.display().to_string())?;
    for entry in std::fs::read_dir(&a.out)?.flatten() {
        if entry.path().extension().is_some_and(|e| e == "json" || e == "svg") {
            std::fs::remove_file(entry.path())?;
        }
    }
    let mut run = Run {
        bench: bench.clone(),
        out: a.out.clone(),
        env: vec![
            ("SECKILL_PG_URL", a.pg_url.clone()),
            ("SECKILL_REDIS_URL", a.redis_url.clone()),
            ("SECKILL_AMQP_URL", a.amqp_url.clone()),
        ],
        notes: Vec::new(),
    };
    let up = Instant::now();
    let mut system = System::start(a, &bench, sizes.storm_ttl_secs).await?;
    run.notes.push(format!(
        "The system started in {:.0} s before the first measurement.",
        up.elapsed().as_secs_f64()
    ));
    run.notes.push(format!(
        "The run used scratch names, removed when it ends (and at its start, should an interrupted run have left them): databases {PREFIX}_stock and {PREFIX}_order ({PREFIX}_scratch for pgbench), Redis keys {PREFIX}:*, queues and exchange {PREFIX}.*; orders kept their default TTL until the storm (order.ttl_secs = {} s). The system's own databases, keys and queues were not touched.",
        sizes.storm_ttl_secs
    ));
    let measured = tokio::select! {
        r = measure_all(a, &sizes, &mut system, &mut run) => r,
        () = seckill_common::shutdown_signal() => Err(anyhow::anyhow!("interrupted")),
    };
    system.stop().await;
    measured?;

    run.notes.push(format!(
        "Load average (1, 5, 15 min) at the start of the run: {load_at_start}; at the end: {} (this machine has {} cores).",
        load_average(),
        std::thread::available_parallelism().map_or(0, usize::from)
    ));
    let info = RunInfo {
        kind: KIND_MACHINE.into(),
        facts: crate::machine::facts(),
        versions: baselines::versions(a).await,
        quick: a.quick,
        repeat: sizes.repeat,
        started_at,
        finished_at: now_rfc3339(),
        notes: run.notes,
    };
    crate::cli::write_json(&a.out.join("machine.json"), &info)?;
    markdown::write(&a.out, &a.doc)?;
    eprintln!("bench: done: {}, {}", a.doc.display(), a.out.display());
    Ok(())
}

async fn measure_all(a: &SuiteArgs, s: &Sizes, system: &mut System, run: &mut Run) -> anyhow::Result<()> {
    let gw = system.url(None);
    let [hop, forwarded, twin] = Extra::ALL.map(|e| system.url(Some(e)));
    // The processes each measurement watches: the system's four (their pid files), and the
    // extra ones it involves, by name.
    let pid_dir = system.pid_dir();
    let watch = |cmd: Cmd| cmd.arg("--run-dir", pid_dir.display());
    let shared = |cmd: Cmd| cmd.gateway_settings(&system::SHARED_SETTINGS);
    let [hop_pid, forwarded_pid, twin_pid] = Extra::ALL.map(|e| system.pid_arg(e));
    let hop_pids = [hop_pid.clone(), system.upstream_pid_arg()];

    // Phase A: path tokens required.
    let cmd = watch(Cmd::new("seed").arg("--gateway", &gw));
    run.measure(cmd, names::SEED, None, true).await;
    let cmd = watch(Cmd::new("spike").arg("--gateway", &gw).arg("--users", s.spike_users));
    run.measure(cmd, names::SPIKE, None, true).await;
    // 600 clicks at 200/s (40 times the buy limit) for 3 s: long enough that the bucket's
    // refill, not only its burst, is in what the limit lets through.
    let hot = |cmd: Cmd| {
        shared(watch(cmd))
            .arg("--clicks", 600)
            .arg("--rate", 200)
            .arg("--buy-per-sec", seckill_harness::fleet::BUY_PER_SEC)
            .arg("--buy-burst", seckill_harness::fleet::BUY_BURST)
    };
    let cmd = hot(Cmd::new("hot-user").arg("--gateway", &gw).arg("--first-user", 900_000));
    run.measure(cmd, names::HOT_USER, None, true).await;
    // The same clicks over two gateways sharing their limits (another user: its own bucket).
    let cmd = hot(Cmd::new("hot-user").arg("--name", names::HOT_USER_TWO))
        .arg("--gateway", format!("{gw},{twin}"))
        .arg("--first-user", 900_001)
        .arg("--pid", &twin_pid);
    run.measure(cmd, names::HOT_USER_TWO, None, false).await;

    // Phase B: orders without a path token.
    system.restart_seckill_without_tokens().await?;
    let secs = s.secs;
    for k in 1..=s.repeat {
        let http = |name: &str, url: String| {
            watch(
                Cmd::new("http").arg("--name", name).arg("--url", url).arg("-c", 200).arg("--duration", secs),
            )
        };
        run.measure(http(names::HEALTHZ, format!("{gw}/healthz")), names::HEALTHZ, Some(k), false).await;
        let cmd =
            http(names::UPSTREAM, format!("{}/api/goods", system.upstream_url())).args("--pid", &hop_pids);
        run.measure(cmd, names::UPSTREAM, Some(k), false).await;
        let cmd = http(names::HOP, format!("{hop}/api/goods")).args("--pid", &hop_pids);
        run.measure(cmd, names::HOP, Some(k), k == 1).await;
        let sold_out = |name: &str, gateway: &str, first: i64| {
            watch(Cmd::new("sold-out").arg("--name", name).arg("--gateway", gateway))
                .flag("--no-path-token")
                .arg("-c", 200)
                .arg("--users", s.sold_users)
                .arg("--duration", secs)
                .arg("--first-user", first + i64::from(k) * 20_000)
        };
        let cmd = shared(sold_out(names::SOLD_OUT, &gw, 200_000));
        run.measure(cmd, names::SOLD_OUT, Some(k), k == 1).await;
        // The hop gateway's limits stay in its own memory; its stock upstream is the trivial
        // server, so the sale is created and read back through the system's gateway.
        let cmd = sold_out(names::SOLD_OUT_PER_REPLICA, &hop, 5_000_000)
            .arg("--admin-gateway", &gw)
            .gateway_settings(Extra::Hop.settings())
            .arg("--pid", &hop_pid);
        run.measure(cmd, names::SOLD_OUT_PER_REPLICA, Some(k), false).await;
        let cmd = sold_out(names::SOLD_OUT_FORWARDED, &forwarded, 6_000_000)
            .gateway_settings(Extra::Forwarded.settings())
            .arg("--pid", &forwarded_pid);
        run.measure(cmd, names::SOLD_OUT_FORWARDED, Some(k), false).await;
    }

    // A waiting room: joins set against the hop, polls against sold-out; a quarter of the
    // users buy (at 500 admitted a second), the rest are told sold out. Its Redis memory per
    // waiting user comes from SECKILL_REDIS_URL.
    let cmd = watch(Cmd::new("room").arg("--gateway", &gw))
        .flag("--no-path-token")
        .arg("--users", s.room_users)
        .arg("--stock", s.room_users / 4)
        .arg("-c", 200)
        .arg("--poll-secs", secs)
        .arg("--first-user", 30_000_000)
        .arg("--memory-prefix", format!("{PREFIX}:room-memory:"));
    run.measure(cmd, names::ROOM, None, true).await;

    // Buyers' event streams, on a system of its own on the same servers.
    let cmd = Cmd::new("push")
        .arg("--bin-dir", a.bin_dir.display())
        .arg("--scratch", a.scratch.join("push").display())
        .arg("--prefix", PUSH_PREFIX)
        .arg("--http-port", a.push_port)
        .arg("--streams", s.push_streams)
        .arg("--rate", 5_000)
        .arg("--spike-buyers", 4_000);
    run.measure(cmd, names::PUSH, None, false).await;

    for k in 1..=s.repeat {
        let cmd = watch(Cmd::new("amqp-publish"))
            .arg("--messages", s.amqp_messages)
            .arg("--in-flight", 1_000)
            .arg("--queue", baselines::amqp_scratch_queue());
        run.measure(cmd, names::AMQP, Some(k), false).await;
    }
    baselines::redis(a, s, &run.out)
        .await
        .unwrap_or_else(|e| run.notes.push(format!("the Redis baseline failed: {e:#}")));
    baselines::postgres(a, s, &run.out)
        .await
        .unwrap_or_else(|e| run.notes.push(format!("the PostgreSQL baseline failed: {e:#}")));

    let drain = |name: &str, users: u64, connections: u32, first: i64| {
        watch(Cmd::new("drain").arg("--name", name).arg("--gateway", &gw))
            .flag("--no-path-token")
            .arg("--users", users)
            .arg("--stock", users * 2)
            .arg("-c", connections)
            .arg("--first-user", first)
    };
    run.measure(drain(names::DRAIN, s.drain_users, 500, 1_000_000), names::DRAIN, None, true).await;
    // The consumer alone: order-service paused while the orders are accepted, resumed when
    // the load ends, so it drains the whole backlog with nothing else arriving.
    let cmd =
        drain(names::DRAIN_BACKLOG, s.drain_users, 500, 4_000_000).arg("--pause-pid", system.order_pid()?);
    run.measure(cmd, names::DRAIN_BACKLOG, None, true).await;
    // The synchronous design beside it: one transaction per buy, same buys, stock and
    // connections, on the same PostgreSQL, in a throw-away database.
    let cmd =
        watch(Cmd::new("sync")).arg("--buys", s.drain_users).arg("--stock", s.drain_users * 2).arg("-c", 500);
    run.measure(cmd, names::SYNC, None, true).await;

    // The p99 target at a rate the system should hold: 0.6 x the RabbitMQ confirm baseline.
    if let Some(amqp) = run.figure(names::AMQP, Metric::Primary, names::ACCEPT_AT_RATE) {
        let cmd =
            drain(names::ACCEPT_AT_RATE, s.rate_users, 500, 2_000_000).arg("--rate", (amqp * 0.6).round());
        run.measure(cmd, names::ACCEPT_AT_RATE, None, true).await;
    }
    // At a rate this system sustains, then past it: 0.8, 2 and 5 x drain's accepted rate. What
    // is past capacity should be shed with 503 BUSY; 2,000 connections, so that the clicks do
    // not wait for the load tool's own connections, where no bound of the system's sees them.
    if let Some(rate) = run.figure(names::DRAIN, Metric::Accepted, names::ACCEPT_SUSTAINED) {
        let cmd =
            drain(names::ACCEPT_SUSTAINED, s.rate_users, 500, 3_000_000).arg("--rate", (rate * 0.8).round());
        run.measure(cmd, names::ACCEPT_SUSTAINED, None, true).await;
        for (times, name) in [(2, names::OVERLOAD), (5, names::OVERLOAD_5X)] {
            let users = s.rate_users * 5 * times / 4;
            let cmd = drain(name, users, 2_000, 7_000_000 + times as i64 * 1_000_000)
                .arg("--rate", (rate * times as f64).round());
            run.measure(cmd, name, None, true).await;
        }
    }

    // Phase C, last (it changes the order TTL): the expiry storm.
    system.restart_order_with_ttl(s.storm_ttl_secs).await?;
    let cmd = watch(Cmd::new("storm").arg("--gateway", &gw))
        .flag("--no-path-token")
        .arg("--users", s.storm_users)
        .arg("--spike-users", s.spike_users)
        .arg("--order-ttl-secs", s.storm_ttl_secs)
        .arg("--pause-pid", system.order_pid()?)
        .arg("--first-user", 8_000_000);
    run.measure(cmd, names::STORM, None, true).await;
    Ok(())
}

/// `/proc/loadavg`'s three averages.
fn load_average() -> String {
    use procfs::Current as _;
    procfs::LoadAverage::current()
        .map_or_else(|_| "unknown".into(), |l| format!("{} {} {}", l.one, l.five, l.fifteen))
}
