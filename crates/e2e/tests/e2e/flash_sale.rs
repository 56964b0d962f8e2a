//! The spike: many more buyers than units, all at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use seckill_common::api::SeckillStatus;
use tokio::sync::Semaphore;

use crate::helpers::spawn_system;

/// 100 units, 1,000 distinct users at once, 50 of them clicking twice: exactly 100 orders, no
/// user with two, stock 0 in the database and in Redis, every accepted request ends
/// `success`, nobody is left `queued`, and the queue is empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_buyers_for_a_hundred_units() {
    let sys = Arc::new(spawn_system());
    let sale = sys.open_sale(100).await;
    let g = sale.id;

    // Tokens are minted before the spike, as users log in before a sale.
    let users: Vec<i64> = (1_000..2_000).collect();
    let limit = Arc::new(Semaphore::new(200));
    let tokens: HashMap<i64, String> = join_all(users.iter().map(|u| {
        let (sys, limit) = (sys.clone(), limit.clone());
        async move {
            let _permit = limit.acquire().await.unwrap();
            (*u, sys.dev_token(*u, "user").await)
        }
    }))
    .await
    .into_iter()
    .collect();

    // Every user buys once; the first 50 fire a second, concurrent click.
    let clicks = users.iter().chain(users.iter().take(50)).map(|u| {
        let (sys, limit, token) = (sys.clone(), limit.clone(), tokens[u].clone());
        let u = *u;
        async move {
            let _permit = limit.acquire().await.unwrap();
            (u, sys.buy(&token, g).await)
        }
    });
    let answers = join_all(clicks).await;

    let mut accepted: HashMap<i64, usize> = HashMap::new();
    for (u, (status, body)) in &answers {
        match (*status, body["code"].as_str()) {
            (202, _) => *accepted.entry(*u).or_default() += 1,
            (410, Some("SOLD_OUT")) | (409, Some("REPEATED")) | (403, Some("BAD_TOKEN")) => {}
            other => panic!("user {u}: unexpected answer {other:?}: {body}"),
        }
    }
    assert_eq!(accepted.values().sum::<usize>(), 100, "exactly the stock is accepted");
    assert!(accepted.values().all(|n| *n == 1), "nobody is accepted twice");

    // Every user's poll ends; the accepted ones in success, nobody stuck queued.
    let finals = join_all(users.iter().map(|u| {
        let (sys, limit, token) = (sys.clone(), limit.clone(), tokens[u].clone());
        let u = *u;
        async move {
            let _permit = limit.acquire().await.unwrap();
            (u, sys.final_result(&token, g, Duration::from_secs(60)).await)
        }
    }))
    .await;
    for (u, r) in &finals {
        if accepted.contains_key(u) {
            assert_eq!(r.status, SeckillStatus::Success, "user {u}: {r:?}");
            assert!(r.order_id.is_some());
        } else {
            assert_eq!(r.status, SeckillStatus::None, "user {u} was refused but sees {r:?}");
        }
    }

    let (orders, most_per_user) = sys.active_orders(g).await;
    assert_eq!(orders, 100, "exactly the stock is sold");
    assert_eq!(most_per_user, 1, "one per user");
    assert_eq!(sys.goods(g).await.stock_available, 0, "database stock");
    assert_eq!(sys.held_at_stock(g).await, 100, "ledger holds what was sold");
    assert_eq!(sys.redis_stock(g).await, Some(0), "redis stock");
    assert_eq!(sys.redis_users(g).await, 100, "reservations in redis");
    assert_eq!(sys.queue_depth(&sys.amqp_names.orders_queue()).await, 0, "orders queue drained");
    assert_eq!(sys.queue_depth(&sys.amqp_names.orders_dead_queue()).await, 0, "nothing dead-lettered");
}
