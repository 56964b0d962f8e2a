//! The buyer's orders: only their own, behind the gateway's signed identity; pay and cancel.

use std::time::Duration;

use reqwest::Method;
use seckill_common::amqp::ReleaseReason;
use seckill_common::trust::{AUTH_HEADER, Peer};
use seckill_testkit::keys;

use crate::helpers::{answer, spawn_app};

#[tokio::test]
async fn a_buyer_sees_their_own_orders_only_with_a_signed_identity() {
    let app = spawn_app();
    let g = app.open_sale(5).await.id;
    let id = app.buy_order(g, 7).await;

    let (status, mine) = app.get(7, "/api/orders").await;
    assert_eq!(status, 200);
    assert_eq!(mine[0]["id"].as_i64(), Some(id), "{mine}");
    assert_eq!(app.get(7, &format!("/api/orders/{id}")).await.0, 200);

    // Another buyer: an empty list, and the order answered exactly like a missing one.
    let (status, theirs) = app.get(8, "/api/orders").await;
    assert_eq!((status, theirs.as_array().map(Vec::len)), (200, Some(0)));
    let (status, body) = app.get(8, &format!("/api/orders/{id}")).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("ORDER_NOT_FOUND")));
    let (status, missing) = app.get(7, "/api/orders/999999").await;
    assert_eq!((status, missing["code"].as_str()), (404, Some("ORDER_NOT_FOUND")));
    assert_eq!(app.post(8, &format!("/api/orders/{id}/pay")).await.0, 404);
    assert_eq!(app.post(8, &format!("/api/orders/{id}/cancel")).await.0, 404);

    // Without the gateway's identity for order-service: 401, however the user is named.
    let path = format!("/api/orders/{id}");
    let (_, for_seckill) = keys::as_user(Peer::Seckill, "GET", &path, 7, seckill_common::api::Role::User);
    let (_, no_user) = keys::as_service(Peer::Seckill, Peer::Order, "GET", &path);
    for credential in [None, Some(for_seckill), Some(no_user)] {
        let mut req = app.http.get(app.url(&path)).header("x-user-id", "7");
        if let Some(c) = credential {
            req = req.header(AUTH_HEADER, c);
        }
        let (status, body) = answer(req.send().await.unwrap()).await;
        assert_eq!((status, body["code"].as_str()), (401, Some("UNAUTHORIZED")));
    }
    assert_eq!(app.as_user(7, Method::GET, "/api/orders").send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn pay_and_cancel_move_an_order_once_and_a_cancel_releases_its_unit() {
    let app = spawn_app();
    let g = app.open_sale(5).await.id;
    let paid = app.buy_order(g, 7).await;
    let cancelled = app.buy_order(g, 8).await;

    let (status, body) = app.post(7, &format!("/api/orders/{paid}/pay")).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("paid")), "{body}");
    let (status, body) = app.post(7, &format!("/api/orders/{paid}/pay")).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("paid")), "paying again is a no-op");
    let (status, body) = app.post(7, &format!("/api/orders/{paid}/cancel")).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("ORDER_NOT_CANCELLABLE")));

    let (status, body) = app.post(8, &format!("/api/orders/{cancelled}/cancel")).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("cancelled")), "{body}");
    let (status, body) = app.post(8, &format!("/api/orders/{cancelled}/cancel")).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("ORDER_NOT_CANCELLABLE")));
    let (status, body) = app.post(8, &format!("/api/orders/{cancelled}/pay")).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("ORDER_NOT_PAYABLE")));

    // The cancelled order's unit: one release, signed for stock-service, recorded as sent.
    let releases = app.wait_for_releases(2, Duration::from_secs(3)).await;
    assert_eq!(releases.len(), 1, "{releases:?}");
    let r = releases[0];
    assert_eq!(
        (r.order_id.get(), r.user_id.get(), r.goods_id, r.reason),
        (cancelled, 8, g, ReleaseReason::Cancelled)
    );
    assert!(app.release_sent(cancelled).await);
    assert!(!app.release_sent(paid).await);
}
