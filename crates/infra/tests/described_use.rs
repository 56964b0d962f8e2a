//! What a service describes of its broker and Redis use binds it (crates/deploy-check sets the
//! users' permissions from the same descriptions): the publisher refuses a destination it does
//! not list, a consumer of an unlisted source is not built, a script not listed answers an error.

use std::sync::Arc;

use lapin::BasicProperties;
use seckill_common::amqp::{AmqpNames, dead_queue, retry_queue};
use seckill_common::config::{AmqpSettings, RedisSettings};
use seckill_common::scripts;
use seckill_common::trust::Peer;
use seckill_infra::amqp::{Declare, Destination, PublishError};
use seckill_infra::broker_use::BrokerUse;
use seckill_infra::consumer::Source;
use seckill_infra::redis::{RedisUse, Scripts, connect};
use seckill_testkit::{TestNames, amqp_url, keys, redis_url};

#[tokio::test]
async fn the_publisher_refuses_a_destination_it_does_not_list() {
    let mut test = TestNames::new();
    let settings = AmqpSettings { url: amqp_url(), prefix: test.amqp_prefix.clone(), ..Default::default() };
    let names = AmqpNames::new(settings.prefix.clone());
    let queue = names.restock_queue();
    test.cleanup_amqp(
        vec![queue.clone(), dead_queue(&queue), retry_queue(&queue, settings.retry_delay_ms)],
        Vec::new(),
    );
    let broker = BrokerUse {
        publisher_declares: vec![Declare::WorkQueue(queue.clone())],
        publishes: vec![Destination::Queue(queue.clone())],
        consumers: Vec::new(),
    };
    let publisher = broker.publisher(&settings, "test", keys::trust(Peer::Stock)).await.unwrap();
    publisher.publish(Peer::Seckill, &queue, b"{}", BasicProperties::default()).await.unwrap();

    let orders = names.orders_queue();
    let err = publisher.publish(Peer::Seckill, &orders, b"{}", BasicProperties::default()).await.unwrap_err();
    assert!(matches!(err, PublishError::Undeclared { .. }), "{err}");
    assert!(!seckill_infra::is_outage(&anyhow::Error::new(err)), "a bug is not an outage");
    // The queue's name as an exchange's routing key is another destination.
    let exchange = names.broadcast_exchange();
    let err = publisher.publish_to(Peer::Seckill, &exchange, &queue, b"{}", BasicProperties::default()).await;
    assert!(matches!(err, Err(PublishError::Undeclared { .. })));
    publisher.close().await;
}

#[test]
fn a_consumer_is_built_only_for_a_listed_source() {
    let names = AmqpNames::new("t.");
    let declares = vec![Declare::WorkQueue(names.restock_queue()), Declare::Broadcast];
    let broker = BrokerUse {
        consumers: vec![(Source::Queue(names.restock_queue()), declares.clone())],
        ..BrokerUse::default()
    };
    let trust = keys::trust(Peer::Seckill);
    let spec =
        broker.consumer("restock", Source::Queue(names.restock_queue()), Peer::Stock, trust.clone()).unwrap();
    assert_eq!(spec.declares, declares);
    let unlisted =
        broker.consumer("orders", Source::Queue(names.orders_queue()), Peer::Seckill, Arc::clone(&trust));
    assert!(unlisted.unwrap_err().to_string().contains("not among the sources"));
}

#[tokio::test]
async fn a_script_not_listed_answers_an_error() {
    let test = TestNames::new();
    let redis = connect(&RedisSettings { url: redis_url(), ..Default::default() }).unwrap();
    let listed = Scripts::of(&RedisUse { scripts: &[scripts::PATH_TOKEN], commands: &[], channels: false });
    listed.load(&redis).await.unwrap();
    let mut conn = redis.clone();
    let key = format!("{}seckill:token", test.redis_prefix);
    let token: String =
        listed.path_token.key(&key).arg("fresh").arg(5).invoke_async(&mut conn).await.unwrap();
    assert_eq!(token, "fresh");
    let refused = listed.snapshot.key(&key).invoke_async::<Vec<Option<String>>>(&mut conn).await.unwrap_err();
    assert!(refused.to_string().contains("script snapshot is not in this service's RedisUse"), "{refused}");
    redis::cmd("DEL").arg(&key).query_async::<()>(&mut conn).await.unwrap();
}
