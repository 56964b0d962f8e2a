//! One buyer's stream: the current state first, then each change, until a final answer.
//!
//! The stream pulls rather than queues: notices land in its [`Slot`](super::Slot) as the
//! latest fact of each kind, and the place in the room is computed from the gateway's mirror
//! when it is due (as often as a polling page would be told to ask), so however long a
//! client leaves its socket unread, the stream holds at most one of each event for it.
//!
//! An event's id names the state it tells (`r.success.41`, `q.waiting.120.37`): a client
//! reconnecting with `Last-Event-ID` is not told again what it was told last, and one whose
//! last event was its final answer is answered `204` (nothing more will come).

use std::convert::Infallible;
use std::fmt::Write as _;
use std::time::Duration;

use actix_web::web::{self, Bytes};
use futures_util::Stream as _;
use seckill_common::api::{SaleState, SeckillResult, SeckillStatus};
use seckill_common::push::{EventKind, SoldOutEvent};
use seckill_common::room::{QueueState, QueueStatus};
use seckill_common::{GoodsId, headers};
use seckill_web::{ApiError, AuthUser};
use serde::Serialize;
use tokio::time::Instant;

use super::Registration;
use crate::proxy::Service;
use crate::state::Gateway;

/// How long a client waits before reconnecting after a drop (the SSE `retry` field).
const RETRY_MS: u64 = 2_000;
/// The longest silence between two re-reads of the result.
const MAX_REREAD: Duration = Duration::from_secs(60);
/// The soonest a place is computed again.
const MIN_QUEUE_EVERY: Duration = Duration::from_millis(500);
/// A place that could not be read is tried again after this.
const QUEUE_RETRY: Duration = Duration::from_secs(2);
/// Re-reads after the channel came back are spread over up to this, half a millisecond a
/// stream: 20,000 streams re-read over 10 s, 2,000 reads a second.
const MAX_SPREAD: Duration = Duration::from_secs(10);

/// What opening a stream came to.
pub(super) enum Opened {
    Stream(Box<Stream>),
    /// The client's last event was this final answer.
    AlreadyTold,
    /// seckill-service refused the read (the sale does not exist, a place ticket that is not
    /// the buyer's): its status and body, for the client.
    Refused(u16, Bytes),
}

pub(super) struct Stream {
    gateway: web::Data<Gateway>,
    registration: Registration,
    caller: AuthUser,
    sale: GoodsId,
    room_ticket: Option<String>,
    /// What the buyer was told last.
    result: Option<SeckillResult>,
    queue_id: Option<String>,
    sold_out: bool,
    /// The client's `Last-Event-ID`, until the first events are written.
    last_event_id: Option<String>,
    /// Written, not yet handed to the connection.
    out: String,
    ended: bool,
    next_heartbeat: Instant,
    next_reread: Instant,
    reread_gap: Duration,
    next_queue: Option<Instant>,
    idle_until: Instant,
}

impl Stream {
    /// Reads the buyer's state (and place) and writes it as the stream's first events.
    pub(super) async fn open(
        gateway: web::Data<Gateway>,
        registration: Registration,
        caller: AuthUser,
        room_ticket: Option<String>,
        last_event_id: Option<String>,
    ) -> Result<Opened, ApiError> {
        let sale = registration.key.0;
        let result = match Box::pin(read_result(&gateway, sale, &caller)).await? {
            Ok(result) => result,
            Err((status, body)) => return Ok(Opened::Refused(status, body)),
        };
        if is_final(&result) && last_event_id.as_deref() == Some(result_id(&result).as_str()) {
            return Ok(Opened::AlreadyTold);
        }
        let settings = gateway.push.settings().clone();
        let now = Instant::now();
        let reread_gap = Duration::from_secs(settings.reread_secs);
        let mut stream = Stream {
            gateway,
            registration,
            caller,
            sale,
            room_ticket,
            result: None,
            queue_id: None,
            sold_out: false,
            last_event_id,
            out: format!("retry: {RETRY_MS}\n\n"),
            ended: false,
            next_heartbeat: now + Duration::from_secs(settings.heartbeat_secs),
            next_reread: now + reread_gap,
            reread_gap,
            next_queue: None,
            idle_until: now + Duration::from_secs(settings.idle_secs),
        };
        stream.tell_result(result);
        if result.status == SeckillStatus::None {
            stream.tell_sale_state().await;
        }
        if !stream.ended
            && stream.room_ticket.is_some()
            && let Err((status, body)) = stream.update_queue().await?
        {
            return Ok(Opened::Refused(status, body));
        }
        stream.last_event_id = None;
        Ok(Opened::Stream(Box::new(stream)))
    }

    pub(super) fn into_body(self: Box<Self>) -> impl futures_util::Stream<Item = Result<Bytes, Infallible>> {
        let body = futures_util::stream::unfold(self, |mut s| async move {
            let chunk = s.next_chunk().await?;
            Some((Ok(chunk), s))
        });
        debug_assert!(body.size_hint().1.is_none());
        body
    }

    /// The next bytes for the client, waiting until there are some; none once the stream is over.
    async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            if !self.out.is_empty() {
                return Some(Bytes::from(std::mem::take(&mut self.out)));
            }
            if self.ended {
                return None;
            }
            let slot = self.registration.slot.clone();
            let woken = slot.wake.notified();
            let pending = slot.take();
            if pending.replaced {
                self.write(EventKind::Replaced, "replaced", &serde_json::json!({}));
                self.ended = true;
                continue;
            }
            if let Some(result) = pending.result {
                self.tell_result(result);
            }
            if pending.sold_out && !self.ended {
                self.tell_sold_out().await;
            }
            if pending.reread {
                let spread_ms =
                    (self.gateway.push.open_count() as u64 / 2).min(MAX_SPREAD.as_millis() as u64);
                let at = self.registration.slot.serial.wrapping_mul(2_654_435_761) % spread_ms.max(1);
                self.next_reread = self.next_reread.min(Instant::now() + Duration::from_millis(at));
            }
            if !self.out.is_empty() || self.ended {
                continue;
            }
            let now = Instant::now();
            if now >= self.next_reread {
                self.reread().await;
                continue;
            }
            if self.next_queue.is_some_and(|at| now >= at) {
                if !matches!(self.update_queue().await, Ok(Ok(()))) {
                    self.next_queue = Some(now + QUEUE_RETRY);
                }
                continue;
            }
            if now >= self.idle_until {
                metrics::counter!("gateway_push_streams_idle_total").increment(1);
                return None;
            }
            if now >= self.next_heartbeat {
                self.next_heartbeat = now + Duration::from_secs(self.gateway.push.settings().heartbeat_secs);
                return Some(Bytes::from_static(b":\n\n"));
            }
            let mut wake_at = self.next_reread.min(self.idle_until).min(self.next_heartbeat);
            if let Some(at) = self.next_queue {
                wake_at = wake_at.min(at);
            }
            tokio::select! {
                () = woken => {}
                () = tokio::time::sleep_until(wake_at) => {}
                () = self.gateway.push.draining.cancelled() => return None,
            }
        }
    }

    /// Writes one event, unless it is the one the client said it had last.
    fn write(&mut self, kind: EventKind, id: &str, data: &impl Serialize) {
        if self.last_event_id.as_deref() == Some(id) {
            return;
        }
        let Ok(json) = serde_json::to_string(data) else {
            return;
        };
        let _ = write!(self.out, "id: {id}\nevent: {}\ndata: {json}\n\n", kind.as_str());
        metrics::counter!("gateway_push_events_total", "event" => kind.as_str()).increment(1);
        let settings = self.gateway.push.settings();
        let now = Instant::now();
        self.idle_until = now + Duration::from_secs(settings.idle_secs);
        self.reread_gap = Duration::from_secs(settings.reread_secs);
        self.next_reread = now + self.silence();
    }

    /// How long the stream waits for news before reading the result again: from
    /// `push.reread_secs`, doubling, while the buyer has a request in flight (its final answer
    /// is what a lost notice would delay); a minute otherwise (a stream at rest costs its
    /// heartbeats, and a re-read a minute).
    fn silence(&self) -> Duration {
        let in_flight = self.result.is_some_and(|r| r.status == SeckillStatus::Queued);
        if in_flight { self.reread_gap } else { MAX_REREAD }
    }

    /// Tells a result that differs from the last told; a final one ends the stream.
    fn tell_result(&mut self, result: SeckillResult) {
        if self.result == Some(result) {
            return;
        }
        self.result = Some(result);
        self.write(EventKind::Result, &result_id(&result), &result);
        if is_final(&result) {
            self.ended = true;
        }
    }

    /// A sell-out ends the stream of a buyer with nothing in flight. The result is read once
    /// more first: the unit that sold the sale out may be this buyer's, accepted a moment ago
    /// (then the result is what they are told; a final one ends the stream on it).
    async fn tell_sold_out(&mut self) {
        if self.sold_out {
            return;
        }
        self.sold_out = true;
        self.reread().await;
        if !self.ended {
            self.write_sold_out();
        }
    }

    /// A buyer who holds nothing in a sale already sold out or over is told so at once (sold
    /// out), or their stream ends after its first event (over): nothing is left to happen.
    async fn tell_sale_state(&mut self) {
        let path = format!("/api/seckill/{}/state", self.sale);
        let Ok((200, body)) = Box::pin(self.gateway.proxy.get(Service::Seckill, &path)).await else {
            return;
        };
        let Ok(state) = serde_json::from_slice::<SaleState>(&body) else {
            return;
        };
        if state.sold_out {
            self.sold_out = true;
            self.write_sold_out();
        } else if chrono::Utc::now() >= state.end_at {
            self.ended = true;
        }
    }

    /// Writes `sold_out`; the stream of a buyer with nothing in flight (and not admitted to
    /// buy) ends on it.
    fn write_sold_out(&mut self) {
        self.write(EventKind::SoldOut, "sold_out", &SoldOutEvent { goods_id: self.sale });
        let holds_nothing = self.result.is_none_or(|r| r.status == SeckillStatus::None);
        let admitted = self.queue_id.as_deref().is_some_and(|id| id.starts_with("q.admitted"));
        if holds_nothing && !admitted {
            self.ended = true;
        }
    }

    /// Reads the result again (nothing heard for a while, or the channel was down).
    async fn reread(&mut self) {
        metrics::counter!("gateway_push_rereads_total").increment(1);
        // Boxed, as every hop here: the stream's state is as large as its largest await, and
        // it is kept for every open stream however seldom it reads.
        match Box::pin(read_result(&self.gateway, self.sale, &self.caller)).await {
            Ok(Ok(result)) => self.tell_result(result),
            Ok(Err((status, _))) => {
                tracing::debug!(goods_id = %self.sale, status, "push: a re-read was refused")
            }
            Err(e) => tracing::debug!(goods_id = %self.sale, error = %e.message, "push: a re-read failed"),
        }
        self.reread_gap = (self.reread_gap * 2).min(MAX_REREAD);
        self.next_reread = Instant::now() + self.silence();
    }

    /// Where the buyer stands in the room: from the mirror, or asked of seckill-service (whose
    /// answer starts the mirror). Told when it changed; asked again when the answer says.
    async fn update_queue(&mut self) -> Result<Result<(), (u16, Bytes)>, ApiError> {
        let Some(ticket) = self.room_ticket.clone() else {
            return Ok(Ok(()));
        };
        let status = match self.gateway.rooms.status(self.sale, self.caller.id, &ticket) {
            Some(status) => status,
            None => {
                let path = format!("/api/seckill/{}/queue", self.sale);
                let read = self.gateway.proxy.get_as(
                    Service::Seckill,
                    &path,
                    &self.caller,
                    Some((headers::ROOM_TICKET, &ticket)),
                );
                let (status, body) = Box::pin(read).await?;
                if status != 200 {
                    return Ok(Err((status, body)));
                }
                self.gateway.rooms.watch(self.sale);
                serde_json::from_slice::<QueueStatus>(&body).map_err(|e| {
                    ApiError::internal(anyhow::anyhow!("seckill-service's place did not parse: {e}"))
                })?
            }
        };
        let id = queue_id(&status);
        if self.queue_id.as_deref() != Some(id.as_str()) {
            self.write(EventKind::Queue, &id, &status);
            self.queue_id = Some(id);
        }
        let now = Instant::now();
        self.next_queue = status.poll_after_ms.map(|ms| now + Duration::from_millis(ms).max(MIN_QUEUE_EVERY));
        if status.state == QueueState::SoldOut {
            self.tell_sold_out().await;
        }
        Ok(Ok(()))
    }
}

/// The buyer's result as seckill-service answers the poll, or its refusal.
async fn read_result(
    gateway: &Gateway,
    sale: GoodsId,
    caller: &AuthUser,
) -> Result<Result<SeckillResult, (u16, Bytes)>, ApiError> {
    let path = format!("/api/seckill/{sale}/result");
    let (status, body) = gateway.proxy.get_as(Service::Seckill, &path, caller, None).await?;
    if status != 200 {
        return Ok(Err((status, body)));
    }
    serde_json::from_slice(&body)
        .map(Ok)
        .map_err(|e| ApiError::internal(anyhow::anyhow!("seckill-service's result did not parse: {e}")))
}

fn is_final(result: &SeckillResult) -> bool {
    matches!(result.status, SeckillStatus::Success | SeckillStatus::Failed)
}

fn result_id(result: &SeckillResult) -> String {
    match (result.status, result.order_id) {
        (SeckillStatus::Success, Some(order)) => format!("r.success.{order}"),
        (SeckillStatus::Success, None) => "r.success".to_owned(),
        (SeckillStatus::Queued, _) => "r.queued".to_owned(),
        (SeckillStatus::Failed, _) => "r.failed".to_owned(),
        (SeckillStatus::None, _) => "r.none".to_owned(),
    }
}

fn queue_id(status: &QueueStatus) -> String {
    let state = match status.state {
        QueueState::Waiting => "waiting",
        QueueState::Admitted => "admitted",
        QueueState::SoldOut => "sold_out",
        QueueState::Closed => "closed",
    };
    let place = status.place.map_or_else(|| "-".to_owned(), |p| p.to_string());
    let ahead = status.ahead.map_or_else(|| "-".to_owned(), |a| a.to_string());
    format!("q.{state}.{place}.{ahead}")
}
