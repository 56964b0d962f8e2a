//! Test support: each test gets its own databases, Redis key prefix and AMQP names on the real
//! servers, runs services in-process on port 0, and leaves nothing behind.
//!
//! The servers are found through `SECKILL_TEST_DATABASE_URL` (a server URL without a database
//! name), `SECKILL_TEST_REDIS_URL` and `SECKILL_TEST_AMQP_URL`, defaulting to loopback;
//! `scripts/test.sh` checks they answer before the tests run.

use std::future::Future;
use std::thread::JoinHandle;

use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use seckill_web::Application;
use tokio::sync::oneshot;

pub mod keys;
pub mod relay;
pub mod slow;
pub mod tls;

pub fn database_server_url() -> String {
    std::env::var("SECKILL_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres:postgres@127.0.0.1:5432".into())
        .trim_end_matches('/')
        .to_owned()
}

pub fn redis_url() -> String {
    std::env::var("SECKILL_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// The nodes of the tests' Redis Cluster (`SECKILL_TEST_REDIS_CLUSTER_URL`, comma-separated;
/// scripts/test.sh starts one of three primaries), or None when
/// `SECKILL_SKIP_REDIS_CLUSTER_TESTS` is set: `test` then skips itself, saying so. Without
/// either the test fails, naming scripts/test.sh.
pub fn redis_cluster_url(test: &str) -> Option<String> {
    if std::env::var("SECKILL_SKIP_REDIS_CLUSTER_TESTS").is_ok_and(|v| !v.is_empty() && v != "0") {
        eprintln!("{test}: skipped (SECKILL_SKIP_REDIS_CLUSTER_TESTS is set)");
        return None;
    }
    let url = std::env::var("SECKILL_TEST_REDIS_CLUSTER_URL").ok().filter(|u| !u.is_empty());
    assert!(
        url.is_some(),
        "{test} needs a Redis Cluster: run scripts/test.sh (it starts one of three primaries), or set \
         SECKILL_TEST_REDIS_CLUSTER_URL to its nodes, or SECKILL_SKIP_REDIS_CLUSTER_TESTS=1 to skip"
    );
    url
}

pub fn amqp_url() -> String {
    std::env::var("SECKILL_TEST_AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// A short unique tag for this test's names (`t1a2b3c4d`).
pub fn unique_tag() -> String {
    format!("t{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
}

/// A database of this test's own, dropped (with its connections) when the value is dropped.
pub struct TestDb {
    name: String,
    url: String,
}

impl TestDb {
    /// Names a fresh database; the service under test creates and migrates it at start.
    pub fn new(purpose: &str) -> Self {
        let name = format!("{}_{purpose}", unique_tag());
        let url = format!("{}/{name}", database_server_url());
        Self { name, url }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// A direct connection, for checking what the service wrote.
    pub async fn connect(&self) -> AsyncPgConnection {
        AsyncPgConnection::establish(&self.url)
            .await
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.name))
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let admin = format!("{}/postgres", database_server_url());
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        block_on_own_thread(async move {
            if let Ok(mut conn) = AsyncPgConnection::establish(&admin).await {
                let _ = diesel::sql_query(sql).execute(&mut conn).await;
            }
        });
    }
}

/// Puts `n` sales that ended long ago straight into a stock database (already migrated), in
/// one statement: a shop that has run sales for years, in a second. Sale `k` (1 to `n`) is
/// named `ended k`, started `k` minutes more than two days ago and ended a day after its start;
/// every third shares its times with the next two, so a listing must break ties by id.
pub async fn insert_ended_sales(db: &TestDb, n: u32) {
    insert_ended_sales_at(db.url().to_owned(), n).await;
}

/// As [`insert_ended_sales`], from a test's synchronous set-up (before the services start).
pub fn insert_ended_sales_blocking(db: &TestDb, n: u32) {
    let url = db.url().to_owned();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
        rt.block_on(insert_ended_sales_at(url, n));
    })
    .join()
    .expect("the ended sales were inserted");
}

async fn insert_ended_sales_at(url: String, n: u32) {
    let sql = format!(
        "INSERT INTO goods (name, price_cents, seckill_price_cents, stock_total, stock_available, start_at, end_at) \
         SELECT 'ended ' || k, 1000, 500, 10, 10, now() - interval '2 days' - (k / 3) * interval '1 minute', \
                now() - interval '1 day' - (k / 3) * interval '1 minute' \
         FROM generate_series(1, {n}) AS k"
    );
    let mut conn =
        AsyncPgConnection::establish(&url).await.unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    diesel::sql_query(sql).execute(&mut conn).await.unwrap_or_else(|e| panic!("insert {n} ended sales: {e}"));
}

/// Deletes this test's Redis keys and AMQP queues and exchanges when dropped.
pub struct TestNames {
    pub redis_prefix: String,
    pub amqp_prefix: String,
    queues: Vec<String>,
    exchanges: Vec<String>,
    /// The Redis servers the keys are on: the tests' server, or a cluster's nodes.
    redis_nodes: Vec<String>,
}

impl TestNames {
    pub fn new() -> Self {
        let tag = unique_tag();
        Self {
            redis_prefix: format!("{tag}:"),
            amqp_prefix: format!("{tag}."),
            queues: Vec::new(),
            exchanges: Vec::new(),
            redis_nodes: vec![redis_url()],
        }
    }

    /// The test's keys are on the Redis Cluster of these nodes (`redis_cluster_url`).
    pub fn on_cluster(&mut self, nodes: &str) {
        self.redis_nodes = nodes.split(',').map(|n| n.trim().to_owned()).filter(|n| !n.is_empty()).collect();
    }

    /// Queues and exchanges to delete at the end (the services declare them).
    pub fn cleanup_amqp(&mut self, queues: Vec<String>, exchanges: Vec<String>) {
        self.queues = queues;
        self.exchanges = exchanges;
    }
}

impl Default for TestNames {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TestNames {
    fn drop(&mut self) {
        let pattern = format!("{}*", self.redis_prefix);
        let queues = std::mem::take(&mut self.queues);
        let exchanges = std::mem::take(&mut self.exchanges);
        let nodes = std::mem::take(&mut self.redis_nodes);
        block_on_own_thread(async move {
            for node in &nodes {
                let _ = seckill_infra::redis::delete_matching(node, &pattern).await;
            }
            let _ = delete_amqp(&queues, &exchanges).await;
        });
    }
}

async fn delete_amqp(queues: &[String], exchanges: &[String]) -> anyhow::Result<()> {
    if queues.is_empty() && exchanges.is_empty() {
        return Ok(());
    }
    let conn = lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default()).await?;
    let channel = conn.create_channel().await?;
    for q in queues {
        let _ = channel.queue_delete(q.as_str().into(), Default::default()).await;
    }
    for e in exchanges {
        let _ = channel.exchange_delete(e.as_str().into(), Default::default()).await;
    }
    let _ = conn.close(200, "test done".into()).await;
    Ok(())
}

/// Runs a future to completion on a fresh runtime on its own thread: usable from `Drop` inside
/// an async test, where blocking the test's runtime on itself would deadlock.
fn block_on_own_thread<F>(fut: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let handle = std::thread::spawn(move || {
        if let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() {
            rt.block_on(fut);
        }
    });
    let _ = handle.join();
}

/// A service's `GET /readyz`: its status and body.
pub async fn readyz(base_url: &str) -> (u16, serde_json::Value) {
    let res = reqwest::get(format!("{base_url}/readyz")).await.expect("GET /readyz");
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(serde_json::Value::Null))
}

/// Polls `GET /readyz` until it answers 200; panics with the last answer after `within`.
/// Returns how long it took.
pub async fn wait_ready(base_url: &str, within: std::time::Duration) -> std::time::Duration {
    let started = std::time::Instant::now();
    loop {
        let (status, body) = readyz(base_url).await;
        if status == 200 {
            return started.elapsed();
        }
        assert!(started.elapsed() < within, "{base_url} not ready within {within:?}: {status} {body}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// How long [`RunningService::start`] waits for a service's background start (the shared
/// test servers answer: a few hundred milliseconds, a migration on a busy machine a few seconds).
pub const START_WITHIN: std::time::Duration = std::time::Duration::from_secs(60);

/// A service running on its own thread and runtime, as it would in its own process.
pub struct RunningService {
    pub port: u16,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl RunningService {
    /// Builds the service with `build` on a new multi-thread runtime and serves until stopped;
    /// returns once everything it starts in the background is ready (its database migrated,
    /// its publisher connected, its scripts loaded: `Application::started`), as the tests
    /// that use it expect. Panics with the build error if the service does not start, or
    /// naming what it waits for if it is not ready within [`START_WITHIN`].
    pub fn start<B, Fut>(build: B) -> Self
    where
        B: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = anyhow::Result<Application>>,
    {
        Self::start_waiting(build, true)
    }

    /// As [`RunningService::start`], returning as soon as the service serves, ready or not
    /// (a test of a service started while a server it needs is away).
    pub fn start_unready<B, Fut>(build: B) -> Self
    where
        B: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = anyhow::Result<Application>>,
    {
        Self::start_waiting(build, false)
    }

    fn start_waiting<B, Fut>(build: B, until_ready: bool) -> Self
    where
        B: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = anyhow::Result<Application>>,
    {
        // Logs show with RUST_LOG set (e.g. RUST_LOG=info cargo test -- --nocapture).
        seckill_common::telemetry::init(&seckill_common::config::LogSettings {
            level: "off".into(),
            ..Default::default()
        });
        let (port_tx, port_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a tokio runtime");
            rt.block_on(async move {
                match build().await {
                    Ok(app) => {
                        if until_ready && tokio::time::timeout(START_WITHIN, app.started()).await.is_err() {
                            let waiting = app.waiting_for().join("; ");
                            let _ =
                                port_tx.send(Err(format!("not ready within {START_WITHIN:?}: {waiting}")));
                            return;
                        }
                        let _ = port_tx.send(Ok(app.port()));
                        let _ = app
                            .run_until_stopped(async {
                                let _ = stop_rx.await;
                            })
                            .await;
                    }
                    Err(e) => {
                        let _ = port_tx.send(Err(format!("{e:#}")));
                    }
                }
            });
        });
        let port = match port_rx.recv() {
            Ok(Ok(port)) => port,
            Ok(Err(e)) => panic!("service failed to start: {e}"),
            Err(_) => panic!("service thread ended before it started"),
        };
        Self { port, stop: Some(stop_tx), thread: Some(thread) }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Graceful shutdown, as on SIGTERM; returns once the service has finished.
    pub async fn stop(mut self) {
        self.signal_stop();
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }

    fn signal_stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Drop for RunningService {
    fn drop(&mut self) {
        self.signal_stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
