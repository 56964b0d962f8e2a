//! The public routes: which need a token, which need an admin, which are rate limited, and
//! which service answers each. Path and query go upstream unchanged; the services check their
//! own ids and answer their own 4xx, so the gateway parses no ids. Also the admin listener's
//! detailed `/readyz`.

use std::net::{IpAddr, Ipv4Addr};

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{HttpServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::http::header::HeaderValue;
use actix_web::http::{Method, StatusCode};
use actix_web::middleware::{Next, from_fn};
use actix_web::{Error, HttpRequest, HttpResponse, Resource, ResponseError, Route, web};
use seckill_common::api::{DevTokenRequest, TokenResponse};
use seckill_web::{ApiError, health, method_not_allowed};
use serde_json::json;

use crate::openapi;
use crate::proxy::Service;
use crate::push;
use crate::rate_limit::{Class, Who};
use crate::sale_state;
use crate::state::{Gateway, goods_of};
use crate::storefront;

/// One public route: the one list that both registers the routes and is checked against the
/// OpenAPI document, so no route goes undocumented. The methods of one path share one
/// resource (registered where the path first appears), and its other methods answer 405.
#[derive(Debug, Clone)]
pub struct PublicRoute {
    pub method: Method,
    pub path: &'static str,
    handler: Handler,
}

/// What a route does, which says who may call it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handler {
    Buy,
    Join,
    Poll,
    Events,
    StreamTicket,
    QueueStatus,
    DevToken,
    Readyz,
    PublicStock,
    AdminSeckill,
    UserOrder,
    OpenApiDocument,
    DocsPage,
    SaleState,
    StorefrontRender,
    ListPage,
    EndedPage,
    SalePage,
    AdminPage,
    Asset,
}

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone, unlimited: a probe load balancers call.
    Probe,
    /// Anyone, unlimited: a page or asset the gateway answers from memory, the same for all.
    Page,
    /// Anyone, limited per client address (`rate_limit.anonymous`).
    Anonymous,
    /// A bearer token.
    User,
    /// A bearer token with the admin role.
    Admin,
}

impl PublicRoute {
    const fn new(method: Method, path: &'static str, handler: Handler) -> Self {
        Self { method, path, handler }
    }

    pub const fn access(&self) -> Access {
        match self.handler {
            Handler::Readyz => Access::Probe,
            Handler::ListPage | Handler::EndedPage | Handler::AdminPage | Handler::Asset => Access::Page,
            // A sale page's id is the client's to choose, and a page not kept costs a call to
            // stock-service: limited per address like `GET /api/goods/{id}`.
            Handler::DevToken
            | Handler::PublicStock
            | Handler::OpenApiDocument
            | Handler::DocsPage
            | Handler::SaleState
            | Handler::SalePage => Access::Anonymous,
            // The stream also opens with a ticket instead of the header (`crate::push`).
            Handler::Buy
            | Handler::Join
            | Handler::Poll
            | Handler::Events
            | Handler::StreamTicket
            | Handler::QueueStatus
            | Handler::UserOrder => Access::User,
            Handler::AdminSeckill | Handler::StorefrontRender => Access::Admin,
        }
    }

    /// Opens with a stream ticket instead of the bearer token (`crate::push`).
    pub fn opens_with_stream_ticket(&self) -> bool {
        self.handler == Handler::Events
    }

    /// Only registered when `auth.dev_tokens` is on.
    pub fn dev_only(&self) -> bool {
        self.handler == Handler::DevToken
    }

    fn route(&self) -> Route {
        let route = web::method(self.method.clone());
        match self.handler {
            Handler::Buy => route.to(buy),
            Handler::Join => route.to(join),
            Handler::Poll => route.to(poll),
            Handler::Events => route.to(push::events),
            Handler::StreamTicket => route.to(push::ticket),
            Handler::QueueStatus => route.to(queue_status),
            Handler::DevToken => route.to(dev_token),
            Handler::Readyz => route.to(readyz),
            Handler::PublicStock => route.to(public_stock),
            Handler::AdminSeckill => route.to(admin_seckill),
            Handler::UserOrder => route.to(user_order),
            Handler::OpenApiDocument => route.to(openapi::document),
            Handler::DocsPage => route.to(openapi::page),
            Handler::SaleState => route.to(sale_state::sale_state),
            Handler::StorefrontRender => route.to(storefront::render_now),
            Handler::ListPage => route.to(storefront::list),
            Handler::EndedPage => route.to(storefront::ended),
            Handler::SalePage => route.to(storefront::sale),
            Handler::AdminPage => route.to(storefront::admin),
            Handler::Asset => route.to(storefront::asset),
        }
    }
}

/// The public routes (`/healthz` is every service's, from `seckill_web`), in the order the
/// router tries them: the flash-sale routes first, the order first of all, since each pattern
/// with a `{segment}` is a regex match (perf shows them).
pub const ROUTES: &[PublicRoute] = &[
    PublicRoute::new(Method::POST, "/api/seckill/{goods_id}/orders", Handler::Buy),
    PublicRoute::new(Method::POST, "/api/seckill/{goods_id}/token", Handler::Buy),
    PublicRoute::new(Method::GET, "/api/seckill/{goods_id}/result", Handler::Poll),
    // Pushed answers instead of polls (`crate::push`).
    PublicRoute::new(Method::GET, "/api/seckill/{goods_id}/events", Handler::Events),
    PublicRoute::new(Method::POST, "/api/seckill/{goods_id}/events/ticket", Handler::StreamTicket),
    // A sale's waiting room: joining takes from the buy limit and the address's join limit,
    // asking where one stands from the polling one.
    PublicRoute::new(Method::POST, "/api/seckill/{goods_id}/queue", Handler::Join),
    PublicRoute::new(Method::GET, "/api/seckill/{goods_id}/queue", Handler::QueueStatus),
    PublicRoute::new(Method::POST, "/api/seckill/{goods_id}/queue/challenge", Handler::Buy),
    PublicRoute::new(Method::POST, "/api/auth/dev-token", Handler::DevToken),
    PublicRoute::new(Method::GET, "/readyz", Handler::Readyz),
    PublicRoute::new(Method::GET, "/api/goods", Handler::PublicStock),
    PublicRoute::new(Method::GET, "/api/goods/{id}", Handler::PublicStock),
    PublicRoute::new(Method::POST, "/api/admin/goods", Handler::AdminSeckill),
    PublicRoute::new(Method::GET, "/api/admin/goods/{id}/audit", Handler::AdminSeckill),
    PublicRoute::new(Method::POST, "/api/admin/goods/{id}/repair", Handler::AdminSeckill),
    PublicRoute::new(Method::GET, "/api/orders", Handler::UserOrder),
    PublicRoute::new(Method::GET, "/api/orders/{id}", Handler::UserOrder),
    PublicRoute::new(Method::POST, "/api/orders/{id}/pay", Handler::UserOrder),
    PublicRoute::new(Method::POST, "/api/orders/{id}/cancel", Handler::UserOrder),
    PublicRoute::new(Method::GET, "/api/openapi.json", Handler::OpenApiDocument),
    PublicRoute::new(Method::GET, "/api/docs", Handler::DocsPage),
    // The storefront (`crate::storefront`): the sale state its page asks for, its pages and
    // their assets.
    PublicRoute::new(Method::GET, "/api/seckill/{goods_id}/state", Handler::SaleState),
    PublicRoute::new(Method::POST, "/api/admin/storefront/render", Handler::StorefrontRender),
    PublicRoute::new(Method::GET, "/", Handler::ListPage),
    PublicRoute::new(Method::GET, "/ended", Handler::EndedPage),
    PublicRoute::new(Method::GET, "/sales/{id}", Handler::SalePage),
    PublicRoute::new(Method::GET, "/admin", Handler::AdminPage),
    PublicRoute::new(Method::GET, "/static/{file}", Handler::Asset),
];

/// Registers the gateway's routes; the dev-token route only exists when `dev_tokens` is on,
/// so with it off the path is an ordinary 404.
pub fn configure(cfg: &mut web::ServiceConfig, gateway: web::Data<Gateway>, dev_tokens: bool) {
    cfg.app_data(gateway).app_data(web::Data::from(openapi::published(dev_tokens)));
    let registered = ROUTES.iter().filter(|route| dev_tokens || !route.dev_only());
    for (i, route) in registered.clone().enumerate() {
        if registered.clone().take(i).any(|earlier| earlier.path == route.path) {
            continue;
        }
        let same_path: Vec<&'static PublicRoute> =
            registered.clone().filter(|r| r.path == route.path).collect();
        match route.access() {
            Access::Anonymous => cfg.service(anonymous(&same_path)),
            Access::Probe | Access::Page | Access::User | Access::Admin => cfg.service(resource(&same_path)),
        };
    }
}

/// The resource of one path and its routes (one per method), whose other methods get a JSON
/// 405 naming the path's methods in `Allow` instead of actix's empty 405.
fn resource(routes: &[&'static PublicRoute]) -> Resource {
    let methods = routes.iter().map(|r| r.method.as_str()).collect::<Vec<_>>().join(", ");
    let allow = HeaderValue::from_str(&methods).expect("method names are header-safe");
    let mut resource = web::resource(routes[0].path).default_service(web::to(move || {
        let allow = allow.clone();
        async move { method_not_allowed(allow) }
    }));
    for route in routes {
        resource = resource.route(route.route());
    }
    resource
}

/// A route anyone may call without a token: limited per client address, before anything of
/// the request (its body) is read.
fn anonymous(routes: &[&'static PublicRoute]) -> impl HttpServiceFactory + use<> {
    resource(routes).wrap(from_fn(anonymous_limit))
}

async fn anonymous_limit(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, Error> {
    // `configure` registers the gateway's data with its routes: never without it.
    if let Some(gateway) = req.app_data::<web::Data<Gateway>>().cloned() {
        let who = Who::address(client_ip(req.request(), gateway.proxy_hops));
        if let Err(limited) = gateway.limits.take(Class::Anonymous, who).await {
            return Ok(req.into_response(limited.error_response()).map_into_right_body());
        }
    }
    next.call(req).await.map(ServiceResponse::map_into_left_body)
}

/// The client's address: the connection's other end, or, behind `hops` trusted proxies, the
/// address the outermost of them saw, read from the right of `X-Forwarded-For`. Never further
/// left: the client writes those entries, and a made-up one per request would be a fresh
/// bucket each time. A header too short or unreadable falls back to the peer.
pub(crate) fn client_ip(req: &HttpRequest, hops: u8) -> IpAddr {
    // No peer (only in in-process tests): one shared bucket, never none.
    let peer = req.peer_addr().map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |peer| peer.ip());
    if hops == 0 {
        return peer;
    }
    forwarded_for(req.headers().get_all("x-forwarded-for").map(|v| v.as_bytes()), hops).unwrap_or(peer)
}

/// The `hops`-th address from the right of all `X-Forwarded-For` values, in order.
fn forwarded_for<'a>(values: impl Iterator<Item = &'a [u8]>, hops: u8) -> Option<IpAddr> {
    let entries: Vec<&str> = values
        .filter_map(|v| std::str::from_utf8(v).ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    let i = entries.len().checked_sub(usize::from(hops))?;
    entries[i].parse().ok()
}

/// `POST /api/auth/dev-token`: a token for any user, for local runs and tests only.
async fn dev_token(
    request: web::Json<DevTokenRequest>,
    gateway: web::Data<Gateway>,
) -> Result<HttpResponse, ApiError> {
    let token = gateway.auth.issue(request.user_id, request.role)?;
    Ok(HttpResponse::Ok().json(TokenResponse { token }))
}

/// `GET /readyz` on the public port: 200 `{"status": "ready"}` while any service has a
/// replica that answers, else 503 `{"status": "unavailable"}`. Nothing about the inside (which
/// service, which replica URL, what error): that is in the log and on the admin listener's
/// `/readyz` ([`admin_routes`]). One service down is answered route by route (503
/// `UPSTREAM_UNAVAILABLE`): taking every gateway pod out of the load balancer for it would
/// turn a partial outage into a total one (no goods list, no buying, because order-service is
/// down).
async fn readyz(gateway: web::Data<Gateway>) -> HttpResponse {
    if gateway.readiness().await.iter().any(|(_, result)| result.is_ok()) {
        HttpResponse::Ok().json(json!({"status": "ready"}))
    } else {
        HttpResponse::ServiceUnavailable().json(json!({"status": "unavailable"}))
    }
}

/// The admin listener's own routes: `GET /readyz` with each service's state and errors (the
/// same rule as the public one, `"degraded"` when some service has no replica answering).
pub fn admin_routes(cfg: &mut web::ServiceConfig, gateway: web::Data<Gateway>) {
    cfg.app_data(gateway).route("/readyz", web::get().to(detailed_readyz));
}

async fn detailed_readyz(gateway: web::Data<Gateway>) -> HttpResponse {
    health::readiness_any(&gateway.readiness().await)
}

/// `GET /api/goods[/{id}]`: public. Identity headers a client sent are still stripped.
async fn public_stock(
    req: HttpRequest,
    payload: web::Payload,
    gateway: web::Data<Gateway>,
) -> Result<HttpResponse, ApiError> {
    gateway.pass(Service::Stock, &req, payload, None).await
}

/// `POST /api/seckill/{id}/token|orders|queue/challenge`: a token and the user's buy limit.
async fn buy(
    req: HttpRequest,
    payload: web::Payload,
    gateway: web::Data<Gateway>,
) -> Result<HttpResponse, ApiError> {
    gateway.pass_buy(&req, payload, None).await
}

/// `POST /api/seckill/{id}/queue`: a token, the user's buy limit and the address's join limit.
async fn join(
    req: HttpRequest,
    payload: web::Payload,
    gateway: web::Data<Gateway>,
) -> Result<HttpResponse, ApiError> {
    let address = client_ip(&req, gateway.proxy_hops);
    let res = gateway.pass_buy(&req, payload, Some(Who::address(address))).await?;
    if res.status() == StatusCode::OK
        && let Some(g) = goods_of(&req)
    {
        gateway.rooms.watch(g);
    }
    Ok(res)
}

/// `GET /api/seckill/{id}/queue`: a token and the user's polling limit; answered here from the
/// room's mirror when it can be (`crate::rooms`), else by seckill-service, whose `200` starts
/// the mirror. An answer from memory costs this replica alone, so it takes from this
/// replica's bucket alone (no call to the shared one in Redis): a user spread over N gateways
/// may ask N times as often, and each of those answers costs a few microseconds of one of them.
async fn queue_status(
    req: HttpRequest,
    payload: web::Payload,
    gateway: web::Data<Gateway>,
) -> Result<HttpResponse, ApiError> {
    let caller = gateway.auth.authenticate(&req)?;
    let who = Who::user(caller.id);
    gateway.limits.take_local(Class::Poll, who)?;
    let goods = goods_of(&req);
    if let Some(answer) = goods.and_then(|g| gateway.rooms.answer(g, caller.id, &req)) {
        return Ok(answer);
    }
    gateway.limits.take_shared(Class::Poll, who).await?;
    let res = gateway.pass(Service::Seckill, &req, payload, Some(caller)).await?;
    if let Some(g) = goods.filter(|_| res.status() == StatusCode::OK) {
        gateway.rooms.watch(g);
    }
    Ok(res)
}

/// `GET /api/seckill/{id}/result`: a token and the user's polling limit.
async fn poll(
    req: HttpRequest,
    payload: web::Payload,
    gateway: web::Data<Gateway>,
) -> Result<HttpResponse, ApiError> {
    gateway.pass_as_user(Service::Seckill, Class::Poll, &req, payload).await
}

/// `/api/admin/goods...` (a sale's creation, audit and repair): an admin token.
async fn admin_seckill(
    req: HttpRequest,
    payload: web::Payload,
    gateway: web::Data<Gateway>,
) -> Result<HttpResponse, ApiError> {
    let res = gateway.pass_as_user(Service::Seckill, Class::Admin, &req, payload).await?;
    // Only a new sale is answered 201: the storefront lists it at once.
    if res.status() == actix_web::http::StatusCode::CREATED {
        gateway.storefront.sale_created();
    }
    Ok(res)
}

/// `/api/orders...`: a token and the user's orders limit.
async fn user_order(
    req: HttpRequest,
    payload: web::Payload,
    gateway: web::Data<Gateway>,
) -> Result<HttpResponse, ApiError> {
    gateway.pass_as_user(Service::Order, Class::Orders, &req, payload).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_is_the_address_the_outermost_trusted_proxy_saw() {
        let one = |v: &'static str| std::iter::once(v.as_bytes());
        // The client wrote 1.1.1.1; the Ingress appended the address it saw, 9.9.9.9.
        assert_eq!(forwarded_for(one("1.1.1.1, 9.9.9.9"), 1), "9.9.9.9".parse().ok());
        assert_eq!(forwarded_for(one("1.1.1.1, 9.9.9.9, 10.0.0.2"), 2), "9.9.9.9".parse().ok());
        // Several header lines read as one list.
        let lines = ["1.1.1.1".as_bytes(), "9.9.9.9".as_bytes()];
        assert_eq!(forwarded_for(lines.into_iter(), 1), "9.9.9.9".parse().ok());
        // Too short or not an address: none (the peer is used).
        assert_eq!(forwarded_for(one("9.9.9.9"), 2), None);
        assert_eq!(forwarded_for(one("1.1.1.1, nonsense"), 1), None);
        assert_eq!(forwarded_for(std::iter::empty(), 1), None);
    }
}
