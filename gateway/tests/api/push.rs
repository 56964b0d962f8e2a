//! The gateway's notice channel against a real Redis: it stays connected while Redis does, and
//! hands on what is published on a sale's channel.

use std::sync::Arc;
use std::time::Duration;

use gateway::configuration::PushSettings;
use gateway::push::{self, Push};
use seckill_common::GoodsId;
use seckill_common::config::RedisSettings;
use seckill_common::keys::RedisKeys;
use seckill_testkit::{TestNames, redis_url};
use seckill_web::Lifecycle;
use tokio_util::sync::CancellationToken;

/// Until the channel's first connection is made.
async fn connected(push: &Push) {
    for _ in 0..100 {
        if push.channel.connects() > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the notice channel did not connect to Redis");
}

/// Past two of the channel's checks (a PING every 5 s) on a subscribed connection it is still
/// the first connection: a check that failed on a healthy Redis would drop it (and make every
/// stream re-read) each time.
#[tokio::test]
async fn the_notice_channel_stays_connected_through_its_checks() {
    let names = TestNames::new();
    let redis =
        RedisSettings { url: redis_url(), key_prefix: names.redis_prefix.clone(), ..Default::default() };
    let keys = RedisKeys::new(names.redis_prefix.clone());
    let secret = "a-test-jwt-secret-of-at-least-32-bytes";
    let connection = seckill_infra::redis::connect(&redis).unwrap();
    let push = Arc::new(
        Push::new(PushSettings::default(), CancellationToken::new(), secret, connection, &redis, keys)
            .unwrap(),
    );
    let lifecycle = Lifecycle::new();
    push::spawn_channel(&lifecycle, push.clone());
    // Subscribed, as with streams open: Redis then answers in subscriber mode.
    connected(&push).await;
    push.channel.subscribe(GoodsId::new(7).unwrap()).await;
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(push.channel.connects(), 1, "the channel was made again: see the log's 'notice channel'");
    lifecycle.cancel.cancel();
    lifecycle.tasks.close();
    lifecycle.tasks.wait().await;
}
