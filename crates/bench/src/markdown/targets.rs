//! The targets: each a figure of this run against its reference (a baseline of the same run)
//! and its goal.

use crate::record::Call;
use crate::report::{KIND_SCENARIO, Report};

use super::{Collected, n0, names};

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

pub(super) fn runs_text(values: &[f64]) -> String {
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

pub(super) fn accepted_per_sec(r: &Report) -> f64 {
    r.drain.as_ref().map_or(0.0, |x| x.accepted_per_sec)
}

pub(super) fn connections(r: &Report) -> u64 {
    r.load.connections
}

/// The order call's p99 over all its answers (NaN without order calls).
pub(super) fn order_p99(r: &Report) -> f64 {
    r.row(Call::Order.name(), "all").map_or(f64::NAN, |x| x.latency.p99_ms)
}

/// The order p99 target row of an open-loop run at a set rate (`rate_is` says where the rate
/// came from).
pub(super) fn open_loop_p99(r: &Report, rate_is: &str) -> Target {
    let p99 = order_p99(r);
    let rate = r.load.rate.unwrap_or(0.0);
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
pub(super) struct OrderAnswers {
    pub(super) calls: u64,
    pub(super) accepted: u64,
    pub(super) busy: u64,
    pub(super) other: Vec<(String, u64)>,
}

impl OrderAnswers {
    /// From the per-status rows. The report counts BUSY answers per click, path-token calls
    /// included: the 503 rows of the order call are BUSY up to that count (exact without path
    /// tokens, as overload runs).
    pub(super) fn of(r: &Report) -> Self {
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

    pub(super) fn all_202_or_busy(&self) -> bool {
        self.calls > 0 && self.other.is_empty()
    }
}

/// An overload scenario: its report's name, the multiple of drain's closed-loop accepted rate
/// it offers, and the share of that rate it must still accept.
pub(super) struct Overload {
    pub(super) name: &'static str,
    pub(super) times: f64,
    pub(super) accepted_goal: f64,
}

pub(super) const OVERLOADS: [Overload; 2] = [
    Overload { name: names::OVERLOAD, times: 2.0, accepted_goal: 0.9 },
    Overload { name: names::OVERLOAD_5X, times: 5.0, accepted_goal: 0.8 },
];

/// An overload scenario's targets (open loop at a multiple of the closed-loop accepted rate):
/// every order call answered 202 or `503 BUSY`, the order p99 over all answers, the accepted
/// rate against the closed loop's, the invariants.
pub(super) fn overload(c: &Collected, o: &Overload) -> [Target; 4] {
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
    let rate = r.load.rate.unwrap_or(0.0);
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
pub(super) fn storm(c: &Collected) -> [Target; 2] {
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
pub(super) fn room(c: &Collected) -> Vec<Target> {
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
pub(super) fn push(c: &Collected) -> Vec<Target> {
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
pub(super) fn largest_service_memory(c: &Collected) -> Target {
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

pub(super) fn missing(what: &str, goal: &str) -> Target {
    Target {
        what: what.into(),
        measured: "not measured".into(),
        against: String::new(),
        ratio: None,
        goal: goal.into(),
        met: None,
    }
}
