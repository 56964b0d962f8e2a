//! What the storefront reads from stock-service: a page of the sales list, or one sale.

use seckill_common::api::Goods;
use seckill_common::listing::GoodsQuery;
use seckill_common::{ErrorCode, GoodsId};
use seckill_web::ApiError;

use crate::proxy::{Proxy, Service};

/// A page of a list as stock-service gave it, and its cursor to the next.
pub(super) struct ListPage {
    pub(super) goods: Vec<Goods>,
    pub(super) next: Option<String>,
}

/// A page of `GET /api/goods` at stock-service, with its cursor to the next.
pub(super) async fn list_goods(proxy: &Proxy, query: &GoodsQuery) -> Result<ListPage, ApiError> {
    let (status, next, body) =
        proxy.get_page(Service::Stock, &format!("/api/goods?{}", query.to_query_string())).await?;
    if status != 200 {
        return Err(ApiError::new(
            ErrorCode::UpstreamUnavailable,
            format!("GET /api/goods answered {status}"),
        ));
    }
    let goods = serde_json::from_slice(&body).map_err(ApiError::internal)?;
    Ok(ListPage { goods, next })
}

/// `GET /api/goods/{id}` at stock-service: None when it knows no such sale.
pub(super) async fn one_goods(proxy: &Proxy, g: GoodsId) -> Result<Option<Goods>, ApiError> {
    let (status, body) = proxy.get(Service::Stock, &format!("/api/goods/{g}")).await?;
    match status {
        200 => serde_json::from_slice(&body).map(Some).map_err(ApiError::internal),
        404 => Ok(None),
        _ => Err(ApiError::new(
            ErrorCode::UpstreamUnavailable,
            format!("GET /api/goods/{g} answered {status}"),
        )),
    }
}
