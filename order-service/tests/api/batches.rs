//! Messages of the batch form (`{"v": 2, "requests": [...]}`): each request is served on its
//! own, idempotent on its `request_id`, and a request that keeps failing never takes its
//! batch-mates down with it.

use std::time::Duration;

use seckill_common::scripts::StoredResult;
use seckill_common::trust::Peer;

use crate::helpers::{spawn_app, spawn_app_with};

#[tokio::test]
async fn a_batch_becomes_one_order_per_request_and_a_second_copy_writes_nothing() {
    let app = spawn_app();
    let g = app.open_sale(10).await.id;
    let mut requests = Vec::new();
    for user in [11, 12, 13] {
        requests.push(app.reserve(g, user).await);
    }
    app.publish_batch(Peer::Seckill, &requests).await;

    let mut ids = Vec::new();
    for user in [11, 12, 13] {
        let StoredResult::Success(id) = app.final_result(g, user, Duration::from_secs(15)).await else {
            panic!("no order for user {user}")
        };
        ids.push(id);
    }
    assert_eq!(app.goods(g).await.stock_available, 7);

    // A request met again, alone (the reconciler's single form) and in another batch.
    app.publish_request(Peer::Seckill, &requests[1]).await;
    app.publish_batch(Peer::Seckill, &requests[..2]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (user, id) in [11, 12, 13].into_iter().zip(ids) {
        let (_, mine) = app.get(user, "/api/orders").await;
        assert_eq!(mine.as_array().map(Vec::len), Some(1), "user {user}: {mine}");
        assert_eq!(app.result(g, user).await, Some(StoredResult::Success(id)));
    }
    assert_eq!(app.goods(g).await.stock_available, 7, "nothing deducted twice");
    assert_eq!(app.queue_depth(&app.amqp_names.orders_dead_queue()).await, 0);
}

#[tokio::test]
async fn a_request_that_keeps_failing_is_compensated_and_its_batch_mates_become_orders() {
    let app = spawn_app();
    let g = app.open_sale(10).await.id;
    // The database refuses any order of user 666: a request no retry can fulfil.
    app.sql("ALTER TABLE orders ADD CONSTRAINT refuse_666 CHECK (user_id <> 666)").await;
    let (first, poison, second, alone) = (
        app.reserve(g, 21).await,
        app.reserve(g, 666).await,
        app.reserve(g, 22).await,
        app.reserve(g, 23).await,
    );
    app.publish_batch(Peer::Seckill, &[first, poison, second]).await;
    app.publish_request(Peer::Seckill, &alone).await;

    for user in [21, 22, 23] {
        let r = app.final_result(g, user, Duration::from_secs(15)).await;
        assert!(matches!(r, StoredResult::Success(_)), "user {user}: {r:?}");
    }
    // Out of tries (3, 200 ms apart): its deduction released, its unit back, the buyer told.
    assert_eq!(app.final_result(g, 666, Duration::from_secs(15)).await, StoredResult::Failed);
    let dead = app.amqp_names.orders_dead_queue();
    assert_eq!(app.settled_depth(&dead, 1).await, 1, "the poisoned message, once, in the dead letters");
    assert_eq!(app.goods(g).await.stock_available, 7, "three orders; the fourth unit released");
    assert_eq!(app.redis_stock(g).await, Some(7), "Redis agrees: the poisoned unit is back on sale");
    for user in [21, 22, 23] {
        let (_, mine) = app.get(user, "/api/orders").await;
        assert_eq!(mine.as_array().map(Vec::len), Some(1), "user {user}: {mine}");
    }
}

#[tokio::test]
async fn a_batch_of_the_wrong_shape_goes_to_the_dead_letters_and_moves_nothing() {
    let app = spawn_app();
    let g = app.open_sale(10).await.id;
    let request = app.reserve(g, 31).await;
    let mut too_new = serde_json::to_value(request).unwrap();
    too_new["v"] = 2.into();
    let bodies = [
        r#"{"v":2,"requests":[]}"#.to_owned(),
        serde_json::json!({"v": 2, "requests": [too_new]}).to_string(),
        serde_json::json!({"v": 2, "requests": vec![request; 101]}).to_string(),
    ];
    for body in &bodies {
        app.publish_order_body(Peer::Seckill, body.as_bytes()).await;
    }
    let dead = app.amqp_names.orders_dead_queue();
    assert_eq!(app.settled_depth(&dead, 3).await, 3, "each refused");
    assert_eq!(app.goods(g).await.stock_available, 10, "nothing deducted");
    assert_eq!(app.result(g, 31).await, Some(StoredResult::Queued), "untouched");
}

#[tokio::test]
async fn a_batch_larger_than_the_consumers_batch_size_is_fulfilled_in_groups() {
    // At most two requests per deduct call: a message of five is served in three groups.
    let app = spawn_app_with(|s| s.order.batch_size = 2);
    let g = app.open_sale(10).await.id;
    let mut requests = Vec::new();
    for user in 41..=45 {
        requests.push(app.reserve(g, user).await);
    }
    app.publish_batch(Peer::Seckill, &requests).await;
    for user in 41..=45 {
        let r = app.final_result(g, user, Duration::from_secs(15)).await;
        assert!(matches!(r, StoredResult::Success(_)), "user {user}: {r:?}");
    }
    assert_eq!(app.goods(g).await.stock_available, 5);
    assert_eq!(app.queue_depth(&app.amqp_names.orders_dead_queue()).await, 0);
}
