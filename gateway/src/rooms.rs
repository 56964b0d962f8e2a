//! `GET /api/seckill/{id}/queue` answered here, from memory: a waiting buyer polls as often as
//! the answer allows, and a room of a million does so thousands of times a second. The gateway
//! mirrors each room it has answered for (seckill-service's `GET /internal/gateway/rooms/{id}`,
//! every [`TICK`]) and answers from the mirror with the code seckill-service answers with
//! (`seckill_common::room::view`): the ticket checked with the room key, the place from the
//! draw, the admission from the marks of when places came up, the rest from the mirrored
//! state. Forwarded to seckill-service instead: a ticket this key does not open (its answer is
//! the refusal), a room not mirrored yet or whose mirror is older than [`STALE`] (a
//! seckill-service that stopped answering is then answered for by its own 503).
//!
//! A room is mirrored once seckill-service answered a join or a status of it `200` (so only
//! rooms that exist are), and forgotten after [`IDLE`] without a poll, or when seckill-service
//! no longer knows it. Without `room.key` nothing is mirrored and every poll is forwarded.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use actix_web::http::header::{CacheControl, CacheDirective};
use actix_web::{HttpRequest, HttpResponse, web};
use dashmap::DashMap;
use seckill_common::room::{CameUpMarks, Draw, QueueDraw, QueueStatus, RoomKey, RoomSnapshot, RoomState};
use seckill_common::{GoodsId, UserId, headers};
use seckill_web::Lifecycle;
use seckill_web::trust::GATEWAY_READS;

use crate::proxy::{Proxy, Service};
use crate::state::Gateway;

/// How often a mirrored room is read again: seckill-service's own tick.
pub const TICK: Duration = Duration::from_millis(100);

/// A mirror older than this answers nothing (seckill-service is not answering the reads).
pub const STALE: Duration = Duration::from_secs(1);

/// A room nobody asked about for this long is no longer read.
pub const IDLE: Duration = Duration::from_secs(30);

/// The rooms this replica answers for.
pub struct RoomMirrors {
    key: Option<RoomKey>,
    rooms: DashMap<GoodsId, Arc<Mirror>>,
}

/// One room as seckill-service last described it.
struct Mirror {
    seed: [u8; 32],
    commitment: String,
    read: RwLock<Read>,
    /// When a buyer last asked (ms since the epoch).
    asked_ms: AtomicI64,
}

/// The reads of a room so far, and the part of every answer that follows from them alone
/// (the draw: the seed in hex once drawn), made once a read rather than once a poll.
#[derive(Default)]
struct Read {
    /// When the last read was made; none yet.
    at: Option<Instant>,
    state: RoomState,
    draw: QueueDraw,
    came_up: CameUpMarks,
    /// How long an admission lives.
    life_ms: i64,
}

pub(crate) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl Mirror {
    fn new(key: &RoomKey, g: GoodsId) -> Self {
        let seed = key.seed_of(g);
        Self {
            seed,
            commitment: Draw::commitment(&seed),
            read: RwLock::new(Read::default()),
            asked_ms: AtomicI64::new(now_ms()),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Read> {
        self.read.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The places come up by the last mark held: the next read asks for the later ones.
    fn since(&self) -> u64 {
        self.read().came_up.last()
    }

    /// A new read. Replicas read Redis at their own ticks: the count of places come up never
    /// goes back because the read came from one a little behind.
    fn store(&self, snapshot: RoomSnapshot, now_ms: i64) {
        let RoomSnapshot { mut state, admission_secs, came_up } = snapshot;
        let mut read = self.read.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        state.admitted = state.admitted.max(read.state.admitted);
        read.life_ms = i64::from(admission_secs) * 1000;
        read.came_up.merge(came_up);
        let life_ms = read.life_ms;
        read.came_up.forget_ended(life_ms, now_ms);
        read.draw = state.draw(&self.seed, &self.commitment);
        read.state = state;
        read.at = Some(Instant::now());
    }
}

impl RoomMirrors {
    pub fn new(key: Option<RoomKey>) -> Self {
        Self { key, rooms: DashMap::new() }
    }

    /// The key place tickets are sealed with (`room.key`), when set.
    pub fn key(&self) -> Option<&RoomKey> {
        self.key.as_ref()
    }

    /// seckill-service answered a join or a status of `g` `200`: `g` has a room, mirror it.
    pub fn watch(&self, g: GoodsId) {
        if let Some(key) = &self.key
            && !self.rooms.contains_key(&g)
        {
            self.rooms.entry(g).or_insert_with(|| Arc::new(Mirror::new(key, g)));
        }
    }

    /// The answer to `user`'s status poll of `g`, when this replica can give it.
    pub fn answer(&self, g: GoodsId, user: UserId, req: &HttpRequest) -> Option<HttpResponse> {
        let ticket = req.headers().get(headers::ROOM_TICKET)?.to_str().ok()?;
        let status = self.status(g, user, ticket)?;
        metrics::counter!("gateway_room_answers_total").increment(1);
        Some(HttpResponse::Ok().insert_header(CacheControl(vec![CacheDirective::NoStore])).json(status))
    }

    /// Where `user`, holding the place `ticket`, stands in `g`'s room, when this replica can
    /// tell from its mirror.
    pub fn status(&self, g: GoodsId, user: UserId, ticket: &str) -> Option<QueueStatus> {
        let key = self.key.as_ref()?;
        let mirror = self.rooms.get(&g)?.clone();
        let now = now_ms();
        mirror.asked_ms.store(now, Ordering::Relaxed);
        let held = key.open_ticket(ticket, g, user).ok()?;
        let (standing, poll_after_ms, draw) = {
            let read = mirror.read();
            read.at.filter(|at| at.elapsed() < STALE)?;
            let standing = read.state.standing(&mirror.seed, held.join, now);
            let standing = read.came_up.resolve(standing, g, user, read.life_ms, now);
            (standing, read.state.poll_after_ms(&standing, held.join, now), read.draw.clone())
        };
        Some(QueueStatus::of(key, ticket.to_owned(), standing, draw, poll_after_ms))
    }

    async fn read_all(&self, proxy: &Proxy) {
        let idle_before = now_ms() - IDLE.as_millis() as i64;
        self.rooms.retain(|_, m| m.asked_ms.load(Ordering::Relaxed) >= idle_before);
        let rooms: Vec<(GoodsId, Arc<Mirror>)> =
            self.rooms.iter().map(|r| (*r.key(), r.value().clone())).collect();
        let reads = rooms.iter().map(|(g, mirror)| async move {
            let path = format!("{GATEWAY_READS}rooms/{g}?since={}", mirror.since());
            match proxy.get(Service::Seckill, &path).await {
                Ok((200, body)) => match serde_json::from_slice::<RoomSnapshot>(&body) {
                    Ok(snapshot) => mirror.store(snapshot, now_ms()),
                    Err(e) => tracing::warn!(goods_id = %g, error = %e, "a room's state did not parse"),
                },
                // The sale is gone (or has no room): nothing to answer for.
                Ok((404, _)) => {
                    self.rooms.remove(g);
                }
                Ok((status, _)) => tracing::debug!(goods_id = %g, status, "a room's state was not read"),
                Err(e) => tracing::debug!(goods_id = %g, error = %e, "a room's state was not read"),
            }
        });
        futures_util::future::join_all(reads).await;
    }
}

/// Reads every mirrored room every [`TICK`] until the gateway stops.
pub fn spawn_reader(lifecycle: &Lifecycle, gateway: web::Data<Gateway>) {
    if gateway.rooms.key.is_none() {
        tracing::warn!("room.key is not set: every waiting-room status poll goes to seckill-service");
        return;
    }
    let cancel = lifecycle.cancel.clone();
    lifecycle.spawn(async move {
        let mut ticker = seckill_web::Ticker::new(TICK);
        while ticker.tick(&cancel).await {
            gateway.rooms.read_all(&gateway.proxy).await;
        }
    });
}
