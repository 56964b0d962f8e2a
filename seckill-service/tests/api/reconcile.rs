//! The reconciler: a reservation whose message the broker never confirmed is published again
//! once it is `seckill.reconcile_after_secs` old, and never given back.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use seckill_common::UserId;
use seckill_common::keys::SaleBucket;
use seckill_common::scripts::StoredResult;
use seckill_service::gate::Reserve;
use seckill_service::sales::now_ms;
use uuid::Uuid;

use crate::helpers::spawn_app_with;

const AFTER_SECS: u64 = 3;

#[tokio::test]
async fn a_reservation_without_a_message_is_published_again_and_never_given_back() {
    let app = spawn_app_with(|s| {
        s.seckill.reconcile_after_secs = AFTER_SECS;
        // Below the reconcile age, as the settings demand.
        s.amqp.confirm_timeout_ms = 2_500;
    });
    let g = app.open_sale(5).await.id;
    let gate = app.gate().await;
    let user = |u: i64| UserId::new(u).unwrap();

    // Two reservations taken by the gate's own script whose messages never reached the broker
    // (the process died between the script and the publish): one a minute old, one fresh.
    let (old, fresh) = (Uuid::new_v4(), Uuid::new_v4());
    let reserved_at = now_ms();
    let (outcome, epoch) =
        gate.reserve(SaleBucket::new(g, 0), user(60), old, reserved_at - 60_000, None).await.unwrap();
    assert_eq!(outcome, Reserve::Reserved { left: 4 });
    let (outcome, _) = gate.reserve(SaleBucket::new(g, 0), user(61), fresh, reserved_at, None).await.unwrap();
    assert_eq!(outcome, Reserve::Reserved { left: 3 });
    // And a buy whose message was confirmed: the reconciler leaves it alone.
    let (status, body) = app.buy(62, g).await;
    assert_eq!(status, 202, "{body}");

    // When each message shows up in the orders queue.
    let mut seen: HashMap<Uuid, (i64, usize)> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while seen.len() < 3 && Instant::now() < deadline {
        for m in app.take_order_messages().await {
            let entry = seen.entry(m.request_id).or_insert((now_ms(), 0));
            entry.1 += 1;
            if m.request_id != fresh && m.request_id != old {
                continue;
            }
            assert_eq!(m.epoch, epoch, "published again with the sale's epoch");
            assert_eq!(m.goods_id, g);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(seen.contains_key(&old), "the old reservation was published again: {seen:?}");
    assert!(seen.contains_key(&fresh), "the fresh one too, once old enough: {seen:?}");
    assert_eq!(seen.len(), 3, "{seen:?}");
    let (fresh_seen_at, _) = seen[&fresh];
    assert!(
        fresh_seen_at >= reserved_at + i64::try_from(AFTER_SECS * 1000).unwrap(),
        "the fresh reservation was published {} ms after it was taken, before reconcile_after_secs",
        fresh_seen_at - reserved_at
    );

    // A few more rounds of the reconciler (every second): nothing is published twice...
    tokio::time::sleep(Duration::from_secs(AFTER_SECS + 2)).await;
    for m in app.take_order_messages().await {
        seen.entry(m.request_id).or_insert((0, 0)).1 += 1;
    }
    assert!(seen.values().all(|(_, n)| *n == 1), "each request published once: {seen:?}");
    assert!(app.pending(g).await.is_empty(), "pending entries cleared once published");

    // ...and nothing was given back: the units stay held for the requests, the buyers queued.
    assert_eq!(app.redis_stock(g).await, Some(2));
    assert_eq!(app.held_by(g, 60).await, Some(old.to_string()));
    assert_eq!(app.held_by(g, 61).await, Some(fresh.to_string()));
    for u in [60, 61] {
        assert_eq!(
            gate.result(SaleBucket::new(g, 0), user(u)).await.unwrap(),
            Some(StoredResult::Queued),
            "user {u}"
        );
    }
}
