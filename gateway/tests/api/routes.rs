//! Routes that exist, and the JSON answers for those that do not.

use std::time::Duration;

use serde_json::Value;

use crate::helpers::{assert_error, echoed, raw_exchange, spawn_app, user_token};

#[tokio::test]
async fn an_unknown_route_is_404() {
    let app = spawn_app();

    for path in ["/api/nope", "/api/goods/1/extra", "/internal/stock/deduct", "/nope"] {
        let res = app.get(path).bearer_auth(user_token(1)).send().await.unwrap();
        assert_error(res, 404, "NOT_FOUND").await;
    }
}

#[tokio::test]
async fn a_known_route_with_another_method_is_405() {
    let app = spawn_app();

    // RFC 9110: a 405 names the methods the route takes in `Allow`. /healthz is every
    // service's own route (seckill_web), answered the same way.
    let cases = [
        (reqwest::Method::DELETE, "/api/goods", "GET"),
        (reqwest::Method::TRACE, "/api/seckill/1/orders", "POST"),
        (reqwest::Method::GET, "/api/admin/goods", "POST"),
        (reqwest::Method::PUT, "/", "GET"),
        (reqwest::Method::TRACE, "/healthz", "GET"),
        // One path, two routes: both methods named, each reached (below).
        (reqwest::Method::DELETE, "/api/seckill/1/queue", "POST, GET"),
    ];
    for (method, path, allow) in cases {
        let res = app.client.request(method.clone(), format!("{}{path}", app.address)).send().await.unwrap();
        let allowed = res.headers().get("allow").and_then(|v| v.to_str().ok()).map(str::to_owned);
        assert_eq!(allowed.as_deref(), Some(allow), "{method} {path}");
        assert_error(res, 405, "METHOD_NOT_ALLOWED").await;
    }
}

#[tokio::test]
async fn each_route_reaches_its_service() {
    let app = spawn_app();
    let token = user_token(3);
    let cases = [
        ("GET", "/api/goods", "stock"),
        ("GET", "/api/goods/1", "stock"),
        ("POST", "/api/seckill/1/token", "seckill"),
        ("POST", "/api/seckill/1/orders", "seckill"),
        ("GET", "/api/seckill/1/result", "seckill"),
        ("POST", "/api/seckill/1/queue", "seckill"),
        ("GET", "/api/seckill/1/queue", "seckill"),
        ("GET", "/api/orders", "order"),
        ("GET", "/api/orders/1", "order"),
        ("POST", "/api/orders/1/pay", "order"),
        ("POST", "/api/orders/1/cancel", "order"),
    ];

    for (method, path, service) in cases {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let res = app
            .client
            .request(method, format!("{}{path}", app.address))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(echoed(res).await["upstream"], service, "{path}");
    }
}

#[tokio::test]
async fn healthz_answers() {
    let app = spawn_app();

    let res = app.get("/healthz").send().await.unwrap();

    assert_eq!(res.status(), 200);
    assert_eq!(res.json::<Value>().await.unwrap()["status"], "ok");
}

#[tokio::test]
async fn a_path_that_would_be_rewritten_on_the_way_upstream_is_400() {
    let app = spawn_app();
    let address = app.address.trim_start_matches("http://").to_owned();
    let token = user_token(1);
    // Sent raw: an HTTP client library would resolve the dots itself before sending.
    let requests = [
        format!("POST /api/orders/../pay HTTP/1.1\r\nAuthorization: Bearer {token}\r\n"),
        format!("POST /api/orders/%2E%2E/pay HTTP/1.1\r\nAuthorization: Bearer {token}\r\n"),
        "GET /api/goods/.. HTTP/1.1\r\n".to_owned(),
    ];
    for start in requests {
        let request = format!("{start}Host: {address}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");

        let (head, body) = tokio::time::timeout(Duration::from_secs(10), raw_exchange(&address, &request))
            .await
            .expect("the gateway answers a raw request");

        assert!(head.starts_with("HTTP/1.1 400"), "{start}: {head}");
        assert!(body.contains("INVALID_INPUT"), "{start}: {body}");
    }
}
