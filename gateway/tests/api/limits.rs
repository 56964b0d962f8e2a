//! The body size limit and the per-user rate limit.

use actix_web::web::Bytes;
use serde_json::json;

use crate::helpers::{assert_error, echoed, spawn_app_with, user_token};

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
        s.rate_limit.per_user_per_sec = 1;
        s.rate_limit.burst = 3;
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
    // Only the seckill routes are limited.
    let res = app.get("/api/orders").bearer_auth(&hammering).send().await.unwrap();
    assert_eq!(res.status(), 200);
}
