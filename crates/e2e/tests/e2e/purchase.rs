//! One buyer, end to end through the gateway.

use std::time::Duration;

use seckill_common::api::{OrderStatus, SeckillStatus};

use crate::helpers::{order_of, spawn_system};

#[tokio::test]
async fn one_purchase_from_token_to_order() {
    let sys = spawn_system();
    let sale = sys.open_sale(3).await;
    let buyer = sys.dev_token(42, "user").await;

    let (status, body) = sys.path_token(&buyer, sale.id).await;
    assert_eq!(status, 200, "{body}");
    let path_token = body["token"].as_str().unwrap().to_owned();
    // Asking again while it is unused gives the same token.
    assert_eq!(sys.path_token(&buyer, sale.id).await.1["token"], path_token);

    let (status, body) = sys.order(&buyer, sale.id, Some(&path_token)).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["status"], "queued");
    assert!(body["request_id"].as_str().unwrap().len() == 36);

    let result = sys.final_result(&buyer, sale.id, Duration::from_secs(15)).await;
    assert_eq!(result.status, SeckillStatus::Success, "{result:?}");
    let order_id = result.order_id.expect("an order id with success").get();

    let (status, body) = sys.order_by_id(&buyer, order_id).await;
    assert_eq!(status, 200, "{body}");
    let order = order_of(&body);
    assert_eq!(order.status, OrderStatus::Unpaid);
    assert_eq!(order.price_cents, 49_900);
    assert_eq!(order.user_id.get(), 42);
    assert_eq!(order.goods_id, sale.id);
    assert!(order.expires_at > order.created_at);

    // The buyer's list shows it; another user cannot see it.
    let (status, list) = sys.get("/api/orders", Some(&buyer)).await;
    assert_eq!(status, 200);
    assert_eq!(list.as_array().unwrap().len(), 1);
    let other = sys.dev_token(43, "user").await;
    let (status, body) = sys.order_by_id(&other, order_id).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("ORDER_NOT_FOUND")));

    // Stock moved everywhere by exactly one.
    assert_eq!(sys.goods(sale.id).await.stock_available, 2);
    assert_eq!(sys.redis_stock(sale.id).await, Some(2));
    assert_eq!(sys.held_at_stock(sale.id).await, 1);
}

#[tokio::test]
async fn a_second_click_of_the_same_user_is_refused_and_takes_nothing() {
    let sys = spawn_system();
    let sale = sys.open_sale(5).await;
    let buyer = sys.dev_token(7, "user").await;
    let (status, body) = sys.path_token(&buyer, sale.id).await;
    assert_eq!(status, 200);
    let used = body["token"].as_str().unwrap().to_owned();
    assert_eq!(sys.order(&buyer, sale.id, Some(&used)).await.0, 202);
    // Clicking again with the token the first click used up, or with a fresh one: either way
    // the buyer is told they hold a unit, not that their token is bad.
    let (status, body) = sys.order(&buyer, sale.id, Some(&used)).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("REPEATED")));
    let (status, body) = sys.buy(&buyer, sale.id).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("REPEATED")));
    let result = sys.final_result(&buyer, sale.id, Duration::from_secs(15)).await;
    assert_eq!(result.status, SeckillStatus::Success);
    assert_eq!(sys.redis_stock(sale.id).await, Some(4));
    assert_eq!(sys.active_orders(sale.id).await, (1, 1));
}

#[tokio::test]
async fn sale_windows_are_answered_before_any_stock_moves() {
    let sys = spawn_system();
    let later = sys.create_sale(5, chrono::Duration::hours(1), chrono::Duration::hours(2)).await;
    let over = sys.create_sale(5, chrono::Duration::hours(-2), chrono::Duration::hours(-1)).await;
    let buyer = sys.dev_token(9, "user").await;

    let (status, body) = sys.path_token(&buyer, later.id).await;
    assert_eq!((status, body["code"].as_str()), (425, Some("NOT_STARTED")));
    let (status, body) = sys.order(&buyer, later.id, Some("whatever")).await;
    assert_eq!((status, body["code"].as_str()), (425, Some("NOT_STARTED")));
    let (status, body) = sys.path_token(&buyer, over.id).await;
    assert_eq!((status, body["code"].as_str()), (410, Some("ENDED")));
    let (status, body) = sys.order(&buyer, over.id, Some("whatever")).await;
    assert_eq!((status, body["code"].as_str()), (410, Some("ENDED")));

    assert_eq!(sys.redis_stock(later.id).await, Some(5));
    assert_eq!(sys.goods(later.id).await.stock_available, 5);
}
