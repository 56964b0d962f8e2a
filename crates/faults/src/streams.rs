//! A buyer that follows its accepted request on the gateway's event stream
//! (`GET /api/seckill/{id}/events`) instead of polling, as the storefront's page does: the
//! stream's `result` events until a final one; a stream that ends or breaks without one is
//! opened again with the last event's id (`Last-Event-ID`), on the next gateway when its own
//! refuses connections. What it is told is the buyer's final answer: the suite's checks then
//! hold it against the orders, as they do a polled one.

use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use hyper::header::HeaderValue;
use seckill_common::api::{SeckillResult, SeckillStatus};
use seckill_common::push::{EventKind, SseReader};

use super::buyers::{Accepted, Backoff, BuyerLog, Load, Tally};
use super::verdict::check;
use seckill_harness::client::{Answer, Endpoint, STATUS_ERROR, STATUS_TIMEOUT, open_events};
use seckill_harness::invariants::{Check, FinalState};

/// How one stream ended.
enum Heard {
    /// A final result: the buyer's answer.
    Final(FinalState, Option<i64>),
    /// Ended or broke without one (its gateway stopped, or the stream's idle limit).
    Dropped,
    /// Not opened: the gateway's answer (a refused connection is [`STATUS_ERROR`]).
    Refused(Answer),
}

/// Follows `acc` on streams until a final result or `load.result_wait`, starting on gateway
/// `first` (and the next ones when it is unreachable).
pub(super) async fn follow(
    load: &Load,
    first: usize,
    bearer: &HeaderValue,
    mut acc: Accepted,
    tally: &mut Tally,
    user_id: i64,
) -> Accepted {
    let start = Instant::now();
    let mut last_id: Option<String> = None;
    let mut gateway = first;
    let mut backoff = Backoff::new(user_id);
    while start.elapsed() < load.result_wait {
        let left = load.result_wait.saturating_sub(start.elapsed());
        match listen(load, load.endpoint(gateway), bearer, &mut last_id, &mut acc, left).await {
            Heard::Final(state, order_id) => {
                acc.state = state;
                acc.order_id = order_id;
                acc.final_s = Some(load.secs());
                return acc;
            }
            Heard::Dropped => backoff.reset(),
            Heard::Refused(a) => {
                if a.status == STATUS_ERROR {
                    gateway += 1;
                }
                if !tally.retryable(&a) {
                    tally.bad(load.secs(), user_id, "GET .../events", &a);
                    if a.status < 500 {
                        return acc;
                    }
                }
            }
        }
        backoff.wait().await;
    }
    acc
}

/// One stream, from its opening to its end (or `within`). Each `result` event told is noted
/// in `acc`; `last_id` keeps the last event's id for the next opening.
async fn listen(
    load: &Load,
    endpoint: &Endpoint,
    bearer: &HeaderValue,
    last_id: &mut Option<String>,
    acc: &mut Accepted,
    within: Duration,
) -> Heard {
    let opened = open_events(endpoint, &load.paths.events, bearer, last_id.as_deref());
    let mut body = match tokio::time::timeout(load.request_timeout, opened).await {
        Ok(Ok(body)) => body,
        Ok(Err(refused)) => return Heard::Refused(refused),
        Err(_) => return Heard::Refused(Answer::failed(STATUS_TIMEOUT)),
    };
    let mut reader = SseReader::default();
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(frame))) => frame,
            _ => return Heard::Dropped,
        };
        let Some(data) = frame.data_ref() else { continue };
        for event in reader.push(&String::from_utf8_lossy(data)) {
            if event.id.is_some() {
                last_id.clone_from(&event.id);
            }
            if event.kind() != Some(EventKind::Result) {
                continue;
            }
            let Ok(told) = serde_json::from_str::<SeckillResult>(&event.data) else { continue };
            let order_id = told.order_id.map(|o| o.get());
            match told.status {
                SeckillStatus::Success => return Heard::Final(FinalState::Success, order_id),
                SeckillStatus::Failed => return Heard::Final(FinalState::Failed, None),
                SeckillStatus::Queued => acc.state = FinalState::Queued,
                SeckillStatus::None => acc.state = FinalState::None,
            }
        }
    }
}

/// A streams case's own check: every accepted request's final answer was told on its stream;
/// the detail says how many streams were open (accepted, not yet answered) at the fault.
pub(super) fn judge(logs: &[BuyerLog], fault_s: Option<f64>) -> Check {
    let accepted: Vec<&Accepted> = logs.iter().flat_map(|l| &l.accepted).collect();
    let told = accepted.iter().filter(|a| a.is_final()).count();
    let open_at_fault = fault_s.map_or(0, |f| {
        accepted.iter().filter(|a| a.at_s <= f && a.final_s.is_none_or(|end| end > f)).count()
    });
    check(
        "every final answer told on a stream",
        told == accepted.len(),
        format!(
            "{told} of {} accepted requests told their final answer on their stream; {open_at_fault} \
             streams open when the fault came",
            accepted.len()
        ),
    )
}
