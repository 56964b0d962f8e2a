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

/// The client's id when it is a plain token, else a new uuid. The id goes into logs, spans and
/// upstream headers: spaces, quotes, control or non-ASCII characters could forge log fields.
pub fn from_request(req: &ServiceRequest) -> String {
    req.headers()
        .get(headers::REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| acceptable(v))
        .map(str::to_owned)
        .unwrap_or_else(new_id)
}

/// A random (version 4) uuid from a thread-local generator: a request id names a request in
/// the logs and guards nothing, so it needs no system randomness (`Uuid::new_v4` makes a
/// `getrandom` call, on every request the gateway receives).
fn new_id() -> String {
    uuid::Builder::from_random_bytes(fastrand::u128(..).to_le_bytes()).into_uuid().to_string()
}

/// 1..=128 characters of `[A-Za-z0-9._:-]`.
fn acceptable(id: &str) -> bool {
    (1..=MAX_LEN).contains(&id.len())
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
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

#[cfg(test)]
mod tests {
    use actix_web::test::TestRequest;

    use super::*;

    #[test]
    fn generated_ids_are_version_4_uuids_and_differ() {
        let (a, b) = (new_id(), new_id());
        assert_ne!(a, b);
        for id in [a, b] {
            assert_eq!(uuid::Uuid::parse_str(&id).unwrap().get_version_num(), 4);
        }
    }

    fn id_for(value: Option<&[u8]>) -> String {
        let mut req = TestRequest::default();
        if let Some(value) = value {
            req = req.insert_header((headers::REQUEST_ID, HeaderValue::from_bytes(value).unwrap()));
        }
        from_request(&req.to_srv_request())
    }

    fn is_uuid(id: &str) -> bool {
        uuid::Uuid::parse_str(id).is_ok()
    }

    #[test]
    fn plain_client_ids_are_kept() {
        let longest = "a".repeat(MAX_LEN);
        for id in ["x", "abc-123", "trace:2024.01_a-b", "0f8e1d2c-aaaa-bbbb-cccc-0123456789ab", &longest] {
            assert_eq!(id_for(Some(id.as_bytes())), id);
        }
    }

    #[test]
    fn anything_else_is_replaced_by_a_uuid() {
        let too_long = "a".repeat(MAX_LEN + 1);
        for id in [
            &b""[..],
            b" ",
            b"has space",
            b"quote\"d",
            b"a=b",
            b"semi;colon",
            b"slash/x",
            b"tab\tx",
            b"caf\xc3\xa9",
            b"\xff\xfe",
            too_long.as_bytes(),
        ] {
            let got = id_for(Some(id));
            assert!(is_uuid(&got), "{:?} kept as {got}", String::from_utf8_lossy(id));
        }
        assert!(is_uuid(&id_for(None)));
    }
}
