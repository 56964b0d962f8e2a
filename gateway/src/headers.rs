//! Which headers cross the hop, each way: one allow list per direction, so a header nobody
//! thought of stays behind rather than travelling by default.
//!
//! Towards a service: only the client headers a service reads ([`TO_UPSTREAM`], each with its
//! reason), the first value of each, plus what the gateway itself settles: `x-request-id` (the
//! id the request-id middleware chose) and `x-seckill-auth` (the identity it signs from the
//! verified token, see `Proxy`). A user's credentials (`Authorization`, `Cookie`, an
//! `x-api-key`), identity headers a client wrote (`x-user-*`, a forged `x-seckill-auth`) and
//! hop-by-hop headers never reach a service: the services trust only the gateway's signature,
//! so a token there would be useless to them and a prize for whoever took one of them over
//! (admin tokens replayed at the front door).
//!
//! Because of the list, what the gateway forwards is bounded whatever the client sent: at most
//! [`TO_UPSTREAM`]'s entries, each at most [`MAX_VALUE_BYTES`] (longer is the client's 431),
//! plus the gateway's own few, on a target of at most [`MAX_TARGET_BYTES`] (longer is 414).
//! That keeps a forwarded head well inside the limits every service's HTTP server enforces
//! ([`SERVICE_MAX_HEADERS`], [`SERVICE_MAX_HEAD_BYTES`]): a request the gateway accepts can
//! never be a service's 431, however many headers or bytes the client packed in.
//!
//! Back to the client: only the response headers the services set that mean something to a
//! client ([`TO_CLIENT`]); the gateway's own middleware adds `x-request-id` and its HTTP server
//! `content-length` and `date`. A `set-cookie` (or any header a service might grow) never
//! reaches a browser from behind the gateway: the gateway is the one origin the client talks
//! to, and what it answers is its own decision, not a service's.
//!
//! actix-web is on the `http` 0.2 crate and reqwest on 1.x, so names and values are converted
//! by their bytes; both versions accept the same bytes, so nothing valid is lost on the way.

use actix_web::HttpResponseBuilder;
use actix_web::http::header as actix;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use seckill_common::ErrorCode;
use seckill_common::headers::{REQUEST_ID, ROOM_ADMISSION, ROOM_TICKET, SECKILL_TOKEN};
use seckill_common::listing::NEXT_CURSOR;
use seckill_web::ApiError;

/// A client header a service may receive, and why it must.
#[derive(Debug, Clone, Copy)]
pub struct Allowed {
    pub name: &'static str,
    pub why: &'static str,
}

/// The client's request headers that travel to a service. Nothing else does.
pub const TO_UPSTREAM: &[Allowed] = &[
    Allowed {
        name: "content-type",
        why: "the services' JSON extractors refuse a body that does not say it is JSON",
    },
    Allowed { name: SECKILL_TOKEN, why: "the path token a buy presents; seckill-service checks it" },
    Allowed { name: ROOM_TICKET, why: "the place ticket a waiting buyer asks where they stand with" },
    Allowed {
        name: ROOM_ADMISSION,
        why: "the waiting room's admission a buy presents on a sale with a room",
    },
];

/// The service's response headers that travel back to the client. Nothing else does.
pub const TO_CLIENT: &[Allowed] = &[
    Allowed { name: "content-type", why: "what the body is" },
    Allowed { name: "cache-control", why: "a sale's live state is `no-store`" },
    Allowed { name: "retry-after", why: "when a shed (503 `BUSY`) or limited (429) request may come again" },
    Allowed { name: "allow", why: "the methods a 405 names, as RFC 9110 requires" },
    Allowed { name: NEXT_CURSOR, why: "the cursor to a list's next page (`GET /api/goods`)" },
    Allowed { name: "link", why: "the next page's URL of a list, `rel=\"next\"`" },
];

/// Longest value of an allowed header the gateway forwards. A content type or a path token is
/// a few dozen bytes; anything near this is not a request of this API.
pub const MAX_VALUE_BYTES: usize = 1024;
/// Longest path and query the gateway forwards. Ids and cursors are short; this is the common
/// bound of HTTP servers and proxies (nginx's default buffer, what RFC 9110 §4.1 recommends
/// every server take at least).
pub const MAX_TARGET_BYTES: usize = 8 * 1024;

/// The limits of the HTTP server every service runs (actix-http's HTTP/1 decoder: 96 header
/// lines, a 128 KiB head, not configurable). A request over either is answered 431 by the
/// service and logged there as a stream error.
pub const SERVICE_MAX_HEADERS: usize = 96;
pub const SERVICE_MAX_HEAD_BYTES: usize = 128 * 1024;
/// The headers the gateway's own client adds (`host`, `content-length`, `accept`,
/// `x-request-id`, `x-seckill-auth`) and an upper bound of their bytes (a credential is about
/// 200 bytes, a request id at most 128, a host name at most 255).
const OWN_HEADERS: usize = 5;
const OWN_HEADER_BYTES: usize = 1024;
// The largest head the gateway can send (request line, allowed headers at their longest, its
// own) fits the services' limits, with room to spare.
const _: () = assert!(TO_UPSTREAM.len() + OWN_HEADERS < SERVICE_MAX_HEADERS);
const _: () = assert!(
    MAX_TARGET_BYTES + 32 + TO_UPSTREAM.len() * (32 + MAX_VALUE_BYTES) + OWN_HEADER_BYTES
        < SERVICE_MAX_HEAD_BYTES / 4
);

/// The headers to send upstream for a client's request: the allowed ones (their first value)
/// and the request id the gateway settled on. A value over [`MAX_VALUE_BYTES`] is the client's
/// 431, never a service's.
pub fn to_upstream(incoming: &actix::HeaderMap, request_id: Option<&str>) -> Result<HeaderMap, ApiError> {
    let mut out = HeaderMap::with_capacity(TO_UPSTREAM.len() + 3);
    for allowed in TO_UPSTREAM {
        let Some(value) = incoming.get(allowed.name) else { continue };
        if value.len() > MAX_VALUE_BYTES {
            return Err(ApiError::new(
                ErrorCode::HeadersTooLarge,
                format!("the {} header is longer than {MAX_VALUE_BYTES} bytes", allowed.name),
            ));
        }
        if let Ok(value) = HeaderValue::from_bytes(value.as_bytes()) {
            out.insert(HeaderName::from_static(allowed.name), value);
        }
    }
    if let Some(id) = request_id.and_then(|id| HeaderValue::from_str(id).ok()) {
        out.insert(REQUEST_ID, id);
    }
    Ok(out)
}

/// Copies the allowed headers of an upstream's response onto the client's response.
pub fn to_client(upstream: &HeaderMap, response: &mut HttpResponseBuilder) {
    for allowed in TO_CLIENT {
        for value in upstream.get_all(allowed.name) {
            if let Ok(value) = actix::HeaderValue::from_bytes(value.as_bytes()) {
                response.append_header((actix::HeaderName::from_static(allowed.name), value));
            }
        }
    }
}

/// 414 when the path and query are longer than [`MAX_TARGET_BYTES`].
pub fn check_target(target: &str) -> Result<(), ApiError> {
    if target.len() > MAX_TARGET_BYTES {
        return Err(ApiError::new(
            ErrorCode::UriTooLong,
            format!("the path and query are longer than {MAX_TARGET_BYTES} bytes"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use actix_web::HttpResponse;

    use super::*;

    fn incoming(pairs: &[(&'static str, &'static str)]) -> actix::HeaderMap {
        let mut map = actix::HeaderMap::new();
        for (n, v) in pairs {
            map.append(actix::HeaderName::from_static(n), actix::HeaderValue::from_static(v));
        }
        map
    }

    #[test]
    fn only_allowed_headers_and_the_settled_request_id_go_upstream() {
        let map = incoming(&[
            ("authorization", "Bearer a.b.c"),
            ("cookie", "session=1"),
            ("x-api-key", "k"),
            ("x-user-id", "999"),
            ("x-user-role", "admin"),
            ("x-seckill-auth", "v1.gateway.1.admin.9999999999999.forged"),
            ("x-request-id", "from-client"),
            ("connection", "keep-alive, x-secret-hop"),
            ("x-secret-hop", "1"),
            ("proxy-authorization", "Basic x"),
            ("host", "gateway"),
            ("content-length", "2"),
            ("content-type", "application/json"),
            ("content-type", "text/plain"),
            ("x-seckill-token", "abc"),
            ("accept", "a"),
            ("x-custom", "1"),
        ]);
        let out = to_upstream(&map, Some("rid-1")).unwrap();
        let names: Vec<&str> = out.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["content-type", "x-seckill-token", "x-request-id"]);
        assert_eq!(out["x-request-id"], "rid-1");
        // The first value only: the one a service's `get` would have read.
        assert_eq!(out.get_all("content-type").iter().collect::<Vec<_>>(), ["application/json"]);
        assert_eq!(out["x-seckill-token"], "abc");
    }

    #[test]
    fn an_allowed_header_too_long_to_forward_is_the_clients_431() {
        let long = "t".repeat(MAX_VALUE_BYTES + 1);
        let mut map = actix::HeaderMap::new();
        map.insert(
            actix::HeaderName::from_static("x-seckill-token"),
            actix::HeaderValue::from_str(&long).unwrap(),
        );
        let err = to_upstream(&map, None).unwrap_err();
        assert_eq!((err.code, err.code.status()), (ErrorCode::HeadersTooLarge, 431));
        assert!(err.message.contains("x-seckill-token"), "{}", err.message);
        // Exactly the limit passes; an over-long header not on the list is simply left behind.
        map.insert(
            actix::HeaderName::from_static("x-seckill-token"),
            actix::HeaderValue::from_str(&long[1..]).unwrap(),
        );
        map.insert(actix::HeaderName::from_static("cookie"), actix::HeaderValue::from_str(&long).unwrap());
        assert_eq!(to_upstream(&map, None).unwrap().len(), 1);
    }

    #[test]
    fn a_target_over_the_bound_is_414() {
        assert!(check_target(&"a".repeat(MAX_TARGET_BYTES)).is_ok());
        let err = check_target(&"a".repeat(MAX_TARGET_BYTES + 1)).unwrap_err();
        assert_eq!((err.code, err.code.status()), (ErrorCode::UriTooLong, 414));
    }

    #[test]
    fn only_allowed_headers_come_back() {
        let mut up = HeaderMap::new();
        up.insert("content-type", HeaderValue::from_static("application/json"));
        up.insert("cache-control", HeaderValue::from_static("no-store"));
        up.insert("retry-after", HeaderValue::from_static("1"));
        up.insert("set-cookie", HeaderValue::from_static("session=stolen"));
        up.insert("x-custom", HeaderValue::from_static("yes"));
        up.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        up.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        up.insert("content-length", HeaderValue::from_static("10"));
        let mut builder = HttpResponse::Ok();
        to_client(&up, &mut builder);
        let res = builder.finish();
        let mut names: Vec<&str> = res.headers().keys().map(actix::HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["cache-control", "content-type", "retry-after"]);
    }
}
