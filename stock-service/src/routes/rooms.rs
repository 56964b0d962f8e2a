//! `POST /internal/stock/rooms/{goods_id}`: the marks of a sale's waiting room, which
//! seckill-service raises as it hands out join numbers and admits places; `GET` reads them back
//! with the leader's marks of when places came up, after a restart or a loss of Redis.

use actix_web::{HttpResponse, web};
use seckill_common::room::RoomMarks;
use seckill_common::{ErrorCode, GoodsId};
use seckill_db::conn;
use seckill_web::ApiError;

use super::goods_not_found;
use crate::rooms::{self, RaiseError, StoredMarks};
use crate::state::AppState;

/// Raises each mark to at least the value sent (`drawn` set by the first call that names it)
/// and answers the marks as they now stand; all zeros reads them.
#[tracing::instrument(skip_all, fields(goods_id = %path))]
pub async fn raise(
    state: web::Data<AppState>,
    path: web::Path<GoodsId>,
    body: web::Json<RoomMarks>,
) -> Result<HttpResponse, ApiError> {
    let g = path.into_inner();
    let to = StoredMarks::try_from(&body.into_inner()).map_err(ApiError::invalid)?;
    let mut conn = conn(&state.pool).await?;
    let marks = rooms::raise(&mut conn, g, to).await.map_err(|e| refused(g, e))?;
    Ok(HttpResponse::Ok().json(marks))
}

/// The room as kept here ([`seckill_common::room::RoomRecord`]).
#[tracing::instrument(skip_all, fields(goods_id = %path))]
pub async fn record(state: web::Data<AppState>, path: web::Path<GoodsId>) -> Result<HttpResponse, ApiError> {
    let g = path.into_inner();
    let mut conn = conn(&state.pool).await?;
    let record = rooms::record(&mut conn, g).await.map_err(|e| refused(g, e))?;
    Ok(HttpResponse::Ok().json(record))
}

fn refused(g: GoodsId, e: RaiseError) -> ApiError {
    match e {
        RaiseError::UnknownGoods => goods_not_found(g),
        RaiseError::NoRoom => {
            ApiError::new(ErrorCode::NoWaitingRoom, format!("goods {g} has no waiting room"))
        }
        RaiseError::Query(e) => e.into(),
    }
}
