//! Only the gateway's signed identity opens the buyer's and the admin's routes.

use reqwest::Method;
use seckill_common::api::Role;
use seckill_common::trust::{AUTH_HEADER, Peer};
use seckill_testkit::keys;

use crate::helpers::spawn_app;

#[tokio::test]
async fn every_route_but_the_probes_wants_the_gateways_signed_identity() {
    let app = spawn_app();
    let goods = app.open_sale(3).await;
    let g = goods.id;
    let routes = [
        (Method::POST, format!("/api/seckill/{g}/token")),
        (Method::POST, format!("/api/seckill/{g}/orders")),
        (Method::GET, format!("/api/seckill/{g}/result")),
        (Method::POST, "/api/admin/goods".to_owned()),
        (Method::GET, format!("/api/admin/goods/{g}/audit")),
    ];
    for (method, path) in &routes {
        // No credential, however the user is named.
        let res = app
            .http
            .request(method.clone(), app.url(path))
            .header("x-user-id", "7")
            .header("x-user-role", "admin")
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 401, "{method} {path} without a credential");
        let body: serde_json::Value = res.json().await.unwrap();
        assert_eq!(body["code"], "UNAUTHORIZED", "{method} {path}");

        // The gateway's identity, but signed for order-service; and a service's, with no user.
        let (_, for_order) = keys::as_user(Peer::Order, method.as_str(), path, 7, Role::Admin);
        let (_, no_user) = keys::as_service(Peer::Stock, Peer::Seckill, method.as_str(), path);
        for (what, credential) in [("order-service's", for_order), ("a service's", no_user)] {
            let res = app
                .http
                .request(method.clone(), app.url(path))
                .header(AUTH_HEADER, credential)
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 401, "{method} {path} with {what} credential");
        }
    }
    assert_eq!(app.redis_stock(g).await, Some(3), "nothing was reserved");
    assert!(app.take_order_messages().await.is_empty(), "nothing was published");

    // A user who is not an admin cannot publish a sale.
    let now = chrono::Utc::now();
    let sale = serde_json::json!({"name": "phone", "price_cents": 100, "seckill_price_cents": 50,
        "stock_total": 1, "start_at": now, "end_at": now + chrono::Duration::hours(1)});
    let res = app.as_user(7, Role::User, Method::POST, "/api/admin/goods").json(&sale).send().await.unwrap();
    assert_eq!(res.status(), 403);
    for open in ["/healthz", "/readyz"] {
        assert_eq!(app.http.get(app.url(open)).send().await.unwrap().status(), 200, "{open}");
    }
}
