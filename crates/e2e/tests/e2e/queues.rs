//! The queues under abuse: poison messages, and the broker closing the consumers' connections
//! in the middle of a sale.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use seckill_common::api::SeckillStatus;

use crate::helpers::spawn_system;

#[tokio::test]
async fn a_malformed_order_message_is_dead_lettered_and_the_consumer_goes_on() {
    let sys = spawn_system();
    let sale = sys.open_sale(2).await;
    let orders = sys.amqp_names.orders_queue();
    sys.publish_raw(&orders, b"{not json").await;
    sys.publish_raw(&orders, br#"{"v": 99, "request_id": "x"}"#).await;
    sys.eventually("both poison messages dead-lettered", Duration::from_secs(20), || async {
        sys.queue_depth(&sys.amqp_names.orders_dead_queue()).await == 2
    })
    .await;
    let buyer = sys.dev_token(5, "user").await;
    let order = sys.buy_order(&buyer, sale.id).await;
    assert_eq!(sys.order_status(&buyer, order).await, "unpaid");
    assert_eq!(sys.queue_depth(&orders).await, 0);
}

/// The broker drops order-service's consumer connections while 300 buyers go for 150 units:
/// the consumers reconnect, and every accepted request still ends `success` (none lost, none
/// twice), with the stock conserved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_survive_their_connections_being_closed_mid_sale() {
    let sys = Arc::new(spawn_system());
    let sale = sys.open_sale(150).await;
    let g = sale.id;
    let users: Vec<i64> = (5_000..5_300).collect();
    let tokens: HashMap<i64, String> =
        join_all(users.iter().map(|u| async { (*u, sys.dev_token(*u, "user").await) }))
            .await
            .into_iter()
            .collect();

    let killer = {
        let sys = sys.clone();
        tokio::spawn(async move {
            let mut closed = 0;
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_millis(150)).await;
                let sys = sys.clone();
                closed += tokio::task::spawn_blocking(move || sys.close_connections("order-service-orders"))
                    .await
                    .unwrap();
            }
            closed
        })
    };
    let answers = join_all(users.iter().map(|u| {
        let (sys, token) = (sys.clone(), tokens[u].clone());
        async move { (*u, sys.buy(&token, g).await) }
    }))
    .await;
    let closed = killer.await.unwrap();
    assert!(closed >= 2, "the broker closed the consumers' connections ({closed})");

    let accepted: Vec<i64> = answers.iter().filter(|(_, (s, _))| *s == 202).map(|(u, _)| *u).collect();
    assert_eq!(accepted.len(), 150);
    let finals = join_all(accepted.iter().map(|u| {
        let (sys, token) = (sys.clone(), tokens[u].clone());
        async move { sys.final_result(&token, g, Duration::from_secs(60)).await }
    }))
    .await;
    assert!(finals.iter().all(|r| r.status == SeckillStatus::Success), "{finals:?}");
    assert_eq!(sys.active_orders(g).await, (150, 1));
    assert_eq!(sys.goods(g).await.stock_available, 0);
    assert_eq!(sys.held_at_stock(g).await, 150);
    assert_eq!(sys.redis_stock(g).await, Some(0));
    assert_eq!(sys.queue_depth(&sys.amqp_names.orders_queue()).await, 0);
    assert_eq!(sys.queue_depth(&sys.amqp_names.orders_dead_queue()).await, 0);
}

/// The broker drops every connection of seckill-service and order-service between two buyers
/// (publishers and consumers alike): the next buyer is still served, and the unit still flows
/// through the whole chain.
#[tokio::test]
async fn publishers_reconnect_after_the_broker_drops_them() {
    let sys = spawn_system();
    let sale = sys.open_sale(3).await;
    let first = sys.dev_token(61, "user").await;
    sys.buy_order(&first, sale.id).await;

    let closed = sys.close_connections("seckill-service") + sys.close_connections("order-service");
    assert!(closed >= 4, "publishers and consumers closed ({closed})");
    tokio::time::sleep(Duration::from_millis(300)).await;

    let second = sys.dev_token(62, "user").await;
    let order = sys.buy_order(&second, sale.id).await;
    let (status, _) = sys.cancel(&second, order).await;
    assert_eq!(status, 200);
    sys.eventually("the cancelled unit is back", Duration::from_secs(30), || async {
        sys.redis_stock(sale.id).await == Some(2) && sys.goods(sale.id).await.stock_available == 2
    })
    .await;
}
