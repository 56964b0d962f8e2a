//! Accepted requests share confirmed messages (`seckill.batch_window_ms`,
//! `seckill.batch_max_requests`); each buyer is answered 202 only after the confirm of the
//! message holding their request, and a batch the broker does not take is given back whole.

use std::collections::HashSet;
use std::time::Duration;

use futures_util::future::join_all;
use lapin::options::QueueDeleteOptions;
use seckill_common::UserId;
use seckill_common::config::AmqpSettings;
use seckill_common::keys::SaleBucket;
use seckill_infra::amqp::{Declare, declare};
use seckill_testkit::amqp_url;
use uuid::Uuid;

use crate::helpers::{TestApp, spawn_app_with};

fn batching(window_ms: u64, max_requests: usize) -> TestApp {
    spawn_app_with(|s| {
        s.seckill.batch_window_ms = window_ms;
        s.seckill.batch_max_requests = max_requests;
    })
}

#[tokio::test]
async fn concurrent_buyers_share_confirmed_messages_of_at_most_the_batch_size() {
    let app = batching(30, 8);
    let g = app.open_sale(100).await.id;

    let answers = join_all((1..=40).map(|u| app.buy(1_000 + u, g))).await;
    let mut accepted = HashSet::new();
    for (status, body) in &answers {
        assert_eq!(*status, 202, "{body}");
        accepted.insert(body["request_id"].as_str().unwrap().parse::<Uuid>().unwrap());
    }

    let mut batches = Vec::new();
    for _ in 0..50 {
        batches.extend(app.take_order_batches().await);
        if batches.iter().map(Vec::len).sum::<usize>() >= accepted.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let published: HashSet<Uuid> = batches.iter().flatten().map(|r| r.request_id).collect();
    assert_eq!(published, accepted, "every accepted request is in a message, once");
    assert_eq!(batches.iter().map(Vec::len).sum::<usize>(), 40, "no request twice");
    assert!(
        batches.iter().all(|b| b.len() <= 8),
        "sizes: {:?}",
        batches.iter().map(Vec::len).collect::<Vec<_>>()
    );
    assert!(batches.len() < 40, "requests shared messages: {} messages", batches.len());
    let epoch = app.gate().await.epoch(SaleBucket::new(g, 0)).await.unwrap();
    assert!(batches.iter().flatten().all(|r| r.goods_id == g && r.epoch == epoch));

    assert_eq!(app.redis_stock(g).await, Some(60));
    for _ in 0..50 {
        if app.pending(g).await.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(app.pending(g).await.is_empty(), "confirmed requests leave the pending set");
}

#[tokio::test]
async fn a_batch_the_broker_does_not_take_is_given_back_whole() {
    let app = batching(30, 50);
    let g = app.open_sale(10).await.id;

    // The orders queue is gone: the broker returns every message as unroutable.
    let conn = lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default()).await.unwrap();
    let channel = conn.create_channel().await.unwrap();
    let queue = app.amqp_names.orders_queue();
    channel.queue_delete(queue.as_str().into(), QueueDeleteOptions::default()).await.unwrap();

    let buyers: Vec<i64> = (1..=6).map(|u| 2_000 + u).collect();
    let answers = join_all(buyers.iter().map(|&u| app.buy(u, g))).await;
    for (status, body) in &answers {
        assert_eq!((*status, body["code"].as_str()), (503, Some("BUSY")), "{body}");
    }
    // Every reservation of the batch is back, and nobody is left queued.
    assert_eq!(app.redis_stock(g).await, Some(10));
    assert!(app.pending(g).await.is_empty(), "{:?}", app.pending(g).await);
    let gate = app.gate().await;
    for &u in &buyers {
        assert_eq!(app.held_by(g, u).await, None, "user {u} holds nothing");
        assert_eq!(
            gate.result(SaleBucket::new(g, 0), UserId::new(u).unwrap()).await.unwrap(),
            None,
            "user {u}"
        );
    }

    // Once the queue is back, the same buyers are accepted.
    let settings = AmqpSettings { retry_delay_ms: 200, ..Default::default() };
    declare(&channel, &app.amqp_names, &settings, &[Declare::WorkQueue(queue)]).await.unwrap();
    let answers = join_all(buyers.iter().map(|&u| app.buy(u, g))).await;
    assert!(answers.iter().all(|(status, _)| *status == 202), "{answers:?}");
    assert_eq!(app.wait_for_order_messages(6, Duration::from_secs(5)).await.len(), 6);
    assert_eq!(app.redis_stock(g).await, Some(4));
    let _ = conn.close(200, "done".into()).await;
}
