//! The buyer's three calls: the path token, the order (the hot path), the result poll.

use actix_web::{HttpRequest, HttpResponse, web};
use seckill_common::amqp::{BroadcastKind, OrderRequest};
use seckill_common::api::{OrderAccepted, SaleWindow, SeckillResult, SeckillStatus, TokenResponse};
use seckill_common::keys::SaleBucket;
use seckill_common::scripts::{Epoch, StoredResult};
use seckill_common::{ErrorCode, GoodsId, OrderId, UserId, headers};
use seckill_web::{ApiError, AuthUser};
use uuid::Uuid;

use crate::batcher::Enqueued;
use crate::buckets::Moved;
use crate::gate::{GateError, Recovery, Reserve};
use crate::routes::queue;
use crate::sales::{Sale, now_ms};
use crate::state::AppState;
use crate::{broadcast, rebuild};

/// Longest path token accepted; ours are 32 hex characters.
const MAX_TOKEN_LEN: usize = 64;

/// Whether `user` may buy now: the sale open, not flagged sold out, and on a sale with a
/// waiting room, their admission. Before the opening of a room sale the missing admission is
/// what a buyer must hear about (403 `NOT_ADMITTED`: join the room), not the hour.
fn check_open(
    state: &AppState,
    sale: &Sale,
    user: UserId,
    req: &HttpRequest,
    now: i64,
) -> Result<(), ApiError> {
    match sale.window_now() {
        SaleWindow::Open => {}
        SaleWindow::NotStarted => {
            queue::check_admission(state, sale, user, req, now)?;
            return Err(ApiError::new(
                ErrorCode::NotStarted,
                format!("the sale starts at {}", sale.goods.start_at.to_rfc3339()),
            ));
        }
        SaleWindow::Ended => return Err(ApiError::new(ErrorCode::Ended, "the sale has ended")),
    }
    if sale.flagged_sold_out(now) {
        return Err(sold_out());
    }
    queue::check_admission(state, sale, user, req, now)
}

/// Raises this replica's flag, and the first time, tells the others (off the request's path).
fn flag_sold_out(state: &web::Data<AppState>, sale: &Sale, now: i64) {
    if sale.flag_sold_out(now, state.settings.sold_out_recheck()) {
        let (state, g) = (state.clone(), sale.id());
        actix_web::rt::spawn(async move { broadcast::announce(&state, BroadcastKind::SoldOut, g).await });
    }
}

/// A slot among the requests in flight; on a sale with a waiting room, a refusal is counted
/// for the room's `auto` rate (an admitted buyer refused: the room admits too fast), in
/// memory: the room's upkeep adds the count to Redis once a tick.
fn enter(state: &AppState, sale: &Sale, route: &'static str) -> Result<seckill_web::shed::Slot, ApiError> {
    state.in_flight.enter(route).inspect_err(|_| {
        if let Some(view) = state.rooms.view(&sale.goods) {
            view.refused_busy();
        }
    })
}

fn sold_out() -> ApiError {
    ApiError::new(ErrorCode::SoldOut, "sold out")
}

/// `POST /api/seckill/{goods_id}/token`: the same unused token while it lives.
#[tracing::instrument(skip_all, fields(goods_id = %path, user_id = %user.id))]
pub async fn path_token(
    state: web::Data<AppState>,
    user: AuthUser,
    path: web::Path<GoodsId>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let sale = state.sales.get(*path).await?;
    let now = now_ms();
    check_open(&state, &sale, user.id, &req, now)?;
    let _slot = enter(&state, &sale, "token")?;
    let token =
        state.gate.path_token(sale.bucket_of(user.id), user.id, state.settings.token_ttl_secs).await?;
    Ok(HttpResponse::Ok().json(TokenResponse { token }))
}

/// `POST /api/seckill/{goods_id}/orders`: sold-out flag, a slot among the requests in flight
/// (503 `BUSY` at once past the bound, `seckill.*_in_flight`), one reserve script in the buyer's bucket
/// (more only when that bucket ran dry: see [`reserve`]), a place in the next confirmed
/// message (`batcher`), 202. Nothing here touches the database.
#[tracing::instrument(skip_all, fields(goods_id = %path, user_id = %user.id, request_id))]
pub async fn order(
    state: web::Data<AppState>,
    user: AuthUser,
    path: web::Path<GoodsId>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let sale = state.sales.get(*path).await?;
    let now = now_ms();
    check_open(&state, &sale, user.id, &req, now)?;
    // Held until the confirm: a reservation awaiting its confirm is work in flight.
    let _slot = enter(&state, &sale, "order")?;
    let token = if state.settings.require_token {
        let presented = req
            .headers()
            .get(headers::SECKILL_TOKEN)
            .and_then(|v| v.to_str().ok())
            .filter(|t| !t.is_empty() && t.len() <= MAX_TOKEN_LEN)
            .ok_or_else(|| {
                ApiError::new(ErrorCode::BadToken, "a valid x-seckill-token header is required")
            })?;
        Some(presented.to_owned())
    } else {
        None
    };

    let (g, u) = (sale.id(), user.id);
    let home = sale.bucket_of(u);
    let request_id = Uuid::new_v4();
    let (outcome, epoch) = reserve(&state, &sale, home, u, request_id, now, token.as_deref()).await?;
    match outcome {
        Reserve::Reserved { left } => {
            // With buckets, the buyer's one being empty says nothing of the others.
            if left == 0 && sale.goods.buckets <= 1 {
                flag_sold_out(&state, &sale, now);
            }
        }
        Reserve::SoldOut => {
            flag_sold_out(&state, &sale, now);
            return Err(sold_out());
        }
        Reserve::Repeated => {
            return Err(ApiError::new(ErrorCode::Repeated, "you already hold a unit of this sale"));
        }
        Reserve::BadToken => {
            return Err(ApiError::new(ErrorCode::BadToken, "the path token is wrong, used or expired"));
        }
        // Redis lost the sale, or a bucket of it (or never had it): rebuilt from the
        // authorities in the background. When the buyer's own bucket is the one missing, the
        // path token was not touched and the retry can use it; when another is, the token was
        // spent, and the retry fetches a new one (as after any 503 BUSY).
        Reserve::NotLoaded => {
            rebuild::start_rebuild(&state, &sale).await?;
            return Err(rebuild::being_restored());
        }
    }

    tracing::Span::current().record("request_id", tracing::field::display(request_id));
    let request = OrderRequest::new(request_id, u, g, now).in_bucket(home).with_epoch(epoch);
    match state.batcher.enqueue(request).await {
        Enqueued::Accepted => {
            metrics::counter!("seckill_orders_accepted_total").increment(1);
            if sale.goods.waiting_room.is_some() {
                // Against the places admitted: those who came in and bought, the rest no-shows.
                metrics::counter!("seckill_room_buys_total", "goods_id" => g.to_string()).increment(1);
            }
            Ok(HttpResponse::Accepted().json(OrderAccepted { status: SeckillStatus::Queued, request_id }))
        }
        Enqueued::Refused => Err(busy()),
    }
}

/// Most rounds of "move units into the buyer's bucket, reserve again" one request makes:
/// other buyers of the bucket may take the units moved before this one's reserve runs. Past
/// that the buyer is told to try again, never `SOLD_OUT` while a bucket may hold a unit.
const REFILL_ROUNDS: usize = 16;

/// Reserves in the buyer's bucket `home`. A sale of several buckets answers
/// [`Reserve::SoldOut`] only when a look at every other bucket found each empty with nothing on
/// its way out, and the buyer's own bucket was still empty after that look (units another
/// buyer's transfer brought in meanwhile are found there): the dry bucket is given units by
/// the others first (`buckets::Transfers`, half of a giver's at most), and the reserve runs
/// again. A bucket that is not loaded among the others makes it [`Reserve::NotLoaded`]: the
/// sale is rebuilt, and the buyer told to try again.
async fn reserve(
    state: &AppState,
    sale: &Sale,
    home: SaleBucket,
    u: UserId,
    request_id: Uuid,
    now: i64,
    token: Option<&str>,
) -> Result<(Reserve, Option<Epoch>), ApiError> {
    let mut token = token;
    let mut others_empty = false;
    for _ in 0..REFILL_ROUNDS {
        let (outcome, epoch) = state.gate.reserve(home, u, request_id, now, token).await?;
        if outcome != Reserve::SoldOut || sale.goods.buckets <= 1 || others_empty {
            return Ok((outcome, epoch));
        }
        // The token was checked and spent before the stock was: the rounds after are the same
        // click.
        token = None;
        match refill(state, sale, home).await? {
            Refill::Moved => {}
            // A transfer between its steps (a millisecond): a moment, and look again.
            Refill::Sending => tokio::time::sleep(std::time::Duration::from_millis(2)).await,
            Refill::Empty => others_empty = true,
            Refill::NotLoaded => return Ok((Reserve::NotLoaded, epoch)),
        }
    }
    Err(ApiError::new(ErrorCode::Busy, "the sale is very busy, try again"))
}

enum Refill {
    Moved,
    /// Every other bucket is empty, and none is sending units anywhere.
    Empty,
    /// None gave; one of them has units on their way out (`Moved::Sending`).
    Sending,
    /// None gave, and one of them is not loaded.
    NotLoaded,
}

/// Asks the other buckets in turn, from the next one on, for units for `home`; the first that
/// has some gives half of them (at most a bucket's first share).
async fn refill(state: &AppState, sale: &Sale, home: SaleBucket) -> Result<Refill, GateError> {
    let n = sale.goods.buckets;
    let share = (sale.goods.stock_total + i64::from(n) - 1) / i64::from(n);
    let share = share.max(1);
    let (mut not_loaded, mut sending) = (false, false);
    for step in 1..n {
        let from = SaleBucket::new(home.goods, (home.bucket + step) % n);
        match state.transfers.transfer(from, home, share).await? {
            Moved::Units(units) => {
                metrics::counter!("seckill_bucket_units_moved_total").increment(units.unsigned_abs());
                tracing::debug!(goods_id = %home.goods, from = from.bucket, to = home.bucket, units, "units moved to a dry bucket");
                return Ok(Refill::Moved);
            }
            Moved::Empty => {}
            Moved::Sending => sending = true,
            Moved::NotLoaded => not_loaded = true,
        }
    }
    Ok(if not_loaded {
        Refill::NotLoaded
    } else if sending {
        Refill::Sending
    } else {
        Refill::Empty
    })
}

fn busy() -> ApiError {
    ApiError::new(ErrorCode::Busy, "the order queue is unavailable, try again")
}

/// How long "the authority has no order of this buyer" is remembered in Redis, so a buyer who
/// polls a sale that Redis knows nothing of costs the order database one query per few seconds.
const NO_ORDER_TTL_SECS: u64 = 3;

/// `GET /api/seckill/{goods_id}/result`: from Redis; when Redis knows nothing of the buyer
/// (never asked, or it lost its data), from the order authority, written back to Redis. While
/// the sale recovers from a loss, a buyer without an order is told `queued`: their request may
/// still wait in the broker, and telling an accepted buyer `none` would be the worse mistake
/// (a buyer who was refused sees `queued` for those seconds, then `none`).
pub async fn result(
    state: web::Data<AppState>,
    user: AuthUser,
    path: web::Path<GoodsId>,
) -> Result<HttpResponse, ApiError> {
    let sale = state.sales.get(*path).await?;
    // A poll is mostly one Redis read: measured, its many quick answers would hide the orders'
    // queueing from the bound.
    let _slot = state.in_flight.enter_unmeasured("result")?;
    let at = sale.bucket_of(user.id);
    let stored = match state.gate.result(at, user.id).await? {
        Some(known) => known,
        None => from_orders(&state, at, user.id).await?,
    };
    let status = match stored {
        StoredResult::NoOrder if in_doubt(&state, &sale, at).await? => SeckillStatus::Queued,
        StoredResult::NoOrder => SeckillStatus::None,
        StoredResult::Queued => SeckillStatus::Queued,
        StoredResult::Failed => SeckillStatus::Failed,
        StoredResult::Success(_) => SeckillStatus::Success,
    };
    let order_id = match stored {
        StoredResult::Success(id) => OrderId::new(id),
        _ => None,
    };
    Ok(HttpResponse::Ok().json(SeckillResult { status, order_id }))
}

/// Whether a buyer without an order may still have a request waiting in the broker: the
/// buyer's bucket (`at`, where all their requests were taken) recovers from a loss of its
/// Redis data, or (open, and missing in Redis) is about to. Another bucket's loss lost none
/// of this buyer's requests.
async fn in_doubt(state: &AppState, sale: &Sale, at: SaleBucket) -> Result<bool, ApiError> {
    let Recovery { held_back, loaded } = state.gate.recovering(&[at]).await?;
    Ok(held_back || (!loaded && sale.window_now() != SaleWindow::Ended))
}

/// The buyer's result as the order authority knows it, written back to Redis.
async fn from_orders(state: &AppState, at: SaleBucket, u: UserId) -> Result<StoredResult, ApiError> {
    let order =
        state.orders.active_of(at.goods, u).await.map_err(|e| ApiError::unavailable("order-service", e))?;
    Ok(match order {
        Some(o) => {
            let found = StoredResult::Success(o.order_id.get());
            state.gate.set_result(at, u, found, None).await?;
            metrics::counter!("seckill_results_from_orders_total").increment(1);
            found
        }
        None => {
            state.gate.set_result(at, u, StoredResult::NoOrder, Some(NO_ORDER_TTL_SECS)).await?;
            StoredResult::NoOrder
        }
    })
}
