//! `GET /api/goods`, `GET /api/goods/{id}`, `POST /internal/stock/goods`.

use actix_web::http::header::{self, ContentType};
use actix_web::{HttpRequest, HttpResponse, web};
use chrono::Utc;
use seckill_common::GoodsId;
use seckill_common::api::NewGoods;
use seckill_common::listing::{GoodsQuery, NEXT_CURSOR, RawGoodsQuery};
use seckill_db::conn;
use seckill_web::ApiError;

use super::goods_not_found;
use crate::goods::{self, ListPage};
use crate::state::AppState;

/// `GET /api/goods?state=&limit=&cursor=`: a page of the sales in those states (see
/// `seckill_common::listing`), the cursor to the next in `x-next-cursor` and a `Link` header.
/// A first page at the default size comes from [`FirstPages`](goods::FirstPages) while fresh.
pub async fn list(
    req: HttpRequest,
    state: web::Data<AppState>,
    raw: web::Query<RawGoodsQuery>,
) -> Result<HttpResponse, ApiError> {
    let query = GoodsQuery::parse(&raw).map_err(ApiError::invalid)?;
    let read = || async {
        let mut conn = conn(&state.pool).await?;
        let (page, more) = goods::list_page(&mut conn, &query, Utc::now()).await?;
        let next = page.last().filter(|_| more).map(|last| query.next(last));
        let body = serde_json::to_vec(&page).map(web::Bytes::from).map_err(ApiError::internal)?;
        Ok(ListPage { body, next: next.and_then(|q| q.after).map(|c| c.encode()) })
    };
    let page = match state.goods_lists.cache_for(&query) {
        Some(cache) => cache.get_or_refill(read).await?,
        None => read().await?,
    };
    let mut res = HttpResponse::Ok();
    res.content_type(ContentType::json());
    if let Some(cursor) = &page.next {
        let next = format!("state={}&limit={}&cursor={cursor}", query.states, query.limit);
        res.insert_header((NEXT_CURSOR, cursor.as_str()))
            .insert_header((header::LINK, format!("<{}?{next}>; rel=\"next\"", req.path())));
    }
    Ok(res.body(page.body))
}

pub async fn get(state: web::Data<AppState>, path: web::Path<GoodsId>) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner();
    let mut conn = conn(&state.pool).await?;
    let found = goods::find(&mut conn, id).await?.ok_or_else(|| goods_not_found(id))?;
    Ok(HttpResponse::Ok().json(found))
}

/// `POST /internal/stock/goods`: seckill-service publishing a sale (it checked the admin).
pub async fn create(state: web::Data<AppState>, body: web::Json<NewGoods>) -> Result<HttpResponse, ApiError> {
    let sale = body.validate().map_err(|e| ApiError::invalid(e.to_string()))?;
    let mut conn = conn(&state.pool).await?;
    let created = goods::insert(&mut conn, &sale).await.map_err(insert_error)?;
    // The creator lists the goods next: not the list from before.
    state.goods_lists.invalidate();
    tracing::info!(goods_id = %created.id, stock = created.stock_total, "goods created");
    Ok(HttpResponse::Created().json(created))
}

/// A database error from writing a sale. Validation keeps out what the database cannot store;
/// should a value slip past it (a rule the database has that `validate` lacks), the data
/// exception is still the client's input: 400, not a 500 that seckill-service would pass on
/// as stock-service being unavailable.
fn insert_error(e: seckill_db::QueryError) -> ApiError {
    let e = seckill_db::DbError::from(e);
    if e.is_bad_value() {
        tracing::warn!(error.cause_chain = %format_args!("{:#}", anyhow::Error::from(e)), "goods refused by the database");
        ApiError::invalid("a field of the sale holds a value the database cannot store")
    } else {
        e.into()
    }
}
