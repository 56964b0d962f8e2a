//! `x-request-id`: taken from the request or generated, put on the response and in the span.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{Error, HttpMessage};
use seckill_common::headers;
use tracing::Instrument;

/// The request id of the current request, readable by handlers from the extensions.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// Longest request id taken from a client; longer ones are replaced.
const MAX_LEN: usize = 128;

pub fn from_request(req: &ServiceRequest) -> String {
    req.headers()
        .get(headers::REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= MAX_LEN)
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
}

pub async fn middleware(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, Error> {
    let id = from_request(&req);
    req.extensions_mut().insert(RequestId(id.clone()));
    let span = tracing::info_span!("request", request_id = %id, method = %req.method(), path = %req.path());
    let mut res = next.call(req).instrument(span).await?;
    if let Ok(value) = HeaderValue::from_str(&id) {
        res.headers_mut().insert(HeaderName::from_static(headers::REQUEST_ID), value);
    }
    Ok(res)
}
