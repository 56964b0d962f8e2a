//! The shared Redis connection: when Redis is not there, calls fail at once (no hang, no retry
//! loop inside the call) with an error the consumers treat as an outage; when it is, calls
//! answer through the one connection.

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use seckill_common::config::RedisSettings;
use seckill_infra::redis::{connect, ping};

#[tokio::test]
async fn a_redis_that_refuses_connections_fails_each_call_quickly_as_an_outage() {
    // Port 1 on loopback: nothing listens there, so every connection attempt is refused.
    let settings =
        RedisSettings { url: "redis://127.0.0.1:1".into(), timeout_ms: 2_000, ..RedisSettings::default() };
    let redis = connect(&settings).expect("connecting is lazy: nothing is opened yet");
    for _ in 0..3 {
        let started = Instant::now();
        let mut conn = redis.clone();
        let err = conn.get::<_, Option<String>>("k").await.unwrap_err();
        assert!(started.elapsed() < Duration::from_millis(500), "took {:?}", started.elapsed());
        assert!(seckill_infra::is_outage(&anyhow::Error::new(err)));
    }
    assert!(ping(&redis).await.is_err());
}

#[tokio::test]
async fn a_live_redis_answers_through_the_shared_connection() {
    let settings = RedisSettings { url: seckill_testkit::redis_url(), ..RedisSettings::default() };
    let redis = connect(&settings).unwrap();
    ping(&redis).await.unwrap();
}
