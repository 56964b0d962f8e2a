//! The queues under abuse: poison messages, and the broker closing the consumers' connections
//! in the middle of a sale.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use seckill_common::api::SeckillStatus;
use seckill_common::trust::Peer;

use crate::helpers::spawn_system;

#[tokio::test]
async fn a_malformed_order_message_is_dead_lettered_and_the_consumer_goes_on() {
    let sys = spawn_system();
    let sale = sys.open_sale(2).await;
    let orders = sys.amqp_names.orders_queue();
    sys.publish_as(Peer::Seckill, Peer::Order, &orders, b"{not json").await;
    sys.publish_as(Peer::Seckill, Peer::Order, &orders, br#"{"v": 99, "request_id": "x"}"#).await;
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

/// A buy request that keeps failing runs out of tries and must be compensated (its deduction
/// released); when the compensation fails too, the request goes back to the queue rather than
/// into the dead letters, where its unit would stay held and its buyer `queued` for ever. Once
/// the fault is gone, it ends, and everything agrees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_compensation_is_tried_again_never_dead_lettered() {
    use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
    let sys = spawn_system();
    let sale = sys.open_sale(3).await;
    let buyer = sys.dev_token(6_001, "user").await;
    // Orders cannot be written (not an outage: tries are counted), and units cannot be released
    // (a ledger row's update); deductions (its inserts) still go through.
    let refuse = |events: &str, table: &str| {
        format!(
            "CREATE FUNCTION refuse() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'test refuses'; END $$ \
             LANGUAGE plpgsql; CREATE TRIGGER refuse BEFORE {events} ON {table} \
             FOR EACH ROW EXECUTE FUNCTION refuse();"
        )
    };
    let mut orders_db = sys.order_db.connect().await;
    orders_db.batch_execute(&refuse("INSERT", "orders")).await.unwrap();
    let mut stock_db = sys.stock_db.connect().await;
    stock_db.batch_execute(&refuse("UPDATE", "stock_ledger")).await.unwrap();

    let (status, body) = sys.buy(&buyer, sale.id).await;
    assert_eq!(status, 202, "{body}");
    // Three tries (200 ms apart), then compensations that fail, over and over.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(sys.queue_depth(&sys.amqp_names.orders_dead_queue()).await, 0, "not dead-lettered");
    assert_eq!(sys.result(&buyer, sale.id).await.status, SeckillStatus::Queued);
    assert_eq!(sys.held_at_stock(sale.id).await, 1, "the unit is held while the request lives");

    diesel::sql_query("DROP TRIGGER refuse ON orders").execute(&mut orders_db).await.unwrap();
    diesel::sql_query("DROP TRIGGER refuse ON stock_ledger").execute(&mut stock_db).await.unwrap();
    let r = sys.final_result(&buyer, sale.id, Duration::from_secs(30)).await;
    let (orders, _) = sys.active_orders(sale.id).await;
    match r.status {
        // The next turn found the database writable and made the order.
        SeckillStatus::Success => assert_eq!((orders, sys.held_at_stock(sale.id).await), (1, 1)),
        // Or the compensation went through: the unit is back, the message in the dead letters.
        SeckillStatus::Failed => {
            assert_eq!((orders, sys.held_at_stock(sale.id).await), (0, 0));
            assert_eq!(sys.queue_depth(&sys.amqp_names.orders_dead_queue()).await, 1);
        }
        other => panic!("the request did not end: {other:?}"),
    }
    assert_eq!(sys.goods(sale.id).await.stock_available, 3 - orders);
}
