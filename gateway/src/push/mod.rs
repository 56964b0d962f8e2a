//! Buyers' event streams: `GET /api/seckill/{id}/events` tells a buyer, as server-sent
//! events, their result, their place in the waiting room and a sell-out, as they happen,
//! instead of their page polling.
//!
//! The path of a fact: order-service's result scripts write the buyer's result and publish it
//! on the sale's Redis channel in one atomic step (`seckill_common::push`); seckill-service
//! publishes a sell-out there. Each gateway replica holds one pub/sub connection
//! ([`channel`]), subscribed to the sales it holds streams of, and hands each notice to the
//! one stream it concerns ([`Slot`]). A notice can be lost (nothing is kept for a subscriber
//! that is away), so a stream never rests on one: it reads the result when it opens, when the
//! channel reconnects, and after a silence ([`stream`]).
//!
//! Bounded: one stream per buyer and sale on a replica (a new one replaces the old),
//! `push.max_streams` a replica, a heartbeat and an idle limit per stream; what a stream has
//! not sent is one slot per kind of fact, never a queue, so a reader that does not read
//! costs no more than one that does ([`Pending`]).

mod channel;
mod stream;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use aws_lc_rs::hmac;
use dashmap::DashMap;
use seckill_common::api::{Role, SeckillResult};
use seckill_common::config::RedisSettings;
use seckill_common::keys::RedisKeys;
use seckill_common::push::StreamTicketResponse;
use seckill_common::room::{RoomKey, StreamTicket};
use seckill_common::{ErrorCode, GoodsId, UserId, headers};
use seckill_infra::redis::Redis;
use seckill_web::{ApiError, AuthUser, Lifecycle};
use serde::Deserialize;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::configuration::PushSettings;
use crate::rate_limit::{Class, Who};
use crate::rooms::now_ms;
use crate::state::{Gateway, goods_of};

pub use channel::Channel;

/// The gateway's streams.
pub struct Push {
    settings: PushSettings,
    /// Seals stream tickets: a key of their own, derived from the JWT secret.
    tickets: RoomKey,
    /// Where a ticket's one use is marked.
    redis: Redis,
    keys: RedisKeys,
    streams: DashMap<(GoodsId, UserId), Arc<Slot>>,
    open: AtomicUsize,
    next_serial: AtomicU64,
    pub channel: Channel,
    /// The gateway is stopping: every stream ends (its client reconnects to another replica).
    draining: CancellationToken,
}

/// What the channel has for one stream and the stream has not sent yet: the latest of each
/// kind of fact, so a notice replaces an unsent one rather than queueing behind it.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    result: Option<SeckillResult>,
    sold_out: bool,
    /// The same buyer opened another stream of the sale here.
    replaced: bool,
    /// The channel was down for a while: notices may have been lost.
    reread: bool,
}

/// One open stream's mailbox.
pub(crate) struct Slot {
    serial: u64,
    pending: Mutex<Pending>,
    wake: Notify,
}

impl Slot {
    fn tell(&self, fact: impl FnOnce(&mut Pending)) {
        fact(&mut self.pending.lock().unwrap_or_else(PoisonError::into_inner));
        self.wake.notify_one();
    }

    fn take(&self) -> Pending {
        std::mem::take(&mut *self.pending.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// A stream's place in the registry, given up when the stream's body is dropped (the client
/// went away, the stream ended, or a newer one replaced it).
pub(crate) struct Registration {
    push: Arc<Push>,
    key: (GoodsId, UserId),
    slot: Arc<Slot>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.push.streams.remove_if(&self.key, |_, slot| slot.serial == self.slot.serial);
        let open = self.push.open.fetch_sub(1, Ordering::Relaxed) - 1;
        metrics::gauge!("gateway_push_streams_open").set(open as f64);
    }
}

impl Push {
    pub fn new(
        settings: PushSettings,
        draining: CancellationToken,
        jwt_secret: &str,
        redis: Redis,
        redis_settings: &RedisSettings,
        keys: RedisKeys,
    ) -> anyhow::Result<Self> {
        let derived = hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, jwt_secret.as_bytes()),
            b"seckill/stream-ticket/v1",
        );
        Ok(Self {
            settings,
            tickets: RoomKey::new(derived.as_ref())?,
            channel: Channel::new(redis_settings, keys.clone())?,
            redis,
            keys,
            streams: DashMap::new(),
            open: AtomicUsize::new(0),
            next_serial: AtomicU64::new(1),
            draining,
        })
    }

    pub fn settings(&self) -> &PushSettings {
        &self.settings
    }

    /// A stream for `user` in `g`: refused past `push.max_streams`; an older stream of the
    /// same buyer and sale on this replica is told it was replaced.
    fn register(self: &Arc<Self>, g: GoodsId, user: UserId) -> Result<Registration, ApiError> {
        let open = self.open.fetch_add(1, Ordering::Relaxed) + 1;
        let slot = Arc::new(Slot {
            serial: self.next_serial.fetch_add(1, Ordering::Relaxed),
            pending: Mutex::default(),
            wake: Notify::new(),
        });
        // From here the count is the registration's to give back, refused or not.
        let registration = Registration { push: self.clone(), key: (g, user), slot: slot.clone() };
        if open > self.settings.max_streams {
            metrics::counter!("gateway_push_refused_total", "why" => "full").increment(1);
            return Err(ApiError::new(
                ErrorCode::Busy,
                "too many open streams here: poll the result instead",
            )
            .with_retry_after(Duration::from_secs(5)));
        }
        metrics::gauge!("gateway_push_streams_open").set(open as f64);
        if let Some(old) = self.streams.insert((g, user), slot) {
            old.tell(|p| p.replaced = true);
        }
        Ok(registration)
    }

    /// The sales this replica holds streams of.
    fn sales(&self) -> Vec<GoodsId> {
        let mut sales: Vec<GoodsId> = self.streams.iter().map(|s| s.key().0).collect();
        sales.sort_unstable();
        sales.dedup();
        sales
    }

    /// Hands a notice to the stream it concerns (a sell-out, to every stream of the sale).
    fn deliver(&self, g: GoodsId, notice: seckill_common::push::Notice) {
        use seckill_common::push::Notice;
        match notice {
            Notice::Result { user, result } => {
                if let Some(slot) = self.streams.get(&(g, user)) {
                    slot.tell(|p| p.result = Some(result));
                }
            }
            Notice::SoldOut => {
                for slot in self.streams.iter().filter(|s| s.key().0 == g) {
                    slot.tell(|p| p.sold_out = true);
                }
            }
        }
    }

    /// Every stream reads its result again (spread over a while): the channel was down.
    fn reread_all(&self) {
        for slot in self.streams.iter() {
            slot.tell(|p| p.reread = true);
        }
    }

    fn open_count(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Spends a stream ticket's one use: false when it was spent before. Redis holds the
    /// mark for the ticket's life, so any replica finds it.
    async fn spend(&self, ticket: &StreamTicket, now_ms: i64) -> Result<bool, ApiError> {
        let key = self.keys.stream_ticket(ticket.sale, &ticket.nonce);
        let life_ms = (ticket.expires_ms - now_ms).max(1);
        let set: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(1)
            .arg("NX")
            .arg("PX")
            .arg(life_ms)
            .query_async(&mut self.redis.clone())
            .await
            .map_err(|e| ApiError::unavailable("redis", e))?;
        Ok(set.is_some())
    }
}

fn sale_of(req: &HttpRequest) -> Result<GoodsId, ApiError> {
    goods_of(req).ok_or_else(|| ApiError::invalid("the sale id must be a positive whole number"))
}

/// `POST /api/seckill/{goods_id}/events/ticket`: a one-use ticket to open the buyer's stream
/// where no `Authorization` header can be sent (a browser's EventSource). With the buyer's
/// place ticket (`x-room-ticket`), the stream also tells their place.
pub async fn ticket(req: HttpRequest, gateway: web::Data<Gateway>) -> Result<HttpResponse, ApiError> {
    let caller = gateway.auth.authenticate(&req)?;
    gateway.limits.take(Class::Stream, Who::user(caller.id)).await?;
    let sale = sale_of(&req)?;
    let place = match (req.headers().get(headers::ROOM_TICKET), gateway.rooms.key()) {
        (Some(value), Some(key)) => {
            let text = value.to_str().map_err(|_| bad_place())?;
            Some(key.open_ticket(text, sale, caller.id).map_err(|_| bad_place())?)
        }
        _ => None,
    };
    let ttl = gateway.push.settings.ticket_ttl_secs;
    let ticket = StreamTicket {
        sale,
        user: caller.id,
        expires_ms: now_ms() + (ttl * 1000) as i64,
        nonce: uuid::Uuid::new_v4().simple().to_string(),
        place,
    };
    Ok(HttpResponse::Ok().json(StreamTicketResponse {
        ticket: ticket.seal(&gateway.push.tickets),
        expires_in_secs: ttl as u32,
    }))
}

fn bad_place() -> ApiError {
    ApiError::new(ErrorCode::BadToken, "the place ticket is not this buyer's for this sale")
}

/// The query of `GET .../events`.
#[derive(Debug, Default, Deserialize)]
struct EventsQuery {
    ticket: Option<String>,
    /// For a client that cannot send the `Last-Event-ID` header.
    last_event_id: Option<String>,
}

/// `GET /api/seckill/{goods_id}/events`: the buyer's stream (see the module's text).
/// Authenticated by `Authorization: Bearer` or by a stream ticket (`?ticket=`).
pub async fn events(req: HttpRequest, gateway: web::Data<Gateway>) -> Result<HttpResponse, ApiError> {
    let sale = sale_of(&req)?;
    let query = web::Query::<EventsQuery>::from_query(req.query_string())
        .map_err(|_| ApiError::invalid("the query names `ticket` or `last_event_id` more than once"))?
        .into_inner();
    let push = gateway.push.clone();
    let (caller, room_ticket, ticket) = match &query.ticket {
        Some(text) => {
            let ticket = push
                .tickets
                .open_stream_ticket(text, sale, now_ms())
                .map_err(|e| ApiError::new(ErrorCode::Unauthorized, format!("the stream ticket: {e}")))?;
            let room = ticket.place.zip(gateway.rooms.key()).map(|(place, key)| place.seal(key));
            (AuthUser { id: ticket.user, role: Role::User }, room, Some(ticket))
        }
        None => {
            let caller = gateway.auth.authenticate(&req)?;
            let room = match req.headers().get(headers::ROOM_TICKET) {
                Some(v) => Some(v.to_str().map_err(|_| bad_place())?.to_owned()),
                None => None,
            };
            (caller, room, None)
        }
    };
    gateway.limits.take(Class::Stream, Who::user(caller.id)).await?;
    if let Some(ticket) = &ticket
        && !push.spend(ticket, now_ms()).await?
    {
        metrics::counter!("gateway_push_refused_total", "why" => "ticket_spent").increment(1);
        return Err(ApiError::new(
            ErrorCode::Unauthorized,
            "the stream ticket was used already: ask for another",
        ));
    }
    let last_event_id = req
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or(query.last_event_id);
    let registration = push.register(sale, caller.id)?;
    // Subscribed before the first read: a result written after the read is heard.
    push.channel.subscribe(sale).await;
    match stream::Stream::open(gateway.clone(), registration, caller, room_ticket, last_event_id).await? {
        stream::Opened::Stream(stream) => Ok(HttpResponse::Ok()
            .content_type("text/event-stream")
            .insert_header(("cache-control", "no-store"))
            // nginx (an Ingress) would otherwise hold the events back in its buffer.
            .insert_header(("x-accel-buffering", "no"))
            .streaming(stream.into_body())),
        // The client's last event was this final answer: nothing more will come. (A 204
        // also stops a browser's EventSource from reconnecting.)
        stream::Opened::AlreadyTold => Ok(HttpResponse::NoContent().finish()),
        stream::Opened::Refused(status, body) => {
            Ok(HttpResponse::build(StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY))
                .content_type("application/json")
                .body(body))
        }
    }
}

/// Keeps the channel to Redis until the gateway stops.
pub fn spawn_channel(lifecycle: &Lifecycle, push: Arc<Push>) {
    channel::spawn(lifecycle, push);
}

#[cfg(test)]
mod tests {
    use seckill_common::OrderId;
    use seckill_common::api::SeckillStatus;

    use super::*;

    fn slot() -> Slot {
        Slot { serial: 1, pending: Mutex::default(), wake: Notify::new() }
    }

    /// A stream whose client does not read takes nothing from its slot: however many notices
    /// come meanwhile, the slot holds the latest result and one sold-out flag, not a queue.
    #[test]
    fn a_slot_keeps_the_latest_of_each_fact_however_many_arrive_unread() {
        let slot = slot();
        for order in 1..=100_000 {
            let result = SeckillResult { status: SeckillStatus::Success, order_id: OrderId::new(order) };
            slot.tell(|p| p.result = Some(result));
            slot.tell(|p| p.sold_out = true);
        }
        let taken = slot.take();
        assert_eq!(taken.result.and_then(|r| r.order_id), OrderId::new(100_000));
        assert!(taken.sold_out && !taken.replaced && !taken.reread);
        // Taken once: nothing left behind.
        let again = slot.take();
        assert!(again.result.is_none() && !again.sold_out);
    }
}
