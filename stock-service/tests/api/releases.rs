//! The release consumer in batches: whatever the broker has ready, in either message form, each
//! unit given back once, every release forwarded to seckill-service, a poison message alone in
//! the dead letters.

use std::collections::HashSet;

use lapin::BasicProperties;
use lapin::options::{BasicGetOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use seckill_common::amqp::{
    AmqpNames, MESSAGE_VERSION, Release, ReleaseBatch, ReleaseReason, dead_queue, decode_releases,
};
use seckill_common::trust::Peer;
use seckill_common::{GoodsId, OrderId, UserId};
use seckill_infra::amqp::{Destination, Publisher};
use seckill_testkit::keys;
use uuid::Uuid;

use crate::helpers::spawn_app;
use crate::outage::wait_for;

fn release(key: Uuid, goods_id: GoodsId, n: i64) -> Release {
    Release {
        v: MESSAGE_VERSION,
        order_key: key,
        order_id: OrderId::new(n).unwrap(),
        user_id: UserId::new(n).unwrap(),
        goods_id,
        reason: ReleaseReason::Expired,
    }
}

#[tokio::test]
async fn a_batch_with_a_duplicate_an_unknown_key_and_a_poison_message_gives_each_unit_back_once() {
    let app = spawn_app();
    let goods = app.create_goods(5).await;
    let held: Vec<Uuid> = (0..3).map(|_| Uuid::new_v4()).collect();
    for key in &held {
        assert_eq!(app.deduct(*key, &goods).await.0, 200);
    }
    assert_eq!(app.goods(&goods).await.stock_available, 2);

    let names = AmqpNames::new(app.amqp.prefix.clone());
    let queue = names.stock_release_queue();
    let order = Publisher::connect(
        &app.amqp,
        "test-order",
        keys::trust(Peer::Order),
        vec![],
        vec![Destination::Queue(queue.clone())],
    )
    .await
    .unwrap();
    let publish = async |body: &[u8]| {
        order.publish(Peer::Stock, &queue, body, BasicProperties::default()).await.unwrap();
    };
    let unknown = Uuid::new_v4();
    // A batch holding the first key twice, a key the ledger never saw, and the second key;
    // then a batch that cannot be served (empty), the third key alone, and the second again.
    let batch = ReleaseBatch::new(vec![
        release(held[0], goods.id, 1),
        release(held[0], goods.id, 1),
        release(unknown, goods.id, 9),
        release(held[1], goods.id, 2),
    ]);
    publish(&serde_json::to_vec(&batch).unwrap()).await;
    publish(br#"{"v":2,"releases":[]}"#).await;
    publish(&serde_json::to_vec(&release(held[2], goods.id, 3)).unwrap()).await;
    publish(&serde_json::to_vec(&release(held[1], goods.id, 2)).unwrap()).await;

    let broker = seckill_infra::amqp::connect(&app.amqp.url, "test").await.unwrap();
    let channel = broker.create_channel().await.unwrap();
    let count = async |queue: &str| {
        let passive = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
        channel.queue_declare(queue.into(), passive, FieldTable::default()).await.unwrap().message_count()
    };
    wait_for("every release settled", async || {
        count(&queue).await == 0 && count(&dead_queue(&queue)).await == 1
    })
    .await;
    wait_for("every unit back", async || app.goods(&goods).await.stock_available == 5).await;
    assert_eq!(app.held(&goods).await, 0);
    app.assert_conserved(&goods).await;

    // Every release went on to seckill-service, the unknown key too (Redis decides for itself).
    let mut forwarded = HashSet::new();
    let restocks = names.restock_queue();
    while let Some(m) =
        channel.basic_get(restocks.as_str().into(), BasicGetOptions { no_ack: true }).await.unwrap()
    {
        forwarded.extend(decode_releases(&m.delivery.data).unwrap().iter().map(|r| r.order_key));
    }
    let expected: HashSet<Uuid> = held.iter().copied().chain([unknown]).collect();
    assert_eq!(forwarded, expected);
    assert_eq!(count(&dead_queue(&queue)).await, 1, "only the empty batch is a dead letter");
    order.close().await;
    seckill_infra::amqp::close_quietly(&broker).await;
}
