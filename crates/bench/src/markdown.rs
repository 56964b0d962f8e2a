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
use crate::push::PushSummary;
use crate::record::Call;
use crate::report::{
    BuySummary, DrainSummary, KIND_AMQP, KIND_HTTP, KIND_SCENARIO, LimitCheck, Report, RoomSummary,
    StormSummary,
};
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

pub use seckill_harness::n0;

fn runs_text(values: &[f64]) -> String {
    if values.len() <= 1 {
        String::new()
    } else {
        format!(" (runs: {})", values.iter().map(|v| n0(*v)).collect::<Vec<_>>().join(", "))
    }
}

/// The targets, each from this run's reports (ratios to this run's baselines). Rows without a
/// goal give context.
pub fn targets(c: &Collected) -> Vec<Target> {
    use names::*;
    let mut t = Vec::new();
    let hop = c.report(HOP);
    let amqp = c.report(AMQP);
    let drain = c.report(DRAIN);
    let backlog = c.report(DRAIN_BACKLOG);

    let alone = "accepted buys/s, accept path alone (drain-backlog";
    t.push(match (&backlog, &hop) {
        (Some((b, _)), Some((h, hr))) => {
            let accepted = accepted_per_sec(b);
            let ratio = accepted / h.load_per_sec().max(1e-9);
            Target {
                what: format!(
                    "{alone}: closed loop, {} connections, order-service paused during the load, so only \
                     gateway, seckill-service, Redis and RabbitMQ work) vs one plain hop",
                    connections(b)
                ),
                measured: format!("{} /s (order p99 {:.1} ms)", n0(accepted), order_p99(b)),
                against: format!("hop {} req/s{}", n0(h.load_per_sec()), runs_text(hr)),
                ratio: Some(ratio),
                goal: ">= 0.5".into(),
                met: Some(ratio >= 0.5),
            }
        }
        _ => missing(&format!("{alone}) vs one plain hop"), ">= 0.5"),
    });
    if let (Some((b, _)), Some((a, ar))) = (&backlog, &amqp) {
        let accepted = accepted_per_sec(b);
        t.push(Target {
            what: format!("{alone}) vs RabbitMQ publish with confirms"),
            measured: format!("{} /s", n0(accepted)),
            against: format!("{} msg/s{}", n0(a.load_per_sec()), runs_text(ar)),
            ratio: Some(accepted / a.load_per_sec().max(1e-9)),
            goal: String::new(),
            met: None,
        });
    }
    if let (Some((d, _)), Some((a, ar))) = (&drain, &amqp) {
        let accepted = accepted_per_sec(d);
        t.push(Target {
            what: format!(
                "accepted buys/s, whole system (drain: closed loop, {} connections, the order consumer running \
                 on the same cores; accept-sustained and overload take their rates from it) vs RabbitMQ publish \
                 with confirms",
                connections(d)
            ),
            measured: format!("{} /s", n0(accepted)),
            against: format!("{} msg/s{}", n0(a.load_per_sec()), runs_text(ar)),
            ratio: Some(accepted / a.load_per_sec().max(1e-9)),
            goal: String::new(),
            met: None,
        });
    }

    t.push(match c.report(ACCEPT_SUSTAINED) {
        Some((r, _)) => open_loop_p99(r, "0.8 x the closed-loop accepted rate"),
        None => missing(
            "order p99, open loop at 0.8 x the closed-loop accepted rate (accept-sustained)",
            "< 50 ms",
        ),
    });
    for o in &OVERLOADS {
        t.extend(overload(c, o));
    }

    t.push(match (c.report(SOLD_OUT), &hop) {
        (Some((s, sr)), Some((h, hr))) => {
            let ratio = s.load_per_sec() / h.load_per_sec().max(1e-9);
            Target {
                what: "sold-out path through the gateway vs one plain hop".into(),
                measured: format!("{} req/s{}", n0(s.load_per_sec()), runs_text(&sr)),
                against: format!("hop {} req/s{}", n0(h.load_per_sec()), runs_text(hr)),
                ratio: Some(ratio),
                goal: ">= 0.8".into(),
                met: Some(ratio >= 0.8),
            }
        }
        _ => missing("sold-out path through the gateway vs one plain hop", ">= 0.8"),
    });
    t.push(match (&hop, c.report(HEALTHZ)) {
        (Some((h, hr)), Some((z, zr))) => {
            let ratio = h.load_per_sec() / z.load_per_sec().max(1e-9);
            Target {
                what: "one plain hop (a second gateway in front of the trivial upstream) vs the gateway's /healthz"
                    .into(),
                measured: format!("{} req/s{}", n0(h.load_per_sec()), runs_text(hr)),
                against: format!("/healthz {} req/s{}", n0(z.load_per_sec()), runs_text(&zr)),
                ratio: Some(ratio),
                goal: ">= 0.5".into(),
                met: Some(ratio >= 0.5),
            }
        }
        _ => missing("one plain hop vs the gateway's /healthz", ">= 0.5"),
    });

    let pg = c.external(PG).and_then(|(e, _)| e.value);
    t.push(match &backlog {
        Some((d, _)) => {
            let tail = d.drain.as_ref().and_then(|x| x.tail_orders_per_sec);
            let size = d.drain.as_ref().map_or(0, |x| x.backlog_at_load_end);
            Target {
                what: format!(
                    "drain: the consumer on a backlog of {} (order-service paused during the load, resumed at its end; deduct, order row, result, ack)",
                    n0(size as f64)
                ),
                measured: tail.map_or("no backlog formed".into(), |v| format!("{} orders/s", n0(v))),
                against: pg.map_or(String::new(), |v| {
                    format!("pgbench one order per transaction {} tx/s", n0(v))
                }),
                ratio: tail.zip(pg).map(|(v, p)| v / p.max(1e-9)),
                goal: ">= 10,000".into(),
                met: Some(tail.is_some_and(|v| v >= 10_000.0)),
            }
        }
        None => missing("drain: the consumer on a backlog", ">= 10,000"),
    });

    t.extend(storm(c));
    t.extend(room(c));
    t.extend(push(c));

    t.push(match c.report(SEED) {
        Some((s, _)) => {
            let within = s.drain.as_ref().and_then(|d| d.all_answered_within_s);
            let users = s.buy.as_ref().map_or(0, |b| b.users);
            Target {
                what: format!(
                    "seed: every one of the {} users has a final answer, from the first request",
                    n0(users as f64)
                ),
                measured: within.map_or("some user never did".into(), |w| format!("within {w:.3} s")),
                against: String::new(),
                ratio: None,
                goal: "<= 0.25 s".into(),
                met: Some(within.is_some_and(|w| w <= 0.25)),
            }
        }
        None => missing("seed: every user has a final answer", "<= 0.25 s"),
    });
    t.push(largest_service_memory(c));

    let scenarios: Vec<&Report> = c.reports.values().flatten().filter(|r| r.kind == KIND_SCENARIO).collect();
    if !scenarios.is_empty() {
        let broken: Vec<String> =
            scenarios.iter().filter(|r| !r.invariants_hold()).map(|r| r.name.clone()).collect();
        t.push(Target {
            what: "invariants in every scenario run".into(),
            measured: if broken.is_empty() {
                format!("{} runs, all hold", scenarios.len())
            } else {
                format!("broken in: {}", broken.join(", "))
            },
            against: String::new(),
            ratio: None,
            goal: String::new(),
            met: None,
        });
    }
    t
}

fn accepted_per_sec(r: &Report) -> f64 {
    r.drain.as_ref().map_or(0.0, |x| x.accepted_per_sec)
}

fn connections(r: &Report) -> u64 {
    r.params.get("connections").and_then(|v| v.as_u64()).unwrap_or(0)
}

/// The order call's p99 over all its answers (NaN without order calls).
fn order_p99(r: &Report) -> f64 {
    r.row(Call::Order.name(), "all").map_or(f64::NAN, |x| x.latency.p99_ms)
}

/// The order p99 target row of an open-loop run at a set rate (`rate_is` says where the rate
/// came from).
fn open_loop_p99(r: &Report, rate_is: &str) -> Target {
    let p99 = order_p99(r);
    let rate = r.params.get("rate").and_then(|v| v.as_f64()).unwrap_or(0.0);
    Target {
        what: format!(
            "order p99, open loop at {} buys/s ({rate_is}), {} connections",
            n0(rate),
            connections(r)
        ),
        measured: format!("{p99:.1} ms (achieved {} accepted/s)", n0(accepted_per_sec(r))),
        against: String::new(),
        ratio: None,
        goal: "< 50 ms".into(),
        met: Some(p99 < 50.0),
    }
}

/// The order calls of a run by answer: 202, `503 BUSY`, anything else (a timeout, a
/// connection error, another status, a 503 that was not BUSY).
#[derive(Debug, Default, PartialEq)]
struct OrderAnswers {
    calls: u64,
    accepted: u64,
    busy: u64,
    other: Vec<(String, u64)>,
}

impl OrderAnswers {
    /// From the per-status rows. The report counts BUSY answers per click, path-token calls
    /// included: the 503 rows of the order call are BUSY up to that count (exact without path
    /// tokens, as overload runs).
    fn of(r: &Report) -> Self {
        let mut a = Self::default();
        let mut busy_left = r.buy.as_ref().map_or(0, |b| b.busy_answers);
        for row in r.calls.iter().filter(|x| x.call == Call::Order.name() && x.outcome != "all") {
            a.calls += row.count;
            match row.outcome.as_str() {
                "202" => a.accepted += row.count,
                "503" => {
                    let busy = row.count.min(busy_left);
                    busy_left -= busy;
                    a.busy += busy;
                    if row.count > busy {
                        a.other.push(("503 not BUSY".into(), row.count - busy));
                    }
                }
                other => a.other.push((other.into(), row.count)),
            }
        }
        a
    }

    fn all_202_or_busy(&self) -> bool {
        self.calls > 0 && self.other.is_empty()
    }
}

/// An overload scenario: its report's name, the multiple of drain's closed-loop accepted rate
/// it offers, and the share of that rate it must still accept.
struct Overload {
    name: &'static str,
    times: f64,
    accepted_goal: f64,
}

const OVERLOADS: [Overload; 2] = [
    Overload { name: names::OVERLOAD, times: 2.0, accepted_goal: 0.9 },
    Overload { name: names::OVERLOAD_5X, times: 5.0, accepted_goal: 0.8 },
];

/// An overload scenario's targets (open loop at a multiple of the closed-loop accepted rate):
/// every order call answered 202 or `503 BUSY`, the order p99 over all answers, the accepted
/// rate against the closed loop's, the invariants.
fn overload(c: &Collected, o: &Overload) -> [Target; 4] {
    const ANSWERS: &str = "all 202 or 503 BUSY";
    let name = o.name;
    let times = o.times;
    let accepted_goal = format!(">= {:.1}", o.accepted_goal);
    let Some((r, _)) = c.report(name) else {
        return [
            missing(
                &format!(
                    "{name} (open loop at {times} x the closed-loop accepted rate): every order call answered 202 \
                     or 503 BUSY"
                ),
                ANSWERS,
            ),
            missing(&format!("{name}: order p99, all answers"), "< 100 ms"),
            missing(&format!("{name}: accepted buys/s vs the closed loop's (drain)"), &accepted_goal),
            missing(&format!("{name}: invariants hold"), "all"),
        ];
    };
    let rate = r.params.get("rate").and_then(|v| v.as_f64()).unwrap_or(0.0);
    let drain = c.report(names::DRAIN).map(|(d, _)| accepted_per_sec(d)).filter(|d| *d > 0.0);
    let offered = match drain {
        Some(d) => format!("{:.2} x the closed-loop accepted rate of drain, {} /s", rate / d, n0(d)),
        None => format!("{times} x the closed-loop accepted rate"),
    };
    let buy = r.buy.clone().unwrap_or_default();
    let a = OrderAnswers::of(r);
    let other = if a.other.is_empty() {
        "none".into()
    } else {
        a.other.iter().map(|(o, n)| format!("{o} x{}", n0(*n as f64))).collect::<Vec<_>>().join(", ")
    };
    let p99 = order_p99(r);
    let accepted = accepted_per_sec(r);
    let broken: Vec<&str> = r.invariants.iter().filter(|x| !x.ok).map(|x| x.name.as_str()).collect();
    [
        Target {
            what: format!(
                "{name}: open loop at {} buys/s ({offered}), {} connections, a 503 BUSY retried after its \
                 Retry-After (up to {} retries a click): every order call answered 202 or 503 BUSY (no timeouts, \
                 no other status)",
                n0(rate),
                connections(r),
                buy.busy_retries
            ),
            measured: format!(
                "{} order calls: {} 202, {} 503 BUSY, other: {other}; {} clicks still BUSY after their retries; \
                 achieved {} accepted/s",
                n0(a.calls as f64),
                n0(a.accepted as f64),
                n0(a.busy as f64),
                n0(buy.ended_busy as f64),
                n0(accepted)
            ),
            against: String::new(),
            ratio: None,
            goal: ANSWERS.into(),
            met: Some(a.all_202_or_busy()),
        },
        Target {
            what: format!("{name}: order p99, all answers (202 and 503 BUSY, every try)"),
            measured: format!("{p99:.1} ms"),
            against: String::new(),
            ratio: None,
            goal: "< 100 ms".into(),
            met: Some(p99 < 100.0),
        },
        Target {
            what: format!("{name}: accepted buys/s vs the closed loop's (drain)"),
            measured: format!("{} /s", n0(accepted)),
            against: drain.map_or_else(String::new, |d| format!("drain {} /s", n0(d))),
            ratio: drain.map(|d| accepted / d),
            goal: accepted_goal,
            met: drain.map(|d| accepted / d >= o.accepted_goal),
        },
        Target {
            what: format!("{name}: invariants hold"),
            measured: match (r.invariants.len(), broken.is_empty()) {
                (0, _) => "none checked".into(),
                (n, true) => format!("all {n} hold"),
                (_, false) => format!("broken: {}", broken.join(", ")),
            },
            against: String::new(),
            ratio: None,
            goal: "all".into(),
            met: (!r.invariants.is_empty()).then_some(broken.is_empty()),
        },
    ]
}

/// The expiry storm's targets: how fast the expired units come back, and what a spike gets
/// meanwhile against the same spike on the quiet system.
fn storm(c: &Collected) -> [Target; 2] {
    const RATE: &str = ">= 10,000";
    const RATIO: &str = ">= 0.8";
    let Some(s) = c.report(names::STORM).and_then(|(r, _)| r.storm.as_ref()) else {
        return [
            missing("expiry storm: unpaid orders all expiring at once, units back in Redis per second", RATE),
            missing("spike during the expiry storm vs the same spike without it, accepted buys/s", RATIO),
        ];
    };
    let back = |secs: Option<f64>, per_sec: Option<f64>| match secs.zip(per_sec) {
        Some((s, r)) => format!("after {s:.2} s, {} /s", n0(r)),
        None => "not all within the timeout".into(),
    };
    [
        Target {
            what: format!(
                "expiry storm: {} unpaid orders (TTL {} s) all expiring at once (order-service stopped while they came \
                 due, resumed {:.0} s after the last did), units back in Redis per second from the resume (order-service \
                 expires, stock-service gives back, seckill-service restocks)",
                n0(s.orders as f64),
                s.order_ttl_secs,
                s.margin_secs
            ),
            measured: match s.redis_per_sec {
                Some(v) => format!(
                    "{} expiries/s (every unit back in Redis {}; in PostgreSQL {})",
                    n0(v),
                    back(s.redis_secs, s.redis_per_sec),
                    back(s.db_secs, s.db_per_sec)
                ),
                None => format!(
                    "units not all back in Redis within the timeout (in PostgreSQL {})",
                    back(s.db_secs, s.db_per_sec)
                ),
            },
            against: String::new(),
            ratio: None,
            goal: RATE.into(),
            met: Some(s.redis_per_sec.is_some_and(|v| v >= 10_000.0)),
        },
        Target {
            what: format!(
                "spike during the expiry storm ({} users, {} units, started at the resume) vs the same spike on the \
                 quiet system, accepted buys/s",
                n0(s.during.users as f64),
                n0(s.during.stock as f64)
            ),
            measured: format!(
                "{} /s (clicks answered {} /s, order p99 {})",
                n0(s.during.accepted_per_sec),
                n0(s.during.clicks_per_sec),
                s.during.order_p99_ms.map_or("-".into(), |v| format!("{v:.1} ms"))
            ),
            against: format!(
                "without {} /s (clicks answered {} /s, ratio {})",
                n0(s.baseline.accepted_per_sec),
                n0(s.baseline.clicks_per_sec),
                s.clicks_ratio.map_or("-".into(), |r| format!("{r:.2}"))
            ),
            ratio: s.accepted_ratio,
            goal: RATIO.into(),
            met: Some(s.accepted_ratio.is_some_and(|r| r >= 0.8)),
        },
    ]
}

/// The waiting room's targets: a join against one plain hop, a status poll against the
/// sold-out answer, the memory a waiting user costs at a million; the admissions against the
/// room's rate for context.
fn room(c: &Collected) -> Vec<Target> {
    const JOIN: &str = "waiting room: joins/s (closed loop, half before the opening) vs one plain hop";
    const POLL: &str = "waiting room: status polls/s, as fast as answered, vs the sold-out answer";
    const POLL_GOAL: &str = ">= 0.83 (cost within 1.2 x)";
    const MEMORY: &str =
        "waiting room: Redis memory per waiting user at 1,000,000 (the join script run directly)";
    const ADMITTED: &str = "waiting room: places admitted per second vs the room's rate";
    let Some((run, r)) = c.report(names::ROOM).and_then(|(run, _)| Some((run, run.room.as_ref()?))) else {
        return vec![missing(JOIN, ">= 0.5"), missing(POLL, POLL_GOAL), missing(MEMORY, "<= 64 B")];
    };
    let vs = |what: String, (v, p50, p99): (f64, f64, f64), base: &str, goal: f64, goal_text: &str| {
        let b = c.report(base).map(|(b, runs)| (b.load_per_sec(), runs_text(&runs)));
        let ratio = b.as_ref().map(|(x, _)| v / x.max(1e-9));
        Target {
            what,
            measured: format!("{} /s (p50 {p50:.1} ms, p99 {p99:.1} ms)", n0(v)),
            against: b.map_or(String::new(), |(x, runs)| format!("{base} {} req/s{runs}", n0(x))),
            ratio,
            goal: goal_text.into(),
            met: ratio.map(|x| x >= goal),
        }
    };
    let at_million = r.memory.iter().find(|m| m.users == 1_000_000);
    let sizes: Vec<String> =
        r.memory.iter().map(|m| format!("{:.1} B at {}", m.bytes_per_user, n0(m.users as f64))).collect();
    vec![
        vs(
            format!("{JOIN} ({} users, {} connections)", n0(r.users as f64), connections(run)),
            (r.joins_per_sec, r.join_p50_ms, r.join_p99_ms),
            names::HOP,
            0.5,
            ">= 0.5",
        ),
        vs(
            format!("{POLL} ({:.0} s, {} connections)", r.poll_secs, connections(run)),
            (r.polls_per_sec, r.poll_p50_ms, r.poll_p99_ms),
            names::SOLD_OUT,
            1.0 / 1.2,
            POLL_GOAL,
        ),
        Target {
            met: at_million.map(|m| m.bytes_per_user <= 64.0),
            measured: sizes.join(", "),
            ..missing(MEMORY, "<= 64 B")
        },
        Target {
            measured: format!(
                "{} /s ({} places; {} bought of {} units)",
                r.admitted_per_sec.map_or("-".into(), n0),
                n0(r.admitted as f64),
                n0(r.bought as f64),
                n0(r.stock as f64)
            ),
            against: format!("rate {} /s", n0(f64::from(r.rate))),
            ratio: r.admitted_per_sec.map(|a| a / f64::from(r.rate)),
            ..missing(ADMITTED, "")
        },
    ]
}

/// The event streams' targets: the gateway's memory per open stream, and order commit to the
/// `success` event; its CPU at rest with them open, and a buyer's requests on a stream against
/// polling, for context.
fn push(c: &Collected) -> Vec<Target> {
    const MEMORY: &str =
        "event streams: the gateway's memory per open stream (RSS with them open minus before)";
    const LATENCY: &str =
        "event streams: order commit (its row's created_at) to the `success` event on the buyer's socket";
    let (memory_goal, latency_goal) = ("<= 10 KiB", "p99 < 50 ms");
    let Some(p) = c.report(names::PUSH).and_then(|(r, _)| r.push.as_ref()) else {
        return vec![missing(MEMORY, memory_goal), missing(LATENCY, latency_goal)];
    };
    let streams = n0(p.opened as f64);
    let (s, q) = (&p.stream_half, &p.poll_half);
    let rest = format!(
        "event streams: the gateway's CPU at rest with {streams} streams open, over {:.0} s (heartbeats, re-reads)",
        p.rest_secs
    );
    let spike = "event streams: requests per buyer in a spike, following the result on a stream (path token + \
                 order + stream) vs polling it (200 ms doubling to 2 s)";
    vec![
        Target {
            what: format!("{MEMORY}, {streams} streams on one gateway replica"),
            measured: format!(
                "{:.2} KiB ({:.1} -> {:.1} MiB)",
                p.gateway_kib_per_stream, p.gateway_rss_before_mib, p.gateway_rss_open_mib
            ),
            against: format!(
                "an idle keep-alive connection {:.2} KiB ({} of them, a gateway of their own)",
                p.idle_connection_kib,
                n0(p.idle_connections as f64)
            ),
            ratio: (p.idle_connection_kib > 0.0).then(|| p.gateway_kib_per_stream / p.idle_connection_kib),
            met: Some(p.opened > 0 && p.gateway_kib_per_stream <= 10.0),
            ..missing(MEMORY, memory_goal)
        },
        Target {
            measured: format!(
                "{:.2}% of a core (seckill-service {:.2}%)",
                p.gateway_rest_cpu_pct, p.seckill_rest_cpu_pct
            ),
            ..missing(&rest, "")
        },
        Target {
            what: format!(
                "{LATENCY}, buys asked at {} /s (reached {} accepted/s)",
                n0(p.rate),
                n0(p.accepted_per_sec)
            ),
            measured: format!(
                "p99 {:.1} ms (p50 {:.1} ms, {} events)",
                p.commit_to_event.p99_ms,
                p.commit_to_event.p50_ms,
                n0(p.told as f64)
            ),
            met: Some(p.told > 0 && p.commit_to_event.p99_ms < 50.0),
            ..missing(LATENCY, latency_goal)
        },
        Target {
            measured: format!(
                "p99 {:.1} ms (p50 {:.1} ms, {} events)",
                p.notice_to_event.p99_ms,
                p.notice_to_event.p50_ms,
                n0(p.noticed as f64)
            ),
            against: format!(
                "commit to notice p99 {:.1} ms (p50 {:.1} ms)",
                p.commit_to_notice.p99_ms, p.commit_to_notice.p50_ms
            ),
            ..missing(
                "event streams: the gateway's own hop, the notice's arrival on the sale's Redis channel to the event \
                 on the buyer's socket, vs order-service's (commit to notice), same events",
                "",
            )
        },
        Target {
            measured: format!("{:.2} a buyer, {:.2} an accepted one", s.per_buyer, s.per_accepted),
            against: format!("polling {:.2} a buyer, {:.2} an accepted one", q.per_buyer, q.per_accepted),
            ratio: (q.per_accepted > 0.0).then(|| s.per_accepted / q.per_accepted),
            ..missing(spike, "")
        },
    ]
}

/// The largest resident memory of any service process (a service or a replica of it, the
/// bench's extra gateways included) over every measurement of the run: the RSS sampled during
/// each, and the kernel's high-water mark (VmHWM) at its end, which catches a peak between
/// samples.
fn largest_service_memory(c: &Collected) -> Target {
    const SERVICES: [&str; 4] = ["gateway", "seckill-service", "order-service", "stock-service"];
    const GOAL_MIB: f64 = 100.0;
    let is_service = |name: &str| {
        SERVICES
            .iter()
            .any(|s| name.strip_prefix(s).is_some_and(|rest| rest.is_empty() || rest.starts_with('-')))
    };
    let largest = c
        .reports
        .values()
        .flatten()
        .flat_map(|r| {
            r.memory
                .iter()
                .filter(|m| is_service(&m.name))
                .map(move |m| (m.peak_rss_mib.max(m.vm_hwm_mib), m, r))
        })
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let what = "largest resident memory of any service process over the run (RSS sampled during each measurement, and VmHWM)";
    match largest {
        Some((mib, m, r)) => Target {
            what: what.into(),
            measured: format!(
                "{mib:.1} MiB ({}, {}{})",
                m.name,
                r.name,
                if m.vm_hwm_mib > m.peak_rss_mib { ": VmHWM" } else { "" }
            ),
            against: String::new(),
            ratio: None,
            goal: "<= 100 MiB".into(),
            met: Some(mib <= GOAL_MIB),
        },
        None => missing(what, "<= 100 MiB"),
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
    /// The order TTL order-service was restarted with for the storm, when it ran.
    storm_ttl_secs: Option<u64>,
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
            storm_ttl_secs: c
                .report(names::STORM)
                .and_then(|(r, _)| r.storm.as_ref())
                .map(|s| s.order_ttl_secs),
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
    /// `storm`: the expiries, the spikes with and without them, the buyers buying again.
    storm: Option<&'a StormSummary>,
    /// `room`: joins, polls, admissions, memory per waiting user.
    room: Option<&'a RoomSummary>,
    /// `push`: streams held, commit to event, requests per buyer.
    push: Option<&'a PushSummary>,
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
    /// No more got through than the buckets allow.
    held: bool,
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
    use crate::report::RoomMemory;
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
            storm: None,
            room: None,
            push: None,
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
        let sold = row(&t, "sold-out path through the gateway vs one plain hop");
        assert_eq!(sold.ratio, Some(0.85));
        assert_eq!(sold.met, Some(true));
        assert!(sold.against.contains("10,000"), "{sold:?}");
        assert!(sold.against.contains("runs: 9,000, 20,000, 10,000"), "{sold:?}");
        let md = render(&c).unwrap();
        assert!(md.contains("| sold-out path through the gateway vs one plain hop |"), "{md}");
    }

    /// The target row whose text starts with `what`.
    fn row<'t>(t: &'t [Target], what: &str) -> &'t Target {
        t.iter().find(|x| x.what.starts_with(what)).unwrap_or_else(|| panic!("no row {what:?} in {t:#?}"))
    }

    #[test]
    fn the_targets_state_these_goals_and_no_others() {
        // Nothing measured: every goal is there, not measured, and no row without a goal.
        let t = targets(&Collected::default());
        let goals: Vec<&str> = t.iter().map(|x| x.goal.as_str()).collect();
        assert_eq!(
            goals,
            [
                ">= 0.5",
                "< 50 ms",
                "all 202 or 503 BUSY",
                "< 100 ms",
                ">= 0.9",
                "all",
                "all 202 or 503 BUSY",
                "< 100 ms",
                ">= 0.8",
                "all",
                ">= 0.8",
                ">= 0.5",
                ">= 10,000",
                ">= 10,000",
                ">= 0.8",
                ">= 0.5",
                ">= 0.83 (cost within 1.2 x)",
                "<= 64 B",
                "<= 10 KiB",
                "p99 < 50 ms",
                "<= 0.25 s",
                "<= 100 MiB"
            ],
            "{t:#?}"
        );
        assert!(t.iter().all(|x| x.measured == "not measured" && x.met.is_none()), "{t:#?}");
    }

    #[test]
    fn the_room_is_set_against_the_hop_and_the_sold_out_answer() {
        let mut c = Collected::default();
        for (name, call, per_sec) in [(names::HOP, "get", 20_000.0), (names::SOLD_OUT, "order", 40_000.0)] {
            c.reports.insert(name.into(), vec![report(KIND_HTTP, name, call, per_sec)]);
        }
        let memory = |users, bytes_per_user| RoomMemory { users, bytes_per_user, ..RoomMemory::default() };
        let mut r = report(KIND_SCENARIO, names::ROOM, "join", 1_000.0);
        r.room = Some(RoomSummary {
            joins_per_sec: 12_000.0,
            polls_per_sec: 36_000.0,
            rate: 500,
            admitted_per_sec: Some(490.0),
            memory: vec![memory(20_000, 140.0), memory(1_000_000, 19.5)],
            ..RoomSummary::default()
        });
        c.reports.insert(names::ROOM.into(), vec![r]);
        let t = targets(&c);
        let ratio = |what| row(&t, what).ratio.map(|x| (x * 100.0).round() / 100.0);
        assert_eq!(ratio("waiting room: joins/s"), Some(0.6));
        assert_eq!(ratio("waiting room: status polls/s"), Some(0.9));
        assert_eq!(ratio("waiting room: places admitted"), Some(0.98));
        let memory = row(&t, "waiting room: Redis memory");
        assert_eq!(
            (memory.met, memory.measured.as_str()),
            (Some(true), "140.0 B at 20,000, 19.5 B at 1,000,000")
        );
        assert!(render(&c).unwrap().contains("**12,000 joins/s**"));
    }

    #[test]
    fn the_streams_memory_and_latency_are_held_to_their_goals() {
        let mut r = report(KIND_SCENARIO, names::PUSH, "events", 1_000.0);
        let half = |per_accepted| crate::push::SpikeHalf { per_accepted, ..Default::default() };
        r.push = Some(PushSummary {
            opened: 20_000,
            gateway_kib_per_stream: 7.5,
            commit_to_event: Latency { p50_ms: 9.0, p99_ms: 61.0, ..Latency::default() },
            told: 20_000,
            stream_half: half(3.0),
            poll_half: half(6.0),
            ..PushSummary::default()
        });
        let mut c = Collected::default();
        c.reports.insert(names::PUSH.into(), vec![r]);
        let t = targets(&c);
        let memory = row(&t, "event streams: the gateway's memory per open stream");
        assert_eq!((memory.met, memory.goal.as_str()), (Some(true), "<= 10 KiB"));
        let latency = row(&t, "event streams: order commit");
        assert_eq!(
            (latency.met, latency.measured.as_str()),
            (Some(false), "p99 61.0 ms (p50 9.0 ms, 20,000 events)")
        );
        assert_eq!(row(&t, "event streams: requests per buyer").ratio, Some(0.5));
        assert!(render(&c).unwrap().contains("**7.50 KiB a stream**"));
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
    fn the_accept_path_alone_is_compared_to_one_plain_hop() {
        let mut c = Collected::default();
        let mut add = |r: Report| c.reports.entry(r.name.clone()).or_default().push(r);
        add(report(KIND_HTTP, names::HOP, "get", 20_000.0));
        add(report(KIND_AMQP, names::AMQP, "publish", 25_000.0));
        add(drain_report(names::DRAIN, 4_000.0, 180.0));
        let t = targets(&c);
        let alone = row(&t, "accepted buys/s, accept path alone (drain-backlog) vs one plain hop");
        assert_eq!(
            (alone.measured.as_str(), alone.goal.as_str(), alone.met),
            ("not measured", ">= 0.5", None)
        );
        assert!(
            !t.iter().any(|x| x.what.contains("vs RabbitMQ") && x.what.contains("accept path alone")),
            "{t:#?}"
        );

        c.reports.entry(names::DRAIN_BACKLOG.into()).or_default().push(drain_report(
            names::DRAIN_BACKLOG,
            13_000.0,
            95.25,
        ));
        let t = targets(&c);
        let a = row(&t, "accepted buys/s, accept path alone (drain-backlog: closed loop, 500 connections");
        assert_eq!((a.ratio, a.met, a.goal.as_str()), (Some(0.65), Some(true), ">= 0.5"));
        assert_eq!(a.measured, "13,000 /s (order p99 95.2 ms)");
        assert_eq!(a.against, "hop 20,000 req/s");
        assert!(a.what.contains("order-service paused") && a.what.ends_with("vs one plain hop"), "{a:?}");
        // RabbitMQ publish with confirms: context, no goal; the whole system beside it.
        let rabbit = row(&t, "accepted buys/s, accept path alone (drain-backlog) vs RabbitMQ");
        assert_eq!((rabbit.ratio, rabbit.goal.as_str(), rabbit.met), (Some(0.52), "", None));
        let whole = row(&t, "accepted buys/s, whole system");
        assert_eq!((whole.ratio, whole.goal.as_str(), whole.met), (Some(0.16), "", None));
        let md = render(&c).unwrap();
        assert!(
            md.contains("| 13,000 /s (order p99 95.2 ms) | hop 20,000 req/s | 0.65 | >= 0.5 | **yes** |"),
            "{md}"
        );
        assert!(md.contains("| 13,000 /s | 25,000 msg/s | 0.52 |  | - |"), "{md}");

        // Below half a hop: missed.
        c.reports
            .insert(names::DRAIN_BACKLOG.into(), vec![drain_report(names::DRAIN_BACKLOG, 9_999.0, 40.0)]);
        assert_eq!(row(&targets(&c), "accepted buys/s, accept path alone (drain-backlog:").met, Some(false));
    }

    #[test]
    fn the_hop_is_compared_to_the_gateways_healthz() {
        let mut c = Collected::default();
        c.reports.entry(names::HOP.into()).or_default().push(report(KIND_HTTP, names::HOP, "get", 20_000.0));
        assert_eq!(row(&targets(&c), "one plain hop vs the gateway's /healthz").met, None);
        for v in [50_000.0, 40_000.0, 45_000.0] {
            c.reports.entry(names::HEALTHZ.into()).or_default().push(report(
                KIND_HTTP,
                names::HEALTHZ,
                "get",
                v,
            ));
        }
        let t = targets(&c);
        let hop = row(&t, "one plain hop (a second gateway");
        assert_eq!((hop.ratio.map(|r| (r * 1e3).round() / 1e3), hop.met), (Some(0.444), Some(false)));
        assert_eq!(hop.against, "/healthz 45,000 req/s (runs: 50,000, 40,000, 45,000)");
        assert_eq!(hop.goal, ">= 0.5");
        c.reports.insert(names::HOP.into(), vec![report(KIND_HTTP, names::HOP, "get", 22_500.0)]);
        assert_eq!(row(&targets(&c), "one plain hop (a second gateway").met, Some(true));
    }

    #[test]
    fn the_consumer_drains_a_backlog_at_ten_thousand_orders_a_second() {
        let mut c = Collected::default();
        let mut b = drain_report(names::DRAIN_BACKLOG, 5_000.0, 90.0);
        b.drain.as_mut().unwrap().tail_orders_per_sec = Some(9_999.0);
        b.drain.as_mut().unwrap().backlog_at_load_end = 50_000;
        c.reports.insert(names::DRAIN_BACKLOG.into(), vec![b.clone()]);
        let t = targets(&c);
        let d = row(&t, "drain: the consumer on a backlog of 50,000");
        assert_eq!(
            (d.measured.as_str(), d.goal.as_str(), d.met),
            ("9,999 orders/s", ">= 10,000", Some(false))
        );
        b.drain.as_mut().unwrap().tail_orders_per_sec = Some(10_000.0);
        c.reports.insert(names::DRAIN_BACKLOG.into(), vec![b]);
        assert_eq!(row(&targets(&c), "drain: the consumer on a backlog").met, Some(true));
    }

    #[test]
    fn every_seed_user_is_final_within_a_quarter_second() {
        let mut c = Collected::default();
        let mut seed = report(KIND_SCENARIO, names::SEED, "order", 1_000.0);
        seed.buy = Some(BuySummary { users: 1_000, ..Default::default() });
        seed.drain = Some(DrainSummary { all_answered_within_s: Some(0.2501), ..Default::default() });
        c.reports.insert(names::SEED.into(), vec![seed.clone()]);
        let s = row(&targets(&c), "seed: every one of the 1,000 users").clone();
        assert_eq!(
            (s.measured.as_str(), s.goal.as_str(), s.met),
            ("within 0.250 s", "<= 0.25 s", Some(false))
        );
        seed.drain.as_mut().unwrap().all_answered_within_s = Some(0.25);
        c.reports.insert(names::SEED.into(), vec![seed]);
        assert_eq!(row(&targets(&c), "seed:").met, Some(true));
    }

    fn memory(name: &str, peak_rss_mib: f64, vm_hwm_mib: f64) -> ProcMemory {
        ProcMemory {
            name: name.into(),
            pid: 1,
            peak_rss_mib,
            end_rss_mib: 0.0,
            vm_hwm_mib,
            samples: 10,
            alive_at_end: true,
        }
    }

    #[test]
    fn the_largest_service_memory_of_the_whole_run_is_held_to_100_mib() {
        let what = "largest resident memory of any service process";
        let mut c = Collected::default();
        assert_eq!(row(&targets(&c), what).met, None);
        let mut spike = report(KIND_SCENARIO, names::SPIKE, "order", 1_000.0);
        spike.memory = vec![memory("gateway", 60.0, 61.0), memory("order-service", 90.0, 90.0)];
        let mut drain = drain_report(names::DRAIN, 4_000.0, 100.0);
        // The load tool's own upstream is no service, whatever it used.
        drain.memory = vec![memory("seckill-service", 95.0, 99.5), memory("upstream", 300.0, 300.0)];
        c.reports.insert(names::SPIKE.into(), vec![spike]);
        c.reports.insert(names::DRAIN.into(), vec![drain]);
        let t = targets(&c);
        let m = row(&t, what);
        assert_eq!(
            (m.measured.as_str(), m.goal.as_str(), m.met),
            ("99.5 MiB (seckill-service, drain: VmHWM)", "<= 100 MiB", Some(true))
        );
        // A replica, or one of the bench's extra gateways, is a service process too.
        let mut hop = report(KIND_SCENARIO, names::SOLD_OUT_PER_REPLICA, "order", 1_000.0);
        hop.memory = vec![memory("gateway-hop", 100.5, 80.0)];
        c.reports.insert(names::SOLD_OUT_PER_REPLICA.into(), vec![hop]);
        let t = targets(&c);
        let m = row(&t, what);
        assert_eq!(
            (m.measured.as_str(), m.met),
            ("100.5 MiB (gateway-hop, sold-out-per-replica)", Some(false))
        );
    }

    /// An overload run: `answers` (outcome, count) of the order call, `busy` of the 503s BUSY,
    /// order p99 `p99_ms`, invariants `ok`.
    fn overload_report(answers: &[(&str, u64)], busy: u64, p99_ms: f64, ok: bool) -> Report {
        let mut r = drain_report(names::OVERLOAD, 4_400.0, p99_ms);
        r.params = serde_json::json!({"connections": 500, "rate": 8_878.0});
        for (outcome, count) in answers {
            r.calls.push(CallStats {
                call: "order".into(),
                outcome: (*outcome).into(),
                count: *count,
                per_sec: 0.0,
                window_secs: 1.0,
                latency: Latency::default(),
            });
        }
        r.buy = Some(BuySummary { busy_answers: busy, ended_busy: 7, busy_retries: 3, ..Default::default() });
        r.invariants = vec![
            Check { name: "no oversell".into(), ok: true, detail: String::new() },
            Check { name: "one order per user".into(), ok, detail: String::new() },
        ];
        r
    }

    #[test]
    fn overload_is_answered_202_or_busy_within_100_ms_and_keeps_the_invariants() {
        let mut c = Collected::default();
        c.reports.insert(names::DRAIN.into(), vec![drain_report(names::DRAIN, 4_439.0, 200.0)]);
        let answers = "overload (open loop at 2 x the closed-loop accepted rate): every order call";
        assert_eq!(row(&targets(&c), answers).met, None);
        assert_eq!(row(&targets(&c), "overload: order p99").met, None);
        assert_eq!(row(&targets(&c), "overload: invariants").met, None);

        c.reports.insert(
            names::OVERLOAD.into(),
            vec![overload_report(&[("202", 40_000), ("503", 12_000)], 12_000, 60.0, true)],
        );
        let t = targets(&c);
        let a = row(
            &t,
            "overload: open loop at 8,878 buys/s (2.00 x the closed-loop accepted rate of drain, 4,439 /s), 500 connections, a 503 BUSY retried after its Retry-After (up to 3 retries a click)",
        );
        assert_eq!(
            a.measured,
            "52,000 order calls: 40,000 202, 12,000 503 BUSY, other: none; 7 clicks still BUSY after their retries; achieved 4,400 accepted/s"
        );
        assert_eq!((a.goal.as_str(), a.met), ("all 202 or 503 BUSY", Some(true)));
        let p99 = row(&t, "overload: order p99");
        assert_eq!((p99.measured.as_str(), p99.goal.as_str(), p99.met), ("60.0 ms", "< 100 ms", Some(true)));
        let inv = row(&t, "overload: invariants");
        assert_eq!((inv.measured.as_str(), inv.met), ("all 2 hold", Some(true)));
        let kept = row(&t, "overload: accepted buys/s vs the closed loop's");
        assert_eq!(
            (kept.measured.as_str(), kept.goal.as_str(), kept.met),
            ("4,400 /s", ">= 0.9", Some(true))
        );
        // Five times the rate, accepting 0.75 of the closed loop's: short of its 0.8.
        assert_eq!(row(&t, "overload-5x: accepted buys/s").met, None, "not measured");
        let mut five = overload_report(&[("202", 40_000), ("503", 90_000)], 90_000, 80.0, true);
        five.name = names::OVERLOAD_5X.into();
        five.drain = Some(crate::report::DrainSummary { accepted_per_sec: 3_329.0, ..Default::default() });
        c.reports.insert(names::OVERLOAD_5X.into(), vec![five]);
        let t = targets(&c);
        assert_eq!(row(&t, "overload-5x: order p99").met, Some(true));
        let kept = row(&t, "overload-5x: accepted buys/s");
        assert_eq!(
            (kept.ratio.map(|r| (r * 100.0).round()), kept.goal.as_str(), kept.met),
            (Some(75.0), ">= 0.8", Some(false))
        );
        let md = render(&c).unwrap();
        assert!(
            md.find(
                "### drain
"
            ) < md.find(
                "### overload
"
            ),
            "{md}"
        );

        // A timeout, a 503 that was not BUSY, a 500: each breaks the first; slow; broken.
        c.reports.insert(
            names::OVERLOAD.into(),
            vec![overload_report(
                &[("202", 40_000), ("500", 2), ("503", 12_003), ("timeout", 1)],
                12_000,
                100.0,
                false,
            )],
        );
        let t = targets(&c);
        let a = row(&t, "overload: open loop");
        assert!(a.measured.contains("other: 500 x2, 503 not BUSY x3, timeout x1;"), "{a:?}");
        assert_eq!(a.met, Some(false));
        assert_eq!(row(&t, "overload: order p99").met, Some(false));
        let inv = row(&t, "overload: invariants");
        assert_eq!((inv.measured.as_str(), inv.met), ("broken: one order per user", Some(false)));
    }

    /// A storm run: every unit back in Redis after `redis_s` seconds, the spike during it at
    /// `during` accepted/s against 2,000 without.
    fn storm_report(redis_s: Option<f64>, during: f64) -> Report {
        use crate::report::SpikeFigures;
        let mut r = report(KIND_SCENARIO, names::STORM, "order", during);
        let spike = |accepted: f64, clicks: f64| SpikeFigures {
            goods_id: 3,
            users: 20_000,
            stock: 1_000,
            accepted_per_sec: accepted,
            clicks_per_sec: clicks,
            order_p99_ms: Some(80.0),
            load_secs: 5.0,
        };
        r.storm = Some(StormSummary {
            goods_id: 2,
            orders: 50_000,
            order_ttl_secs: 60,
            buy_accepted_per_sec: 3_000.0,
            buy_secs: Some(19.5),
            paused_secs: 21.0,
            margin_secs: 2.0,
            db_secs: redis_s.map(|s| s - 0.5),
            redis_secs: redis_s,
            db_per_sec: StormSummary::per_sec(50_000, redis_s.map(|s| s - 0.5)),
            redis_per_sec: StormSummary::per_sec(50_000, redis_s),
            baseline: spike(2_000.0, 4_000.0),
            during: spike(during, 3_000.0),
            accepted_ratio: StormSummary::ratio(during, 2_000.0),
            clicks_ratio: Some(0.75),
            rebuy_sample: 1_000,
            rebuy_accepted: 1_000,
            rebuy_success: 1_000,
        });
        r
    }

    #[test]
    fn the_expiry_storm_is_held_to_ten_thousand_a_second_and_the_spike_to_four_fifths() {
        let mut c = Collected::default();
        let (rate, spike) = ("expiry storm:", "spike during the expiry storm");
        assert_eq!((row(&targets(&c), rate).met, row(&targets(&c), spike).met), (None, None));

        c.reports.insert(names::STORM.into(), vec![storm_report(Some(5.0), 1_600.0)]);
        let t = targets(&c);
        let r = row(&t, "expiry storm: 50,000 unpaid orders (TTL 60 s) all expiring at once");
        assert_eq!(
            (r.measured.as_str(), r.goal.as_str(), r.met),
            (
                "10,000 expiries/s (every unit back in Redis after 5.00 s, 10,000 /s; in PostgreSQL after 4.50 s, 11,111 /s)",
                ">= 10,000",
                Some(true)
            )
        );
        let s = row(&t, "spike during the expiry storm (20,000 users, 1,000 units");
        assert_eq!((s.ratio, s.goal.as_str(), s.met), (Some(0.8), ">= 0.8", Some(true)));
        assert_eq!(s.measured, "1,600 /s (clicks answered 3,000 /s, order p99 80.0 ms)");
        assert_eq!(s.against, "without 2,000 /s (clicks answered 4,000 /s, ratio 0.75)");
        // The median of repeated runs is by the storm's rate.
        assert_eq!(c.report(names::STORM).unwrap().0.primary(), 10_000.0);

        let md = render(&c).unwrap();
        assert!(md.contains("### storm\n"), "{md}");
        assert!(md.contains("after 5.000 s, **10,000 expiries/s**"), "{md}");
        assert!(md.contains("(**0.80 x** the accepted rate, 0.75 x the clicks)"), "{md}");
        assert!(
            md.contains("1,000 of the expired buyers bought again: 1,000 accepted (202), 1,000 success"),
            "{md}"
        );
        assert!(md.contains("phase C (storm) as phase B, with order-service restarted alone with `SECKILL__ORDER__TTL_SECS=60`"), "{md}");

        // Slower, or never done within the timeout; a spike slowed down more.
        c.reports.insert(names::STORM.into(), vec![storm_report(Some(71.0), 1_599.0)]);
        let t = targets(&c);
        assert!(row(&t, rate).measured.starts_with("704 expiries/s"), "{:?}", row(&t, rate));
        assert_eq!((row(&t, rate).met, row(&t, spike).met), (Some(false), Some(false)));
        c.reports.insert(names::STORM.into(), vec![storm_report(None, 1_600.0)]);
        let r = row(&targets(&c), rate).clone();
        assert_eq!(
            (r.measured.as_str(), r.met),
            (
                "units not all back in Redis within the timeout (in PostgreSQL not all within the timeout)",
                Some(false)
            )
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
        assert!(!render(&c).unwrap().contains("Shed (`503 BUSY`)"));
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
        // Not a target any more: the section shows the ratios.
        assert!(!targets(&c).iter().any(|t| t.what.contains("per-replica")));
        let md = render(&c).unwrap();
        assert!(
            md.contains(
                "| sold-out | http://127.0.0.1:18080 | as configured | 8,800 (runs: 8,000, 9,500, 8,800) |"
            ),
            "{md}"
        );
        assert!(md.contains("| 0.88 |\n"), "{md}");
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
        // Not a target any more: the section says whether the limit held.
        assert!(!targets(&c).iter().any(|t| t.what.contains("gateways sharing their limits")));
        let md = render(&c).unwrap();
        assert!(
            md.contains("| hot-user-two-gateways | http://127.0.0.1:8080, http://127.0.0.1:18280 | 1,000 | 12 | 0.400 s | 10 + 5 x 0.400 = 12.0 | **yes** | http://127.0.0.1:8080: 500 / 6; http://127.0.0.1:18280: 500 / 6 |"),
            "{md}"
        );
        assert!(
            md.contains(
                "| hot-user | http://127.0.0.1:8080 | 1,000 | 11 | 0.250 s | 10 + 5 x 0.250 = 11.2 | **yes** | - |"
            ),
            "{md}"
        );

        // One more call than the buckets hold: the limit did not hold across the gateways.
        let mut leaky = two;
        leaky.buy.as_mut().unwrap().limit.as_mut().unwrap().let_through = 13;
        c.reports.insert(names::HOT_USER_TWO.into(), vec![leaky]);
        let md = render(&c).unwrap();
        assert!(md.contains("| 10 + 5 x 0.400 = 12.0 | **no** |"), "{md}");
    }

    #[test]
    fn numbers_get_thousands_separators() {
        assert_eq!(n0(1_234_567.4), "1,234,567");
        assert_eq!(n0(999.0), "999");
        assert_eq!(n0(-1_000.0), "-1,000");
    }
}
