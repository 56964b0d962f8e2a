//! Reading a request body to forward, within `http.body_limit_bytes`.
//!
//! Done by hand rather than with actix's `Bytes` extractor so that an oversized body is answered
//! with the JSON `PAYLOAD_TOO_LARGE` error instead of actix's plain-text one, and rather than
//! with `Payload::to_bytes_limited`, which reserves 32 KiB for every request, empty GETs too.
//!
//! By the time a handler runs, `seckill_web::read_bound` has read the body within
//! `http.read_timeout_ms` and the same limit (a declared length past it refused before a byte
//! was read): here it is one buffered chunk, taken as is.

use actix_web::HttpRequest;
use actix_web::http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use actix_web::web::{Bytes, Payload};
use seckill_web::ApiError;

/// The whole body, or 413 once it grows past `limit` bytes.
pub async fn read_limited(req: &HttpRequest, payload: Payload, limit: usize) -> Result<Bytes, ApiError> {
    let headers = req.headers();
    let declared =
        headers.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<usize>().ok());
    // HTTP/1.1 has a body only with a length or a transfer coding. Anything else reads as
    // empty without touching the payload: for a websocket upgrade actix makes the payload the
    // rest of the connection, and waiting for its end would hold the request forever.
    if !headers.contains_key(TRANSFER_ENCODING) && declared.unwrap_or(0) == 0 {
        return Ok(Bytes::new());
    }
    seckill_web::read_bound::read(payload.into_inner(), limit, declared).await
}
