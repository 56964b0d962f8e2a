//! What the gateway's handlers share, built once at start (`crate::startup`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use seckill_common::GoodsId;
use seckill_web::health::Check;
use seckill_web::shed::InFlight;
use seckill_web::{ApiError, AuthUser};
use tokio::sync::Mutex;

use crate::auth::Authenticator;
use crate::body;
use crate::closed::ClosedSales;
use crate::proxy::{Proxy, Service};
use crate::push::Push;
use crate::rate_limit::{Class, Limits, Who};
use crate::rooms::RoomMirrors;
use crate::storefront::Storefront;

/// How long one round of upstream health checks answers `/readyz`: a flood of calls to the
/// public `/readyz` makes at most one round a second, not one per call.
const READINESS_REUSE: Duration = Duration::from_secs(1);

/// What every handler shares, built once at start.
pub struct Gateway {
    pub auth: Authenticator,
    pub proxy: Proxy,
    /// Every class of routes' rate limit.
    pub limits: Arc<Limits>,
    /// `rate_limit.trusted_proxy_hops`.
    pub proxy_hops: u8,
    /// `http.body_limit_bytes`.
    pub body_limit: usize,
    pub last_readiness: LastReadiness,
    /// Sales seckill-service just called gone, answered here for a moment.
    pub closed: ClosedSales,
    /// `overload.*`: buy clicks forwarded and not yet answered, under a bound that follows
    /// their latency.
    pub buys_in_flight: InFlight,
    /// The buyers' pages, kept in memory.
    pub storefront: Storefront,
    /// The waiting rooms this replica answers status polls of.
    pub rooms: RoomMirrors,
    /// Buyers' event streams.
    pub push: Arc<Push>,
}

/// The sale a `/api/seckill/{goods_id}/...` route names, when it is an id.
pub(crate) fn goods_of(req: &HttpRequest) -> Option<GoodsId> {
    req.match_info().get("goods_id").and_then(|v| v.parse().ok())
}

/// The last round of upstream health checks and when it ended.
#[derive(Default)]
pub struct LastReadiness(Mutex<Option<(Instant, Arc<[Check]>)>>);

impl Gateway {
    /// Each service's state, at most `READINESS_REUSE` old. One round at a time: callers
    /// arriving meanwhile wait for it and share it. Failures are logged here, once per round.
    pub async fn readiness(&self) -> Arc<[Check]> {
        let mut last = self.last_readiness.0.lock().await;
        if let Some((at, checks)) = last.as_ref()
            && at.elapsed() < READINESS_REUSE
        {
            return checks.clone();
        }
        let checks: Arc<[Check]> = self.proxy.readiness().await.into();
        for (upstream, result) in checks.iter() {
            if let Err(why) = result {
                tracing::warn!(upstream, error = %why, "no replica of the upstream answers");
            }
        }
        *last = Some((Instant::now(), checks.clone()));
        checks
    }

    /// A route that takes a token: checks it (and, for the admin class, the role: the service
    /// checks again, refusing here spares it the request), takes one request from the user's
    /// bucket of `class`, and forwards the request as that user.
    pub(crate) async fn pass_as_user(
        &self,
        service: Service,
        class: Class,
        req: &HttpRequest,
        payload: web::Payload,
    ) -> Result<HttpResponse, ApiError> {
        let caller = self.auth.authenticate(req)?;
        if class == Class::Admin {
            caller.require_admin()?;
        }
        self.limits.take(class, Who::user(caller.id)).await?;
        self.pass(service, req, payload, Some(caller)).await
    }

    /// A buy click (path token, order, or a join of a waiting room, which also takes from the
    /// address's join limit, `joining_from`): the token and the user's buy limit (every click
    /// counts, whoever answers it: one limit across replicas), then a sale seckill-service just
    /// called gone is answered here (see `closed`); otherwise the hop, a `410` remembered.
    pub(crate) async fn pass_buy(
        &self,
        req: &HttpRequest,
        payload: web::Payload,
        joining_from: Option<Who>,
    ) -> Result<HttpResponse, ApiError> {
        // Under overload most clicks end here: shed before the token and the limit cost.
        self.buys_in_flight.refuse_if_full("buy")?;
        let caller = self.auth.authenticate(req)?;
        self.limits.take(Class::Buy, Who::user(caller.id)).await?;
        if let Some(address) = joining_from {
            self.limits.take(Class::Join, address).await?;
        }
        let goods = goods_of(req);
        if let Some(answer) = goods.and_then(|g| self.closed.answer(g)) {
            return Ok(answer);
        }
        let _slot = self.buys_in_flight.enter("buy")?;
        let res = self.pass(Service::Seckill, req, payload, Some(caller)).await?;
        match goods {
            Some(g) if res.status() == StatusCode::GONE => {
                let (res, body) = res.into_parts();
                let body = actix_web::body::to_bytes(body)
                    .await
                    .map_err(|e| ApiError::internal(anyhow::anyhow!("{e}")))?;
                self.closed.remember(g, body.clone());
                Ok(res.set_body(body).map_into_boxed_body())
            }
            _ => Ok(res),
        }
    }

    /// Checks what would be forwarded, reads the body within the limit and forwards the
    /// request.
    pub(crate) async fn pass(
        &self,
        service: Service,
        req: &HttpRequest,
        payload: web::Payload,
        caller: Option<AuthUser>,
    ) -> Result<HttpResponse, ApiError> {
        let outgoing = Proxy::outgoing(req)?;
        let body = body::read_limited(req, payload, self.body_limit).await?;
        self.proxy.forward(service, outgoing, body, caller).await
    }
}
