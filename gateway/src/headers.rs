//! Which headers cross the hop, each way.
//!
//! Towards an upstream: every end-to-end header of the client's request except the
//! credential header (`x-seckill-auth`, which only the gateway signs, from the verified token:
//! see `Proxy`) and the identity headers older versions used (`x-user-id`, `x-user-role`);
//! `x-request-id` is the id the request-id middleware settled on. Back to the client:
//! the upstream's headers as they are. Both ways, hop-by-hop headers (RFC 9110 §7.6.1) and
//! `content-length` stay behind: the HTTP clients and servers on each side set their own.
//!
//! actix-web is on the `http` 0.2 crate and reqwest on 1.x, so names and values are converted
//! by their bytes; both versions accept the same bytes, so nothing valid is lost on the way.

use actix_web::HttpResponseBuilder;
use actix_web::http::header as actix;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use seckill_common::headers::{REQUEST_ID, USER_ID, USER_ROLE};
use seckill_common::trust::AUTH_HEADER;

/// Headers that describe one connection, not the message, so a proxy never forwards them.
fn is_hop_by_hop(name: &str) -> bool {
    matches!(name, "connection" | "keep-alive" | "te" | "trailer" | "transfer-encoding" | "upgrade" | "host")
        || name.starts_with("proxy-")
}

/// Names a `Connection` header lists are hop-by-hop too. `keep-alive` and `close`, by far the
/// most common options, are skipped anyway, so the list stays empty (and unallocated) then.
fn connection_options<'a>(values: impl Iterator<Item = &'a [u8]>) -> Vec<&'a str> {
    values
        .filter_map(|v| std::str::from_utf8(v).ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|o| {
            !o.is_empty() && !o.eq_ignore_ascii_case("keep-alive") && !o.eq_ignore_ascii_case("close")
        })
        .collect()
}

fn is_listed(name: &str, options: &[&str]) -> bool {
    options.iter().any(|o| o.eq_ignore_ascii_case(name))
}

/// The headers to send upstream for a client's request.
pub fn to_upstream(incoming: &actix::HeaderMap, request_id: Option<&str>) -> HeaderMap {
    let options = connection_options(incoming.get_all(actix::CONNECTION).map(|v| v.as_bytes()));
    let mut out = HeaderMap::with_capacity(incoming.len() + 3);
    for (name, value) in incoming {
        let name = name.as_str();
        if is_hop_by_hop(name)
            || matches!(name, "content-length" | AUTH_HEADER | USER_ID | USER_ROLE | REQUEST_ID)
            || is_listed(name, &options)
        {
            continue;
        }
        if let (Ok(name), Ok(value)) =
            (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_bytes(value.as_bytes()))
        {
            out.append(name, value);
        }
    }
    if let Some(id) = request_id.and_then(|id| HeaderValue::from_str(id).ok()) {
        out.insert(REQUEST_ID, id);
    }
    out
}

/// Copies an upstream's response headers onto the client's response.
pub fn to_client(upstream: &HeaderMap, response: &mut HttpResponseBuilder) {
    let options =
        connection_options(upstream.get_all(reqwest::header::CONNECTION).iter().map(|v| v.as_bytes()));
    for (name, value) in upstream {
        let name = name.as_str();
        if is_hop_by_hop(name) || name == "content-length" || is_listed(name, &options) {
            continue;
        }
        if let (Ok(name), Ok(value)) =
            (actix::HeaderName::from_bytes(name.as_bytes()), actix::HeaderValue::from_bytes(value.as_bytes()))
        {
            response.append_header((name, value));
        }
    }
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
    fn identity_and_hop_by_hop_headers_are_replaced_or_dropped() {
        let map = incoming(&[
            ("x-user-id", "999"),
            ("x-user-role", "admin"),
            ("x-seckill-auth", "v1.gateway.1.admin.9999999999999.forged"),
            ("x-request-id", "from-client"),
            ("connection", "keep-alive, x-secret-hop"),
            ("x-secret-hop", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-authorization", "Basic x"),
            ("te", "trailers"),
            ("host", "gateway"),
            ("content-length", "2"),
            ("content-type", "application/json"),
            ("x-seckill-token", "abc"),
            ("accept", "a"),
            ("accept", "b"),
        ]);
        let out = to_upstream(&map, Some("rid-1"));
        assert_eq!(out["x-request-id"], "rid-1");
        assert_eq!(out["content-type"], "application/json");
        assert_eq!(out["x-seckill-token"], "abc");
        assert_eq!(out.get_all("accept").iter().count(), 2);
        for gone in [
            "x-user-id",
            "x-user-role",
            "x-seckill-auth",
            "connection",
            "x-secret-hop",
            "keep-alive",
            "proxy-authorization",
            "te",
            "host",
            "content-length",
        ] {
            assert!(!out.contains_key(gone), "{gone} forwarded");
        }
    }

    #[test]
    fn upstream_headers_pass_back_without_hop_by_hop_ones() {
        let mut up = HeaderMap::new();
        up.insert("content-type", HeaderValue::from_static("application/json"));
        up.insert("x-custom", HeaderValue::from_static("yes"));
        up.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        up.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        up.insert("content-length", HeaderValue::from_static("10"));
        let mut builder = HttpResponse::Ok();
        to_client(&up, &mut builder);
        let res = builder.finish();
        assert_eq!(res.headers().get("x-custom").unwrap(), "yes");
        assert_eq!(res.headers().get("content-type").unwrap(), "application/json");
        assert!(res.headers().get("keep-alive").is_none());
        assert!(res.headers().get("transfer-encoding").is_none());
        assert!(res.headers().get("content-length").is_none());
    }
}
