//! `POST` and `GET /api/seckill/{goods_id}/queue`: joining a sale's waiting room, and where
//! one stands in it. The admission a buyer is given here is what the sale's buy routes ask
//! for ([`check_admission`]).

use std::sync::Arc;
use std::time::Duration;

use actix_web::http::header::{CacheControl, CacheDirective};
use actix_web::web::Bytes;
use actix_web::{HttpRequest, HttpResponse, web};
use chrono::{DateTime, Utc};
use seckill_common::room::{
    Challenge, PlaceTicket, QueueChallenge, QueueJoin, QueueStatus, RoomError, RoomSnapshot, WaitingRoom,
};
use seckill_common::{ErrorCode, GoodsId, UserId, headers};
use seckill_web::{ApiError, AuthUser};
use serde::Deserialize;

use crate::room::store::Work;
use crate::room::{RoomView, ticker};
use crate::sales::{Sale, now_ms};
use crate::state::AppState;

/// What a room token's refusal is answered with.
fn refused(e: RoomError) -> ApiError {
    match e {
        RoomError::Malformed => ApiError::invalid(format!("{e}")),
        other => ApiError::new(ErrorCode::BadToken, other.to_string()),
    }
}

fn no_room(g: GoodsId) -> ApiError {
    ApiError::new(ErrorCode::NoWaitingRoom, format!("sale {g} has no waiting room"))
}

fn room_of(sale: &Sale) -> Result<WaitingRoom, ApiError> {
    sale.goods.waiting_room.ok_or_else(|| no_room(sale.id()))
}

/// `POST /api/seckill/{goods_id}/queue`: a place, once per user (joining again answers the same
/// place); 410 `SOLD_OUT` once nothing is left. The body is optional: `{"ticket": ...}`
/// presents a ticket given before.
#[tracing::instrument(skip_all, fields(goods_id = %path, user_id = %user.id))]
pub async fn join(
    state: web::Data<AppState>,
    user: AuthUser,
    path: web::Path<GoodsId>,
    body: Bytes,
) -> Result<HttpResponse, ApiError> {
    let sale = state.sales.get(*path).await?;
    let room = room_of(&sale)?;
    let now = now_ms();
    let opens = room.opens_at(sale.goods.start_at);
    if now < opens.timestamp_millis() {
        return Err(ApiError::new(
            ErrorCode::NotStarted,
            format!("the waiting room opens at {}", opens.to_rfc3339()),
        ));
    }
    if now >= sale.goods.end_at.timestamp_millis() {
        return Err(ApiError::new(ErrorCode::Ended, "the sale has ended"));
    }
    let asked: QueueJoin = if body.iter().all(u8::is_ascii_whitespace) {
        QueueJoin::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::invalid(format!("the body is not a join: {e}")))?
    };
    let presented = match asked.ticket.as_deref() {
        Some(t) => Some(state.rooms.key.open_ticket(t, sale.id(), user.id).map_err(refused)?.join),
        None => None,
    };
    let work = work_brought(&state, &sale, room, user.id, &asked, now)?;
    let _slot = state.in_flight.enter("join")?;
    let view = view_of(&state, &sale, now).await?;
    // Nothing left to wait for: the same answer the gateway then gives from its memory.
    if sale.flagged_sold_out(now) || view.sold_out() {
        return Err(ApiError::new(ErrorCode::SoldOut, "sold out"));
    }
    let code = state.rooms.store.join(&sale.goods, user.id, presented, &work, now).await?;
    metrics::counter!("seckill_room_joins_total").increment(1);
    let ticket =
        PlaceTicket { sale: sale.id(), user: user.id, join: code, issued_ms: now }.seal(&state.rooms.key);
    Ok(answer(&state, &view, ticket, code, user.id, now))
}

/// How long a proof-of-work challenge may be answered.
const CHALLENGE_TTL: Duration = Duration::from_secs(120);

/// `POST /api/seckill/{goods_id}/queue/challenge`: work to do before joining (a room with a
/// `pow_difficulty`; a room without one answers a challenge of difficulty 0). Sealed, so
/// nothing is kept until it is used.
pub async fn challenge(
    state: web::Data<AppState>,
    user: AuthUser,
    path: web::Path<GoodsId>,
) -> Result<HttpResponse, ApiError> {
    let sale = state.sales.get(*path).await?;
    let room = room_of(&sale)?;
    let now = now_ms();
    let challenge =
        Challenge::issue(&state.rooms.key, sale.id(), user.id, room.pow_difficulty, now, CHALLENGE_TTL);
    let expires_at = DateTime::<Utc>::from_timestamp_millis(now + CHALLENGE_TTL.as_millis() as i64)
        .ok_or_else(|| ApiError::internal(anyhow::anyhow!("the clock is out of range")))?;
    Ok(HttpResponse::Ok().json(QueueChallenge { challenge, difficulty: room.pow_difficulty, expires_at }))
}

/// The proof of work a join brings, checked (in constant time: one hash and one MAC) when the
/// room asks for it. A ticket is proof enough: its place was paid for when it was given.
fn work_brought(
    state: &AppState,
    sale: &Sale,
    room: WaitingRoom,
    user: UserId,
    asked: &QueueJoin,
    now: i64,
) -> Result<Work, ApiError> {
    if room.pow_difficulty == 0 || asked.ticket.is_some() {
        return Ok(Work::NotAsked);
    }
    let (Some(challenge), Some(answer)) = (asked.challenge.as_deref(), asked.answer) else {
        return Ok(Work::Missing);
    };
    let nonce =
        Challenge::verify(&state.rooms.key, challenge, answer, sale.id(), user, now).map_err(|e| {
            ApiError::new(
                ErrorCode::ChallengeRequired,
                format!("the proof of work is refused ({e}): ask for a new challenge"),
            )
        })?;
    let nonce = nonce.iter().map(|b| format!("{b:02x}")).collect();
    Ok(Work::Done { nonce, ttl_ms: CHALLENGE_TTL.as_millis() as i64 })
}

/// `GET /api/seckill/{goods_id}/queue` with `x-room-ticket`: where the ticket's holder stands,
/// and their admission once their place has come up. Memory only: the ticket says the join,
/// this replica's view of the room says the rest.
pub async fn status(
    state: web::Data<AppState>,
    user: AuthUser,
    path: web::Path<GoodsId>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let sale = state.sales.get(*path).await?;
    room_of(&sale)?;
    let ticket = req.headers().get(headers::ROOM_TICKET).and_then(|v| v.to_str().ok()).ok_or_else(|| {
        ApiError::invalid("the x-room-ticket header (the ticket the join answered) is required")
    })?;
    let held = state.rooms.key.open_ticket(ticket, sale.id(), user.id).map_err(refused)?;
    let now = now_ms();
    let view = view_of(&state, &sale, now).await?;
    Ok(answer(&state, &view, ticket.to_owned(), held.join, user.id, now))
}

/// The sale's room as this replica sees it. The first request for a room this replica has
/// not read yet reads it (once); every other answer comes from memory.
async fn view_of(state: &AppState, sale: &Sale, now: i64) -> Result<Arc<RoomView>, ApiError> {
    let view = state.rooms.view(&sale.goods).ok_or_else(|| no_room(sale.id()))?;
    if !view.known() {
        ticker::refresh(state, sale, &view, now).await.map_err(|e| ApiError::unavailable("redis", e))?;
    }
    Ok(view)
}

/// The answer of both routes: where the holder of join `code` (and of `ticket`) stands.
fn answer(
    state: &AppState,
    view: &RoomView,
    ticket: String,
    code: u64,
    user: UserId,
    now: i64,
) -> HttpResponse {
    let standing = view.standing(code, user, now);
    let poll_after_ms = view.poll_after_ms(&standing, code, now);
    let status = QueueStatus::of(&state.rooms.key, ticket, standing, view.draw(), poll_after_ms);
    // Of this instant: no cache may keep it.
    HttpResponse::Ok().insert_header(CacheControl(vec![CacheDirective::NoStore])).json(status)
}

/// The query of `GET /internal/gateway/rooms/{goods_id}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotQuery {
    /// Places come up by the last mark the gateway holds: only later marks are sent.
    #[serde(default)]
    since: u64,
}

/// `GET /internal/gateway/rooms/{goods_id}?since=N` (the gateway's credential): the room as
/// this replica sees it, which the gateway answers status polls from.
pub async fn room_snapshot(
    state: web::Data<AppState>,
    path: web::Path<GoodsId>,
    query: web::Query<SnapshotQuery>,
) -> Result<web::Json<RoomSnapshot>, ApiError> {
    let sale = state.sales.get(*path).await?;
    room_of(&sale)?;
    let view = view_of(&state, &sale, now_ms()).await?;
    Ok(web::Json(view.snapshot(query.since)))
}

/// On a sale with a waiting room, the buy routes ask for the buyer's admission
/// (`x-room-admission`): 403 `NOT_ADMITTED` without one, with one of another user or sale, a
/// forged one, or one whose life is over.
pub fn check_admission(
    state: &AppState,
    sale: &Sale,
    user: UserId,
    req: &HttpRequest,
    now: i64,
) -> Result<(), ApiError> {
    if sale.goods.waiting_room.is_none() {
        return Ok(());
    }
    let presented =
        req.headers().get(headers::ROOM_ADMISSION).and_then(|v| v.to_str().ok()).ok_or_else(|| {
            ApiError::new(
                ErrorCode::NotAdmitted,
                "this sale has a waiting room: join it and wait for your admission",
            )
        })?;
    state
        .rooms
        .key
        .open_admission(presented, sale.id(), user, now)
        .map(|_| ())
        .map_err(|e| ApiError::new(ErrorCode::NotAdmitted, format!("the admission is refused: {e}")))
}
