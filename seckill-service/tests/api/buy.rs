//! The buyer's three calls: path token, order, result.

use std::time::Duration;

use seckill_common::api::ActiveOrder;
use seckill_common::keys::SaleBucket;
use seckill_common::scripts::StoredResult;
use seckill_common::{OrderId, UserId};
use uuid::Uuid;

use crate::helpers::spawn_app;

#[tokio::test]
async fn a_path_token_is_the_same_until_used_and_only_it_opens_the_order() {
    let app = spawn_app();
    let g = app.open_sale(5).await.id;

    let (status, first) = app.path_token(10, g).await;
    assert_eq!(status, 200, "{first}");
    let token = first["token"].as_str().unwrap().to_owned();
    let (_, again) = app.path_token(10, g).await;
    assert_eq!(again["token"], first["token"], "the live token is handed out again");
    let (_, other) = app.path_token(11, g).await;
    assert_ne!(other["token"], first["token"], "each buyer has their own");

    // Without the token, or with another's or a made-up one: 403, and nothing moves.
    for wrong in [None, other["token"].as_str(), Some("0123456789abcdef0123456789abcdef")] {
        let (status, body) = app.order(10, g, wrong).await;
        assert_eq!(status, 403, "{wrong:?}: {body}");
        assert_eq!(body["code"], "BAD_TOKEN");
    }
    assert_eq!(app.redis_stock(g).await, Some(5));

    let (status, body) = app.order(10, g, Some(&token)).await;
    assert_eq!(status, 202, "{body}");
    // Used up: the next token is a new one.
    let (_, next) = app.path_token(10, g).await;
    assert_ne!(next["token"].as_str(), Some(token.as_str()));
}

#[tokio::test]
async fn an_accepted_buy_publishes_one_signed_message_and_holds_one_unit() {
    let app = spawn_app();
    let g = app.open_sale(5).await.id;

    let (status, body) = app.buy(20, g).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["status"], "queued");
    let request_id: Uuid = body["request_id"].as_str().unwrap().parse().unwrap();

    // Signed by seckill-service for order-service, checked by `take_order_messages`.
    let messages = app.wait_for_order_messages(1, Duration::from_secs(5)).await;
    assert_eq!(messages.len(), 1, "{messages:?}");
    let m = messages[0];
    assert_eq!((m.request_id, m.user_id.get(), m.goods_id), (request_id, 20, g));
    assert_eq!(
        m.epoch,
        app.gate().await.epoch(SaleBucket::new(g, 0)).await.unwrap(),
        "the message carries the sale's epoch"
    );

    assert_eq!(app.redis_stock(g).await, Some(4));
    assert_eq!(app.held_by(g, 20).await, Some(request_id.to_string()));
    let (status, result) = app.result(20, g).await;
    assert_eq!((status, result["status"].as_str()), (200, Some("queued")), "{result}");
    // The broker confirmed it: its pending entry is cleared (off the request's path).
    for _ in 0..50 {
        if app.pending(g).await.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(app.pending(g).await.is_empty(), "pending: {:?}", app.pending(g).await);
    assert!(app.take_order_messages().await.is_empty(), "exactly one message");
}

#[tokio::test]
async fn a_repeat_buyer_is_409_and_takes_nothing() {
    let app = spawn_app();
    let g = app.open_sale(5).await.id;
    assert_eq!(app.buy(30, g).await.0, 202);

    for _ in 0..3 {
        let (status, body) = app.buy(30, g).await;
        assert_eq!(status, 409, "{body}");
        assert_eq!(body["code"], "REPEATED");
    }
    assert_eq!(app.redis_stock(g).await, Some(4));
    assert_eq!(app.wait_for_order_messages(2, Duration::from_secs(2)).await.len(), 1);
}

#[tokio::test]
async fn a_sold_out_sale_is_410_and_publishes_nothing_more() {
    let app = spawn_app();
    let g = app.open_sale(2).await.id;
    assert_eq!(app.buy(40, g).await.0, 202);
    assert_eq!(app.buy(41, g).await.0, 202);

    for user in 42..46 {
        let (status, body) = app.buy(user, g).await;
        assert_eq!(status, 410, "{body}");
        assert_eq!(body["code"], "SOLD_OUT");
    }
    assert_eq!(app.redis_stock(g).await, Some(0), "never below zero");
    let messages = app.wait_for_order_messages(3, Duration::from_secs(2)).await;
    let mut buyers: Vec<i64> = messages.iter().map(|m| m.user_id.get()).collect();
    buyers.sort_unstable();
    assert_eq!(buyers, [40, 41]);
}

#[tokio::test]
async fn the_result_poll_answers_from_redis_then_from_the_order_authority() {
    let app = spawn_app();
    let g = app.open_sale(5).await.id;

    // A buyer whose request is queued: from Redis, order-service is not asked.
    assert_eq!(app.buy(50, g).await.0, 202);
    let (status, body) = app.result(50, g).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("queued")), "{body}");
    assert_eq!(app.orders.book.signed_calls.load(std::sync::atomic::Ordering::SeqCst), 0);

    // Redis knows nothing of these two: order-service is asked, and its answer kept in Redis.
    let order = ActiveOrder {
        order_id: OrderId::new(4242).unwrap(),
        user_id: UserId::new(51).unwrap(),
        request_id: Uuid::new_v4(),
    };
    app.orders.book.add(g, order);
    let (status, body) = app.result(51, g).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!((body["status"].as_str(), body["order_id"].as_i64()), (Some("success"), Some(4242)));
    let gate = app.gate().await;
    assert_eq!(
        gate.result(SaleBucket::new(g, 0), UserId::new(51).unwrap()).await.unwrap(),
        Some(StoredResult::Success(4242))
    );

    let (status, body) = app.result(52, g).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("none")), "{body}");
    assert_eq!(
        gate.result(SaleBucket::new(g, 0), UserId::new(52).unwrap()).await.unwrap(),
        Some(StoredResult::NoOrder)
    );

    // Every call carried seckill-service's credential.
    assert_eq!(app.orders.book.signed_calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(app.orders.book.refused_calls.load(std::sync::atomic::Ordering::SeqCst), 0);
}
