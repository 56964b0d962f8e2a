//! docs/BENCHMARKS.md from the JSON files of one bench.sh run (docs/bench/*.json): the
//! targets with their ratios to this machine's baselines, the baselines, each scenario, where
//! the CPU went, the machine, and how to reproduce. Repeated measurements share a name; the
//! median (by its main figure) is shown, with every run's figure next to it.
//!
//! The words are in two templates: templates/benchmarks.md.j2 (the document, reading each
//! measurement's median run as its report serialized) and templates/targets.md.j2 (each target
//! row's words); the targets themselves are one table of data in [`targets`].

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use minijinja::value::Serde;
use serde::{Deserialize, Serialize};

use crate::machine::{CpuReport, MachineFacts};
use crate::record::Call;
use crate::report::{KIND_AMQP, KIND_HTTP, KIND_SCENARIO, Report};

mod targets;

pub use self::targets::{Target, targets};
pub use seckill_harness::n0;

pub const KIND_EXTERNAL: &str = "external";
pub const KIND_MACHINE: &str = "machine";

/// The names the suite gives its measurements; the targets are computed from these.
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
    /// Open loop at twice the closed-loop accepted rate: what is past capacity is shed with
    /// `503 BUSY`, the rest accepted.
    pub const OVERLOAD: &str = "overload";
    pub const OVERLOAD_5X: &str = "overload-5x";
    /// The synchronous design: one transaction per buy on the same PostgreSQL.
    pub const SYNC: &str = "sync";
    /// Every unpaid order of a sale expiring at once, a spike running meanwhile.
    pub const STORM: &str = "storm";
    /// A sale behind a waiting room: joins, status polls, admissions, memory per waiting user.
    pub const ROOM: &str = "room";
    /// Buyers' event streams: memory per open stream, commit to event, requests per buyer.
    pub const PUSH: &str = "push";
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

/// The environment with both templates: the document, and the target rows' words.
fn environment() -> anyhow::Result<minijinja::Environment<'static>> {
    let mut env = seckill_harness::markdown::environment()?;
    env.add_template("benchmarks.md", include_str!("../../templates/benchmarks.md.j2"))
        .context("parsing templates/benchmarks.md.j2")?;
    env.add_template("targets.md", include_str!("../../templates/targets.md.j2"))
        .context("parsing templates/targets.md.j2")?;
    Ok(env)
}

/// The whole document.
pub fn render(c: &Collected) -> anyhow::Result<String> {
    let page = Page::new(c)?;
    environment()?
        .get_template("benchmarks.md")?
        .render(Serde(&page))
        .context("rendering templates/benchmarks.md.j2")
}

/// A measurement's median run, with what the templates read of it beyond the report.
#[derive(Serialize)]
struct Run<'a> {
    #[serde(flatten)]
    report: &'a Report,
    /// Every run's main figure, when it ran more than once.
    runs: Vec<f64>,
    load_per_sec: f64,
    accepted_per_sec: f64,
    /// The order call's p99 over all its answers (NaN without order calls).
    order_p99: f64,
    answers: targets::OrderAnswers,
    /// CPU microseconds per request of each process (its cores over the load's rate), and of
    /// the whole machine (busy x cores).
    us: BTreeMap<&'a str, f64>,
    total_us: f64,
    /// The parameters as one line of JSON.
    params_json: String,
}

/// What both templates read: each measurement's median run by name, and the run as a whole.
#[derive(Serialize)]
struct Runs<'a> {
    runs: BTreeMap<&'a str, Run<'a>>,
    largest: Option<targets::LargestMemory<'a>>,
    /// The scenario runs whose invariants broke.
    broken_in: Vec<&'a str>,
}

impl<'a> Runs<'a> {
    fn new(c: &'a Collected) -> Self {
        let runs = c
            .reports
            .keys()
            .filter_map(|name| {
                let (report, runs) = c.report(name)?;
                Some((
                    name.as_str(),
                    Run {
                        report,
                        runs: if runs.len() > 1 { runs } else { Vec::new() },
                        load_per_sec: report.load_per_sec(),
                        accepted_per_sec: targets::accepted_per_sec(report),
                        order_p99: report
                            .row(Call::Order.name(), "all")
                            .map_or(f64::NAN, |x| x.latency.p99_ms),
                        answers: targets::OrderAnswers::of(report),
                        us: report
                            .cpu
                            .iter()
                            .flat_map(|c| &c.by_process)
                            .map(|p| (p.name.as_str(), p.cores * 1e6 / report.load_per_sec().max(1e-9)))
                            .collect(),
                        total_us: report.cpu.as_ref().map_or(0.0, |c| c.busy * c.cores as f64) * 1e6
                            / report.load_per_sec().max(1e-9),
                        params_json: report.params.to_string(),
                    },
                ))
            })
            .collect();
        Self {
            runs,
            largest: targets::largest_service_memory(c),
            broken_in: targets::scenario_runs(c)
                .filter(|r| !r.invariants_hold())
                .map(|r| r.name.as_str())
                .collect(),
        }
    }
}

/// What the document's template shows beyond each measurement's median run.
#[derive(Serialize)]
struct Page<'a> {
    #[serde(flatten)]
    runs: Runs<'a>,
    run: RunInfo,
    targets: Vec<Target>,
    /// Measurements others disturbed: name, the others' cores, the busiest of them.
    disturbed: Vec<(&'a str, f64, String)>,
    /// redis-benchmark's and pgbench's figures by name, with every run's figure.
    externals: BTreeMap<&'a str, ExternalRun<'a>>,
    /// The scenarios in the order they ran (others after them, by name).
    scenarios: Vec<&'a str>,
    /// SVG charts present, by file stem.
    charts: &'a [String],
    cost: Option<Cost<'a>>,
    /// Where the CPU went in each measurement's first run.
    cpu_by_measurement: Vec<(&'a str, &'a CpuReport)>,
    /// Tool versions, `|` kept out of the table.
    versions: Vec<(String, String)>,
    /// Every command of the run, in the order they ran, each once.
    commands: Vec<String>,
}

#[derive(Serialize)]
struct ExternalRun<'a> {
    #[serde(flatten)]
    external: &'a External,
    runs: Vec<f64>,
}

/// CPU per request, process by process, of the measurements that compare the paths.
#[derive(Serialize)]
struct Cost<'a> {
    columns: Vec<&'static str>,
    /// Every process that used 0.02 of a core or more in one of them.
    processes: Vec<&'a str>,
}

impl<'a> Page<'a> {
    fn new(c: &'a Collected) -> anyhow::Result<Self> {
        use names::*;
        let run = c.run.clone().unwrap_or_default();
        let versions = run.versions.iter().map(|(k, v)| (k.clone(), v.replace('|', "/"))).collect();
        let order = [
            SEED,
            SPIKE,
            HOT_USER,
            HOT_USER_TWO,
            SOLD_OUT,
            SOLD_OUT_PER_REPLICA,
            SOLD_OUT_FORWARDED,
            ROOM,
            PUSH,
            DRAIN,
            DRAIN_BACKLOG,
            SYNC,
            ACCEPT_AT_RATE,
            ACCEPT_SUSTAINED,
            OVERLOAD,
            OVERLOAD_5X,
            STORM,
        ];
        let mut scenarios: Vec<&str> = c
            .reports
            .iter()
            .filter(|(_, r)| r.iter().any(|x| x.kind == KIND_SCENARIO))
            .map(|(n, _)| n.as_str())
            .collect();
        scenarios.sort_by_key(|n| order.iter().position(|o| o == n).unwrap_or(order.len()));
        let mut commands: Vec<(&str, &str)> = c
            .reports
            .values()
            .flatten()
            .map(|r| (r.started_at.as_str(), r.command.as_str()))
            .chain(c.externals.values().flatten().map(|e| (e.started_at.as_str(), e.command.as_str())))
            .filter(|(_, cmd)| !cmd.is_empty())
            .collect();
        commands.sort();
        commands.dedup_by(|a, b| a.1 == b.1);
        Ok(Self {
            runs: Runs::new(c),
            targets: targets(c)?,
            disturbed: c
                .reports
                .values()
                .flatten()
                .filter_map(|r| r.cpu.as_ref().filter(|c| c.disturbed).map(|cpu| (r, cpu)))
                .map(|(r, cpu)| (r.name.as_str(), cpu.others_cores, cpu.busiest_others(3)))
                .collect(),
            externals: c
                .externals
                .keys()
                .filter_map(|name| {
                    let (external, runs) = c.external(name)?;
                    Some((
                        name.as_str(),
                        ExternalRun { external, runs: if runs.len() > 1 { runs } else { Vec::new() } },
                    ))
                })
                .collect(),
            scenarios,
            charts: &c.charts,
            cost: Cost::new(c),
            cpu_by_measurement: c
                .reports
                .iter()
                .filter_map(|(name, runs)| Some((name.as_str(), runs.first()?.cpu.as_ref()?)))
                .collect(),
            versions,
            commands: commands.into_iter().map(|(_, cmd)| cmd.to_owned()).collect(),
            run,
        })
    }
}

impl<'a> Cost<'a> {
    fn new(c: &'a Collected) -> Option<Self> {
        use names::*;
        let columns: Vec<(&'static str, &Report)> =
            [HOP, SOLD_OUT, SOLD_OUT_PER_REPLICA, SOLD_OUT_FORWARDED, DRAIN, DRAIN_BACKLOG, SYNC]
                .into_iter()
                .filter_map(|name| Some((name, c.report(name)?.0)))
                .filter(|(_, r)| r.cpu.is_some() && r.load_per_sec() > 0.0)
                .collect();
        let mut processes: Vec<&str> = Vec::new();
        for p in columns.iter().flat_map(|(_, r)| r.cpu.iter().flat_map(|c| &c.by_process)) {
            if p.cores >= 0.02 && !processes.contains(&p.name.as_str()) {
                processes.push(&p.name);
            }
        }
        (!columns.is_empty())
            .then(|| Self { columns: columns.into_iter().map(|(name, _)| name).collect(), processes })
    }
}

/// Writes the document for `dir` to `out`.
pub fn write(dir: &Path, out: &Path) -> anyhow::Result<()> {
    let c = Collected::read(dir)?;
    std::fs::write(out, render(&c)?).with_context(|| format!("writing {}", out.display()))
}

/// Which figure of a measurement [`figure`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// The one repeated runs are compared by.
    Primary,
    /// A scenario's accepted orders per second.
    Accepted,
}

/// The median main figure of a measurement already written (the suite sets open-loop rates
/// from them).
pub fn figure(dir: &Path, name: &str, metric: Metric) -> anyhow::Result<f64> {
    let c = Collected::read(dir)?;
    if let Some((r, _)) = c.report(name) {
        return match metric {
            Metric::Accepted => r
                .drain
                .as_ref()
                .map(|d| d.accepted_per_sec)
                .or(r.sync.as_ref().map(|s| s.accepted_per_sec))
                .context("not a scenario"),
            Metric::Primary => Ok(r.primary()),
        };
    }
    if let Some((e, _)) = c.external(name) {
        return e.value.with_context(|| format!("{name} was skipped"));
    }
    anyhow::bail!("no measurement named {name} in {}", dir.display())
}

#[cfg(test)]
mod tests;
