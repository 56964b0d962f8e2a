//! `GET /api/orders` and `GET /api/orders/{id}`: the caller's own orders only.

use actix_web::{HttpResponse, web};
use seckill_common::{ErrorCode, OrderId};
use seckill_db::{conn, query_error};
use seckill_web::{ApiError, AuthUser};

use crate::fulfil::Fulfiller;
use crate::orders;

pub async fn list(
    fulfiller: web::Data<Fulfiller>,
    user: AuthUser,
) -> Result<HttpResponse, ApiError> {
    let mut conn = conn(fulfiller.pool()).await?;
    let mine = orders::list_for_user(&mut conn, user.id)
        .await
        .map_err(query_error)?;
    Ok(HttpResponse::Ok().json(mine))
}

/// Another user's order is answered exactly like a missing one, so ids reveal nothing.
pub async fn get(
    fulfiller: web::Data<Fulfiller>,
    user: AuthUser,
    path: web::Path<OrderId>,
) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner();
    let mut conn = conn(fulfiller.pool()).await?;
    match orders::find_for_user(&mut conn, id, user.id)
        .await
        .map_err(query_error)?
    {
        Some(order) => Ok(HttpResponse::Ok().json(order)),
        None => Err(ApiError::new(
            ErrorCode::OrderNotFound,
            format!("no order {id}"),
        )),
    }
}
