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

/// A private Redis Cluster of three primaries for one test (it kills and restarts a node, which
/// the shared test cluster must not see): redis-server processes on free loopback ports, the
/// slots split evenly, a primary's failure leaving the others serving their slots.
struct PrivateCluster {
    ports: Vec<u16>,
    dir: std::path::PathBuf,
    nodes: Vec<Option<std::process::Child>>,
}

impl PrivateCluster {
    async fn start() -> Self {
        let dir = std::env::temp_dir().join(format!("seckill-cluster-{}", seckill_testkit::unique_tag()));
        let mut ports = Vec::new();
        while ports.len() < 3 {
            // A free port whose cluster bus port (+10000) is free too.
            let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let bus_free = port < 55_535 && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok();
            if bus_free && !ports.contains(&port) {
                ports.push(port);
            }
        }
        let mut cluster = Self { ports: ports.clone(), dir, nodes: Vec::new() };
        for i in 0..3 {
            let child = cluster.spawn(i);
            cluster.nodes.push(Some(child));
        }
        for (i, port) in ports.iter().enumerate() {
            let mut conn = Self::node(*port).await;
            let (lo, hi) = (16_384 * i / 3, 16_384 * (i + 1) / 3 - 1);
            let _: () = redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(lo)
                .arg(hi)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        let mut first = Self::node(ports[0]).await;
        for port in &ports[1..] {
            let _: () = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(*port)
                .query_async(&mut first)
                .await
                .unwrap();
        }
        cluster.wait_whole().await;
        cluster
    }

    fn spawn(&self, i: usize) -> std::process::Child {
        let dir = self.dir.join(self.ports[i].to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::process::Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.ports[i].to_string()])
            .args(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"])
            .args(["--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server (scripts/test.sh installs it)")
    }

    /// A plain connection to one node, once it answers.
    async fn node(port: u16) -> redis::aio::MultiplexedConnection {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
        for _ in 0..100 {
            if let Ok(conn) = client.get_multiplexed_async_connection().await {
                return conn;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the node on port {port} does not answer");
    }

    async fn wait_whole(&self) {
        for _ in 0..200 {
            let mut whole = true;
            for port in &self.ports {
                let mut conn = Self::node(*port).await;
                let info: String = redis::cmd("CLUSTER").arg("INFO").query_async(&mut conn).await.unwrap();
                whole &= info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3");
            }
            if whole {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the private cluster did not form");
    }

    fn url(&self) -> String {
        self.ports.iter().map(|p| format!("redis://127.0.0.1:{p}")).collect::<Vec<_>>().join(",")
    }

    /// A key held by node `i` (slots split evenly: node i holds a third).
    async fn key_on(&self, i: usize) -> String {
        let mut conn = Self::node(self.ports[0]).await;
        for n in 0.. {
            let key = format!("seckill:{{{n}}}:stock");
            let slot: usize =
                redis::cmd("CLUSTER").arg("KEYSLOT").arg(&key).query_async(&mut conn).await.unwrap();
            if slot * 3 / 16_384 == i {
                return key;
            }
        }
        unreachable!()
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts node `i` again on its port and directory: it keeps its place in the cluster (its
    /// nodes.conf), not its data.
    fn restart(&mut self, i: usize) {
        self.nodes[i] = Some(self.spawn(i));
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A primary of the cluster dies: calls for its slots fail quickly as an outage while the other
/// primaries' sales go on; it comes back without its data (restarted, no persistence): the
/// client finds it again on its own, and its keys are simply gone (the sale's data lost, which
/// the services rebuild from the authorities).
#[tokio::test]
async fn a_cluster_primary_that_dies_fails_only_its_slots_and_is_found_again_when_back() {
    if seckill_testkit::redis_cluster_url("a_cluster_primary_that_dies").is_none() {
        return;
    }
    let mut cluster = PrivateCluster::start().await;
    let settings =
        RedisSettings { url: cluster.url(), cluster: true, timeout_ms: 500, ..RedisSettings::default() };
    let redis = connect(&settings).unwrap();
    let (lost, kept) = (cluster.key_on(1).await, cluster.key_on(2).await);
    let mut conn = redis.clone();
    let _: () = conn.set(&lost, 10).await.unwrap();
    let _: () = conn.set(&kept, 20).await.unwrap();

    cluster.kill(1);
    let started = Instant::now();
    let err = conn.get::<_, Option<i64>>(&lost).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
    let shown = format!("{err:?}");
    assert!(seckill_infra::is_outage(&anyhow::Error::new(err)), "not an outage: {shown}");
    assert_eq!(conn.get::<_, Option<i64>>(&kept).await.unwrap(), Some(20), "the other primaries serve on");

    cluster.restart(1);
    let mut back = None;
    for _ in 0..100 {
        if let Ok(value) = conn.get::<_, Option<i64>>(&lost).await {
            back = Some(value);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(back, Some(None), "back, and without the data it held");
    let _: () = conn.set(&lost, 11).await.unwrap();
    assert_eq!(conn.get::<_, Option<i64>>(&lost).await.unwrap(), Some(11));
    assert_eq!(conn.get::<_, Option<i64>>(&kept).await.unwrap(), Some(20));
}
