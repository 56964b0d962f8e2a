//! A run's report: one JSON document for machines (docs/bench/*.json), the same figures as a
//! table for people.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::invariants::Check;
use crate::machine::CpuReport;
use crate::memory::ProcMemory;
use crate::record::Event;
use crate::stats::{self, CallStats, Timeline};
use crate::sync::SyncSummary;

pub const KIND_SCENARIO: &str = "scenario";
pub const KIND_HTTP: &str = "http";
pub const KIND_AMQP: &str = "amqp-publish";

/// The shape of a measurement's load.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadShape {
    /// Connections the load went out on.
    pub connections: u64,
    /// Open loop at this many calls a second; none: closed loop.
    pub rate: Option<f64>,
    /// Where the calls went (a scenario's gateways).
    pub gateways: Vec<String>,
    /// Settings of the gateways under load, `key` to `value`, as the run was told them.
    #[serde(default)]
    pub gateway_settings: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// `scenario`, `http` or `amqp-publish`.
    pub kind: String,
    /// The measurement's name (the scenario, or `--name`); repeated runs share it.
    pub name: String,
    pub started_at: String,
    /// The command line that produced it.
    pub command: String,
    /// Every parameter, as the run had them: a record for the reader.
    pub params: serde_json::Value,
    /// What the document reads of them, typed.
    #[serde(default)]
    pub load: LoadShape,
    /// The timed phase: first request to the last request of the load (result polls after the
    /// load are not in it).
    pub duration_secs: f64,
    pub calls: Vec<CallStats>,
    #[serde(default)]
    pub buy: Option<BuySummary>,
    #[serde(default)]
    pub drain: Option<DrainSummary>,
    /// The `sync` scenario's answers and database figures.
    #[serde(default)]
    pub sync: Option<SyncSummary>,
    /// The `storm` scenario's figures: the expiries, and the spikes with and without them.
    #[serde(default)]
    pub storm: Option<StormSummary>,
    /// The `room` scenario's figures: joins, polls, admissions, memory per waiting user.
    #[serde(default)]
    pub room: Option<RoomSummary>,
    /// The `push` scenario's figures: streams held, commit to event, requests per buyer.
    #[serde(default)]
    pub push: Option<crate::push::PushSummary>,
    #[serde(default)]
    pub invariants: Vec<Check>,
    #[serde(default)]
    pub memory: Vec<ProcMemory>,
    #[serde(default)]
    pub cpu: Option<CpuReport>,
    #[serde(default)]
    pub timeline: Timeline,
    #[serde(default)]
    pub notes: Vec<String>,
}

/// What the buyers got.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BuySummary {
    pub goods_id: i64,
    pub stock: i64,
    pub stock_available: Option<i64>,
    pub users: u64,
    pub clicks: u64,
    /// Orders answered 202.
    pub accepted: u64,
    pub success: u64,
    pub failed: u64,
    pub still_queued: u64,
    /// Clicks that did not end in 202, by the outcome of their last call.
    pub refused: BTreeMap<String, u64>,
    pub polls: u64,
    /// `503 BUSY` answers to the clicks' calls (path tokens and orders), retried or not.
    #[serde(default)]
    pub busy_answers: u64,
    /// Clicks still answered BUSY after all their retries (shed: nothing was reserved).
    #[serde(default)]
    pub ended_busy: u64,
    /// Retries a click had for BUSY answers (0: none; reports before retries: 0).
    #[serde(default)]
    pub busy_retries: u32,
    /// The clicks per gateway the load went to, in the order they were given.
    #[serde(default)]
    pub by_gateway: Vec<GatewayClicks>,
    /// The buy routes' rate limit against what it let through (when the run was told the
    /// limit the gateways had).
    #[serde(default)]
    pub limit: Option<LimitCheck>,
}

/// One gateway's share of a load's clicks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GatewayClicks {
    pub gateway: String,
    pub clicks: u64,
    /// Clicks it refused with 429 (its rate limit).
    pub rate_limited: u64,
}

impl GatewayClicks {
    /// Clicks answered by something else than the rate limit's 429.
    pub fn let_through(&self) -> u64 {
        self.clicks - self.rate_limited
    }
}

/// Calls on the buy routes (path tokens and orders) a rate limit let through, against what
/// its buckets allow.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LimitCheck {
    /// The limit: tokens per second and burst of each user's bucket.
    pub per_sec: f64,
    pub burst: f64,
    pub users: u64,
    /// First buy call's start to the last one's answer.
    pub elapsed_s: f64,
    /// `users x (burst + per_sec x elapsed_s)`: the most the buckets let through in that time.
    pub allowance: f64,
    pub calls: u64,
    /// Calls answered with anything but 429 (and answered at all).
    pub let_through: u64,
    /// Calls without an answer (connection error, timeout).
    pub unanswered: u64,
}

impl LimitCheck {
    /// The limit held: no more got through than the buckets allow.
    pub fn held(&self) -> bool {
        self.let_through as f64 <= self.allowance
    }
}

/// How fast the accepted requests became orders.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DrainSummary {
    /// Order calls answered 202 per second over the order call's window.
    pub accepted_per_sec: f64,
    /// First request to the last result seen final.
    pub first_request_to_last_final_s: Option<f64>,
    /// First 202 to the last result seen final.
    pub first_accept_to_last_final_s: Option<f64>,
    /// When the first and the last order rows were written (their `created_at`, sampled),
    /// seconds since the first request.
    #[serde(default)]
    pub first_order_s: Option<f64>,
    #[serde(default)]
    pub last_order_s: Option<f64>,
    /// Successful orders per second from the first 202 to the last order row written (the
    /// drain figure; without order rows, to the last result seen final).
    pub orders_per_sec: Option<f64>,
    /// Orders per second between the first and the last order row written.
    #[serde(default)]
    pub consumer_orders_per_sec: Option<f64>,
    /// Orders per second written after the load ended: the consumer on its backlog alone.
    #[serde(default)]
    pub tail_orders_per_sec: Option<f64>,
    /// The latest moment any user got a final answer (a refusal, or a final result): every
    /// user was answered within this many seconds of the first request.
    pub all_answered_within_s: Option<f64>,
    /// Accepted but not yet written (from the order rows; else not yet seen final) when the
    /// load ended.
    pub backlog_at_load_end: u64,
}

/// An expiry storm: a sale of `orders` units bought by as many users, whose unpaid orders all
/// came due while order-service was stopped, and what the system did once it was resumed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StormSummary {
    pub goods_id: i64,
    /// Orders that expired together (one unit each).
    pub orders: u64,
    pub order_ttl_secs: u64,
    /// The buyers of the sale, before the storm: order calls answered 202 per second, and the
    /// first request to the last result seen final.
    pub buy_accepted_per_sec: f64,
    pub buy_secs: Option<f64>,
    /// How long order-service was held stopped: from just before the first order came due to
    /// `margin_secs` after the last one did.
    pub paused_secs: f64,
    pub margin_secs: f64,
    /// From the resume to every unit back in PostgreSQL (`GET /api/goods/{id}`, polled every
    /// 50 ms) and in Redis (the admin audit, every 250 ms); `None`: not within the timeout.
    pub db_secs: Option<f64>,
    pub redis_secs: Option<f64>,
    /// Expiries per second: `orders` over those times.
    pub db_per_sec: Option<f64>,
    pub redis_per_sec: Option<f64>,
    /// The same spike on the quiet system, and started at the resume.
    pub baseline: SpikeFigures,
    pub during: SpikeFigures,
    /// `during` over `baseline`: accepted buys/s and clicks answered/s.
    pub accepted_ratio: Option<f64>,
    pub clicks_ratio: Option<f64>,
    /// Expired buyers who bought again afterwards: how many tried, were accepted, ended in success.
    pub rebuy_sample: u64,
    pub rebuy_accepted: u64,
    pub rebuy_success: u64,
}

impl StormSummary {
    /// `units` over `secs`, when some time passed.
    pub fn per_sec(units: u64, secs: Option<f64>) -> Option<f64> {
        secs.filter(|s| *s > 0.0).map(|s| units as f64 / s)
    }

    /// `during` over `baseline`, when the baseline measured something.
    pub fn ratio(during: f64, baseline: f64) -> Option<f64> {
        (baseline > 0.0).then(|| during / baseline)
    }
}

/// A waiting room under load: a sale behind one, joined by `users` (`joined_before` of them
/// before its opening), polled, admitted at `rate` a second, bought.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RoomSummary {
    pub goods_id: i64,
    pub users: u64,
    pub stock: i64,
    pub rate: u32,
    pub joined: u64,
    /// The draw's size: joins before the opening.
    pub joined_before: Option<u64>,
    /// Joins answered 200 per second of joining (both phases, closed loop), and their latency.
    pub joins_per_sec: f64,
    pub join_p50_ms: f64,
    pub join_p99_ms: f64,
    /// Status polls answered 200 per second, asked as fast as answered for `poll_secs`.
    pub polls_per_sec: f64,
    pub poll_p50_ms: f64,
    pub poll_p99_ms: f64,
    pub poll_secs: f64,
    /// Places admitted per second, from the count each waiting answer implies (place - ahead).
    pub admitted_per_sec: Option<f64>,
    /// The most places seen admitted.
    pub admitted: u64,
    /// Users told admitted, and their buys (orders answered 202).
    pub told_admitted: u64,
    pub bought: u64,
    pub told_sold_out: u64,
    pub told_closed: u64,
    /// Still waiting (or admitted and not yet bought) when the run gave up.
    pub unfinished: u64,
    /// CPU microseconds a join, and a poll, cost each process (during those phases).
    pub join_us: BTreeMap<String, f64>,
    pub poll_us: BTreeMap<String, f64>,
    /// Redis memory per waiting user, the join script run directly, by size.
    pub memory: Vec<RoomMemory>,
}

/// What `users` waiting users cost Redis: the join script run directly for each, pipelined,
/// on a fresh key prefix (`INFO memory` before and after).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RoomMemory {
    pub users: u64,
    pub bytes: i64,
    pub bytes_per_user: f64,
    pub joins_per_sec: f64,
    /// Redis main-thread CPU per join script call (the whole server's: others' work included).
    pub redis_us_per_join: f64,
}

/// One spike's figures, for comparing the spike during the storm with the one without.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SpikeFigures {
    pub goods_id: i64,
    pub users: u64,
    pub stock: i64,
    /// Order calls answered 202 per second, over their own window.
    pub accepted_per_sec: f64,
    /// Clicks that ended (accepted or refused) per second of load.
    pub clicks_per_sec: f64,
    pub order_p99_ms: Option<f64>,
    pub load_secs: f64,
}

impl SpikeFigures {
    pub fn of(r: &Report) -> Self {
        let buy = r.buy.clone().unwrap_or_default();
        Self {
            goods_id: buy.goods_id,
            users: buy.users,
            stock: buy.stock,
            accepted_per_sec: r.drain.as_ref().map_or(0.0, |d| d.accepted_per_sec),
            clicks_per_sec: if r.duration_secs > 0.0 { buy.clicks as f64 / r.duration_secs } else { 0.0 },
            order_p99_ms: r.row("order", "all").map(|x| x.latency.p99_ms),
            load_secs: r.duration_secs,
        }
    }
}

impl Report {
    pub fn row(&self, call: &str, outcome: &str) -> Option<&CallStats> {
        self.calls.iter().find(|r| r.call == call && r.outcome == outcome)
    }

    /// Requests per second of the load itself: every call but the result polls.
    pub fn load_per_sec(&self) -> f64 {
        self.calls.iter().filter(|r| r.outcome == "all" && r.call != "result").map(|r| r.per_sec).sum()
    }

    pub fn invariants_hold(&self) -> bool {
        self.invariants.iter().all(|c| c.ok)
    }

    /// The one figure a repeated measurement is compared by (its median is reported).
    pub fn primary(&self) -> f64 {
        if let Some(s) = &self.storm {
            return s.redis_per_sec.unwrap_or(0.0);
        }
        if let Some(r) = &self.room {
            return r.joins_per_sec;
        }
        if self.kind == KIND_SCENARIO && self.name.starts_with("drain") {
            return self.drain.as_ref().and_then(|d| d.orders_per_sec).unwrap_or(0.0);
        }
        if let Some(s) = &self.sync {
            return s.accepted_per_sec;
        }
        self.load_per_sec()
    }

    /// The report of a load's calls alone (`events`, the last ending at `end_us`): what a
    /// baseline measures; the caller adds the CPU, memory and notes.
    pub fn of_calls(
        kind: &str,
        name: &str,
        started_at: String,
        params: serde_json::Value,
        events: &[Event],
        end_us: u32,
    ) -> Self {
        Self {
            kind: kind.into(),
            name: name.into(),
            started_at,
            command: this_command(),
            params,
            load: LoadShape::default(),
            duration_secs: f64::from(end_us) / 1e6,
            calls: stats::call_stats(events),
            buy: None,
            drain: None,
            sync: None,
            storm: None,
            room: None,
            push: None,
            invariants: Vec::new(),
            memory: Vec::new(),
            cpu: None,
            timeline: stats::timeline(events, &[], stats::bucket_ms_for(u64::from(end_us))),
            notes: Vec::new(),
        }
    }

    pub fn write_json(&self, path: &Path) -> anyhow::Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
    }

    pub fn read_json(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }

    /// The report as text tables.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "== {} ({}) at {}: {:.2} s of load",
            self.name, self.kind, self.started_at, self.duration_secs
        );
        let _ = writeln!(out, "params: {}", self.params);
        out.push_str(&calls_table(&self.calls));
        if let Some(b) = &self.buy {
            let refused: Vec<String> = b.refused.iter().map(|(k, v)| format!("{k} x{v}")).collect();
            let _ = writeln!(
                out,
                "buyers: {} users, {} clicks: {} accepted (202) -> {} success, {} failed, {} still queued; other answers: {}; {} result polls",
                b.users,
                b.clicks,
                b.accepted,
                b.success,
                b.failed,
                b.still_queued,
                if refused.is_empty() { "none".into() } else { refused.join(", ") },
                b.polls
            );
            let _ = writeln!(
                out,
                "sale {}: {} units, stock_available after the run: {}",
                b.goods_id,
                b.stock,
                b.stock_available.map_or("unknown".into(), |s| s.to_string())
            );
            if b.busy_answers > 0 {
                let _ = writeln!(
                    out,
                    "503 BUSY: {} answers to buy calls, {} of them retried after Retry-After; {} clicks still BUSY after {} retries",
                    b.busy_answers,
                    b.busy_answers - b.ended_busy,
                    b.ended_busy,
                    b.busy_retries
                );
            }
            if b.by_gateway.len() > 1 {
                let split: Vec<String> = b
                    .by_gateway
                    .iter()
                    .map(|g| format!("{} {} clicks, {} let through", g.gateway, g.clicks, g.let_through()))
                    .collect();
                let _ = writeln!(out, "per gateway: {}", split.join("; "));
            }
            if let Some(l) = &b.limit {
                let _ = writeln!(
                    out,
                    "buy limit {}/s burst {}: {} of {} buy calls let through (not 429) in {:.3} s, allowance {:.1} for {} user(s){}{}",
                    l.per_sec,
                    l.burst,
                    l.let_through,
                    l.calls,
                    l.elapsed_s,
                    l.allowance,
                    l.users,
                    if l.unanswered > 0 { format!(", {} unanswered", l.unanswered) } else { String::new() },
                    if l.held() { "" } else { " (MORE THAN THE LIMIT ALLOWS)" }
                );
            }
        }
        if let Some(d) = self.drain.as_ref().filter(|d| d.accepted_per_sec > 0.0) {
            let s = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.3} s"));
            let n = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0}"));
            let _ = writeln!(
                out,
                "drain: accepted {:.0}/s; order rows written from {} to {}: {} orders/s from the first 202 (consumer {}/s between first and last row, {}/s on the backlog after the load); results seen final: first request -> last {}, first 202 -> last {}; every user answered within {}; backlog when the load ended {}",
                d.accepted_per_sec,
                s(d.first_order_s),
                s(d.last_order_s),
                n(d.orders_per_sec),
                n(d.consumer_orders_per_sec),
                n(d.tail_orders_per_sec),
                s(d.first_request_to_last_final_s),
                s(d.first_accept_to_last_final_s),
                s(d.all_answered_within_s),
                d.backlog_at_load_end
            );
        }
        if let Some(s) = &self.sync {
            let _ = writeln!(
                out,
                "sync: {} buys on {} connections, pool {}: {} accepted (200, {:.0}/s), {} sold out (410), {} repeated (409), {} other; database: {} orders of {} users, available {} of {}",
                s.buys,
                s.connections,
                s.pool_size,
                s.accepted,
                s.accepted_per_sec,
                s.sold_out,
                s.repeated,
                s.other,
                s.orders,
                s.distinct_users,
                s.available,
                s.total
            );
        }
        if let Some(s) = &self.storm {
            out.push_str(&storm_lines(s));
        }
        if let Some(r) = &self.room {
            out.push_str(&room_lines(r));
        }
        if let Some(p) = &self.push {
            let _ = writeln!(out, "push: {}", serde_json::to_string(p).unwrap_or_default());
        }
        if !self.memory.is_empty() {
            let m: Vec<String> = self
                .memory
                .iter()
                .map(|m| format!("{} {:.1} MiB (VmHWM {:.1})", m.name, m.peak_rss_mib, m.vm_hwm_mib))
                .collect();
            let _ = writeln!(out, "peak RSS during the run: {}", m.join(", "));
        }
        if let Some(c) = &self.cpu {
            let top: Vec<String> =
                c.by_process.iter().take(8).map(|p| format!("{} {:.2}", p.name, p.cores)).collect();
            let _ = writeln!(
                out,
                "cpu ({} cores, {:.0}% busy; in cores): {}; others {:.2}{}",
                c.cores,
                c.busy * 100.0,
                top.join(", "),
                c.others_cores,
                if c.disturbed { " (DISTURBED)" } else { "" }
            );
        }
        for c in &self.invariants {
            let _ = writeln!(out, "  [{}] {}: {}", if c.ok { "ok" } else { "FAIL" }, c.name, c.detail);
        }
        for n in &self.notes {
            let _ = writeln!(out, "note: {n}");
        }
        out
    }
}

/// The storm's figures as text (the calls table above them is the spike's during the storm).
fn storm_lines(s: &StormSummary) -> String {
    let secs = |v: Option<f64>| v.map_or("- (not within the timeout)".into(), |v| format!("{v:.2} s"));
    let rate = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0}"));
    let ratio = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
    let spike = |f: &SpikeFigures| {
        format!(
            "sale {}, {} users for {} units: {:.0} accepted/s, {:.0} clicks answered/s, order p99 {}",
            f.goods_id,
            f.users,
            f.stock,
            f.accepted_per_sec,
            f.clicks_per_sec,
            f.order_p99_ms.map_or("-".into(), |v| format!("{v:.1} ms"))
        )
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "storm: sale {}, {} orders (TTL {} s; bought at {:.0} accepted/s, all final within {}); order-service stopped {:.1} s, resumed {:.1} s after the last came due",
        s.goods_id,
        s.orders,
        s.order_ttl_secs,
        s.buy_accepted_per_sec,
        secs(s.buy_secs),
        s.paused_secs,
        s.margin_secs
    );
    let _ = writeln!(
        out,
        "storm: every unit back in PostgreSQL after {} ({} expiries/s), in Redis after {} ({} expiries/s)",
        secs(s.db_secs),
        rate(s.db_per_sec),
        secs(s.redis_secs),
        rate(s.redis_per_sec)
    );
    let _ = writeln!(out, "spike without the storm: {}", spike(&s.baseline));
    let _ = writeln!(
        out,
        "spike during the storm:  {}; ratio {} accepted, {} clicks",
        spike(&s.during),
        ratio(s.accepted_ratio),
        ratio(s.clicks_ratio)
    );
    let _ = writeln!(
        out,
        "bought again: {} expired buyers, {} accepted (202), {} success",
        s.rebuy_sample, s.rebuy_accepted, s.rebuy_success
    );
    out
}

/// The room's figures as text (the calls above: `join`, `queue` as fast as answered,
/// `queue-wait` with back-off, and the admitted's buys).
fn room_lines(r: &RoomSummary) -> String {
    let us = |m: &BTreeMap<String, f64>| {
        m.iter().map(|(k, v)| format!("{k} {v:.0}")).collect::<Vec<_>>().join(", ")
    };
    let memory: Vec<String> =
        r.memory.iter().map(|m| format!("{:.1} B at {} users", m.bytes_per_user, m.users)).collect();
    format!(
        "room: {} of {} users joined ({} before the opening): {:.0} joins/s, p99 {:.1} ms; polls {:.0}/s, p99 \
         {:.1} ms; admitted {:.1}/s at rate {}, {} bought of {} units, {} told sold out, {} closed, {} \
         unfinished\nroom: CPU µs a join: {}; a poll: {}\nroom: Redis memory per waiting user: {}\n",
        r.joined,
        r.users,
        r.joined_before.map_or("?".into(), |n| n.to_string()),
        r.joins_per_sec,
        r.join_p99_ms,
        r.polls_per_sec,
        r.poll_p99_ms,
        r.admitted_per_sec.unwrap_or(0.0),
        r.rate,
        r.bought,
        r.stock,
        r.told_sold_out,
        r.told_closed,
        r.unfinished,
        us(&r.join_us),
        us(&r.poll_us),
        memory.join(", ")
    )
}

/// The per call and outcome table.
pub fn calls_table(rows: &[CallStats]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<11} {:>7} {:>9} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "call", "outcome", "count", "req/s", "p50 ms", "p90 ms", "p99 ms", "p99.9", "max ms"
    );
    for r in rows {
        let l = &r.latency;
        let _ = writeln!(
            out,
            "{:<11} {:>7} {:>9} {:>10.0} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
            r.call, r.outcome, r.count, r.per_sec, l.p50_ms, l.p90_ms, l.p99_ms, l.p999_ms, l.max_ms
        );
    }
    out
}

/// The command line of this process, for the report.
/// The command line of this process, the program named `seckill-bench` whatever its path.
pub fn this_command() -> String {
    std::iter::once("seckill-bench".to_owned()).chain(std::env::args().skip(1)).collect::<Vec<_>>().join(" ")
}

pub fn now_rfc3339() -> String {
    rfc3339(chrono::Utc::now())
}

/// UTC with milliseconds (sorts as text in time order).
pub fn rfc3339(at: chrono::DateTime<chrono::Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
