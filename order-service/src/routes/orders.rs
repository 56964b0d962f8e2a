//! The buyer's orders: list, look up, pay, cancel. Only the caller's own; another user's order
//! is answered exactly like a missing one, so ids reveal nothing.

use actix_web::{HttpResponse, web};
use seckill_common::api::{Order, OrderStatus};
use seckill_common::{ErrorCode, OrderId};
use seckill_db::conn;
use seckill_web::{ApiError, AuthUser};

use crate::orders::{self, transition::Change};
use crate::state::AppState;

fn not_found(id: OrderId) -> ApiError {
    ApiError::new(ErrorCode::OrderNotFound, format!("no order {id}"))
}

pub async fn list(state: web::Data<AppState>, user: AuthUser) -> Result<HttpResponse, ApiError> {
    let mut conn = conn(&state.pool).await?;
    let mine = orders::list_for_user(&mut conn, user.id).await?;
    Ok(HttpResponse::Ok().json(mine))
}

pub async fn get(
    state: web::Data<AppState>,
    user: AuthUser,
    path: web::Path<OrderId>,
) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner();
    let mut conn = conn(&state.pool).await?;
    let order = orders::find_for_user(&mut conn, id, user.id).await?.ok_or_else(|| not_found(id))?;
    Ok(HttpResponse::Ok().json(order))
}

/// A simulated payment: unpaid -> paid in one conditional update. Paying a paid order again is
/// a no-op 200; an expired, cancelled or overdue one is 409.
#[tracing::instrument(skip_all, fields(order_id = %path, user_id = %user.id))]
pub async fn pay(
    state: web::Data<AppState>,
    user: AuthUser,
    path: web::Path<OrderId>,
) -> Result<HttpResponse, ApiError> {
    change(&state, &user, path.into_inner(), Change::Pay).await
}

/// unpaid -> cancelled in one conditional update, then the unit's release is sent (or, if the
/// broker is down, owed and sent by the sweeper).
#[tracing::instrument(skip_all, fields(order_id = %path, user_id = %user.id))]
pub async fn cancel(
    state: web::Data<AppState>,
    user: AuthUser,
    path: web::Path<OrderId>,
) -> Result<HttpResponse, ApiError> {
    change(&state, &user, path.into_inner(), Change::Cancel).await
}

/// The owner's change to an unpaid order; when it does not apply, the order as it is says why.
async fn change(
    state: &AppState,
    user: &AuthUser,
    id: OrderId,
    change: Change,
) -> Result<HttpResponse, ApiError> {
    let mut conn = conn(&state.pool).await?;
    let Some(row) = orders::transition::by_owner(&mut conn, id, user.id, change).await? else {
        let order = orders::find_for_user(&mut conn, id, user.id).await?.ok_or_else(|| not_found(id))?;
        let (code, done) = match change {
            Change::Pay if order.status == OrderStatus::Paid => return Ok(HttpResponse::Ok().json(order)),
            Change::Pay => (ErrorCode::OrderNotPayable, "paid"),
            Change::Cancel => (ErrorCode::OrderNotCancellable, "cancelled"),
        };
        return Err(ApiError::new(code, format!("order {id} is {} and cannot be {done}", describe(&order))));
    };
    drop(conn);
    match change {
        Change::Pay => {
            tracing::info!("order paid");
            metrics::counter!("order_orders_paid_total").increment(1);
        }
        Change::Cancel => {
            tracing::info!("order cancelled");
            metrics::counter!("order_orders_cancelled_total").increment(1);
            if let Err(e) = state.releaser.send(std::slice::from_ref(&row)).await {
                tracing::warn!(error = format!("{e:#}"), "release not sent now; the sweeper sends it");
            }
        }
    }
    Ok(HttpResponse::Ok().json(Order::try_from(row)?))
}

fn describe(order: &Order) -> String {
    if order.status == OrderStatus::Unpaid && order.expires_at <= chrono::Utc::now() {
        "past its payment deadline".into()
    } else {
        order.status.as_str().into()
    }
}
