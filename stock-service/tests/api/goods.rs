//! Goods: creation checks, lookups, bad ids.

use serde_json::json;

use crate::helpers::spawn_app;

#[tokio::test]
async fn created_goods_are_listed_and_found() {
    let app = spawn_app();
    let goods = app.create_goods(7).await;
    assert_eq!(goods.stock_available, 7);
    assert_eq!(app.goods(&goods).await, goods);
    let list: Vec<seckill_common::api::Goods> =
        app.http.get(app.url("/api/goods")).send().await.unwrap().json().await.unwrap();
    assert_eq!(list, vec![goods]);
}

#[tokio::test]
async fn only_admins_create_and_bad_bodies_are_refused() {
    let app = spawn_app();
    let body = json!({"name": "x", "price_cents": 10, "seckill_price_cents": 5, "stock_total": 1,
        "start_at": "2030-01-01T00:00:00Z", "end_at": "2030-01-02T00:00:00Z"});
    let post = |role: &'static str, body: serde_json::Value| {
        app.http
            .post(app.url("/api/admin/goods"))
            .header("x-user-id", "5")
            .header("x-user-role", role)
            .json(&body)
            .send()
    };
    let res = post("user", body.clone()).await.unwrap();
    assert_eq!(res.status(), 403);
    let mut bad = body.clone();
    bad["stock_total"] = json!(-5);
    let res = post("admin", bad).await.unwrap();
    assert_eq!(res.status(), 400);
    let err: serde_json::Value = res.json().await.unwrap();
    assert_eq!(err["code"], "INVALID_INPUT");
    assert!(err["message"].as_str().unwrap().contains("stock_total"));
    let res = app.http.post(app.url("/api/admin/goods")).json(&body).send().await.unwrap();
    assert_eq!(res.status(), 401);
}

#[tokio::test]
async fn unknown_and_malformed_ids() {
    let app = spawn_app();
    for (path, status, code) in [
        ("/api/goods/12345", 404, "GOODS_NOT_FOUND"),
        ("/api/goods/abc", 400, "INVALID_INPUT"),
        ("/api/goods/-1", 400, "INVALID_INPUT"),
        ("/api/goods/0", 400, "INVALID_INPUT"),
        ("/nope", 404, "NOT_FOUND"),
    ] {
        let res = app.http.get(app.url(path)).send().await.unwrap();
        assert_eq!(res.status(), status, "{path}");
        let body: serde_json::Value = res.json().await.unwrap();
        assert_eq!(body["code"], code, "{path}");
    }
}
