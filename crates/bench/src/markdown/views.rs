//! What the template shows beyond the targets: the baselines, the scenarios, where the CPU
//! went, the shared limits, and the figures the missed targets are explained with.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::invariants::Check;
use crate::machine::ProcCpu;
use crate::memory::ProcMemory;
use crate::push::PushSummary;
use crate::record::Call;
use crate::report::{
    BuySummary, DrainSummary, KIND_AMQP, KIND_SCENARIO, LimitCheck, Report, RoomSummary, StormSummary,
};
use crate::stats::CallStats;
use crate::sync::SyncSummary;

use super::{Collected, names};

/// A measurement others disturbed.
#[derive(Serialize)]
pub(super) struct Disturbed<'a> {
    pub(super) name: &'a str,
    pub(super) others_cores: f64,
    pub(super) busiest: String,
}

pub(super) fn disturbed(c: &Collected) -> Vec<Disturbed<'_>> {
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
pub(super) fn repeated(values: Vec<f64>) -> Vec<f64> {
    if values.len() > 1 { values } else { Vec::new() }
}

#[derive(Serialize)]
pub(super) struct HttpBaseline<'a> {
    pub(super) name: &'a str,
    pub(super) per_sec: f64,
    /// `msg` or `req`.
    pub(super) unit: &'static str,
    pub(super) runs: Vec<f64>,
    pub(super) p50_ms: f64,
    pub(super) p99_ms: f64,
    pub(super) connections: Option<u64>,
}

pub(super) fn http_baselines(c: &Collected) -> BTreeMap<&'static str, HttpBaseline<'_>> {
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
                    connections: Some(r.load.connections).filter(|c| *c > 0),
                },
            ))
        })
        .collect()
}

#[derive(Serialize)]
pub(super) struct ExternalBaseline<'a> {
    pub(super) name: &'static str,
    pub(super) value: Option<f64>,
    pub(super) unit: &'a str,
    pub(super) runs: Vec<f64>,
    pub(super) p50_ms: Option<f64>,
    pub(super) p99_ms: Option<f64>,
    pub(super) detail: &'a str,
    pub(super) skipped: Option<&'a str>,
}

pub(super) fn external_baselines(c: &Collected) -> Vec<ExternalBaseline<'_>> {
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
pub(super) struct SyncBaseline {
    pub(super) per_sec: f64,
    pub(super) runs: Vec<f64>,
    pub(super) p50_ms: Option<f64>,
    pub(super) p99_ms: Option<f64>,
    pub(super) connections: usize,
    pub(super) pool_size: usize,
    /// The accept path alone, when it was measured, and its ratio to `per_sec`.
    pub(super) accept_path: Option<f64>,
    pub(super) ratio: Option<f64>,
}

impl SyncBaseline {
    pub(super) fn new(c: &Collected) -> Option<Self> {
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
pub(super) struct CpuView<'a> {
    pub(super) cores: usize,
    pub(super) busy_pct: f64,
    pub(super) top: Vec<&'a ProcCpu>,
    pub(super) others_cores: f64,
    pub(super) disturbed: bool,
}

impl<'a> CpuView<'a> {
    pub(super) fn of(r: &'a Report) -> Option<Self> {
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
pub(super) struct NamedCpu<'a> {
    pub(super) name: &'a str,
    pub(super) cpu: CpuView<'a>,
}

#[derive(Serialize)]
pub(super) struct ScenarioView<'a> {
    pub(super) name: &'a str,
    pub(super) command: &'a str,
    pub(super) runs: Vec<f64>,
    /// The parameters as one line of JSON.
    pub(super) params: String,
    pub(super) calls: &'a [CallStats],
    pub(super) buy: Option<&'a BuySummary>,
    /// Refused clicks by call and outcome.
    pub(super) refused: Vec<(&'a str, u64)>,
    /// Without accepted buys (a sold-out sale): when every user had a final answer.
    pub(super) answered_within: Option<f64>,
    /// With accepted buys: how they drained.
    pub(super) drain: Option<&'a DrainSummary>,
    /// `sync`: its answers and the database's figures.
    pub(super) sync: Option<&'a SyncSummary>,
    /// `storm`: the expiries, the spikes with and without them, the buyers buying again.
    pub(super) storm: Option<&'a StormSummary>,
    /// `room`: joins, polls, admissions, memory per waiting user.
    pub(super) room: Option<&'a RoomSummary>,
    /// `push`: streams held, commit to event, requests per buyer.
    pub(super) push: Option<&'a PushSummary>,
    pub(super) duration_secs: f64,
    pub(super) memory: &'a [ProcMemory],
    pub(super) cpu: Option<CpuView<'a>>,
    pub(super) invariants: &'a [Check],
    pub(super) notes: &'a [String],
    pub(super) chart: bool,
}

/// The scenarios in the order they ran (others after them, by name).
pub(super) fn scenarios(c: &Collected) -> Vec<ScenarioView<'_>> {
    use names::*;
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
                storm: r.storm.as_ref(),
                room: r.room.as_ref(),
                push: r.push.as_ref(),
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
pub(super) fn commands(c: &Collected) -> Vec<String> {
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
pub(super) struct CostTable<'a> {
    pub(super) columns: Vec<CostColumn>,
    pub(super) rows: Vec<CostRow<'a>>,
}

#[derive(Serialize)]
pub(super) struct CostColumn {
    pub(super) label: &'static str,
    /// Machine-wide CPU microseconds per request.
    pub(super) all_us: f64,
    pub(super) busy_pct: f64,
    pub(super) per_sec: f64,
}

#[derive(Serialize)]
pub(super) struct CostRow<'a> {
    pub(super) name: &'a str,
    /// CPU microseconds per request, by column.
    pub(super) us: Vec<f64>,
}

impl<'a> CostTable<'a> {
    pub(super) fn new(c: &'a Collected) -> Option<Self> {
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
pub(super) fn cores_of(r: &Report, name: &str) -> f64 {
    r.cpu.iter().flat_map(|c| &c.by_process).find(|p| p.name == name).map_or(0.0, |p| p.cores)
}

/// CPU microseconds per request of one process during a run.
pub(super) fn us_per_request(r: &Report, name: &str) -> f64 {
    cores_of(r, name) * 1e6 / r.load_per_sec().max(1e-9)
}

/// Machine-wide CPU microseconds per request of a run (busy x cores / rate).
pub(super) fn total_us(r: &Report) -> f64 {
    r.cpu.as_ref().map_or(0.0, |c| c.busy * c.cores as f64) * 1e6 / r.load_per_sec().max(1e-9)
}

/// The limits shared across gateways: what sharing costs on the sold-out path, and what one
/// user gets through one gateway and through two.
#[derive(Serialize)]
pub(super) struct SharedLimits<'a> {
    pub(super) sold_out: Vec<SoldOutVariant<'a>>,
    pub(super) hot_user: Vec<HotUserLimit<'a>>,
}

/// One way of limiting, on the sold-out path.
#[derive(Serialize)]
pub(super) struct SoldOutVariant<'a> {
    pub(super) name: &'static str,
    pub(super) gateway: &'a str,
    /// `key=value, ...` as the run recorded them.
    pub(super) settings: String,
    pub(super) per_sec: f64,
    pub(super) runs: Vec<f64>,
    pub(super) p99_ms: Option<f64>,
    /// CPU microseconds per click: every process named gateway, and Redis.
    pub(super) gateway_us: Option<f64>,
    pub(super) redis_us: Option<f64>,
    /// To the per-replica run.
    pub(super) ratio: Option<f64>,
}

/// One user hammering the buy button, through one or more gateways.
#[derive(Serialize)]
pub(super) struct HotUserLimit<'a> {
    pub(super) name: &'static str,
    pub(super) gateways: Vec<&'a str>,
    pub(super) clicks: u64,
    pub(super) limit: &'a LimitCheck,
    /// No more got through than the buckets allow.
    pub(super) held: bool,
    /// `(gateway, clicks, let through)` when the clicks went to more than one.
    pub(super) by_gateway: Vec<(&'a str, u64, u64)>,
}

impl<'a> SharedLimits<'a> {
    pub(super) fn new(c: &'a Collected) -> Self {
        use names::*;
        let per_replica = c.report(SOLD_OUT_PER_REPLICA).map(|(r, _)| r.load_per_sec());
        let sold_out = [SOLD_OUT_PER_REPLICA, SOLD_OUT, SOLD_OUT_FORWARDED]
            .into_iter()
            .filter_map(|name| {
                let (r, runs) = c.report(name)?;
                let settings = r
                    .load
                    .gateway_settings
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                let gateway = r.load.gateways.first().map_or("?", String::as_str);
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
                    held: buy.limit.as_ref()?.held(),
                    by_gateway: if by_gateway.len() > 1 { by_gateway } else { Vec::new() },
                })
            })
            .collect();
        Self { sold_out, hot_user }
    }
}

/// What stands in the way of the missed targets: the figures the template explains them with.
#[derive(Serialize)]
pub(super) struct Limits {
    pub(super) sold_out: Option<SoldOutVsHop>,
    pub(super) drain: Option<DrainLimits>,
}

/// CPU per request, a sold-out click against a plain hop.
#[derive(Serialize)]
pub(super) struct SoldOutVsHop {
    pub(super) sold_out_busy_pct: f64,
    pub(super) hop_busy_pct: f64,
    pub(super) sold_out_us: f64,
    pub(super) hop_us: f64,
    pub(super) sold_out_gateway_us: f64,
    pub(super) hop_gateway_us: f64,
    pub(super) sold_out_seckill_us: f64,
    pub(super) hop_bench_us: f64,
}

/// What an accepted order costs, and what that means for the rate and the latency.
#[derive(Serialize)]
pub(super) struct DrainLimits {
    pub(super) total_us: f64,
    /// CPU microseconds per accepted order, by process name.
    pub(super) per_process_us: BTreeMap<&'static str, f64>,
    pub(super) cores: f64,
    /// The rate the cores allow at that cost.
    pub(super) cap_per_sec: f64,
    /// The accept path alone (drain-backlog).
    pub(super) backlog: Option<AcceptPathAlone>,
    pub(super) rabbitmq: Option<RabbitCost>,
    pub(super) connections: f64,
    pub(super) per_sec: f64,
    /// Little's law: connections / throughput.
    pub(super) wait_ms: f64,
    /// The rate a 50 ms wait needs at these connections.
    pub(super) needed_per_sec: f64,
    pub(super) backlog_at_load_end: u64,
}

#[derive(Serialize)]
pub(super) struct AcceptPathAlone {
    pub(super) total_us: f64,
    pub(super) per_sec: f64,
}

#[derive(Serialize)]
pub(super) struct RabbitCost {
    /// Per message in the RabbitMQ baseline.
    pub(super) baseline_us: f64,
    /// Per accepted order with the consumer paused.
    pub(super) paused_us: Option<f64>,
}

impl Limits {
    pub(super) fn new(c: &Collected) -> Self {
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
            let connections = d.load.connections as f64;
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
