//! docs/BENCHMARKS.md from the JSON files of one bench.sh run (docs/bench/*.json): the
//! targets with their ratios to this machine's baselines, the baselines, each scenario, where
//! the CPU went, the machine, and how to reproduce. Repeated measurements share a name; the
//! median (by its main figure) is shown, with every run's figure next to it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::machine::MachineFacts;
use crate::report::{KIND_AMQP, KIND_HTTP, KIND_SCENARIO, Report};

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
    pub const SOLD_OUT: &str = "sold-out";
    pub const DRAIN: &str = "drain";
    pub const DRAIN_BACKLOG: &str = "drain-backlog";
    pub const ACCEPT_AT_RATE: &str = "accept-at-rate";
    pub const ACCEPT_SUSTAINED: &str = "accept-sustained";
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

fn yes_no(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "**yes**",
        Some(false) => "**no**",
        None => "-",
    }
}

fn md_calls(rows: &[crate::stats::CallStats]) -> String {
    let mut out = String::from(
        "| call | outcome | count | req/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let l = &r.latency;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            r.call,
            r.outcome,
            r.count,
            n0(r.per_sec),
            l.p50_ms,
            l.p90_ms,
            l.p99_ms,
            l.p999_ms,
            l.max_ms
        );
    }
    out
}

fn cpu_line(r: &Report) -> String {
    match &r.cpu {
        Some(c) => {
            let top: Vec<String> = c
                .by_process
                .iter()
                .filter(|p| p.cores >= 0.01)
                .take(8)
                .map(|p| format!("{} {:.2}", p.name, p.cores))
                .collect();
            format!(
                "CPU during the run ({} cores, {:.0}% busy), in cores: {}; other processes {:.2}{}",
                c.cores,
                c.busy * 100.0,
                top.join(", "),
                c.others_cores,
                if c.disturbed { " **(disturbed)**" } else { "" }
            )
        }
        None => String::new(),
    }
}

/// The whole document.
pub fn render(c: &Collected) -> String {
    use names::*;
    let mut out = String::new();
    let run = c.run.clone().unwrap_or_default();
    out.push_str("# Benchmarks\n\n");
    let _ = writeln!(
        out,
        "Written by `scripts/bench.sh` ({}) from the JSON files in [bench/](bench/); do not edit by hand, run it again. \
         Run started {} and ended {}. Every figure comes from that one run on this machine, the load generator \
         (`seckill-bench`) on the same cores as the system, so absolute figures drift from machine to machine and run \
         to run; the ratios to the baselines measured in the same run are what to compare.{}\n",
        if run.quick { "quick run, `BENCH_QUICK=1`: smaller sizes" } else { "full run" },
        if run.started_at.is_empty() { "?" } else { &run.started_at },
        if run.finished_at.is_empty() { "?" } else { &run.finished_at },
        if run.repeat > 1 {
            format!(
                " Baselines and the sold-out scenario ran {} times each; the median is shown, with every run in brackets.",
                run.repeat
            )
        } else {
            String::new()
        }
    );

    out.push_str(
        "## Targets\n\n| target | measured | against | ratio | goal | met |\n|---|---|---|---:|---|---|\n",
    );
    for t in targets(c) {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            t.what,
            t.measured,
            t.against,
            t.ratio.map_or(String::new(), |r| format!("{r:.2}")),
            t.goal,
            yes_no(t.met)
        );
    }
    out.push('\n');

    let disturbed: Vec<String> =
        c.reports
            .values()
            .flatten()
            .filter_map(|r| {
                r.cpu.as_ref().filter(|c| c.disturbed).map(|cpu| {
                    format!("{} ({:.2} cores: {})", r.name, cpu.others_cores, cpu.busiest_others(3))
                })
            })
            .collect();
    if !run.notes.is_empty() || !disturbed.is_empty() {
        out.push_str("### Notes on this run\n\n");
        for n in &run.notes {
            let _ = writeln!(out, "- {n}");
        }
        if !disturbed.is_empty() {
            let _ = writeln!(
                out,
                "- Processes a measurement does not use (another session's builds or tests, the servers busy for someone else, the system's own services during a baseline that bypasses them) took more than 0.15 of a core during: {}. Those figures are disturbed: the machine and its PostgreSQL, Redis and RabbitMQ are shared.",
                disturbed.join(", ")
            );
        }
        out.push('\n');
    }

    out.push_str("## Baselines: this machine's limits, same run\n\n| baseline | figure | p50 ms | p99 ms | what |\n|---|---:|---:|---:|---|\n");
    let http_rows = [
        (HEALTHZ, "the gateway alone: `GET /healthz`"),
        (UPSTREAM, "the trivial upstream alone (`seckill-bench upstream`), no gateway"),
        (
            HOP,
            "one plain hop: `GET /api/goods` through a second gateway whose stock upstream is the trivial upstream",
        ),
        (AMQP, "RabbitMQ: persistent publishes with publisher confirms, ~1,000 in flight, one channel"),
    ];
    for (name, what) in http_rows {
        if let Some((r, runs)) = c.report(name) {
            let all = r.calls.iter().find(|x| x.outcome == "all");
            let conns = r.params.get("connections").and_then(|v| v.as_u64());
            let _ = writeln!(
                out,
                "| {name} | {} {}/s{} | {:.2} | {:.2} | {what}{} |",
                n0(r.load_per_sec()),
                if r.kind == KIND_AMQP { "msg" } else { "req" },
                runs_text(&runs),
                all.map_or(0.0, |x| x.latency.p50_ms),
                all.map_or(0.0, |x| x.latency.p99_ms),
                conns.map_or(String::new(), |n| format!("; {n} connections"))
            );
        }
    }
    for name in [REDIS, REDIS_PIPELINED, PG] {
        if let Some((e, runs)) = c.external(name) {
            match e.value {
                None => {
                    let why = e.skipped.clone().unwrap_or_else(|| "not measured".into());
                    let _ = writeln!(out, "| {name} | skipped | | | {why} |");
                }
                Some(v) => {
                    let _ = writeln!(
                        out,
                        "| {name} | {} {}{} | {} | {} | {} |",
                        n0(v),
                        e.unit,
                        runs_text(&runs),
                        e.p50_ms.map_or(String::new(), |v| format!("{v:.2}")),
                        e.p99_ms.map_or(String::new(), |v| format!("{v:.2}")),
                        e.detail
                    );
                }
            }
        }
    }
    out.push('\n');

    out.push_str("## Scenarios\n\n");
    let order = [SEED, SPIKE, HOT_USER, SOLD_OUT, DRAIN, DRAIN_BACKLOG, ACCEPT_AT_RATE, ACCEPT_SUSTAINED];
    let mut names: Vec<&String> =
        c.reports.iter().filter(|(_, r)| r.iter().any(|x| x.kind == KIND_SCENARIO)).map(|(n, _)| n).collect();
    names.sort_by_key(|n| order.iter().position(|o| o == n).unwrap_or(order.len()));
    for name in names {
        let Some((r, runs)) = c.report(name) else { continue };
        let _ = writeln!(out, "### {name}\n");
        let _ = writeln!(out, "`{}`{}\n", r.command, runs_text(&runs));
        let _ = writeln!(out, "Parameters: `{}`\n", r.params);
        out.push_str(&md_calls(&r.calls));
        out.push('\n');
        if let Some(b) = &r.buy {
            let refused: Vec<String> =
                b.refused.iter().map(|(k, v)| format!("{k} x{}", n0(*v as f64))).collect();
            let _ = writeln!(
                out,
                "- Buyers: {} users, {} clicks; {} accepted (202) -> {} success, {} failed, {} still queued. Other answers: {}. {} result polls.",
                n0(b.users as f64),
                n0(b.clicks as f64),
                n0(b.accepted as f64),
                n0(b.success as f64),
                b.failed,
                b.still_queued,
                if refused.is_empty() { "none".into() } else { refused.join(", ") },
                n0(b.polls as f64)
            );
        }
        if let Some(w) =
            r.drain.as_ref().filter(|d| d.accepted_per_sec <= 0.0).and_then(|d| d.all_answered_within_s)
        {
            let _ = writeln!(out, "- Every user had a final answer within {w:.3} s of the first request.");
        }
        if let Some(d) = r.drain.as_ref().filter(|d| d.accepted_per_sec > 0.0) {
            let s = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.3} s"));
            let _ = writeln!(
                out,
                "- Load {:.2} s. Accepted {}/s. Order rows written from {} to {} (sampled `created_at`): **{} orders/s** from the first 202 to the last row; {}/s between the first and the last row; {}/s on the backlog after the load ended. Results seen final by the poller: first request -> last {}, first 202 -> last {}. Every user had a final answer within {}. Accepted but not written when the load ended: {}.",
                r.duration_secs,
                n0(d.accepted_per_sec),
                s(d.first_order_s),
                s(d.last_order_s),
                d.orders_per_sec.map_or("-".into(), n0),
                d.consumer_orders_per_sec.map_or("-".into(), n0),
                d.tail_orders_per_sec.map_or("-".into(), n0),
                s(d.first_request_to_last_final_s),
                s(d.first_accept_to_last_final_s),
                s(d.all_answered_within_s),
                n0(d.backlog_at_load_end as f64)
            );
        }
        if !r.memory.is_empty() {
            let m: Vec<String> = r
                .memory
                .iter()
                .map(|m| format!("{} {:.1} MiB (VmHWM {:.1})", m.name, m.peak_rss_mib, m.vm_hwm_mib))
                .collect();
            let _ = writeln!(out, "- Peak resident memory sampled during the run: {}.", m.join(", "));
        }
        let cpu = cpu_line(r);
        if !cpu.is_empty() {
            let _ = writeln!(out, "- {cpu}.");
        }
        for ch in &r.invariants {
            let _ = writeln!(
                out,
                "- Invariant {} {}: {}",
                if ch.ok { "holds:" } else { "**BROKEN**:" },
                ch.name,
                ch.detail
            );
        }
        for n in &r.notes {
            let _ = writeln!(out, "- Note: {n}");
        }
        if c.charts.iter().any(|s| s == name) {
            let _ = writeln!(out, "\n![{name}: throughput and latency over time](bench/{name}.svg)");
        }
        out.push('\n');
    }

    out.push_str(&cost_table(c));
    out.push_str(&limits(c));

    out.push_str("## Where the CPU went\n\nCores used by each process during each measurement (2.00 = both cores of a 2-core machine). The load generator shares the cores: its share is CPU the system did not get.\n\n");
    for (name, runs) in &c.reports {
        let Some(r) = runs.first() else { continue };
        let line = cpu_line(r);
        if !line.is_empty() {
            let _ = writeln!(out, "- **{name}**: {line}");
        }
    }
    out.push('\n');

    out.push_str("## The machine\n\n| | |\n|---|---|\n");
    let f = &run.facts;
    let _ = writeln!(out, "| cores (`nproc`) | {} |", f.nproc);
    let _ = writeln!(out, "| memory | {} MiB |", n0(f.memory_mib as f64));
    let _ = writeln!(out, "| CPU | {} |", f.cpu_model);
    let _ = writeln!(out, "| kernel | {} |", f.kernel);
    for (k, v) in &run.versions {
        let _ = writeln!(out, "| {k} | {} |", v.replace('|', "/"));
    }
    out.push('\n');

    out.push_str("## Reproduce\n\n```sh\nscripts/bench.sh                 # the whole run: build, start, baselines, scenarios, this file, stop\nBENCH_QUICK=1 scripts/bench.sh   # smaller sizes, one run of each baseline\n```\n\nHow the system ran: phase A (seed, spike, hot-user) as `scripts/up.sh` starts it (`seckill.require_token = true`); \
         phase B (everything after) with seckill-service restarted alone with `SECKILL__SECKILL__REQUIRE_TOKEN=false`. \
         Both gateways with `SECKILL__RATE_LIMIT__ANONYMOUS_PER_SEC=1000000 SECKILL__RATE_LIMIT__ANONYMOUS_BURST=1000000` \
         (the load comes from one address). The hop: `seckill-bench upstream --port 18083` and a second gateway, \
         `SECKILL__HTTP__PORT=18080 SECKILL__ADMIN__PORT=19080 SECKILL__UPSTREAMS__STOCK=http://127.0.0.1:18083 target/release/gateway`. \
         `seckill-bench` is `target/release/seckill-bench`. The commands, in order:\n\n```sh\n");
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
    for (_, cmd) in commands {
        let _ = writeln!(out, "{cmd}");
    }
    out.push_str("```\n");
    out
}

/// CPU time per request of each process, from the CPU each used during the load and the
/// load's rate: what a request costs, and so where the throughput of a CPU-bound run goes.
pub fn cost_table(c: &Collected) -> String {
    use names::*;
    let cols: Vec<(&str, &str, &Report)> = [
        (HOP, "hop (per GET)"),
        (SOLD_OUT, "sold-out (per 410)"),
        (DRAIN, "drain (per accepted order, consumer running)"),
        (DRAIN_BACKLOG, "drain-backlog load (per accepted order, consumer paused)"),
    ]
    .into_iter()
    .filter_map(|(name, label)| c.report(name).map(|(r, _)| (name, label, r)))
    .filter(|(_, _, r)| r.cpu.is_some() && r.load_per_sec() > 0.0)
    .collect();
    if cols.is_empty() {
        return String::new();
    }
    let mut procs: Vec<String> = Vec::new();
    for (_, _, r) in &cols {
        for p in r.cpu.iter().flat_map(|c| &c.by_process) {
            if p.cores >= 0.02 && !procs.contains(&p.name) {
                procs.push(p.name.clone());
            }
        }
    }
    let mut out = String::from(
        "## What a request costs\n\nCPU microseconds per request of each process during the load (its cores used divided by the load's requests/s). \
         When the machine is busy near 100%, throughput is the cores divided by the total: this is where it goes. \
         `seckill-bench` is the load generator (and, in the hop, also the trivial upstream).\n\n| process |",
    );
    for (_, label, _) in &cols {
        let _ = write!(out, " {label} |");
    }
    out.push_str("\n|---|");
    out.push_str(&"---:|".repeat(cols.len()));
    out.push('\n');
    let us = |cores: f64, r: &Report| cores * 1e6 / r.load_per_sec().max(1e-9);
    for name in &procs {
        let _ = write!(out, "| {name} |");
        for (_, _, r) in &cols {
            let cores =
                r.cpu.iter().flat_map(|c| &c.by_process).find(|p| &p.name == name).map_or(0.0, |p| p.cores);
            let _ = write!(out, " {:.0} |", us(cores, r));
        }
        out.push('\n');
    }
    out.push_str("| **all (machine busy)** |");
    for (_, _, r) in &cols {
        let cpu = r.cpu.as_ref().map_or((0.0, 0), |c| (c.busy, c.cores));
        let _ = write!(out, " **{:.0}** ({:.0}% busy) |", us(cpu.0 * cpu.1 as f64, r), cpu.0 * 100.0);
    }
    out.push_str("\n| requests/s |");
    for (_, _, r) in &cols {
        let _ = write!(out, " {} |", n0(r.load_per_sec()));
    }
    out.push_str("\n\n");
    out
}

fn cores_of(r: &Report, name: &str) -> f64 {
    r.cpu.iter().flat_map(|c| &c.by_process).filter(|p| p.name == name).map(|p| p.cores).sum()
}

/// Machine-wide CPU microseconds per request of a run (busy x cores / rate).
fn total_us(r: &Report) -> f64 {
    r.cpu.as_ref().map_or(0.0, |c| c.busy * c.cores as f64) * 1e6 / r.load_per_sec().max(1e-9)
}

/// What stands in the way of the missed targets, computed from this run's figures.
pub fn limits(c: &Collected) -> String {
    use names::*;
    let mut lines = Vec::new();
    if let (Some((s, _)), Some((h, _))) = (c.report(SOLD_OUT), c.report(HOP)) {
        let per = |r: &Report, n: &str| cores_of(r, n) * 1e6 / r.load_per_sec().max(1e-9);
        lines.push(format!(
            "Sold-out path vs one hop: both saturate the machine ({:.0}% and {:.0}% busy), so the ratio is the ratio of CPU per request: \
             {:.0} µs for a sold-out click against {:.0} µs for a plain hop. The gateway spends {:.0} µs on a sold-out click (JWT check, \
             per-user rate limit, identity headers) against {:.0} µs on the plain hop, and seckill-service {:.0} µs answering from its flag, \
             where the trivial upstream and the load generator together spend {:.0} µs.",
            s.cpu.as_ref().map_or(0.0, |c| c.busy * 100.0),
            h.cpu.as_ref().map_or(0.0, |c| c.busy * 100.0),
            total_us(s),
            total_us(h),
            per(s, "gateway"),
            per(h, "gateway"),
            per(s, "seckill-service"),
            per(h, "seckill-bench"),
        ));
    }
    if let Some((d, _)) = c.report(DRAIN) {
        let cores = d.cpu.as_ref().map_or(0, |c| c.cores) as f64;
        let per = |n: &str| cores_of(d, n) * 1e6 / d.load_per_sec().max(1e-9);
        let mut line = format!(
            "Accepted buys: every accepted order costs {:.0} µs of CPU across the stack while the consumer runs (seckill-service {:.0}, \
             RabbitMQ {:.0}, gateway {:.0}, PostgreSQL {:.0}, Redis {:.0}, order-service {:.0}, stock-service {:.0}, the load generator {:.0}), \
             so {:.0} cores cap it near {} orders/s whatever the concurrency.",
            total_us(d),
            per("seckill-service"),
            per("beam.smp"),
            per("gateway"),
            per("postgres"),
            per("redis-server"),
            per("order-service"),
            per("stock-service"),
            per("seckill-bench"),
            cores,
            n0(cores * 1e6 / total_us(d).max(1e-9)),
        );
        if let Some((b, _)) = c.report(DRAIN_BACKLOG) {
            let _ = write!(
                line,
                " With the consumer paused the accept path alone costs {:.0} µs an order and reaches {} accepted/s.",
                total_us(b),
                n0(b.load_per_sec())
            );
        }
        if let Some((a, _)) = c.report(AMQP) {
            let rabbit = cores_of(a, "beam.smp") * 1e6 / a.load_per_sec().max(1e-9);
            let paused = c
                .report(DRAIN_BACKLOG)
                .map(|(b, _)| cores_of(b, "beam.smp") * 1e6 / b.load_per_sec().max(1e-9));
            let _ = write!(
                line,
                " RabbitMQ spends {rabbit:.0} µs a message in its baseline (bare publishes, one channel, 1,000 confirms in flight) against {:.0} µs \
                 an accepted order here{}: seckill-service's publishes are mandatory, carry a message id and a header, go out one per HTTP \
                 request over 4 channels, and with the consumer running the broker also delivers each message and takes the acks.",
                per("beam.smp"),
                paused.map_or(String::new(), |v| format!(
                    " ({v:.0} µs with the consumer paused, publishing only)"
                ))
            );
        }
        lines.push(line);
        let conns = d.params.get("connections").and_then(|v| v.as_f64()).unwrap_or(0.0);
        lines.push(format!(
            "p99 at {conns:.0} connections: a closed loop of {conns:.0} clicks in flight at {} accepted/s waits {:.0} ms on average (Little's law: \
             connections / throughput), so a p99 under 50 ms needs more than {} accepted/s or fewer clicks in flight; open loop at a rate \
             above the capacity, the queue (and the latency) grows for as long as the load lasts.",
            n0(d.load_per_sec()),
            conns * 1e3 / d.load_per_sec().max(1e-9),
            n0(conns / 0.05),
        ));
    }
    if let Some((d, _)) = c.report(DRAIN) {
        let backlog = d.drain.as_ref().map_or(0, |x| x.backlog_at_load_end);
        lines.push(format!(
            "Drain under load: the consumer kept up with the accepted orders ({} not yet written when the load ended), so orders/s there \
             equals the accepted rate; the consumer's own throughput is the drain-backlog figure.",
            n0(backlog as f64)
        ));
    }
    if lines.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "## What stands in the way\n\nComputed from this run's figures (see the table above):\n\n",
    );
    for l in lines {
        let _ = writeln!(out, "- {l}");
    }
    out.push('\n');
    out
}

/// Writes the document for `dir` to `out`.
pub fn write(dir: &Path, out: &Path) -> anyhow::Result<()> {
    let c = Collected::read(dir)?;
    std::fs::write(out, render(&c)).with_context(|| format!("writing {}", out.display()))
}

/// The median main figure of a measurement, for bench.sh (e.g. to set an open-loop rate).
pub fn figure(dir: &Path, name: &str, metric: &str) -> anyhow::Result<f64> {
    let c = Collected::read(dir)?;
    if let Some((r, _)) = c.report(name) {
        return match metric {
            "accepted" => r.drain.as_ref().map(|d| d.accepted_per_sec).context("not a scenario"),
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
        assert_eq!(t[1].met, None);
        let md = render(&c);
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
        let md = render(&c);
        assert!(
            md.contains("| 13,000 /s (order p99 95.2 ms) | 20,000 msg/s | 0.65 | >= 0.6 | **yes** |"),
            "{md}"
        );
    }

    #[test]
    fn numbers_get_thousands_separators() {
        assert_eq!(n0(1_234_567.4), "1,234,567");
        assert_eq!(n0(999.0), "999");
        assert_eq!(n0(-1_000.0), "-1,000");
    }
}
