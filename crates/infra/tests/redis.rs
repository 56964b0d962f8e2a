//! The shared Redis connection: when Redis is not there, calls fail at once (no hang, no retry
//! loop inside the call) with an error the consumers treat as an outage; when it is, calls
//! answer through the one connection.

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use seckill_common::config::RedisSettings;
use seckill_infra::redis::{connect, ping, pipelined};

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

/// The tests' Redis Cluster (three primaries, scripts/test.sh), under keys of this test's own.
fn cluster(test: &str) -> Option<(RedisSettings, seckill_testkit::TestNames)> {
    let nodes = seckill_testkit::redis_cluster_url(test)?;
    let mut names = seckill_testkit::TestNames::new();
    names.on_cluster(&nodes);
    let settings = RedisSettings {
        url: nodes,
        cluster: true,
        key_prefix: names.redis_prefix.clone(),
        ..RedisSettings::default()
    };
    Some((settings, names))
}

#[tokio::test]
async fn on_a_cluster_one_pipeline_over_many_sales_is_split_by_slot_and_answers_in_order() {
    let Some((settings, names)) = cluster("pipelined") else { return };
    let redis = connect(&settings).unwrap();
    assert!(redis.is_cluster());
    ping(&redis).await.unwrap();
    // 60 sales: their keys spread over the three primaries' slots.
    let sales: Vec<u64> = (1..=60).collect();
    let key = |g: &u64| format!("{}seckill:{{{g}}}:stock", names.redis_prefix);

    // A plain pipeline over several slots is refused by the cluster: what `pipelined` is for.
    let mut plain = redis::pipe();
    sales.iter().for_each(|g| {
        plain.set(key(g), g);
    });
    let mut conn = redis.clone();
    assert!(plain.query_async::<()>(&mut conn).await.is_err(), "a cross-slot pipeline went through");

    let set: Vec<i64> = pipelined(
        &redis,
        &sales,
        |g| *g,
        |pipe, g| {
            pipe.incr(key(g), *g);
        },
    )
    .await
    .unwrap();
    assert_eq!(set, sales.iter().map(|g| *g as i64).collect::<Vec<_>>(), "each reply in its item's place");
    let again: Vec<i64> = pipelined(
        &redis,
        &sales,
        |g| *g,
        |pipe, g| {
            pipe.incr(key(g), 1);
        },
    )
    .await
    .unwrap();
    assert_eq!(again, sales.iter().map(|g| *g as i64 + 1).collect::<Vec<_>>());
    // And through the one connection, each key read where its slot lives.
    for g in [1, 30, 60] {
        assert_eq!(conn.get::<_, i64>(key(&g)).await.unwrap(), g as i64 + 1);
    }
}

#[tokio::test]
async fn a_cluster_that_is_not_there_fails_each_call_quickly_as_an_outage() {
    let settings = RedisSettings {
        url: "redis://127.0.0.1:1,redis://127.0.0.1:2".into(),
        cluster: true,
        timeout_ms: 500,
        ..RedisSettings::default()
    };
    let redis = connect(&settings).expect("connecting is lazy: nothing is opened yet");
    for _ in 0..3 {
        let started = Instant::now();
        let mut conn = redis.clone();
        let err = conn.get::<_, Option<String>>("k").await.unwrap_err();
        assert!(started.elapsed() < Duration::from_millis(1_500), "took {:?}", started.elapsed());
        let shown = format!("{err:?}");
        assert!(seckill_infra::is_outage(&anyhow::Error::new(err)), "not an outage: {shown}");
    }
    assert!(ping(&redis).await.is_err());
}

#[test]
fn several_servers_are_a_cluster_or_a_mistake() {
    let several = RedisSettings { url: "redis://a:6379, redis://b:6379".into(), ..RedisSettings::default() };
    let err = several.validate().unwrap_err().to_string();
    assert!(err.contains("redis.cluster"), "{err}");
    assert!(RedisSettings { cluster: true, ..several }.validate().is_ok());
}
