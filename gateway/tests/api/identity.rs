//! What the services trust: the identity the gateway signs from the token (never a header a
//! client sent), the request id carried, and only the headers a service reads, each way.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::{Echo, TestApp, echoed, raw_exchange, settings, spawn_app, user_token};

#[tokio::test]
async fn a_client_sent_user_id_is_replaced_by_the_tokens() {
    let app = spawn_app();

    let res = app
        .get("/api/seckill/5/result")
        .bearer_auth(user_token(42))
        .header("x-user-id", "999")
        .header("x-user-role", "admin")
        .header("x-seckill-auth", "v1.gateway.999.admin.99999999999999.forged")
        .send()
        .await
        .unwrap();

    let seen = echoed(res).await;
    assert_eq!(seen["upstream"], "seckill");
    assert_eq!(seen["caller"], "gateway");
    assert_eq!(seen["user"], serde_json::json!({"id": 42, "role": "user"}));
    for stripped in ["x-user-id", "x-user-role"] {
        assert!(seen["headers"].get(stripped).is_none(), "{seen}");
    }
}

#[tokio::test]
async fn identity_headers_are_stripped_on_public_routes() {
    let app = spawn_app();

    let res = app
        .get("/api/goods/3")
        .header("x-user-id", "999")
        .header("x-user-role", "admin")
        .send()
        .await
        .unwrap();

    let seen = echoed(res).await;
    assert_eq!(seen["upstream"], "stock");
    assert_eq!(seen["caller"], "gateway");
    assert!(seen["user"].is_null(), "{seen}");
    assert!(seen["headers"].get("x-user-id").is_none(), "{seen}");
    assert!(seen["headers"].get("x-user-role").is_none(), "{seen}");
}

#[tokio::test]
async fn the_request_id_is_forwarded_and_echoed() {
    let app = spawn_app();

    let res = app.get("/api/goods").header("x-request-id", "test-rid-123").send().await.unwrap();

    assert_eq!(res.headers()["x-request-id"], "test-rid-123");
    let seen = echoed(res).await;
    assert_eq!(seen["headers"]["x-request-id"], "test-rid-123");
}

#[tokio::test]
async fn a_generated_request_id_is_the_one_forwarded() {
    let app = spawn_app();

    let res = app.get("/api/orders").bearer_auth(user_token(1)).send().await.unwrap();

    let answered = res.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert!(!answered.is_empty());
    assert_eq!(echoed(res).await["headers"]["x-request-id"], answered.as_str());
}

#[tokio::test]
async fn method_path_query_body_and_the_headers_a_service_reads_are_forwarded_unchanged() {
    let app = spawn_app();

    let res = app
        .post("/api/seckill/12/orders?a=1&b=%20x")
        .bearer_auth(user_token(9))
        .header("x-seckill-token", "path-token-abc")
        .header("x-room-admission", "v1.a.admission")
        .header("x-room-ticket", "v1.p.ticket")
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .header("x-custom", "not a header any service reads")
        .body(r#"{"qty":1}"#)
        .send()
        .await
        .unwrap();

    let seen = echoed(res).await;
    assert_eq!(seen["method"], "POST");
    assert_eq!(seen["path"], "/api/seckill/12/orders");
    assert_eq!(seen["query"], "a=1&b=%20x");
    assert_eq!(seen["body"], r#"{"qty":1}"#);
    let headers = &seen["headers"];
    assert_eq!(headers["x-seckill-token"], "path-token-abc");
    assert_eq!(
        (&headers["x-room-admission"], &headers["x-room-ticket"]),
        (&json!("v1.a.admission"), &json!("v1.p.ticket"))
    );
    assert_eq!(headers["content-type"], "application/json");
    // Not on the allow list: the gateway's own client asks for anything, as it always did.
    assert_eq!(headers["accept"], "*/*");
    assert!(headers.get("x-custom").is_none(), "{headers}");
    // The services trust the gateway's signature alone: the bearer token stays behind.
    assert!(headers.get("authorization").is_none(), "{headers}");
}

#[tokio::test]
async fn hop_by_hop_request_headers_are_not_forwarded() {
    let app = spawn_app();
    let address = app.address.trim_start_matches("http://").to_owned();
    // Raw HTTP/1.1, so that exactly these headers reach the gateway.
    let request = format!(
        "GET /api/goods HTTP/1.1\r\nHost: {address}\r\nConnection: close, x-hop-only\r\n\
         X-Hop-Only: 1\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\nProxy-Authorization: Basic eA==\r\n\
         Upgrade: websocket\r\nContent-Type: application/json\r\n\r\n"
    );
    let (head, body) = tokio::time::timeout(Duration::from_secs(10), raw_exchange(&address, &request))
        .await
        .expect("the gateway answers a raw request");

    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let seen: Value = serde_json::from_str(&body).unwrap();
    let headers = &seen["headers"];
    assert_eq!(headers["content-type"], "application/json");
    for hop in ["x-hop-only", "keep-alive", "te", "proxy-authorization", "upgrade"] {
        assert!(headers.get(hop).is_none(), "{hop} was forwarded: {headers}");
    }
    // The upstream sees its own hop's host, not the gateway's.
    assert_ne!(headers["host"].as_str(), Some(address.as_str()));
}

#[tokio::test]
async fn only_the_response_headers_a_client_needs_come_back() {
    let stock = Echo::new("stock")
        .header("cache-control", "no-store")
        .header("set-cookie", "internal=1")
        .header("x-upstream", "yes")
        .header("keep-alive", "timeout=99")
        .start();
    let other = Echo::new("other").start();
    let app = TestApp::start(settings(&other.url(), &other.url(), &stock.url()), vec![stock, other]);

    let res = app.get("/api/goods").send().await.unwrap();

    assert_eq!(res.headers()["cache-control"], "no-store");
    assert_eq!(res.headers()["content-type"], "application/json");
    for held in ["set-cookie", "x-upstream", "keep-alive"] {
        assert!(res.headers().get(held).is_none(), "{held} came back: {:?}", res.headers());
    }
    assert_eq!(echoed(res).await["upstream"], "stock");
}
