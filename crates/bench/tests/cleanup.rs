//! The scratch queues' clean-up against the real RabbitMQ (SECKILL_TEST_AMQP_URL, default loopback): the
//! queues and the exchange the services declare under a prefix go, with their messages, and a
//! queue under another prefix stays.

use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties, ExchangeKind};
use seckill_bench::cleanup::{self, ScratchNames};
use seckill_common::amqp::AmqpNames;

fn amqp_url() -> String {
    std::env::var("SECKILL_TEST_AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

async fn exists(conn: &Connection, queue: &str) -> bool {
    let ch = conn.create_channel().await.unwrap();
    let passive = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
    let found = ch.queue_declare(queue.into(), passive, FieldTable::default()).await.is_ok();
    if ch.status().connected() {
        let _ = ch.close(200, "".into()).await;
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scratch_names_go_and_others_stay() {
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let prefix = format!("t{}.", &tag[..12]);
    let other = format!("u{}.seckill.orders", &tag[..12]);
    let names = AmqpNames::new(prefix.clone());
    let conn = Connection::connect(&amqp_url(), ConnectionProperties::default()).await.unwrap();
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let durable = QueueDeclareOptions { durable: true, ..QueueDeclareOptions::default() };
    let delay = names.order_delay_queue(1_800);
    let retry = seckill_common::amqp::retry_queue(&names.orders_queue(), 1_000);
    for q in [names.orders_queue(), delay.clone(), retry.clone(), other.clone()] {
        ch.queue_declare(q.as_str().into(), durable, FieldTable::default()).await.unwrap();
    }
    for q in [names.orders_queue(), delay.clone()] {
        ch.basic_publish(
            "".into(),
            q.as_str().into(),
            BasicPublishOptions::default(),
            b"{}",
            BasicProperties::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    }
    ch.exchange_declare(
        names.broadcast_exchange().as_str().into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions { durable: true, ..ExchangeDeclareOptions::default() },
        FieldTable::default(),
    )
    .await
    .unwrap();

    let scratch = ScratchNames::new(&prefix, &[1_800], &[1_000], &[]).unwrap();
    let done = cleanup::delete(&amqp_url(), &scratch).await.unwrap();
    assert!(done.failed.is_empty(), "{done:?}");
    assert_eq!(done.queues, scratch.queues.len());
    assert_eq!(done.messages, 2);
    assert_eq!(done.exchanges, 1);

    for q in [names.orders_queue(), delay, retry] {
        assert!(!exists(&conn, &q).await, "{q} is still there");
    }
    let ch2 = conn.create_channel().await.unwrap();
    let passive = ExchangeDeclareOptions { passive: true, ..ExchangeDeclareOptions::default() };
    let gone = ch2
        .exchange_declare(
            names.broadcast_exchange().as_str().into(),
            ExchangeKind::Fanout,
            passive,
            FieldTable::default(),
        )
        .await
        .is_err();
    assert!(gone, "the broadcast exchange is still there");
    assert!(exists(&conn, &other).await, "a queue under another prefix was deleted");

    // Running it again finds nothing and still succeeds.
    let again = cleanup::delete(&amqp_url(), &scratch).await.unwrap();
    assert!(again.failed.is_empty(), "{again:?}");
    assert_eq!(again.messages, 0);

    let ch3 = conn.create_channel().await.unwrap();
    let _ = ch3.queue_delete(other.as_str().into(), QueueDeleteOptions::default()).await;
    let _ = conn.close(200, "test done".into()).await;
}
