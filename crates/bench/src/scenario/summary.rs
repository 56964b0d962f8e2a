//! The run's figures from its clicks, its polls and the order rows: what the report says.

use std::collections::BTreeMap;

use chrono::Utc;
use hyper::header::HeaderValue;
use serde_json::json;

use crate::api;
use crate::client::{Conn, STATUS_ERROR, STATUS_TIMEOUT};
use crate::invariants::{Buyer, FinalState};
use crate::record::{Call, Event, outcome_label};
use crate::report::{BuySummary, DrainSummary, GatewayClicks, LimitCheck};
use crate::stats;

use super::click::{Click, is_undecided};
use super::poll::PollOut;
use super::{BuyLimit, ScenarioConfig, Timed};

pub(super) fn secs(us: u32) -> f64 {
    f64::from(us) / 1e6
}

/// Each user's clicks and final result, as the load and the poller saw them.
pub(super) fn fold_outcomes(buyers: &mut [Buyer], clicks: &[Click], polled: &PollOut) {
    for c in clicks {
        let b = &mut buyers[c.user];
        b.clicks += 1;
        if c.accepted() {
            b.accepted += 1;
        } else {
            if c.ended_busy {
                b.busy_clicks += 1;
            } else if is_undecided(c.status) {
                b.undecided_clicks += 1;
            }
            b.answered_us = Some(b.answered_us.unwrap_or(0).max(c.answered_us));
        }
    }
    for (user, fin) in &polled.finals {
        let b = &mut buyers[*user];
        b.result = Some(fin.state);
        b.order_id = fin.order_id;
        b.answered_us = fin.at_us.map(|at| at.max(b.answered_us.unwrap_or(0)));
    }
}

/// Clicks, acceptances, final results and refusals by call and outcome.
pub(super) fn buy_summary(
    cfg: &ScenarioConfig,
    goods_id: i64,
    stock_available: Option<i64>,
    buyers: &[Buyer],
    timed: &Timed,
) -> BuySummary {
    let mut refused: BTreeMap<String, u64> = BTreeMap::new();
    for c in timed.clicks.iter().filter(|c| !c.accepted()) {
        let label = format!("{} {}", c.last.name(), outcome_label(c.last, c.status));
        *refused.entry(label).or_default() += 1;
    }
    let count_result = |s: FinalState| buyers.iter().filter(|b| b.result == Some(s)).count() as u64;
    BuySummary {
        goods_id,
        stock: cfg.stock(),
        stock_available,
        users: cfg.users(),
        clicks: timed.clicks.len() as u64,
        accepted: buyers.iter().map(|b| u64::from(b.accepted)).sum(),
        success: count_result(FinalState::Success),
        failed: count_result(FinalState::Failed),
        still_queued: count_result(FinalState::Queued),
        refused,
        polls: timed.polled.events.len() as u64,
        busy_answers: timed.clicks.iter().map(|c| u64::from(c.busy_answers)).sum(),
        ended_busy: timed.clicks.iter().filter(|c| c.ended_busy).count() as u64,
        busy_retries: cfg.busy.retries,
        by_gateway: by_gateway(cfg.click_gateways(), &timed.clicks),
        limit: cfg.buy_limit.map(|l| limit_check(l, &timed.events, cfg.users())),
    }
}

/// Clicks, and those the gateway's rate limit refused (429), per click gateway.
pub(super) fn by_gateway(gateways: &[String], clicks: &[Click]) -> Vec<GatewayClicks> {
    gateways
        .iter()
        .enumerate()
        .map(|(k, g)| {
            let mine = clicks.iter().filter(|c| c.gateway == k);
            GatewayClicks {
                gateway: g.clone(),
                clicks: mine.clone().count() as u64,
                rate_limited: mine.filter(|c| c.status == 429).count() as u64,
            }
        })
        .collect()
}

/// The buy-route calls of the load (path tokens and orders) the limit let through, against
/// what it allows `users` users from the first such call's start to the last one's answer. A
/// call without an answer (connection error, timeout) is counted apart: nobody knows what the
/// limit did with it.
pub(super) fn limit_check(limit: BuyLimit, events: &[Event], users: u64) -> LimitCheck {
    let buy = events.iter().filter(|e| matches!(e.call, Call::Order | Call::PathToken));
    let first = buy.clone().map(Event::start_us).min().unwrap_or(0);
    let elapsed_s = secs(buy.clone().map(|e| e.end_us).max().unwrap_or(0).saturating_sub(first));
    let unanswered = buy.clone().filter(|e| matches!(e.status, STATUS_ERROR | STATUS_TIMEOUT)).count() as u64;
    let rate_limited = buy.clone().filter(|e| e.status == 429).count() as u64;
    let calls = buy.count() as u64;
    LimitCheck {
        per_sec: limit.per_sec,
        burst: limit.burst,
        users,
        elapsed_s,
        allowance: users as f64 * limit.allowance(elapsed_s),
        calls,
        let_through: calls - rate_limited - unanswered,
        unanswered,
    }
}

/// `(order id, user)` of every user who got an order, by order id.
pub(super) fn winners_by_order(buyers: &[Buyer]) -> Vec<(i64, usize)> {
    let mut winners: Vec<(i64, usize)> = buyers
        .iter()
        .enumerate()
        .filter(|(_, b)| b.result == Some(FinalState::Success))
        .filter_map(|(i, b)| b.order_id.map(|o| (o, i)))
        .collect();
    winners.sort_unstable();
    winners
}

/// How fast the accepted requests became orders: from the results seen final and, when they
/// could be read back, the order rows' creation times.
pub(super) fn drain_summary(
    timed: &Timed,
    buyers: &[Buyer],
    final_times: &[u32],
    rows: &OrderRows,
    success: u64,
) -> DrainSummary {
    let accept_times: Vec<u32> =
        timed.events.iter().filter(|e| e.call == Call::Order && e.status == 202).map(|e| e.end_us).collect();
    let last_final = final_times.iter().copied().max();
    let first_accept = accept_times.iter().copied().min();
    let all_answered = if buyers.iter().any(|b| b.clicks > 0 && b.answered_us.is_none()) {
        None
    } else {
        buyers.iter().filter_map(|b| b.answered_us).max().map(secs)
    };
    let drain_window = match (first_accept, last_final) {
        (Some(a), Some(f)) if f > a => Some(secs(f - a)),
        _ => None,
    };
    DrainSummary {
        accepted_per_sec: stats::call_stats(
            &timed.events.iter().filter(|e| e.call == Call::Order).copied().collect::<Vec<_>>(),
        )
        .iter()
        .find(|r| r.outcome == "202")
        .map_or(0.0, |r| r.count as f64 / r.window_secs.max(1e-6)),
        first_request_to_last_final_s: last_final.map(secs),
        first_accept_to_last_final_s: drain_window,
        first_order_s: rows.first_s,
        last_order_s: rows.last_s,
        // First 202 to the last order row written; without rows, to the last result seen final.
        orders_per_sec: match (first_accept, rows.last_s) {
            (Some(a), Some(last)) if last > secs(a) => Some(stats::per_sec(success, last - secs(a))),
            _ => drain_window.map(|w| stats::per_sec(success, w)),
        },
        consumer_orders_per_sec: rows.consumer_per_sec,
        tail_orders_per_sec: rows.tail_per_sec,
        all_answered_within_s: all_answered,
        backlog_at_load_end: rows.backlog.unwrap_or(timed.backlog),
    }
}

/// The run's parameters, as the report records them.
pub(super) fn scenario_params(cfg: &ScenarioConfig, total_clicks: Option<u64>) -> serde_json::Value {
    json!({
        "scenario": cfg.scenario.name(),
        "gateway": cfg.gateway(),
        "gateways": cfg.click_gateways(),
        "buy_limit": cfg.buy_limit,
        "gateway_settings": cfg.gateway_settings(),
        "users": cfg.users(),
        "stock": cfg.stock(),
        "connections": cfg.connections(),
        "clicks": total_clicks,
        "duration_secs": cfg.duration().map(|d| d.as_secs_f64()),
        "rate": cfg.rate,
        "path_token": cfg.path_token,
        "path_token_once": cfg.path_token_once(),
        "busy_retries": cfg.busy.retries,
        "busy_max_wait_s": cfg.busy.max_wait.as_secs_f64(),
        "first_user": cfg.first_user,
        "poll_interval_ms": cfg.poll_interval.as_millis() as u64,
        "poll_connections": cfg.poll_connections(),
        "poll_during_load": cfg.poll_during_load(),
        "paused_during_load": cfg.pause_pids,
    })
}

/// `(rank, seconds since the first request)` of sampled winners' order rows: `samples`
/// orders evenly spread over the winners sorted by order id (ids grow in insertion order),
/// read back with their owner's token. `created_at` is the database's `now()` of the insert.
pub(super) async fn order_times(
    conn: &mut Conn,
    tokens: &[HeaderValue],
    winners: &[(i64, usize)],
    t0_wall: chrono::DateTime<Utc>,
    samples: usize,
) -> Vec<(usize, f64)> {
    let n = winners.len();
    if n == 0 || samples == 0 {
        return Vec::new();
    }
    let picks: Vec<usize> = if n <= samples {
        (0..n).collect()
    } else {
        let mut p: Vec<usize> = (0..samples).map(|k| k * (n - 1) / (samples - 1).max(1)).collect();
        p.dedup();
        p
    };
    let mut out = Vec::with_capacity(picks.len());
    for rank in picks {
        let (order_id, user) = winners[rank];
        if let Ok(order) = api::order(conn, &tokens[user], order_id).await {
            let us = (order.created_at - t0_wall).num_microseconds().unwrap_or(0);
            out.push((rank, us as f64 / 1e6));
        }
    }
    out
}

/// The drain timed at the order rows, from [`order_times`].
#[derive(Debug, Default, PartialEq)]
pub(super) struct OrderRows {
    pub(super) first_s: Option<f64>,
    pub(super) last_s: Option<f64>,
    /// Orders per second between the first and the last row written.
    pub(super) consumer_per_sec: Option<f64>,
    /// Orders per second written after the load ended (the backlog alone), when at least 5%
    /// of the orders were written then.
    pub(super) tail_per_sec: Option<f64>,
    /// Orders not yet written when the load ended.
    pub(super) backlog: Option<u64>,
}

impl OrderRows {
    pub(super) fn new(written: &[(usize, f64)], n: usize, load_end_s: f64) -> Self {
        let (Some(first), Some(last)) = (written.first(), written.last()) else {
            return Self::default();
        };
        // Times are those of whole insert batches: the earliest and latest stand for them.
        let first_s = written.iter().map(|w| w.1).fold(f64::INFINITY, f64::min);
        let last_s = written.iter().map(|w| w.1).fold(f64::NEG_INFINITY, f64::max);
        let span = last_s - first_s;
        let consumer_per_sec = (span > 0.0 && n > 1).then(|| (last.0 - first.0) as f64 / span);
        // Rank written by the end of the load, interpolated between samples.
        let done_by_end = written.iter().filter(|w| w.1 <= load_end_s).map(|w| w.0 + 1).max().unwrap_or(0);
        let backlog = n.saturating_sub(done_by_end) as u64;
        let tail = last_s - load_end_s;
        let tail_per_sec = (backlog as f64 >= 0.05 * n as f64 && tail > 0.0).then(|| backlog as f64 / tail);
        Self {
            first_s: Some(first_s),
            last_s: Some(last_s),
            consumer_per_sec,
            tail_per_sec,
            backlog: Some(backlog),
        }
    }
}

/// Synthetic per-order times (µs) from sampled ranks: the orders between two samples spread
/// evenly over the time between them, for the chart's "orders written" line.
pub(super) fn spread_marks(written: &[(usize, f64)]) -> Vec<u32> {
    let mut marks = Vec::new();
    let us = |s: f64| (s.max(0.0) * 1e6) as u32;
    if let Some(first) = written.first() {
        marks.push(us(first.1));
    }
    for pair in written.windows(2) {
        let ((r0, t0), (r1, t1)) = (pair[0], pair[1]);
        let k = r1.saturating_sub(r0);
        for j in 1..=k {
            marks.push(us(t0 + (t1 - t0) * j as f64 / k as f64));
        }
    }
    marks
}
