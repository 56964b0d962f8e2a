//! The generic consumer against a real RabbitMQ: bounded retries through the retry queue, then
//! the dead letters; outages requeued without counting a try; messages not signed by the queue's
//! one sender refused before any handler sees them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable, LongString};
use seckill_common::amqp::{AmqpNames, dead_queue, retry_queue};
use seckill_common::config::AmqpSettings;
use seckill_common::trust::{Peer, SIGNATURE_HEADER};
use seckill_infra::amqp::Declare;
use seckill_infra::consumer::{self, ConsumerSpec, Inbox, Retry, Source};
use seckill_testkit::{TestNames, amqp_url, keys};
use tokio_util::sync::CancellationToken;

struct Fixture {
    settings: AmqpSettings,
    queue: String,
    channel: lapin::Channel,
    _conn: lapin::Connection,
    _names: TestNames,
}

async fn fixture() -> Fixture {
    fixture_with(false).await
}

async fn fixture_with(quorum_queues: bool) -> Fixture {
    let mut names = TestNames::new();
    let settings = AmqpSettings {
        url: amqp_url(),
        prefix: names.amqp_prefix.clone(),
        retry_delay_ms: 100,
        max_attempts: 3,
        quorum_queues,
        ..Default::default()
    };
    let queue = AmqpNames::new(settings.prefix.clone()).restock_queue();
    names.cleanup_amqp(
        vec![queue.clone(), dead_queue(&queue), retry_queue(&queue, settings.retry_delay_ms)],
        Vec::new(),
    );
    let conn = lapin::Connection::connect(&settings.url, Default::default()).await.unwrap();
    let channel = conn.create_channel().await.unwrap();
    seckill_infra::amqp::declare(
        &channel,
        &AmqpNames::new(settings.prefix.clone()),
        &settings,
        &[Declare::WorkQueue(queue.clone())],
    )
    .await
    .unwrap();
    Fixture { settings, queue, channel, _conn: conn, _names: names }
}

impl Fixture {
    /// Publishes as stock-service, the one sender of the restock queue.
    async fn publish(&self, body: &[u8]) {
        let signature = keys::trust(Peer::Stock).sign_message(Peer::Seckill, body);
        self.publish_with(body, Some(signature)).await;
    }

    async fn publish_with(&self, body: &[u8], signature: Option<String>) {
        let mut headers = FieldTable::default();
        if let Some(s) = signature {
            headers.insert(SIGNATURE_HEADER.into(), AMQPValue::LongString(LongString::from(s)));
        }
        self.channel
            .basic_publish(
                "".into(),
                self.queue.as_str().into(),
                Default::default(),
                body,
                BasicProperties::default().with_headers(headers),
            )
            .await
            .unwrap();
    }

    async fn depth(&self, queue: &str) -> u32 {
        self.channel
            .queue_declare(
                queue.into(),
                lapin::options::QueueDeclareOptions { passive: true, ..Default::default() },
                Default::default(),
            )
            .await
            .unwrap()
            .message_count()
    }

    fn spec(&self) -> ConsumerSpec {
        ConsumerSpec {
            name: "test-consumer".into(),
            source: Source::Queue(self.queue.clone()),
            from: Peer::Stock,
            trust: keys::trust(Peer::Seckill),
            declares: vec![Declare::WorkQueue(self.queue.clone())],
            prefetch: 10,
            batch_size: 10,
        }
    }
}

async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    for _ in 0..100 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for: {what}");
}

#[tokio::test]
async fn a_message_failing_every_try_ends_dead_after_max_attempts() {
    ends_dead_after_max_attempts(fixture().await).await;
}

/// The same on quorum queues (a cluster's), with at-least-once dead-lettering.
#[tokio::test]
async fn quorum_queues_retry_and_dead_letter_the_same_way() {
    ends_dead_after_max_attempts(fixture_with(true).await).await;
}

async fn ends_dead_after_max_attempts(f: Fixture) {
    let tries = Arc::new(AtomicU32::new(0));
    let cancel = CancellationToken::new();
    let seen = tries.clone();
    let task =
        tokio::spawn(consumer::run(f.settings.clone(), f.spec(), cancel.clone(), move |inbox: Inbox| {
            let seen = seen.clone();
            async move {
                for d in &inbox.deliveries {
                    assert_eq!(
                        Inbox::attempt(d),
                        seen.fetch_add(1, Ordering::SeqCst) + 1,
                        "tries are numbered"
                    );
                    if inbox.retry_later(d).await? == Retry::Exhausted {
                        inbox.dead_letter(d, "always fails").await?;
                    }
                }
                Ok(())
            }
        }));
    f.publish(b"poison").await;
    eventually("the message is dead", async || f.depth(&dead_queue(&f.queue)).await == 1).await;
    assert_eq!(tries.load(Ordering::SeqCst), 3, "max_attempts tries, no more");
    assert_eq!(f.depth(&f.queue).await, 0);
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test]
async fn a_requeued_message_comes_back_without_counting_a_try_and_then_succeeds() {
    let f = fixture().await;
    let tries = Arc::new(AtomicU32::new(0));
    let cancel = CancellationToken::new();
    let seen = tries.clone();
    let task =
        tokio::spawn(consumer::run(f.settings.clone(), f.spec(), cancel.clone(), move |inbox: Inbox| {
            let seen = seen.clone();
            async move {
                for d in &inbox.deliveries {
                    assert_eq!(Inbox::attempt(d), 1, "an outage does not count against the message");
                    // Five "outages", then the dependency is back.
                    if seen.fetch_add(1, Ordering::SeqCst) < 5 {
                        inbox.requeue(d).await?;
                    } else {
                        inbox.ack(d).await?;
                    }
                }
                Ok(())
            }
        }));
    f.publish(b"fine").await;
    eventually("the message is done", async || tries.load(Ordering::SeqCst) == 6).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(f.depth(&f.queue).await, 0);
    assert_eq!(f.depth(&dead_queue(&f.queue)).await, 0);
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test]
async fn messages_not_from_the_queues_sender_are_dead_before_any_handler_sees_them() {
    let f = fixture().await;
    let handled = Arc::new(std::sync::Mutex::new(Vec::new()));
    let cancel = CancellationToken::new();
    let seen = handled.clone();
    let task =
        tokio::spawn(consumer::run(f.settings.clone(), f.spec(), cancel.clone(), move |inbox: Inbox| {
            let seen = seen.clone();
            async move {
                for d in &inbox.deliveries {
                    seen.lock().unwrap().push(d.data.clone());
                    inbox.ack(d).await?;
                }
                Ok(())
            }
        }));
    let body = br#"{"v":1}"#;
    // Unsigned; signed by order-service (a real key, of another link); altered after signing;
    // garbage in the header.
    f.publish_with(body, None).await;
    f.publish_with(body, Some(keys::trust(Peer::Order).sign_message(Peer::Seckill, body))).await;
    f.publish_with(b"{\"v\":2}", Some(keys::trust(Peer::Stock).sign_message(Peer::Seckill, body))).await;
    f.publish_with(body, Some("v1.stock.not-a-tag".into())).await;
    f.publish(b"genuine").await;
    eventually("four refused", async || f.depth(&dead_queue(&f.queue)).await == 4).await;
    eventually("the genuine one handled", async || handled.lock().unwrap().len() == 1).await;
    assert_eq!(handled.lock().unwrap().as_slice(), [b"genuine".to_vec()]);
    cancel.cancel();
    task.await.unwrap();
}
