//! A signed buy request becomes an order: deducted at stock-service, written, told to the buyer.

use std::time::Duration;

use seckill_common::api::OrderStatus;
use seckill_common::scripts::StoredResult;
use seckill_common::trust::Peer;

use crate::helpers::spawn_app;

#[tokio::test]
async fn a_signed_buy_request_becomes_one_order_deducted_at_stock_service() {
    let app = spawn_app();
    let goods = app.open_sale(5).await;
    let g = goods.id;
    let request = app.reserve(g, 7).await;
    app.publish_request(Peer::Seckill, &request).await;

    let StoredResult::Success(id) = app.final_result(g, 7, Duration::from_secs(15)).await else {
        panic!("no order for the request")
    };
    let order = app.order(7, id).await;
    assert_eq!((order.user_id.get(), order.goods_id, order.status), (7, g, OrderStatus::Unpaid));
    assert_eq!(order.price_cents, goods.seckill_price_cents, "the seckill price");
    assert!(order.expires_at > chrono::Utc::now() + chrono::Duration::minutes(29), "ttl_secs from now");
    assert_eq!(app.goods(g).await.stock_available, 4, "one unit deducted at the authority");

    // The same message again (a re-delivery): answered with the same order, nothing twice.
    app.publish_request(Peer::Seckill, &request).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (status, mine) = app.get(7, "/api/orders").await;
    assert_eq!(status, 200);
    assert_eq!(mine.as_array().map(Vec::len), Some(1), "{mine}");
    assert_eq!(app.goods(g).await.stock_available, 4);
    assert_eq!(app.result(g, 7).await, Some(StoredResult::Success(id)));
}

#[tokio::test]
async fn a_request_not_signed_by_seckill_service_moves_nothing() {
    let app = spawn_app();
    let g = app.open_sale(5).await.id;
    // Right shape, wrong sender: stock-service and order-service itself may not publish orders.
    for (from, user) in [(Peer::Stock, 8), (Peer::Order, 9), (Peer::Gateway, 10)] {
        let request = app.reserve(g, user).await;
        app.publish_request(from, &request).await;
    }
    let dead = app.amqp_names.orders_dead_queue();
    assert_eq!(app.settled_depth(&dead, 3).await, 3, "each refused to the dead letters");
    assert_eq!(app.goods(g).await.stock_available, 5, "nothing deducted");
    for user in [8, 9, 10] {
        assert_eq!(app.result(g, user).await, Some(StoredResult::Queued), "user {user} untouched");
        let (_, mine) = app.get(user, "/api/orders").await;
        assert_eq!(mine.as_array().map(Vec::len), Some(0));
    }
}
