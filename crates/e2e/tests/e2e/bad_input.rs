//! Bad input through the gateway: a 4xx with the contract's code, never a 5xx.

use serde_json::json;

use crate::helpers::spawn_system;

#[tokio::test]
async fn bad_requests_get_their_codes() {
    let sys = spawn_system();
    let sale = sys.open_sale(2).await;
    let g = sale.id;
    let buyer = sys.dev_token(77, "user").await;

    let cases: Vec<(&str, (u16, serde_json::Value), u16, &str)> = vec![
        (
            "unknown sale",
            sys.path_token(&buyer, seckill_common::GoodsId::new(987_654).unwrap()).await,
            404,
            "GOODS_NOT_FOUND",
        ),
        (
            "non-numeric id",
            sys.post("/api/seckill/abc/token", Some(&buyer), json!(null)).await,
            400,
            "INVALID_INPUT",
        ),
        (
            "negative id",
            sys.post("/api/seckill/-4/orders", Some(&buyer), json!(null)).await,
            400,
            "INVALID_INPUT",
        ),
        ("goods id zero", sys.get("/api/goods/0", None).await, 400, "INVALID_INPUT"),
        ("order id text", sys.get("/api/orders/x1", Some(&buyer)).await, 400, "INVALID_INPUT"),
        ("missing path token", sys.order(&buyer, g, None).await, 403, "BAD_TOKEN"),
        ("wrong path token", sys.order(&buyer, g, Some("not-the-token")).await, 403, "BAD_TOKEN"),
        (
            "no jwt",
            sys.post(&format!("/api/seckill/{g}/token"), None, json!(null)).await,
            401,
            "UNAUTHORIZED",
        ),
        (
            "bad jwt",
            sys.post(&format!("/api/seckill/{g}/token"), Some("e30.e30.e30"), json!(null)).await,
            401,
            "UNAUTHORIZED",
        ),
        (
            "user creates a sale",
            sys.post("/api/admin/goods", Some(&buyer), json!({})).await,
            403,
            "FORBIDDEN",
        ),
    ];
    for (what, (status, body), want_status, want_code) in cases {
        assert_eq!(status, want_status, "{what}: {body}");
        assert_eq!(body["code"], want_code, "{what}: {body}");
        assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "{what}: {body}");
    }

    // A wrong token consumed nothing: the real one still works.
    assert_eq!(sys.buy(&buyer, g).await.0, 202);
    assert_eq!(sys.redis_stock(g).await, Some(1));
}

#[tokio::test]
async fn malformed_and_oversized_bodies() {
    let sys = spawn_system();
    let admin = sys.dev_token(1, "admin").await;
    let url = sys.url("/api/admin/goods");

    let res = sys
        .http
        .post(&url)
        .bearer_auth(&admin)
        .header("content-type", "application/json")
        .body("{\"name\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    assert_eq!(res.json::<serde_json::Value>().await.unwrap()["code"], "INVALID_INPUT");

    let res = sys
        .http
        .post(&url)
        .bearer_auth(&admin)
        .json(&json!({"name": "x", "price_cents": "ten"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);

    let huge = format!("{{\"name\": \"{}\"}}", "x".repeat(2 * 1024 * 1024));
    let res = sys
        .http
        .post(&url)
        .bearer_auth(&admin)
        .header("content-type", "application/json")
        .body(huge)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 413);
    assert_eq!(res.json::<serde_json::Value>().await.unwrap()["code"], "PAYLOAD_TOO_LARGE");

    let (status, body) = sys.post("/api/auth/dev-token", None, json!({"user_id": -1})).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("INVALID_INPUT")));
}

#[tokio::test]
async fn a_forged_user_header_is_replaced_by_the_token_user() {
    let sys = spawn_system();
    let sale = sys.open_sale(2).await;
    let buyer = sys.dev_token(500, "user").await;
    let token = sys.path_token(&buyer, sale.id).await.1["token"].as_str().unwrap().to_owned();
    let res = sys
        .http
        .post(sys.url(&format!("/api/seckill/{}/orders", sale.id)))
        .bearer_auth(&buyer)
        .header("x-user-id", "501")
        .header("x-user-role", "admin")
        .header("x-seckill-token", &token)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);
    let result = sys.final_result(&buyer, sale.id, std::time::Duration::from_secs(15)).await;
    let order_id = result.order_id.expect("the order is the token user's").get();
    let (status, body) = sys.order_by_id(&buyer, order_id).await;
    assert_eq!(status, 200);
    assert_eq!(body["user_id"], 500);
    // No token at all, only a forged header: refused.
    let res = sys.http.get(sys.url("/api/orders")).header("x-user-id", "500").send().await.unwrap();
    assert_eq!(res.status(), 401);
}
