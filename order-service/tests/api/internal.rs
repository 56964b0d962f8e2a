//! The internal order API serves seckill-service and nobody else.

use reqwest::Method;
use seckill_common::trust::Peer;
use serde_json::json;

use crate::helpers::{answer, spawn_app};

#[tokio::test]
async fn internal_routes_answer_seckill_service_only() {
    let app = spawn_app();
    let g = app.open_sale(5).await.id;
    let id = app.buy_order(g, 7).await;
    let one = format!("/internal/orders/active?goods_id={g}&user_id=7");
    let page = format!("/internal/orders/active?goods_id={g}&after_id=0&limit=10");
    let count = format!("/internal/orders/count?goods_id={g}");

    let (status, body) = answer(app.as_service(Peer::Seckill, Method::GET, &one).send().await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body[0]["order_id"].as_i64(), Some(id), "{body}");
    assert_eq!(body[0]["user_id"].as_i64(), Some(7));
    let (status, body) =
        answer(app.as_service(Peer::Seckill, Method::GET, &page).send().await.unwrap()).await;
    assert_eq!((status, body.as_array().map(Vec::len)), (200, Some(1)), "{body}");
    let (status, body) =
        answer(app.as_service(Peer::Seckill, Method::GET, &count).send().await.unwrap()).await;
    assert_eq!((status, body), (200, json!({"active": 1})));
    let (status, _) = answer(
        app.as_service(
            Peer::Seckill,
            Method::GET,
            &format!("/internal/orders/active?goods_id={g}&user_id=8"),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200);

    for path in [&one, &page, &count] {
        assert_eq!(app.http.get(app.url(path)).send().await.unwrap().status(), 401, "{path} unsigned");
        // Services order-service knows, but not the one these routes serve.
        for from in [Peer::Order, Peer::Gateway] {
            let status = app.as_service(from, Method::GET, path).send().await.unwrap().status().as_u16();
            assert!(status == 401 || status == 403, "{path} as {from}: {status}");
        }
        // A buyer's identity through the gateway does not open them either.
        let status = app.as_user(7, Method::GET, path).send().await.unwrap().status().as_u16();
        assert!(status == 401 || status == 403, "{path} as a buyer: {status}");
    }
}
