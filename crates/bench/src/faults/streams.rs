//! A buyer that follows its accepted request on the gateway's event stream
//! (`GET /api/seckill/{id}/events`) instead of polling, as the storefront's page does: the
//! stream's `result` events until a final one; a stream that ends or breaks without one is
//! opened again with the last event's id (`Last-Event-ID`), on the next gateway when its own
//! refuses connections. What it is told is the buyer's final answer: the suite's checks then
//! hold it against the orders, as they do a polled one.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::header::{ACCEPT, AUTHORIZATION, HOST, HeaderValue};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use seckill_common::api::{SeckillResult, SeckillStatus};
use seckill_common::push::{EventKind, SseReader};
use tokio::net::TcpStream;

use super::buyers::{Accepted, Backoff, BuyerLog, Load, Tally};
use super::verdict::check;
use crate::client::{Answer, Endpoint, STATUS_ERROR, STATUS_TIMEOUT};
use crate::invariants::{Check, FinalState};

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
    let opened = tokio::time::timeout(load.request_timeout, open(load, endpoint, bearer, last_id.as_deref()));
    let mut body = match opened.await {
        Ok(Ok(Ok(body))) => body,
        Ok(Ok(Err(refused))) => return Heard::Refused(refused),
        Ok(Err(_)) => return Heard::Refused(Answer::failed(STATUS_ERROR)),
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

/// Opens the buyer's stream on a connection of its own: its body, or the refusal.
async fn open(
    load: &Load,
    endpoint: &Endpoint,
    bearer: &HeaderValue,
    last_id: Option<&str>,
) -> anyhow::Result<Result<hyper::body::Incoming, Answer>> {
    let stream = TcpStream::connect(endpoint.addr()).await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let path = endpoint.path(&format!("/api/seckill/{}/events", load.goods_id));
    let mut request = Request::get(path)
        .header(HOST, endpoint.addr().to_string())
        .header(AUTHORIZATION, bearer.clone())
        .header(ACCEPT, "text/event-stream");
    if let Some(id) = last_id {
        request = request.header("last-event-id", id);
    }
    let response = sender.send_request(request.body(Empty::<Bytes>::new())?).await?;
    if response.status() == StatusCode::OK {
        return Ok(Ok(response.into_body()));
    }
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    Ok(Err(Answer::new(status, body)))
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
