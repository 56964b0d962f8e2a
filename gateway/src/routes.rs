//! The public routes: which need a token, which need an admin, which are rate limited, and
//! which service answers each. Path and query go upstream unchanged; the services check their
//! own ids and answer their own 4xx, so the gateway parses no ids.

use std::sync::Arc;

use actix_web::{HttpRequest, HttpResponse, Resource, web};
use seckill_common::ErrorCode;
use seckill_common::api::{DevTokenRequest, TokenResponse};
use seckill_web::{ApiError, AuthUser, health};

use crate::auth::Authenticator;
use crate::body;
use crate::proxy::{Proxy, Service};
use crate::rate_limit::UserRateLimiter;

/// What every handler shares, built once at start.
pub struct Gateway {
    pub auth: Authenticator,
    pub proxy: Proxy,
    pub limiter: Arc<UserRateLimiter>,
    /// `http.body_limit_bytes`.
    pub body_limit: usize,
}

impl Gateway {
    /// Reads the body within the limit and forwards the request.
    async fn pass(
        &self,
        service: Service,
        req: &HttpRequest,
        payload: web::Payload,
        caller: Option<AuthUser>,
    ) -> Result<HttpResponse, ApiError> {
        let body = body::read_limited(req, payload, self.body_limit).await?;
        self.proxy.forward(service, req, body, caller).await
    }
}

/// Registers the gateway's routes; the dev-token route only exists when `dev_tokens` is on,
/// so with it off the path is an ordinary 404. The flash-sale routes come first, the order
/// first of all: the router tries routes in this order, and each pattern with a `{segment}`
/// is a regex match (perf shows them).
pub fn configure(cfg: &mut web::ServiceConfig, gateway: web::Data<Gateway>, dev_tokens: bool) {
    cfg.app_data(gateway);
    cfg.service(resource("/api/seckill/{goods_id}/orders").route(web::post().to(user_seckill)))
        .service(resource("/api/seckill/{goods_id}/token").route(web::post().to(user_seckill)))
        .service(resource("/api/seckill/{goods_id}/result").route(web::get().to(user_seckill)));
    if dev_tokens {
        cfg.service(resource("/api/auth/dev-token").route(web::post().to(dev_token)));
    }
    cfg.service(resource("/readyz").route(web::get().to(readyz)))
        .service(resource("/api/goods").route(web::get().to(public_stock)))
        .service(resource("/api/goods/{id}").route(web::get().to(public_stock)))
        .service(resource("/api/admin/goods").route(web::post().to(admin_seckill)))
        .service(resource("/api/admin/goods/{id}/audit").route(web::get().to(admin_seckill)))
        .service(resource("/api/admin/goods/{id}/repair").route(web::post().to(admin_seckill)))
        .service(resource("/api/orders").route(web::get().to(user_order)))
        .service(resource("/api/orders/{id}").route(web::get().to(user_order)))
        .service(resource("/api/orders/{id}/pay").route(web::post().to(user_order)))
        .service(resource("/api/orders/{id}/cancel").route(web::post().to(user_order)));
}

/// A resource whose other methods get a JSON 405 instead of actix's empty one.
fn resource(path: &str) -> Resource {
    web::resource(path).default_service(web::to(method_not_allowed))
}

async fn method_not_allowed() -> Result<HttpResponse, ApiError> {
    Err(ApiError::new(ErrorCode::MethodNotAllowed, "method not allowed on this route"))
}

/// `POST /api/auth/dev-token`: a token for any user, for local runs and tests only.
async fn dev_token(
    request: web::Json<DevTokenRequest>,
    gateway: web::Data<Gateway>,
) -> Result<HttpResponse, ApiError> {
    let token = gateway.auth.issue(request.user_id, request.role)?;
    Ok(HttpResponse::Ok().json(TokenResponse { token }))
}

/// `GET /readyz`: ready while any service has a replica that answers, each service's state in
/// the body. One service down is answered route by route (503 `UPSTREAM_UNAVAILABLE`): taking
/// every gateway pod out of the load balancer for it would turn a partial outage into a total
/// one (no goods list, no buying, because order-service is down).
async fn readyz(gateway: web::Data<Gateway>) -> HttpResponse {
    health::readiness_any(&gateway.proxy.readiness().await)
}

/// `GET /api/goods[/{id}]`: public. Identity headers a client sent are still stripped.
async fn public_stock(
    req: HttpRequest,
    payload: web::Payload,
    gateway: web::Data<Gateway>,
) -> Result<HttpResponse, ApiError> {
    gateway.pass(Service::Stock, &req, payload, None).await
}

/// `/api/seckill/...`: a token and the per-user rate limit.
async fn user_seckill(
    req: HttpRequest,
    payload: web::Payload,
    gateway: web::Data<Gateway>,
) -> Result<HttpResponse, ApiError> {
    let caller = gateway.auth.authenticate(&req)?;
    gateway.limiter.check(caller.id)?;
    gateway.pass(Service::Seckill, &req, payload, Some(caller)).await
}

/// `/api/admin/goods...` (a sale's creation, audit and repair): an admin token. seckill-service checks the role again; refusing
/// here spares it the request.
async fn admin_seckill(
    req: HttpRequest,
    payload: web::Payload,
    gateway: web::Data<Gateway>,
) -> Result<HttpResponse, ApiError> {
    let caller = gateway.auth.authenticate(&req)?;
    caller.require_admin()?;
    gateway.pass(Service::Seckill, &req, payload, Some(caller)).await
}

/// `/api/orders...`: a token.
async fn user_order(
    req: HttpRequest,
    payload: web::Payload,
    gateway: web::Data<Gateway>,
) -> Result<HttpResponse, ApiError> {
    let caller = gateway.auth.authenticate(&req)?;
    gateway.pass(Service::Order, &req, payload, Some(caller)).await
}
