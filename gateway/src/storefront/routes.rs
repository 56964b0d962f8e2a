//! The storefront's routes: the two lists, a sale's page, the admin page, the assets, and an
//! admin's render of every page now.

use actix_web::{HttpRequest, HttpResponse, web};
use seckill_common::GoodsId;
use seckill_common::listing::RawGoodsQuery;
use seckill_web::ApiError;
use serde_json::json;

use crate::rate_limit::{Class, Who};
use crate::state::Gateway;

use super::ListKind;
use super::cache::PageKey;

/// `GET /`: the live and upcoming sales, a page at a time.
pub async fn list(req: HttpRequest, gateway: web::Data<Gateway>) -> HttpResponse {
    list_of(ListKind::Current, req, gateway).await
}

/// `GET /ended`: the ended sales, the latest first, a page at a time.
pub async fn ended(req: HttpRequest, gateway: web::Data<Gateway>) -> HttpResponse {
    list_of(ListKind::Ended, req, gateway).await
}

async fn list_of(kind: ListKind, req: HttpRequest, gateway: web::Data<Gateway>) -> HttpResponse {
    let storefront = &gateway.storefront;
    let cursor = web::Query::<RawGoodsQuery>::from_query(req.query_string()).ok().and_then(|q| q.0.cursor);
    let Some(cursor) = cursor else {
        return storefront.page(&gateway.proxy, PageKey::List(kind)).await.respond(&req);
    };
    // A page past the first costs a call to stock-service: limited per address.
    let who = Who::address(crate::routes::client_ip(&req, gateway.proxy_hops));
    if let Err(limited) = gateway.limits.take(Class::Anonymous, who).await {
        return actix_web::ResponseError::error_response(&limited);
    }
    storefront.later_page(&gateway.proxy, kind, &cursor).await.respond(&req)
}

/// `GET /sales/{id}`: one sale.
pub async fn sale(req: HttpRequest, gateway: web::Data<Gateway>) -> HttpResponse {
    let storefront = &gateway.storefront;
    match req.match_info().get("id").and_then(|v| v.parse::<GoodsId>().ok()) {
        Some(g) => storefront.page(&gateway.proxy, PageKey::Sale(g)).await.respond(&req),
        None => storefront.not_found.respond(&req),
    }
}

/// `GET /admin`: the admin page (its data comes from the admin API, with an admin's token).
pub async fn admin(req: HttpRequest, gateway: web::Data<Gateway>) -> HttpResponse {
    gateway.storefront.admin.respond(&req)
}

/// `GET /static/{file}`: the pages' scripts (and the proof-of-work worker's) and style.
pub async fn asset(req: HttpRequest, gateway: web::Data<Gateway>) -> HttpResponse {
    let storefront = &gateway.storefront;
    match req.match_info().get("file") {
        Some("store.js") => storefront.store_js.respond(&req),
        Some("store.css") => storefront.store_css.respond(&req),
        Some("admin.js") => storefront.admin_js.respond(&req),
        Some("work.js") => storefront.work_js.respond(&req),
        _ => storefront.not_found.respond(&req),
    }
}

/// `POST /api/admin/storefront/render`: an admin renders every page now; `{"pages": n}`.
pub async fn render_now(req: HttpRequest, gateway: web::Data<Gateway>) -> Result<HttpResponse, ApiError> {
    let caller = gateway.auth.authenticate(&req)?;
    caller.require_admin()?;
    gateway.limits.take(Class::Admin, Who::user(caller.id)).await?;
    let pages = gateway.storefront.render_all(&gateway.proxy).await?;
    tracing::info!(pages, user_id = %caller.id, "storefront rendered");
    Ok(HttpResponse::Ok().json(json!({ "pages": pages })))
}
