//! The door of every service behind the gateway: a request without a good credential of a peer
//! this service accepts is answered 401 before any handler runs. Only the probes and the
//! metrics (`/healthz`, `/readyz`, `/metrics`), which Kubernetes and Prometheus read unsigned,
//! stay open; they change nothing and say nothing of a user.
//!
//! A request that passed carries its [`Caller`] in the request's extensions: the extractors
//! [`crate::AuthUser`] (a user, vouched for by the gateway) and [`ServiceCaller`] (another
//! service) read it from there.

use std::future::{Ready, ready};
use std::sync::Arc;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Payload, ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::middleware::{Next, from_fn};
use actix_web::{Error, FromRequest, HttpMessage, HttpRequest, ResponseError};
use seckill_common::trust::{AUTH_HEADER, Caller, Peer, RequestFacts, Trust, TrustError};
use seckill_common::{ErrorCode, headers};

use crate::ApiError;

/// The internal routes the gateway's own credential opens: reads it makes itself (a waiting
/// room's state), never a client's request, which the gateway never sends to `/internal/`.
pub const GATEWAY_READS: &str = "/internal/gateway/";

/// Paths anyone on the network may read: probes and metrics.
fn is_open(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/metrics")
}

/// Checks the caller's credential of every request but the open ones.
pub async fn middleware(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, Error> {
    if is_open(req.path()) {
        return next.call(req).await.map(ServiceResponse::map_into_left_body);
    }
    let Some(trust) = req.app_data::<actix_web::web::Data<Arc<Trust>>>().cloned() else {
        // `serve` installs both or neither; refusing keeps a wiring mistake closed, not open.
        return Ok(refuse(req, TrustError::Missing));
    };
    let headers = req.headers();
    let facts = RequestFacts {
        method: req.method().as_str(),
        path: req.path(),
        request_id: headers.get(headers::REQUEST_ID).and_then(|v| v.to_str().ok()).unwrap_or_default(),
    };
    let checked = trust.verify_request(headers.get(AUTH_HEADER).map(|v| v.as_bytes()), &facts);
    match checked {
        // The gateway never forwards `/internal/...`: those are for services only, but for
        // the reads it makes itself, which carry no user.
        Ok(caller)
            if caller.peer == Peer::Gateway
                && req.path().starts_with("/internal/")
                && (caller.user.is_some() || !req.path().starts_with(GATEWAY_READS)) =>
        {
            Ok(refuse(req, TrustError::Stranger))
        }
        Ok(caller) => {
            req.extensions_mut().insert(caller);
            next.call(req).await.map(ServiceResponse::map_into_left_body)
        }
        Err(why) => Ok(refuse(req, why)),
    }
}

fn refuse<B>(req: ServiceRequest, why: TrustError) -> ServiceResponse<EitherBody<B>> {
    metrics::counter!("trust_refused_requests_total", "reason" => why.label()).increment(1);
    // Debug, not warn: whoever probes the port decides how many lines a warn would write; the
    // counter above is what an alert watches.
    tracing::debug!(reason = %why, path = req.path(), "request refused: no good credential");
    let response =
        ApiError::new(ErrorCode::Unauthorized, "a valid credential of a trusted caller is required")
            .error_response();
    req.into_response(response).map_into_right_body()
}

/// The caller the middleware let in.
pub fn caller(req: &HttpRequest) -> Option<Caller> {
    req.extensions().get::<Caller>().copied()
}

/// The services an internal route serves, set on its resource:
/// `web::resource(path).app_data(AllowedCallers(&[Peer::Order]))`.
#[derive(Debug, Clone, Copy)]
pub struct AllowedCallers(pub &'static [Peer]);

/// An internal route's resource, open to the services in `allowed` alone: any other caller is
/// refused (401 or 403, as [`ServiceCaller`] words it) before the handler runs, whether the
/// handler asks for the caller or not, so no handler can open its route by forgetting to.
pub fn internal_route(
    path: &str,
    allowed: &'static [Peer],
) -> actix_web::Resource<
    impl ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse<impl MessageBody>,
        Error = Error,
        InitError = (),
    >,
> {
    actix_web::web::resource(path).app_data(AllowedCallers(allowed)).wrap(from_fn(allowed_callers_only))
}

async fn allowed_callers_only(
    mut req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, Error> {
    match req.extract::<ServiceCaller>().await {
        Ok(_) => next.call(req).await.map(ServiceResponse::map_into_left_body),
        // An answer, not an error: the middlewares around see a response with its status.
        Err(refused) => Ok(req.into_response(refused.error_response()).map_into_right_body()),
    }
}

/// Another service calling an internal route, one of those the route's [`AllowedCallers`]
/// names: a service credential of another is 403 before the body is read, none is 401.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceCaller(pub Peer);

impl FromRequest for ServiceCaller {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let peer = match caller(req) {
            // The gateway as itself (its own reads), never as a user it forwards.
            Some(c) if c.peer != Peer::Gateway || c.user.is_none() => c.peer,
            _ => {
                return ready(Err(ApiError::new(
                    ErrorCode::Unauthorized,
                    "a service credential is required",
                )));
            }
        };
        // A route that names nobody is open to nobody.
        let allowed = req.app_data::<AllowedCallers>().map_or(&[][..], |a| a.0);
        ready(if allowed.contains(&peer) {
            Ok(Self(peer))
        } else {
            Err(ApiError::new(ErrorCode::Forbidden, format!("{peer} may not call this route")))
        })
    }
}

#[cfg(test)]
mod tests {
    use actix_web::{App, test, web};
    use seckill_common::trust::TrustSettings;

    use super::*;

    /// `me`'s trust, with one key per link made up from the two names.
    fn trust(me: Peer) -> Arc<Trust> {
        let key = |from: Peer, to: Peer| format!("{from}-to-{to}-a-key-long-enough-for-the-link");
        let settings = TrustSettings {
            send: Peer::ALL.iter().map(|&to| (to.as_str().to_owned(), key(me, to))).collect(),
            accept: Peer::ALL.iter().map(|&from| (from.as_str().to_owned(), key(from, me))).collect(),
            ..TrustSettings::default()
        };
        Arc::new(Trust::new(me, &settings, &Peer::ALL, &Peer::ALL).expect("valid keys"))
    }

    /// A route open to order-service alone whose handler never asks who called: the route
    /// itself refuses the others.
    #[actix_web::test]
    async fn an_internal_route_refuses_every_other_caller_even_if_its_handler_does_not_ask() {
        let app = test::init_service(
            App::new().app_data(web::Data::new(trust(Peer::Stock))).wrap(from_fn(middleware)).service(
                internal_route("/internal/stock/thing", &[Peer::Order])
                    .route(web::post().to(|| async { "done" })),
            ),
        )
        .await;
        let call = |from: Option<Peer>| {
            let mut req = test::TestRequest::post().uri("/internal/stock/thing");
            if let Some(from) = from {
                let facts = RequestFacts { method: "POST", path: "/internal/stock/thing", request_id: "" };
                req = req.insert_header((AUTH_HEADER, trust(from).sign_request(Peer::Stock, &facts, None)));
            }
            req.to_request()
        };
        assert_eq!(test::call_service(&app, call(Some(Peer::Order))).await.status(), 200);
        for (from, status) in [(Some(Peer::Seckill), 403), (Some(Peer::Gateway), 401), (None, 401)] {
            let res = test::call_service(&app, call(from)).await;
            assert_eq!(res.status().as_u16(), status, "{from:?}");
        }
    }
}
