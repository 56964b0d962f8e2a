//! docs/BENCHMARKS.md from the JSON files of one bench.sh run (docs/bench/*.json): the
//! targets with their ratios to this machine's baselines, the baselines, each scenario, where
//! the CPU went, the machine, and how to reproduce. Repeated measurements share a name; the
//! median (by its main figure) is shown, with every run's figure next to it.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use minijinja::syntax::SyntaxConfig;
use minijinja::value::Serde;
use minijinja::{AutoEscape, Environment};
use serde::{Deserialize, Serialize};

use crate::invariants::Check;
use crate::machine::{MachineFacts, ProcCpu};
use crate::memory::ProcMemory;
use crate::record::Call;
use crate::report::{BuySummary, DrainSummary, KIND_AMQP, KIND_HTTP, KIND_SCENARIO, LimitCheck, Report};
use crate::stats::CallStats;
use crate::sync::SyncSummary;

pub const KIND_EXTERNAL: &str = "external";
pub const KIND_MACHINE: &str = "machine";

/// The names bench.sh gives its measurements; the targets are computed from these.
pub mod names {
    pub const HEALTHZ: &str = "gateway-healthz";
    pub const UPSTREAM: &str = "upstream-direct";
    pub const HOP: &str = "hop";
    pub const AMQP: &str = "amqp-publish";
    pub const REDIS: &str = "redis-evalsha";
    pub const REDIS_PIPELINED: &str = "redis-evalsha-p16";
    pub const PG: &str = "pg-hot-row";
    pub const SEED: &str = "seed";
    pub const SPIKE: &str = "spike";
    pub const HOT_USER: &str = "hot-user";
    /// hot-user with its clicks spread over two gateways sharing their limits.
    pub const HOT_USER_TWO: &str = "hot-user-two-gateways";
    pub const SOLD_OUT: &str = "sold-out";
    /// sold-out through a gateway whose limits stay in its own memory (`rate_limit.shared = false`).
    pub const SOLD_OUT_PER_REPLICA: &str = "sold-out-per-replica";
    /// sold-out through a gateway sharing its limits that forwards every click (no answers of
    /// its own for a gone sale): the shared limit's cost on a forwarded click.
    pub const SOLD_OUT_FORWARDED: &str = "sold-out-forwarded";
    pub const DRAIN: &str = "drain";
    pub const DRAIN_BACKLOG: &str = "drain-backlog";
    pub const ACCEPT_AT_RATE: &str = "accept-at-rate";
    pub const ACCEPT_SUSTAINED: &str = "accept-sustained";
    /// The synchronous design: one transaction per buy on the same PostgreSQL.
    pub const SYNC: &str = "sync";
}

/// A figure measured by another tool (redis-benchmark, pgbench), or a baseline skipped.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct External {
    pub kind: String,
    pub name: String,
    pub value: Option<f64>,
    pub unit: String,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub detail: String,
    pub command: String,
    /// When it was recorded (orders the commands under "Reproduce").
    #[serde(default)]
    pub started_at: String,
    /// Why the figure is missing.
    pub skipped: Option<String>,
}

/// The run as a whole: the machine, versions, notes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    pub kind: String,
    pub facts: MachineFacts,
    pub versions: BTreeMap<String, String>,
    pub quick: bool,
    pub repeat: u32,
    pub started_at: String,
    pub finished_at: String,
    pub notes: Vec<String>,
}

/// Everything found in the directory.
#[derive(Default)]
pub struct Collected {
    pub reports: BTreeMap<String, Vec<Report>>,
    pub externals: BTreeMap<String, Vec<External>>,
    pub run: Option<RunInfo>,
    /// SVG charts present, by file stem.
    pub charts: Vec<String>,
}

impl Collected {
    pub fn read(dir: &Path) -> anyhow::Result<Self> {
        let mut c = Self::default();
        let mut paths: Vec<_> = std::fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .flatten()
            .map(|e| e.path())
            .collect();
        paths.sort();
        for path in paths {
            let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
            let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("").to_owned();
            if ext == "svg" {
                c.charts.push(stem);
                continue;
            }
            if ext != "json" {
                continue;
            }
            let text = std::fs::read_to_string(&path)?;
            let value: serde_json::Value =
                serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
            match value.get("kind").and_then(|k| k.as_str()) {
                Some(KIND_SCENARIO | KIND_HTTP | KIND_AMQP) => {
                    let r: Report = serde_json::from_value(value)
                        .with_context(|| format!("reading {}", path.display()))?;
                    c.reports.entry(r.name.clone()).or_default().push(r);
                }
                Some(KIND_EXTERNAL) => {
                    let e: External = serde_json::from_value(value)?;
                    c.externals.entry(e.name.clone()).or_default().push(e);
                }
                Some(KIND_MACHINE) => c.run = Some(serde_json::from_value(value)?),
                _ => {}
            }
        }
        Ok(c)
    }

    /// The median run of a measurement by its main figure, and every run's figure.
    pub fn report(&self, name: &str) -> Option<(&Report, Vec<f64>)> {
        let runs = self.reports.get(name)?;
        let mut order: Vec<&Report> = runs.iter().collect();
        order.sort_by(|a, b| a.primary().total_cmp(&b.primary()));
        let median = order.get((order.len() - 1) / 2).copied()?;
        Some((median, runs.iter().map(Report::primary).collect()))
    }

    pub fn external(&self, name: &str) -> Option<(&External, Vec<f64>)> {
        let runs = self.externals.get(name)?;
        let mut measured: Vec<&External> = runs.iter().filter(|e| e.value.is_some()).collect();
        if measured.is_empty() {
            return runs.first().map(|e| (e, Vec::new()));
        }
        measured.sort_by(|a, b| a.value.unwrap_or(0.0).total_cmp(&b.value.unwrap_or(0.0)));
        let median = measured[(measured.len() - 1) / 2];
        Some((median, measured.iter().filter_map(|e| e.value).collect()))
    }
}

/// One target's verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub what: String,
    pub measured: String,
    pub against: String,
    pub ratio: Option<f64>,
    pub goal: String,
    /// `None`: not measured in this run.
    pub met: Option<bool>,
}

/// A whole number with thousands separators (`12,345`).
pub fn n0(v: f64) -> String {
    let s = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    if v < 0.0 { format!("-{out}") } else { out }
}

fn runs_text(values: &[f64]) -> String {
    if values.len() <= 1 {
        String::new()
    } else {
        format!(" (runs: {})", values.iter().map(|v| n0(*v)).collect::<Vec<_>>().join(", "))
    }
}

/// The issue's targets, from what was measured.
pub fn targets(c: &Collected) -> Vec<Target> {
    use names::*;
    let mut t = Vec::new();

    let sold = c.report(SOLD_OUT);
    let hop = c.report(HOP);
    t.push(match (sold, hop) {
        (Some((s, sr)), Some((h, hr))) => {
            let ratio = s.load_per_sec() / h.load_per_sec().max(1e-9);
            Target {
                what: "sold-out path through the gateway vs one plain hop".into(),
                measured: format!("{} req/s{}", n0(s.load_per_sec()), runs_text(&sr)),
                against: format!("hop {} req/s{}", n0(h.load_per_sec()), runs_text(&hr)),
                ratio: Some(ratio),
                goal: ">= 0.8".into(),
                met: Some(ratio >= 0.8),
            }
        }
        _ => missing("sold-out path through the gateway vs one plain hop", ">= 0.8"),
    });
    let what = "sold-out path as configured (shared limit; the gateway answers a gone sale itself) vs every click forwarded under a per-replica limit (the gateway before shared limits)";
    t.push(vs_per_replica(c, SOLD_OUT, what.into()));
    if c.report(SOLD_OUT_FORWARDED).is_some() {
        let what = "the shared limit's cost on a forwarded click: sold-out, every click forwarded, shared limit vs per-replica limit";
        t.push(vs_per_replica(c, SOLD_OUT_FORWARDED, what.into()));
    }
    t.push(match (c.report(HOT_USER_TWO), c.report(HOT_USER)) {
        (Some((two, _)), one) if limit_of(two).is_some() => {
            let l = limit_of(two).cloned().unwrap_or_default();
            let n = two.buy.as_ref().map_or(0, |b| b.by_gateway.len());
            let one = one.and_then(|(r, _)| limit_of(r)).map_or(String::new(), |o| {
                format!("; one gateway: {} of {} in {:.3} s, allowance {:.1}", o.let_through, o.calls, o.elapsed_s, o.allowance)
            });
            Target {
                what: format!(
                    "one user's clicks over {n} gateways sharing their limits: buy calls let through (not 429) vs the limit's allowance (burst + rate x elapsed)"
                ),
                measured: format!("{} of {} in {:.3} s", l.let_through, l.calls, l.elapsed_s),
                against: format!("allowance {:.1}{one}", l.allowance),
                ratio: Some(l.let_through as f64 / l.allowance.max(1e-9)),
                goal: "<= 1".into(),
                met: Some(l.held()),
            }
        }
        _ => missing(
            "one user's clicks over two gateways sharing their limits: buy calls let through vs the limit's allowance",
            "<= 1",
        ),
    });

    let drain = c.report(DRAIN);
    let amqp = c.report(AMQP);
    t.push(match (&drain, &amqp) {
        (Some((d, _)), Some((a, ar))) => {
            let accepted = d.drain.as_ref().map_or(0.0, |x| x.accepted_per_sec);
            let ratio = accepted / a.load_per_sec().max(1e-9);
            let conns = d.params.get("connections").and_then(|v| v.as_u64()).unwrap_or(0);
            Target {
                what: format!(
                    "accepted buys/s, whole system (drain: closed loop, {conns} connections, the order consumer \
                     running on the same cores) vs RabbitMQ publish with confirms"
                ),
                measured: format!("{} /s", n0(accepted)),
                against: format!("{} msg/s{}", n0(a.load_per_sec()), runs_text(ar)),
                ratio: Some(ratio),
                goal: ">= 0.6".into(),
                met: Some(ratio >= 0.6),
            }
        }
        _ => missing("accepted buys/s, whole system (drain) vs RabbitMQ publish with confirms", ">= 0.6"),
    });
    t.push(match (c.report(DRAIN_BACKLOG), &amqp) {
        (Some((b, _)), Some((a, ar))) => {
            let accepted = b.drain.as_ref().map_or(0.0, |x| x.accepted_per_sec);
            let ratio = accepted / a.load_per_sec().max(1e-9);
            let conns = b.params.get("connections").and_then(|v| v.as_u64()).unwrap_or(0);
            let p99 = b.row("order", "all").map_or(f64::NAN, |x| x.latency.p99_ms);
            Target {
                what: format!(
                    "accepted buys/s, accept path alone (drain-backlog: closed loop, {conns} connections, \
                     order-service paused during the load, so only gateway, seckill-service, Redis and RabbitMQ \
                     work) vs RabbitMQ publish with confirms"
                ),
                measured: format!("{} /s (order p99 {p99:.1} ms)", n0(accepted)),
                against: format!("{} msg/s{}", n0(a.load_per_sec()), runs_text(ar)),
                ratio: Some(ratio),
                goal: ">= 0.6".into(),
                met: Some(ratio >= 0.6),
            }
        }
        _ => missing(
            "accepted buys/s, accept path alone (drain-backlog) vs RabbitMQ publish with confirms",
            ">= 0.6",
        ),
    });
    t.push(match c.report(ACCEPT_AT_RATE) {
        Some((r, _)) => open_loop_p99(r, "0.6 x the RabbitMQ baseline"),
        None => missing("order p99 at 0.6 x the RabbitMQ baseline, 500 connections", "< 50 ms"),
    });
    if let Some((d, _)) = &drain {
        let p99 = d.row("order", "all").map_or(f64::NAN, |x| x.latency.p99_ms);
        let conns = d.params.get("connections").and_then(|v| v.as_u64()).unwrap_or(0);
        t.push(Target {
            what: format!("order p99, closed loop (as fast as it goes), {conns} connections"),
            measured: format!("{p99:.1} ms"),
            against: String::new(),
            ratio: None,
            goal: "< 50 ms".into(),
            met: Some(p99 < 50.0),
        });
    }

    if let Some((r, _)) = c.report(ACCEPT_SUSTAINED) {
        t.push(open_loop_p99(r, "0.8 x the closed-loop accepted rate"));
    }
    let pg = c.external(PG).and_then(|(e, _)| e.value);
    let pg_text = |v: Option<f64>| {
        v.map_or(String::new(), |v| format!("pgbench one order per transaction {} tx/s", n0(v)))
    };
    t.push(match c.report(DRAIN_BACKLOG) {
        Some((d, _)) => {
            let tail = d.drain.as_ref().and_then(|x| x.tail_orders_per_sec);
            let backlog = d.drain.as_ref().map_or(0, |x| x.backlog_at_load_end);
            Target {
                what: format!(
                    "drain: the consumer on a backlog of {} (order-service paused during the load, resumed at its end; deduct, order row, result, ack)",
                    n0(backlog as f64)
                ),
                measured: tail.map_or("no backlog formed".into(), |v| format!("{} orders/s", n0(v))),
                against: pg_text(pg),
                ratio: tail.zip(pg).map(|(v, p)| v / p.max(1e-9)),
                goal: ">= 5,000".into(),
                met: Some(tail.is_some_and(|v| v >= 5_000.0)),
            }
        }
        None => missing("drain: the consumer on a backlog", ">= 5,000"),
    });
    if let Some((d, _)) = drain {
        let ops = d.drain.as_ref().and_then(|x| x.orders_per_sec).unwrap_or(0.0);
        t.push(Target {
            what: "drain under load: first 202 to last order row written, load and consumer together (bounded by the accepted rate)".into(),
            measured: format!("{} orders/s", n0(ops)),
            against: pg_text(pg),
            ratio: pg.map(|v| ops / v.max(1e-9)),
            goal: ">= 5,000".into(),
            met: Some(ops >= 5_000.0),
        });
    }

    t.push(match c.report(SEED) {
        Some((s, _)) => {
            let within = s.drain.as_ref().and_then(|d| d.all_answered_within_s);
            let users = s.buy.as_ref().map_or(0, |b| b.users);
            Target {
                what: format!("seed: every one of the {} users has a final answer", n0(users as f64)),
                measured: within.map_or("some user never did".into(), |w| format!("within {w:.3} s")),
                against: String::new(),
                ratio: None,
                goal: "<= 1 s".into(),
                met: Some(within.is_some_and(|w| w <= 1.0)),
            }
        }
        None => missing("seed: every user has a final answer", "<= 1 s"),
    });

    t.push(match c.report(SPIKE) {
        Some((s, _)) => {
            let services = ["gateway", "seckill-service", "order-service", "stock-service"];
            let peak = s
                .memory
                .iter()
                .filter(|m| services.contains(&m.name.as_str()))
                .max_by(|a, b| a.peak_rss_mib.total_cmp(&b.peak_rss_mib));
            match peak {
                Some(m) => Target {
                    what: "spike: largest service resident memory".into(),
                    measured: format!("{:.1} MiB ({})", m.peak_rss_mib, m.name),
                    against: String::new(),
                    ratio: None,
                    goal: "<= 150 MiB".into(),
                    met: Some(m.peak_rss_mib <= 150.0),
                },
                None => missing("spike: largest service resident memory (no pids found)", "<= 150 MiB"),
            }
        }
        None => missing("spike: largest service resident memory", "<= 150 MiB"),
    });

    let scenarios: Vec<&Report> = c.reports.values().flatten().filter(|r| r.kind == KIND_SCENARIO).collect();
    if !scenarios.is_empty() {
        let broken: Vec<String> =
            scenarios.iter().filter(|r| !r.invariants_hold()).map(|r| r.name.clone()).collect();
        t.push(Target {
            what: "invariants hold in every scenario run".into(),
            measured: if broken.is_empty() {
                format!("{} runs, all hold", scenarios.len())
            } else {
                format!("broken in: {}", broken.join(", "))
            },
            against: String::new(),
            ratio: None,
            goal: "all".into(),
            met: Some(broken.is_empty()),
        });
    }
    t
}

/// The order p99 target row of an open-loop run at a set rate (`rate_is` says where the rate
/// came from).
fn open_loop_p99(r: &Report, rate_is: &str) -> Target {
    let p99 = r.row("order", "all").map_or(f64::NAN, |x| x.latency.p99_ms);
    let rate = r.params.get("rate").and_then(|v| v.as_f64()).unwrap_or(0.0);
    let conns = r.params.get("connections").and_then(|v| v.as_u64()).unwrap_or(0);
    let achieved = r.drain.as_ref().map_or(0.0, |x| x.accepted_per_sec);
    Target {
        what: format!("order p99, open loop at {} buys/s ({rate_is}), {conns} connections", n0(rate)),
        measured: format!("{p99:.1} ms (achieved {} accepted/s)", n0(achieved)),
        against: String::new(),
        ratio: None,
        goal: "< 50 ms".into(),
        met: Some(p99 < 50.0),
    }
}

/// A sold-out run against the same scenario through a gateway whose limits are per replica:
/// what sharing the limits costs on the sold-out path. The issue's goal: within 10%.
fn vs_per_replica(c: &Collected, name: &str, what: String) -> Target {
    match (c.report(name), c.report(names::SOLD_OUT_PER_REPLICA)) {
        (Some((s, sr)), Some((p, pr))) => {
            let ratio = s.load_per_sec() / p.load_per_sec().max(1e-9);
            Target {
                what,
                measured: format!("{} req/s{}", n0(s.load_per_sec()), runs_text(&sr)),
                against: format!("per-replica limit {} req/s{}", n0(p.load_per_sec()), runs_text(&pr)),
                ratio: Some(ratio),
                goal: ">= 0.9".into(),
                met: Some(ratio >= 0.9),
            }
        }
        _ => missing(&what, ">= 0.9"),
    }
}

fn limit_of(r: &Report) -> Option<&LimitCheck> {
    r.buy.as_ref()?.limit.as_ref()
}

fn missing(what: &str, goal: &str) -> Target {
    Target {
        what: what.into(),
        measured: "not measured".into(),
        against: String::new(),
        ratio: None,
        goal: goal.into(),
        met: None,
    }
}

/// The document's template: its prose; [`render`] hands it the figures.
const TEMPLATE: &str = include_str!("../templates/benchmarks.md.j2");

/// The whole document.
pub fn render(c: &Collected) -> anyhow::Result<String> {
    let mut env = Environment::new();
    env.set_syntax(
        SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(true)
            .build()
            .context("the template syntax")?,
    );
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.add_filter("n0", |v: f64| n0(v));
    env.add_filter("fixed", |v: f64, digits: usize| format!("{v:.digits$}"));
    env.add_template("benchmarks.md", TEMPLATE).context("parsing templates/benchmarks.md.j2")?;
    let page = Page::new(c);
    env.get_template("benchmarks.md")?.render(Serde(&page)).context("rendering templates/benchmarks.md.j2")
}

/// What the template shows, gathered from the collected runs.
#[derive(Serialize)]
struct Page<'a> {
    run: RunInfo,
    targets: Vec<TargetRow>,
    disturbed: Vec<Disturbed<'a>>,
    /// The HTTP and AMQP baselines by name.
    http: BTreeMap<&'static str, HttpBaseline<'a>>,
    externals: Vec<ExternalBaseline<'a>>,
    /// The synchronous design, next to the accept path.
    sync: Option<SyncBaseline>,
    scenarios: Vec<ScenarioView<'a>>,
    cost: Option<CostTable<'a>>,
    limits: Limits,
    shared_limits: SharedLimits<'a>,
    cpu_by_measurement: Vec<NamedCpu<'a>>,
    /// Tool versions, `|` kept out of the table.
    versions: Vec<(String, String)>,
    commands: Vec<String>,
}

impl<'a> Page<'a> {
    fn new(c: &'a Collected) -> Self {
        let run = c.run.clone().unwrap_or_default();
        let versions = run.versions.iter().map(|(k, v)| (k.clone(), v.replace('|', "/"))).collect();
        Self {
            targets: targets(c).into_iter().map(TargetRow::from).collect(),
            disturbed: disturbed(c),
            http: http_baselines(c),
            externals: external_baselines(c),
            sync: SyncBaseline::new(c),
            scenarios: scenarios(c),
            cost: CostTable::new(c),
            limits: Limits::new(c),
            shared_limits: SharedLimits::new(c),
            cpu_by_measurement: c
                .reports
                .iter()
                .filter_map(|(name, runs)| Some(NamedCpu { name, cpu: CpuView::of(runs.first()?)? }))
                .collect(),
            versions,
            commands: commands(c),
            run,
        }
    }
}

#[derive(Serialize)]
struct TargetRow {
    what: String,
    measured: String,
    against: String,
    ratio: Option<f64>,
    goal: String,
    met: Option<bool>,
}

impl From<Target> for TargetRow {
    fn from(t: Target) -> Self {
        Self {
            what: t.what,
            measured: t.measured,
            against: t.against,
            ratio: t.ratio,
            goal: t.goal,
            met: t.met,
        }
    }
}

/// A measurement others disturbed.
#[derive(Serialize)]
struct Disturbed<'a> {
    name: &'a str,
    others_cores: f64,
    busiest: String,
}

fn disturbed(c: &Collected) -> Vec<Disturbed<'_>> {
    c.reports
        .values()
        .flatten()
        .filter_map(|r| {
            let cpu = r.cpu.as_ref().filter(|c| c.disturbed)?;
            Some(Disturbed { name: &r.name, others_cores: cpu.others_cores, busiest: cpu.busiest_others(3) })
        })
        .collect()
}

/// Every run's figure, when there was more than one.
fn repeated(values: Vec<f64>) -> Vec<f64> {
    if values.len() > 1 { values } else { Vec::new() }
}

#[derive(Serialize)]
struct HttpBaseline<'a> {
    name: &'a str,
    per_sec: f64,
    /// `msg` or `req`.
    unit: &'static str,
    runs: Vec<f64>,
    p50_ms: f64,
    p99_ms: f64,
    connections: Option<u64>,
}

fn http_baselines(c: &Collected) -> BTreeMap<&'static str, HttpBaseline<'_>> {
    [names::HEALTHZ, names::UPSTREAM, names::HOP, names::AMQP]
        .into_iter()
        .filter_map(|name| {
            let (r, runs) = c.report(name)?;
            let all = r.calls.iter().find(|x| x.outcome == "all");
            Some((
                name,
                HttpBaseline {
                    name,
                    per_sec: r.load_per_sec(),
                    unit: if r.kind == KIND_AMQP { "msg" } else { "req" },
                    runs: repeated(runs),
                    p50_ms: all.map_or(0.0, |x| x.latency.p50_ms),
                    p99_ms: all.map_or(0.0, |x| x.latency.p99_ms),
                    connections: r.params.get("connections").and_then(|v| v.as_u64()),
                },
            ))
        })
        .collect()
}

#[derive(Serialize)]
struct ExternalBaseline<'a> {
    name: &'static str,
    value: Option<f64>,
    unit: &'a str,
    runs: Vec<f64>,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    detail: &'a str,
    skipped: Option<&'a str>,
}

fn external_baselines(c: &Collected) -> Vec<ExternalBaseline<'_>> {
    [names::REDIS, names::REDIS_PIPELINED, names::PG]
        .into_iter()
        .filter_map(|name| {
            let (e, runs) = c.external(name)?;
            Some(ExternalBaseline {
                name,
                value: e.value,
                unit: &e.unit,
                runs: repeated(runs),
                p50_ms: e.p50_ms,
                p99_ms: e.p99_ms,
                detail: &e.detail,
                skipped: e.skipped.as_deref(),
            })
        })
        .collect()
}

/// `sync` (one transaction per buy) against the accept path alone (drain-backlog), in accepted
/// buys per second.
#[derive(Serialize)]
struct SyncBaseline {
    per_sec: f64,
    runs: Vec<f64>,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    connections: usize,
    pool_size: usize,
    /// The accept path alone, when it was measured, and its ratio to `per_sec`.
    accept_path: Option<f64>,
    ratio: Option<f64>,
}

impl SyncBaseline {
    fn new(c: &Collected) -> Option<Self> {
        let (r, runs) = c.report(names::SYNC)?;
        let s = r.sync.as_ref()?;
        let ok = r.row(Call::Buy.name(), "200");
        let accept_path =
            c.report(names::DRAIN_BACKLOG).and_then(|(b, _)| b.drain.as_ref()).map(|d| d.accepted_per_sec);
        Some(Self {
            per_sec: s.accepted_per_sec,
            runs: repeated(runs),
            p50_ms: ok.map(|x| x.latency.p50_ms),
            p99_ms: ok.map(|x| x.latency.p99_ms),
            connections: s.connections,
            pool_size: s.pool_size,
            accept_path,
            ratio: accept_path.filter(|_| s.accepted_per_sec > 0.0).map(|a| a / s.accepted_per_sec),
        })
    }
}

/// Where the CPU went during one run: the busiest processes.
#[derive(Serialize)]
struct CpuView<'a> {
    cores: usize,
    busy_pct: f64,
    top: Vec<&'a ProcCpu>,
    others_cores: f64,
    disturbed: bool,
}

impl<'a> CpuView<'a> {
    fn of(r: &'a Report) -> Option<Self> {
        let c = r.cpu.as_ref()?;
        Some(Self {
            cores: c.cores,
            busy_pct: c.busy * 100.0,
            top: c.by_process.iter().filter(|p| p.cores >= 0.01).take(8).collect(),
            others_cores: c.others_cores,
            disturbed: c.disturbed,
        })
    }
}

#[derive(Serialize)]
struct NamedCpu<'a> {
    name: &'a str,
    cpu: CpuView<'a>,
}

#[derive(Serialize)]
struct ScenarioView<'a> {
    name: &'a str,
    command: &'a str,
    runs: Vec<f64>,
    /// The parameters as one line of JSON.
    params: String,
    calls: &'a [CallStats],
    buy: Option<&'a BuySummary>,
    /// Refused clicks by call and outcome.
    refused: Vec<(&'a str, u64)>,
    /// Without accepted buys (a sold-out sale): when every user had a final answer.
    answered_within: Option<f64>,
    /// With accepted buys: how they drained.
    drain: Option<&'a DrainSummary>,
    /// `sync`: its answers and the database's figures.
    sync: Option<&'a SyncSummary>,
    duration_secs: f64,
    memory: &'a [ProcMemory],
    cpu: Option<CpuView<'a>>,
    invariants: &'a [Check],
    notes: &'a [String],
    chart: bool,
}

/// The scenarios in the order they ran (others after them, by name).
fn scenarios(c: &Collected) -> Vec<ScenarioView<'_>> {
    use names::*;
    let order = [
        SEED,
        SPIKE,
        HOT_USER,
        HOT_USER_TWO,
        SOLD_OUT,
        SOLD_OUT_PER_REPLICA,
        SOLD_OUT_FORWARDED,
        DRAIN,
        DRAIN_BACKLOG,
        SYNC,
        ACCEPT_AT_RATE,
        ACCEPT_SUSTAINED,
    ];
    let mut names: Vec<&String> =
        c.reports.iter().filter(|(_, r)| r.iter().any(|x| x.kind == KIND_SCENARIO)).map(|(n, _)| n).collect();
    names.sort_by_key(|n| order.iter().position(|o| o == n).unwrap_or(order.len()));
    names
        .into_iter()
        .filter_map(|name| {
            let (r, runs) = c.report(name)?;
            Some(ScenarioView {
                name,
                command: &r.command,
                runs: repeated(runs),
                params: r.params.to_string(),
                calls: &r.calls,
                buy: r.buy.as_ref(),
                refused: r.buy.iter().flat_map(|b| &b.refused).map(|(k, v)| (k.as_str(), *v)).collect(),
                answered_within: r
                    .drain
                    .as_ref()
                    .filter(|d| d.accepted_per_sec <= 0.0)
                    .and_then(|d| d.all_answered_within_s),
                drain: r.drain.as_ref().filter(|d| d.accepted_per_sec > 0.0),
                sync: r.sync.as_ref(),
                duration_secs: r.duration_secs,
                memory: &r.memory,
                cpu: CpuView::of(r),
                invariants: &r.invariants,
                notes: &r.notes,
                chart: c.charts.iter().any(|s| s == name),
            })
        })
        .collect()
}

/// Every command of the run, in the order they ran, each once.
fn commands(c: &Collected) -> Vec<String> {
    let mut commands: Vec<(String, String)> = c
        .reports
        .values()
        .flatten()
        .map(|r| (r.started_at.clone(), r.command.clone()))
        .chain(
            c.externals
                .values()
                .flatten()
                .filter(|e| !e.command.is_empty())
                .map(|e| (e.started_at.clone(), e.command.clone())),
        )
        .collect();
    commands.sort();
    commands.dedup_by(|a, b| a.1 == b.1);
    commands.into_iter().map(|(_, cmd)| cmd).collect()
}

/// CPU time per request of each process, from the CPU each used during the load and the
/// load's rate: what a request costs, and so where the throughput of a CPU-bound run goes.
#[derive(Serialize)]
struct CostTable<'a> {
    columns: Vec<CostColumn>,
    rows: Vec<CostRow<'a>>,
}

#[derive(Serialize)]
struct CostColumn {
    label: &'static str,
    /// Machine-wide CPU microseconds per request.
    all_us: f64,
    busy_pct: f64,
    per_sec: f64,
}

#[derive(Serialize)]
struct CostRow<'a> {
    name: &'a str,
    /// CPU microseconds per request, by column.
    us: Vec<f64>,
}

impl<'a> CostTable<'a> {
    fn new(c: &'a Collected) -> Option<Self> {
        use names::*;
        let cols: Vec<(&'static str, &Report)> = [
            (HOP, "hop (per GET)"),
            (SOLD_OUT, "sold-out (per 410)"),
            (SOLD_OUT_PER_REPLICA, "sold-out, per-replica limit (per 410)"),
            (SOLD_OUT_FORWARDED, "sold-out, every click forwarded, shared limit (per 410)"),
            (DRAIN, "drain (per accepted order, consumer running)"),
            (DRAIN_BACKLOG, "drain-backlog load (per accepted order, consumer paused)"),
            (SYNC, "sync (per buy, one transaction)"),
        ]
        .into_iter()
        .filter_map(|(name, label)| c.report(name).map(|(r, _)| (label, r)))
        .filter(|(_, r)| r.cpu.is_some() && r.load_per_sec() > 0.0)
        .collect();
        if cols.is_empty() {
            return None;
        }
        let mut procs: Vec<&str> = Vec::new();
        for (_, r) in &cols {
            for p in r.cpu.iter().flat_map(|c| &c.by_process) {
                if p.cores >= 0.02 && !procs.contains(&p.name.as_str()) {
                    procs.push(&p.name);
                }
            }
        }
        let rows = procs
            .into_iter()
            .map(|name| CostRow { name, us: cols.iter().map(|(_, r)| us_per_request(r, name)).collect() })
            .collect();
        let columns = cols
            .iter()
            .map(|(label, r)| CostColumn {
                label,
                all_us: total_us(r),
                busy_pct: r.cpu.as_ref().map_or(0.0, |c| c.busy * 100.0),
                per_sec: r.load_per_sec(),
            })
            .collect();
        Some(Self { columns, rows })
    }
}

/// Cores a process used during a run (names are unique in `by_process`); 0 when it did not show.
fn cores_of(r: &Report, name: &str) -> f64 {
    r.cpu.iter().flat_map(|c| &c.by_process).find(|p| p.name == name).map_or(0.0, |p| p.cores)
}

/// CPU microseconds per request of one process during a run.
fn us_per_request(r: &Report, name: &str) -> f64 {
    cores_of(r, name) * 1e6 / r.load_per_sec().max(1e-9)
}

/// Machine-wide CPU microseconds per request of a run (busy x cores / rate).
fn total_us(r: &Report) -> f64 {
    r.cpu.as_ref().map_or(0.0, |c| c.busy * c.cores as f64) * 1e6 / r.load_per_sec().max(1e-9)
}

/// The limits shared across gateways: what sharing costs on the sold-out path, and what one
/// user gets through one gateway and through two.
#[derive(Serialize)]
struct SharedLimits<'a> {
    sold_out: Vec<SoldOutVariant<'a>>,
    hot_user: Vec<HotUserLimit<'a>>,
}

/// One way of limiting, on the sold-out path.
#[derive(Serialize)]
struct SoldOutVariant<'a> {
    name: &'static str,
    gateway: &'a str,
    /// `key=value, ...` as the run recorded them.
    settings: String,
    per_sec: f64,
    runs: Vec<f64>,
    p99_ms: Option<f64>,
    /// CPU microseconds per click: every process named gateway, and Redis.
    gateway_us: Option<f64>,
    redis_us: Option<f64>,
    /// To the per-replica run.
    ratio: Option<f64>,
}

/// One user hammering the buy button, through one or more gateways.
#[derive(Serialize)]
struct HotUserLimit<'a> {
    name: &'static str,
    gateways: Vec<&'a str>,
    clicks: u64,
    limit: &'a LimitCheck,
    /// `(gateway, clicks, let through)` when the clicks went to more than one.
    by_gateway: Vec<(&'a str, u64, u64)>,
}

impl<'a> SharedLimits<'a> {
    fn new(c: &'a Collected) -> Self {
        use names::*;
        let per_replica = c.report(SOLD_OUT_PER_REPLICA).map(|(r, _)| r.load_per_sec());
        let sold_out = [SOLD_OUT_PER_REPLICA, SOLD_OUT, SOLD_OUT_FORWARDED]
            .into_iter()
            .filter_map(|name| {
                let (r, runs) = c.report(name)?;
                let settings = r
                    .params
                    .get("gateway_settings")
                    .and_then(|v| v.as_object())
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("?")))
                            .collect::<Vec<_>>()
                    })
                    .unwrap_or_default()
                    .join(", ");
                let gateway = r
                    .params
                    .get("gateways")
                    .and_then(|g| g.get(0))
                    .or_else(|| r.params.get("gateway"))
                    .and_then(|g| g.as_str())
                    .unwrap_or("?");
                Some(SoldOutVariant {
                    name,
                    gateway,
                    settings,
                    per_sec: r.load_per_sec(),
                    runs: repeated(runs),
                    p99_ms: r.row("order", "all").map(|x| x.latency.p99_ms),
                    gateway_us: r.cpu.as_ref().map(|_| us_per_request(r, "gateway")),
                    redis_us: r.cpu.as_ref().map(|_| us_per_request(r, "redis-server")),
                    ratio: per_replica
                        .filter(|_| name != SOLD_OUT_PER_REPLICA)
                        .map(|p| r.load_per_sec() / p.max(1e-9)),
                })
            })
            .collect();
        let hot_user = [HOT_USER, HOT_USER_TWO]
            .into_iter()
            .filter_map(|name| {
                let (r, _) = c.report(name)?;
                let buy = r.buy.as_ref()?;
                let by_gateway: Vec<(&str, u64, u64)> =
                    buy.by_gateway.iter().map(|g| (g.gateway.as_str(), g.clicks, g.let_through())).collect();
                Some(HotUserLimit {
                    name,
                    gateways: by_gateway.iter().map(|g| g.0).collect(),
                    clicks: buy.clicks,
                    limit: buy.limit.as_ref()?,
                    by_gateway: if by_gateway.len() > 1 { by_gateway } else { Vec::new() },
                })
            })
            .collect();
        Self { sold_out, hot_user }
    }
}

/// What stands in the way of the missed targets: the figures the template explains them with.
#[derive(Serialize)]
struct Limits {
    sold_out: Option<SoldOutVsHop>,
    drain: Option<DrainLimits>,
}

/// CPU per request, a sold-out click against a plain hop.
#[derive(Serialize)]
struct SoldOutVsHop {
    sold_out_busy_pct: f64,
    hop_busy_pct: f64,
    sold_out_us: f64,
    hop_us: f64,
    sold_out_gateway_us: f64,
    hop_gateway_us: f64,
    sold_out_seckill_us: f64,
    hop_bench_us: f64,
}

/// What an accepted order costs, and what that means for the rate and the latency.
#[derive(Serialize)]
struct DrainLimits {
    total_us: f64,
    /// CPU microseconds per accepted order, by process name.
    per_process_us: BTreeMap<&'static str, f64>,
    cores: f64,
    /// The rate the cores allow at that cost.
    cap_per_sec: f64,
    /// The accept path alone (drain-backlog).
    backlog: Option<AcceptPathAlone>,
    rabbitmq: Option<RabbitCost>,
    connections: f64,
    per_sec: f64,
    /// Little's law: connections / throughput.
    wait_ms: f64,
    /// The rate a 50 ms wait needs at these connections.
    needed_per_sec: f64,
    backlog_at_load_end: u64,
}

#[derive(Serialize)]
struct AcceptPathAlone {
    total_us: f64,
    per_sec: f64,
}

#[derive(Serialize)]
struct RabbitCost {
    /// Per message in the RabbitMQ baseline.
    baseline_us: f64,
    /// Per accepted order with the consumer paused.
    paused_us: Option<f64>,
}

impl Limits {
    fn new(c: &Collected) -> Self {
        use names::*;
        let sold_out = c.report(SOLD_OUT).zip(c.report(HOP)).map(|((s, _), (h, _))| SoldOutVsHop {
            sold_out_busy_pct: s.cpu.as_ref().map_or(0.0, |c| c.busy * 100.0),
            hop_busy_pct: h.cpu.as_ref().map_or(0.0, |c| c.busy * 100.0),
            sold_out_us: total_us(s),
            hop_us: total_us(h),
            sold_out_gateway_us: us_per_request(s, "gateway"),
            hop_gateway_us: us_per_request(h, "gateway"),
            sold_out_seckill_us: us_per_request(s, "seckill-service"),
            hop_bench_us: us_per_request(h, "seckill-bench"),
        });
        let drain = c.report(DRAIN).map(|(d, _)| {
            let cores = d.cpu.as_ref().map_or(0, |c| c.cores) as f64;
            let connections = d.params.get("connections").and_then(|v| v.as_f64()).unwrap_or(0.0);
            let processes = [
                "seckill-service",
                "beam.smp",
                "gateway",
                "postgres",
                "redis-server",
                "order-service",
                "stock-service",
                "seckill-bench",
            ];
            DrainLimits {
                total_us: total_us(d),
                per_process_us: processes.into_iter().map(|p| (p, us_per_request(d, p))).collect(),
                cores,
                cap_per_sec: cores * 1e6 / total_us(d).max(1e-9),
                backlog: c
                    .report(DRAIN_BACKLOG)
                    .map(|(b, _)| AcceptPathAlone { total_us: total_us(b), per_sec: b.load_per_sec() }),
                rabbitmq: c.report(AMQP).map(|(a, _)| RabbitCost {
                    baseline_us: us_per_request(a, "beam.smp"),
                    paused_us: c.report(DRAIN_BACKLOG).map(|(b, _)| us_per_request(b, "beam.smp")),
                }),
                connections,
                per_sec: d.load_per_sec(),
                wait_ms: connections * 1e3 / d.load_per_sec().max(1e-9),
                needed_per_sec: connections / 0.05,
                backlog_at_load_end: d.drain.as_ref().map_or(0, |x| x.backlog_at_load_end),
            }
        });
        Self { sold_out, drain }
    }
}

/// Writes the document for `dir` to `out`.
pub fn write(dir: &Path, out: &Path) -> anyhow::Result<()> {
    let c = Collected::read(dir)?;
    std::fs::write(out, render(&c)?).with_context(|| format!("writing {}", out.display()))
}

/// The median main figure of a measurement, for bench.sh (e.g. to set an open-loop rate).
pub fn figure(dir: &Path, name: &str, metric: &str) -> anyhow::Result<f64> {
    let c = Collected::read(dir)?;
    if let Some((r, _)) = c.report(name) {
        return match metric {
            "accepted" => r
                .drain
                .as_ref()
                .map(|d| d.accepted_per_sec)
                .or(r.sync.as_ref().map(|s| s.accepted_per_sec))
                .context("not a scenario"),
            _ => Ok(r.primary()),
        };
    }
    if let Some((e, _)) = c.external(name) {
        return e.value.with_context(|| format!("{name} was skipped"));
    }
    anyhow::bail!("no measurement named {name} in {}", dir.display())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{CallStats, Latency};

    fn report(kind: &str, name: &str, call: &str, per_sec: f64) -> Report {
        Report {
            kind: kind.into(),
            name: name.into(),
            started_at: "2026-01-01T00:00:00Z".into(),
            command: format!("seckill-bench {name}"),
            params: serde_json::json!({"connections": 200}),
            duration_secs: 1.0,
            calls: vec![CallStats {
                call: call.into(),
                outcome: "all".into(),
                count: per_sec as u64,
                per_sec,
                window_secs: 1.0,
                latency: Latency::default(),
            }],
            buy: None,
            drain: None,
            sync: None,
            invariants: Vec::new(),
            memory: Vec::new(),
            cpu: None,
            timeline: Default::default(),
            notes: Vec::new(),
        }
    }

    #[test]
    fn ratios_use_the_median_of_repeated_runs() {
        let mut c = Collected::default();
        for v in [9_000.0, 20_000.0, 10_000.0] {
            c.reports.entry(names::HOP.into()).or_default().push(report(KIND_HTTP, names::HOP, "get", v));
        }
        c.reports.entry(names::SOLD_OUT.into()).or_default().push(report(
            KIND_SCENARIO,
            names::SOLD_OUT,
            "order",
            8_500.0,
        ));
        let t = targets(&c);
        let sold = &t[0];
        assert_eq!(sold.ratio, Some(0.85));
        assert_eq!(sold.met, Some(true));
        assert!(sold.against.contains("10,000"), "{sold:?}");
        assert!(sold.against.contains("runs: 9,000, 20,000, 10,000"), "{sold:?}");
        let per_replica = t.iter().find(|t| t.what.contains("per-replica limit")).unwrap();
        assert_eq!((per_replica.measured.as_str(), per_replica.met), ("not measured", None));
        let md = render(&c).unwrap();
        assert!(md.contains("| sold-out path through the gateway vs one plain hop |"), "{md}");
    }

    /// A drain-like scenario run: `accepted` buys/s, order p99 `p99_ms`.
    fn drain_report(name: &str, accepted: f64, p99_ms: f64) -> Report {
        let mut r = report(KIND_SCENARIO, name, "order", accepted);
        r.params = serde_json::json!({"connections": 500});
        r.calls[0].latency.p99_ms = p99_ms;
        r.drain = Some(crate::report::DrainSummary { accepted_per_sec: accepted, ..Default::default() });
        r
    }

    #[test]
    fn the_accept_path_alone_is_compared_to_the_rabbitmq_baseline() {
        let mut c = Collected::default();
        c.reports.entry(names::AMQP.into()).or_default().push(report(
            KIND_AMQP,
            names::AMQP,
            "publish",
            20_000.0,
        ));
        c.reports.entry(names::DRAIN.into()).or_default().push(drain_report(names::DRAIN, 4_000.0, 180.0));
        let t = targets(&c);
        let alone = t.iter().find(|t| t.what.contains("accept path alone")).expect("the accept-path row");
        assert_eq!((alone.measured.as_str(), alone.met), ("not measured", None));

        c.reports.entry(names::DRAIN_BACKLOG.into()).or_default().push(drain_report(
            names::DRAIN_BACKLOG,
            13_000.0,
            95.25,
        ));
        let t = targets(&c);
        let whole = t.iter().position(|t| t.what.contains("whole system")).expect("the closed-loop row");
        let alone = t.iter().position(|t| t.what.contains("accept path alone")).expect("the accept-path row");
        assert_eq!(alone, whole + 1, "the two rows are next to each other: {t:#?}");
        assert_eq!(t[whole].ratio, Some(0.2));
        assert_eq!(t[whole].met, Some(false));
        let a = &t[alone];
        assert_eq!(a.ratio, Some(0.65));
        assert_eq!(a.met, Some(true));
        assert_eq!(a.goal, ">= 0.6");
        assert_eq!(a.measured, "13,000 /s (order p99 95.2 ms)");
        assert!(a.against.contains("20,000 msg/s"), "{a:?}");
        assert!(a.what.contains("order-service paused"), "{a:?}");
        assert!(t[whole].what.contains("consumer running"), "{:?}", t[whole]);
        let md = render(&c).unwrap();
        assert!(
            md.contains("| 13,000 /s (order p99 95.2 ms) | 20,000 msg/s | 0.65 | >= 0.6 | **yes** |"),
            "{md}"
        );
    }

    #[test]
    fn busy_answers_are_told_with_the_buyers() {
        let mut c = Collected::default();
        let mut r = report(KIND_SCENARIO, names::SPIKE, "order", 5_000.0);
        r.buy = Some(BuySummary {
            users: 20_000,
            clicks: 20_000,
            busy_answers: 1_500,
            ended_busy: 12,
            busy_retries: 3,
            ..Default::default()
        });
        c.reports.entry(names::SPIKE.into()).or_default().push(r.clone());
        let md = render(&c).unwrap();
        assert!(
            md.contains("result polls. Shed (`503 BUSY`): 1,500 answers to buy calls, 1,488 of them retried after their `Retry-After` (up to 3 retries a click); 12 clicks still BUSY after them.\n"),
            "{md}"
        );
        // Nothing shed: nothing said.
        r.buy.as_mut().unwrap().busy_answers = 0;
        c.reports.insert(names::SPIKE.into(), vec![r]);
        assert!(!render(&c).unwrap().contains("BUSY"));
    }

    #[test]
    fn sync_stands_next_to_the_accept_path_with_a_ratio() {
        let mut c = Collected::default();
        let mut sync = report(KIND_SCENARIO, names::SYNC, "buy", 2_000.0);
        sync.calls.push(CallStats {
            call: "buy".into(),
            outcome: "200".into(),
            count: 2_000,
            per_sec: 2_000.0,
            window_secs: 1.0,
            latency: Latency { p50_ms: 200.0, p99_ms: 410.5, ..Latency::default() },
        });
        sync.sync = Some(SyncSummary {
            buys: 2_000,
            stock: 4_000,
            connections: 500,
            pool_size: 32,
            accepted: 2_000,
            accepted_per_sec: 2_000.0,
            orders: 2_000,
            distinct_users: 2_000,
            available: 2_000,
            total: 4_000,
            ..SyncSummary::default()
        });
        c.reports.entry(names::SYNC.into()).or_default().push(sync);
        let md = render(&c).unwrap();
        assert!(
            md.contains("| sync (one transaction per buy) | 2,000 accepted buys/s | 200.00 | 410.50 | the synchronous design"),
            "{md}"
        );
        assert!(md.contains("The accept path alone (drain-backlog) was not measured |"), "{md}");
        assert!(md.contains("### sync\n"), "{md}");
        assert!(md.contains("2,000 answered 200 (**2,000 accepted buys/s** while units lasted)"), "{md}");

        c.reports.entry(names::DRAIN_BACKLOG.into()).or_default().push(drain_report(
            names::DRAIN_BACKLOG,
            13_000.0,
            95.0,
        ));
        let md = render(&c).unwrap();
        assert!(
            md.contains("The accept path alone (drain-backlog): **13,000 accepted buys/s, 6.50 x** this |"),
            "{md}"
        );
        assert!(md.find("### drain-backlog") < md.find("### sync"), "{md}");
        // Repeated runs are ordered by their accepted buys/s.
        assert_eq!(c.report(names::SYNC).unwrap().0.primary(), 2_000.0);
    }

    #[test]
    fn the_recorded_run_renders_every_section() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/bench");
        let md = render(&Collected::read(&dir).unwrap()).unwrap();
        for heading in [
            "# Benchmarks\n\nWritten by `scripts/bench.sh`",
            "\n## Targets\n\n| target |",
            "\n## Baselines: this machine's limits, same run\n\n",
            "\n## Scenarios\n\n### seed\n\n`seckill-bench seed",
            "\n## What a request costs\n\n",
            "\n## What stands in the way\n\n",
            "\n## Where the CPU went\n\n",
            "\n## The machine\n\n",
            "\n## Reproduce\n\n",
        ] {
            assert!(md.contains(heading), "{heading:?} missing from\n{md}");
        }
        assert!(!md.contains("{{") && !md.contains("{%") && !md.contains("\n\n\n"), "{md}");
        assert!(md.ends_with("```\n"));
    }

    /// A sold-out run through a gateway recorded with these settings.
    fn sold_out(name: &str, per_sec: f64, settings: serde_json::Value) -> Report {
        let mut r = report(KIND_SCENARIO, name, "order", per_sec);
        r.params = serde_json::json!({"gateways": ["http://127.0.0.1:18080"], "gateway_settings": settings});
        r
    }

    #[test]
    fn the_shared_limit_is_compared_to_a_per_replica_one() {
        let mut c = Collected::default();
        let mut add = |r: Report| c.reports.entry(r.name.clone()).or_default().push(r);
        for v in [9_000.0, 10_000.0, 11_000.0] {
            add(sold_out(names::SOLD_OUT_PER_REPLICA, v, serde_json::json!({"rate_limit.shared": "false"})));
        }
        for v in [8_000.0, 9_500.0, 8_800.0] {
            add(sold_out(names::SOLD_OUT, v, serde_json::json!({})));
        }
        add(sold_out(names::SOLD_OUT_FORWARDED, 7_900.0, serde_json::json!({"sold_out.remember_ms": "0"})));
        let t = targets(&c);
        let shared = t.iter().find(|t| t.what.starts_with("sold-out path as configured")).unwrap();
        assert_eq!(shared.ratio, Some(0.88));
        assert_eq!((shared.goal.as_str(), shared.met), (">= 0.9", Some(false)));
        assert_eq!(shared.measured, "8,800 req/s (runs: 8,000, 9,500, 8,800)");
        assert_eq!(shared.against, "per-replica limit 10,000 req/s (runs: 9,000, 10,000, 11,000)");
        let forwarded = t.iter().find(|t| t.what.contains("cost on a forwarded click")).unwrap();
        assert_eq!((forwarded.ratio, forwarded.met), (Some(0.79), Some(false)));
        let md = render(&c).unwrap();
        assert!(md.contains("| sold-out path as configured (shared limit; the gateway answers a gone sale itself) vs every click forwarded under a per-replica limit (the gateway before shared limits) | 8,800 req/s"), "{md}");
        assert!(md.contains("\n## Rate limits shared across gateways\n"), "{md}");
        assert!(
            md.contains("| sold-out-forwarded | http://127.0.0.1:18080 | sold_out.remember_ms=0 | 7,900 |"),
            "{md}"
        );
        assert!(
            md.contains(
                "| sold-out-per-replica | http://127.0.0.1:18080 | rate_limit.shared=false | 10,000 (runs:"
            ),
            "{md}"
        );
    }

    /// A hot-user run whose clicks went to `gateways`, `let_through` of them past the limit.
    fn hot_user(name: &str, gateways: &[&str], let_through: u64, elapsed_s: f64) -> Report {
        let mut r = report(KIND_SCENARIO, name, "order", 1_000.0);
        let split = gateways.len() as u64;
        let limit = LimitCheck {
            per_sec: 5.0,
            burst: 10.0,
            users: 1,
            elapsed_s,
            allowance: 10.0 + 5.0 * elapsed_s,
            calls: 1_000,
            let_through,
            unanswered: 0,
        };
        r.buy = Some(BuySummary {
            users: 1,
            clicks: 1_000,
            by_gateway: gateways
                .iter()
                .map(|g| crate::report::GatewayClicks {
                    gateway: (*g).into(),
                    clicks: 1_000 / split,
                    rate_limited: (1_000 - let_through) / split,
                })
                .collect(),
            limit: Some(limit),
            ..Default::default()
        });
        r
    }

    #[test]
    fn two_gateways_let_one_user_through_no_more_than_the_limit_allows() {
        let mut c = Collected::default();
        let one = hot_user(names::HOT_USER, &["http://127.0.0.1:8080"], 11, 0.25);
        c.reports.entry(names::HOT_USER.into()).or_default().push(one);
        let two =
            hot_user(names::HOT_USER_TWO, &["http://127.0.0.1:8080", "http://127.0.0.1:18280"], 12, 0.4);
        c.reports.entry(names::HOT_USER_TWO.into()).or_default().push(two.clone());
        let t = targets(&c);
        let row = t.iter().find(|t| t.what.starts_with("one user's clicks over 2 gateways")).unwrap();
        assert_eq!((row.met, row.ratio), (Some(true), Some(1.0)));
        assert_eq!(row.measured, "12 of 1000 in 0.400 s");
        assert_eq!(row.against, "allowance 12.0; one gateway: 11 of 1000 in 0.250 s, allowance 11.2");
        let md = render(&c).unwrap();
        assert!(
            md.contains("| hot-user-two-gateways | http://127.0.0.1:8080, http://127.0.0.1:18280 | 1,000 | 12 | 0.400 s | 10 + 5 x 0.400 = 12.0 | http://127.0.0.1:8080: 500 / 6; http://127.0.0.1:18280: 500 / 6 |"),
            "{md}"
        );
        assert!(
            md.contains(
                "| hot-user | http://127.0.0.1:8080 | 1,000 | 11 | 0.250 s | 10 + 5 x 0.250 = 11.2 | - |"
            ),
            "{md}"
        );

        // One more call than the buckets hold: the limit did not hold across the gateways.
        let mut leaky = two;
        leaky.buy.as_mut().unwrap().limit.as_mut().unwrap().let_through = 13;
        c.reports.insert(names::HOT_USER_TWO.into(), vec![leaky]);
        let t = targets(&c);
        let row = t.iter().find(|t| t.what.starts_with("one user's clicks over 2 gateways")).unwrap();
        assert_eq!(row.met, Some(false));
    }

    #[test]
    fn numbers_get_thousands_separators() {
        assert_eq!(n0(1_234_567.4), "1,234,567");
        assert_eq!(n0(999.0), "999");
        assert_eq!(n0(-1_000.0), "-1,000");
    }
}
