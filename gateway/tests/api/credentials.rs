//! Nothing that authenticates a user reaches a service: every header each stand-in service
//! receives is captured, for every public route, sent with a user's token, an admin's token,
//! a cookie and forged identity headers. The services trust the gateway's signed identity
//! alone, so a credential past the gateway would only be a prize for whoever took a service
//! over. (Put `authorization` or `cookie` on `headers::TO_UPSTREAM` and these fail.)

use gateway::headers::TO_UPSTREAM;
use gateway::routes::{Access, ROUTES};
use seckill_common::headers::REQUEST_ID;
use seckill_common::trust::AUTH_HEADER;

use crate::helpers::{Echo, Seen, TestApp, admin_token, assert_error, settings, user_token};

const COOKIE_SECRET: &str = "cookie-secret-7f3a";
const FORGED: &str = "forged-credential-91c2";

/// What may arrive at a service: the allowed client headers, and what the gateway's own client
/// sets (the hop's host, the body's length, its `accept`, the request id and its signature).
fn may_arrive(name: &str) -> bool {
    TO_UPSTREAM.iter().any(|allowed| allowed.name == name)
        || [REQUEST_ID, AUTH_HEADER, "host", "content-length", "accept"].contains(&name)
}

/// A route's path with its segments filled in.
fn concrete(path: &str) -> String {
    path.replace("{goods_id}", "7").replace("{id}", "7").replace("{file}", "store.js")
}

/// Everything the three stand-ins received so far.
fn captured(upstreams: &[&Echo]) -> Vec<Seen> {
    upstreams.iter().flat_map(|echo| echo.seen.lock().unwrap().clone()).collect()
}

#[tokio::test]
async fn no_header_that_authenticates_a_user_reaches_a_service_on_any_route() {
    // Stock answers an empty list, so that the storefront has pages to render from it.
    let (seckill, order, stock) = (Echo::new("seckill"), Echo::new("order"), Echo::new("stock").body("[]"));
    let stand_ins = [&seckill.clone(), &order.clone(), &stock.clone()].map(|e| (*e).clone());
    let (s, o, t) = (seckill.start(), order.start(), stock.start());
    let app = TestApp::start(settings(&s.url(), &o.url(), &t.url()), vec![s, o, t]);
    let stand_ins: Vec<&Echo> = stand_ins.iter().collect();
    let (user, admin) = (user_token(41), admin_token(42));

    let mut forwarded = Vec::new();
    for route in ROUTES {
        for bearer in [None, Some(&user), Some(&admin)] {
            let before = captured(&stand_ins).len();
            let method = reqwest::Method::from_bytes(route.method.as_str().as_bytes()).unwrap();
            let mut request = app
                .client
                .request(method, format!("{}{}", app.address, concrete(route.path)))
                .header("cookie", format!("session={COOKIE_SECRET}; theme=dark"))
                .header("x-user-id", "1")
                .header("x-user-role", "admin")
                .header(AUTH_HEADER, format!("v1.gateway.1.admin.99999999999999.{FORGED}"))
                .header("x-api-key", FORGED)
                .header("x-auth-token", FORGED)
                .header("x-forwarded-user", FORGED)
                .header("proxy-authorization", format!("Basic {FORGED}"))
                .header("x-seckill-token", "path-token-1")
                .header("content-type", "application/json");
            if let Some(token) = bearer {
                request = request.bearer_auth(token);
            }
            if route.method == actix_web::http::Method::POST {
                request = request.body(r#"{"user_id": 1, "role": "user"}"#);
            }
            let res = request.send().await.unwrap();
            // A sale page needs a sale, and a stream its buyer's result to begin with, which
            // the stand-in (`[]` for any read) does not give.
            let ok = res.status().as_u16() < 500
                || ["/sales/{id}", "/api/seckill/{goods_id}/events"].contains(&route.path);
            assert!(ok, "{} {}: {}", route.method, route.path, res.status());
            if captured(&stand_ins).len() > before {
                forwarded.push((route.path, bearer.is_some()));
            }
        }
    }

    let all = captured(&stand_ins);
    let secrets = [user.as_str(), admin.as_str(), COOKIE_SECRET, FORGED];
    for seen in &all {
        for (name, value) in &seen.headers {
            assert!(may_arrive(name), "{name}: {value} reached {}", seen.path);
            for secret in secrets {
                assert!(!value.contains(secret), "a credential reached {} in {name}: {value}", seen.path);
            }
        }
        // Every request carries the gateway's own signature, never the client's copy.
        assert_eq!(seen.headers.iter().filter(|(n, _)| n == AUTH_HEADER).count(), 1, "{seen:?}");
    }
    // The capture covers every route a service answers: each one that needs a token reached a
    // service with one, and every anonymous route but the gateway's own answers reached one.
    for route in ROUTES {
        let reached = |with_token| forwarded.contains(&(route.path, with_token));
        match route.access() {
            // A stream ticket is the gateway's own answer.
            Access::User | Access::Admin if route.path != "/api/seckill/{goods_id}/events/ticket" => {
                assert!(reached(true), "{} was never forwarded", route.path)
            }
            Access::Anonymous
                if !["/api/auth/dev-token", "/api/openapi.json", "/api/docs"].contains(&route.path) =>
            {
                assert!(reached(false), "{} was never forwarded", route.path)
            }
            _ => {}
        }
    }
    // The storefront's own reads of stock-service (for `/sales/7`: the client's requests all
    // carry a content type) are in the capture too.
    let own_read =
        |seen: &&Seen| seen.path == "/api/goods/7" && !seen.headers.iter().any(|(n, _)| n == "content-type");
    assert!(all.iter().any(|seen| own_read(&seen)), "{all:?}");
}

#[tokio::test]
async fn a_request_of_95_headers_reaches_a_service_as_a_few() {
    let (seckill, other) = (Echo::new("seckill"), Echo::new("other"));
    let capture = seckill.clone();
    let (s, o) = (seckill.start(), other.start());
    let app = TestApp::start(settings(&s.url(), &o.url(), &o.url()), vec![s, o]);

    let mut request = app.get("/api/seckill/7/result").bearer_auth(user_token(5));
    // With reqwest's own `accept` and `host` and the bearer token: 95 lines, one under the
    // limit of actix-http, which the gateway and every service run.
    for i in 0..92 {
        request = request.header(format!("x-filler-{i}"), "x".repeat(64));
    }
    let res = request.send().await.unwrap();

    assert_eq!(res.status(), 200);
    let seen = capture.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].headers.len() <= 5, "{:?}", seen[0].headers);
}

#[tokio::test]
async fn what_the_gateway_would_forward_is_bounded_and_over_the_bound_is_the_clients_4xx() {
    let (stock, other) = (Echo::new("stock"), Echo::new("other"));
    let calls = stock.calls.clone();
    let (t, o) = (stock.start(), other.start());
    let app = TestApp::start(settings(&o.url(), &o.url(), &t.url()), vec![t, o]);

    let long_query = format!("/api/goods?after={}", "9".repeat(8 * 1024));
    let message = assert_error(app.get(&long_query).send().await.unwrap(), 414, "URI_TOO_LONG").await;
    assert!(message.contains("8192"), "{message}");

    let res = app
        .post("/api/seckill/7/orders")
        .bearer_auth(user_token(5))
        .header("x-seckill-token", "t".repeat(1025))
        .send()
        .await
        .unwrap();
    let message = assert_error(res, 431, "HEADERS_TOO_LARGE").await;
    assert!(message.contains("x-seckill-token"), "{message}");
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 0, "refused before any hop");

    // A large header the gateway does not forward is no service's business: through.
    let res = app.get("/api/goods").header("cookie", "c".repeat(16 * 1024)).send().await.unwrap();
    assert_eq!(res.status(), 200);
}
