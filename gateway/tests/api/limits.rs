//! The body size limit, the per-user rate limit and the per-address limit of the anonymous
//! routes.

use actix_web::web::Bytes;
use serde_json::json;

use crate::helpers::{assert_error, echoed, spawn_app_with, user_token};

/// The anonymous routes, each with a body the gateway would take.
fn anonymous_request(app: &crate::helpers::TestApp, k: usize) -> reqwest::RequestBuilder {
    match k % 3 {
        0 => app.get("/api/goods"),
        1 => app.get("/api/goods/7"),
        _ => app.post("/api/auth/dev-token").json(&json!({"user_id": 3, "role": "user"})),
    }
}

#[tokio::test]
async fn a_body_over_the_limit_is_413() {
    let app = spawn_app_with(|s| s.http.body_limit_bytes = 1024);

    let res = app
        .post("/api/seckill/1/orders")
        .bearer_auth(user_token(5))
        .header("content-type", "application/json")
        .body(vec![b'a'; 2048])
        .send()
        .await
        .unwrap();

    assert_error(res, 413, "PAYLOAD_TOO_LARGE").await;
}

#[tokio::test]
async fn a_chunked_body_growing_over_the_limit_is_413() {
    let app = spawn_app_with(|s| s.http.body_limit_bytes = 1024);
    // No content-length: the limit must hold while reading.
    let chunks = (0..4).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b'a'; 400])));
    let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));

    let res = app.post("/api/orders/1/pay").bearer_auth(user_token(5)).body(body).send().await.unwrap();

    assert_error(res, 413, "PAYLOAD_TOO_LARGE").await;
}

#[tokio::test]
async fn a_chunked_body_within_the_limit_is_forwarded_whole() {
    let app = spawn_app_with(|s| s.http.body_limit_bytes = 1024);
    let chunks = ["{\"a\":", "\"", "xyz", "\"}"].map(|c| Ok::<_, std::io::Error>(Bytes::from(c)));
    let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));

    let res = app.post("/api/orders/1/pay").bearer_auth(user_token(5)).body(body).send().await.unwrap();

    assert_eq!(echoed(res).await["body"], r#"{"a":"xyz"}"#);
}

#[tokio::test]
async fn a_user_over_the_rate_limit_is_429_and_others_are_not() {
    let app = spawn_app_with(|s| {
        for limit in
            [&mut s.rate_limit.buy, &mut s.rate_limit.poll, &mut s.rate_limit.orders, &mut s.rate_limit.admin]
        {
            limit.per_sec = Some(1);
            limit.burst = Some(3);
        }
    });
    let hammering = user_token(7);

    let mut statuses = Vec::new();
    for _ in 0..10 {
        let res = app.get("/api/seckill/1/result").bearer_auth(&hammering).send().await.unwrap();
        if res.status() == 429 {
            // One request a second refills the bucket: the client is told to come back in 1 s.
            assert_eq!(res.headers()["retry-after"], "1");
            assert_error(res, 429, "RATE_LIMITED").await;
            statuses.push(429);
        } else {
            statuses.push(res.status().as_u16());
        }
    }

    // The burst passes; the sustained rate (one a second) cannot refill 7 in that time.
    assert_eq!(&statuses[..3], &[200, 200, 200], "{statuses:?}");
    assert!(statuses.iter().filter(|s| **s == 429).count() >= 5, "{statuses:?}");
    // Another user has a bucket of its own.
    let res =
        app.post("/api/seckill/1/token").bearer_auth(user_token(8)).json(&json!({})).send().await.unwrap();
    assert_eq!(res.status(), 200);
    // Each class of routes has its own bucket: the polling user may still buy and see orders.
    let res = app.post("/api/seckill/1/token").bearer_auth(&hammering).json(&json!({})).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let res = app.get("/api/orders").bearer_auth(&hammering).send().await.unwrap();
    assert_eq!(res.status(), 200);
    // The admin routes are limited too.
    let admin = crate::helpers::admin_token(9);
    let mut admin_statuses = Vec::new();
    for _ in 0..6 {
        let res = app.get("/api/admin/goods/1/audit").bearer_auth(&admin).send().await.unwrap();
        admin_statuses.push(res.status().as_u16());
    }
    assert!(admin_statuses.contains(&429), "{admin_statuses:?}");
}

#[tokio::test]
async fn anonymous_routes_are_limited_per_client_address() {
    let app = spawn_app_with(|s| {
        s.rate_limit.anonymous.per_sec = Some(1);
        s.rate_limit.anonymous.burst = Some(3);
    });

    // The three anonymous routes share one bucket per address.
    let mut statuses = Vec::new();
    for k in 0..10 {
        let res = anonymous_request(&app, k).send().await.unwrap();
        if res.status() == 429 {
            assert_eq!(res.headers()["retry-after"], "1");
            assert_error(res, 429, "RATE_LIMITED").await;
            statuses.push(429);
        } else {
            statuses.push(res.status().as_u16());
        }
    }
    assert_eq!(&statuses[..3], &[200, 200, 200], "{statuses:?}");
    assert!(statuses.iter().filter(|s| **s == 429).count() >= 5, "{statuses:?}");

    // Another address has a bucket of its own (all of 127.0.0.0/8 is loopback).
    let elsewhere = reqwest::Client::builder()
        .no_proxy()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    let res = elsewhere.get(format!("{}/api/goods", app.address)).send().await.unwrap();
    assert_eq!(res.status(), 200);

    // Routes with a token have the per-user limit, not this one; the probes have neither.
    let res = app.get("/api/orders").bearer_auth(user_token(5)).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let res = app.get("/api/seckill/1/result").bearer_auth(user_token(5)).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(app.get("/healthz").send().await.unwrap().status(), 200);
    assert_eq!(app.get("/readyz").send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn joins_of_a_waiting_room_are_limited_per_address_whatever_the_user() {
    let app = spawn_app_with(|s| {
        s.rate_limit.join.per_sec = Some(1);
        s.rate_limit.join.burst = Some(3);
    });
    // A farm of accounts behind one address: a fresh user each time, each within its own
    // buy limit; the address's bucket still runs dry.
    let mut statuses = Vec::new();
    for user in 1..=10 {
        let res = app.post("/api/seckill/1/queue").bearer_auth(user_token(user)).send().await.unwrap();
        statuses.push(res.status().as_u16());
    }
    assert_eq!(&statuses[..3], &[200, 200, 200], "{statuses:?}");
    assert!(statuses.iter().filter(|s| **s == 429).count() >= 5, "{statuses:?}");
    // Asking where one stands, and buying, are not joins.
    let res = app.get("/api/seckill/1/queue").bearer_auth(user_token(11)).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let res = app.post("/api/seckill/1/token").bearer_auth(user_token(11)).send().await.unwrap();
    assert_eq!(res.status(), 200);
    // Another address has a bucket of its own.
    let elsewhere = reqwest::Client::builder()
        .no_proxy()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    let res = elsewhere
        .post(format!("{}/api/seckill/1/queue", app.address))
        .bearer_auth(user_token(12))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
}

#[tokio::test]
async fn the_default_anonymous_limit_lets_a_browser_through() {
    let app = spawn_app_with(|_| {});
    // A page load or two: far under the default burst (100).
    for k in 0..30 {
        assert_eq!(anonymous_request(&app, k).send().await.unwrap().status(), 200, "request {k}");
    }
}
