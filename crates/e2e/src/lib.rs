//! The whole system in one process, for tests and tools: `spawn_system()` starts the four
//! services on port 0 against the real PostgreSQL, Redis and RabbitMQ, each run with its own
//! databases, Redis key prefix and queue names (all removed when the `System` is dropped), and
//! `System` has one method per call a buyer or an admin makes through the gateway, plus direct
//! looks into the databases, Redis and the queues for checking invariants.
//!
//! The end-to-end tests are in `tests/`; the load tool's smoke test uses the same harness.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chrono::Utc;
use diesel_async::RunQueryDsl;
use redis::AsyncCommands;
use seckill_common::GoodsId;
use seckill_common::amqp::AmqpNames;
use seckill_common::api::{Goods, Order, SeckillResult, SeckillStatus};
use seckill_common::config::HttpSettings;
use seckill_common::keys::{RedisKeys, SaleBucket};
use seckill_common::room::WaitingRoom;
use seckill_common::trust::Peer;
use seckill_testkit::{RunningService, TestDb, TestNames, amqp_url, keys, redis_url};
use serde_json::{Value, json};

pub const JWT_SECRET: &str = "e2e-test-jwt-secret-at-least-32-bytes-long";

fn http_settings(options: &Options) -> HttpSettings {
    let mut http = HttpSettings { host: "127.0.0.1".into(), port: Some(0), workers: 2, ..Default::default() };
    if let Some(bound) = options.read_timeout_ms {
        http.read_timeout_ms = bound;
    }
    http
}

/// Knobs a test may turn before the system starts.
#[derive(Clone)]
pub struct Options {
    pub require_token: bool,
    pub order_ttl_secs: u64,
    /// seckill-service replicas behind the gateway.
    pub seckill_replicas: usize,
    /// How long the sold-out flag answers alone (long: only a broadcast clears it in time).
    pub sold_out_recheck_ms: u64,
    /// How old an unconfirmed reservation must be before the reconciler publishes it again.
    pub reconcile_after_secs: u64,
    /// The broker URL seckill-service connects to (None: the tests' server), so a test can put
    /// something between them that it cuts.
    pub seckill_amqp_url: Option<String>,
    /// The gateway's rate limits; None: the tests' own (below).
    pub rate_limits: Option<gateway::configuration::RateLimitSettings>,
    /// The gateway's `storefront.dir`: where it also writes the pages, for a web server.
    pub storefront_dir: Option<std::path::PathBuf>,
    /// Every service on this Redis Cluster (its nodes, comma-separated:
    /// `seckill_testkit::redis_cluster_url`) instead of the tests' one server.
    pub redis_cluster: Option<String>,
    /// Every service's `http.read_timeout_ms`; None: the default.
    pub read_timeout_ms: Option<u64>,
    /// How long a buyer's event stream with nothing to tell stays open (`push.idle_secs`).
    pub stream_idle_secs: u64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            require_token: true,
            order_ttl_secs: 1_800,
            seckill_replicas: 1,
            sold_out_recheck_ms: 1_000,
            reconcile_after_secs: 30,
            seckill_amqp_url: None,
            rate_limits: None,
            storefront_dir: None,
            redis_cluster: None,
            read_timeout_ms: None,
            stream_idle_secs: 5,
        }
    }
}

/// Retry delay of the test queues: short, so retries show within a test.
pub const RETRY_DELAY_MS: u64 = 200;

/// Fields drop in order: the services stop (gateway first) before the databases and names go.
/// Some fields are held only to keep what they own alive until then.
#[allow(dead_code)]
pub struct System {
    pub gateway: RunningService,
    /// Where the helpers send their requests, when not to the gateway itself (a web server in
    /// front of it: `serve_through`).
    front: Option<String>,
    pub seckill: Vec<RunningService>,
    /// None while a test has it stopped (`stop_order`, `start_order`).
    order: std::sync::Mutex<Option<RunningService>>,
    order_settings: order_service::Settings,
    /// The address the other services know order-service by, kept while it restarts.
    order_relay: Relay,
    pub stock: RunningService,
    pub http: reqwest::Client,
    pub redis_keys: RedisKeys,
    /// The services' Redis (one server or a cluster), for the helpers that look into it.
    redis_settings: seckill_common::config::RedisSettings,
    pub amqp_names: AmqpNames,
    pub stock_db: TestDb,
    pub order_db: TestDb,
    pub names: TestNames,
}

pub fn spawn_system() -> System {
    spawn_system_with(Options::default())
}

pub fn spawn_system_with(options: Options) -> System {
    let mut names = TestNames::new();
    let amqp_names = AmqpNames::new(names.amqp_prefix.clone());
    names.cleanup_amqp(
        amqp_names.all_queues(options.order_ttl_secs, RETRY_DELAY_MS),
        vec![amqp_names.broadcast_exchange()],
    );
    let redis_keys = RedisKeys::new(names.redis_prefix.clone());
    let stock_db = TestDb::new("stock");
    let order_db = TestDb::new("order");

    if let Some(nodes) = &options.redis_cluster {
        names.on_cluster(nodes);
    }
    let redis = seckill_common::config::RedisSettings {
        url: options.redis_cluster.clone().unwrap_or_else(redis_url),
        cluster: options.redis_cluster.is_some(),
        key_prefix: names.redis_prefix.clone(),
        ..Default::default()
    };
    let amqp = seckill_common::config::AmqpSettings {
        url: amqp_url(),
        prefix: names.amqp_prefix.clone(),
        retry_delay_ms: RETRY_DELAY_MS,
        max_attempts: 3,
        ..Default::default()
    };
    let database = |db: &TestDb| seckill_common::config::DatabaseSettings {
        url: Some(db.url().to_owned()),
        ..Default::default()
    };

    let s = stock_service::Settings {
        http: http_settings(&options),
        database: database(&stock_db),
        amqp: amqp.clone(),
        trust: keys::trust_settings(Peer::Stock),
        ..Default::default()
    };
    let stock = RunningService::start(move || stock_service::startup::build(s));
    let upstreams = |seckill: &str, order: &str| seckill_common::config::UpstreamSettings {
        seckill: seckill.to_owned(),
        order: order.to_owned(),
        stock: stock.url(),
        ..Default::default()
    };

    // order-service starts after seckill-service, which calls it, and a test may restart it:
    // the others know it by a relay's address, which stays.
    let order_relay = Relay::start();
    let order_url = format!("http://127.0.0.1:{}", order_relay.port);
    let seckill: Vec<RunningService> = (0..options.seckill_replicas.max(1))
        .map(|_| {
            let s = seckill_service::Settings {
                http: http_settings(&options),
                redis: redis.clone(),
                amqp: seckill_common::config::AmqpSettings {
                    url: options.seckill_amqp_url.clone().unwrap_or_else(|| amqp.url.clone()),
                    ..amqp.clone()
                },
                upstreams: upstreams("", &order_url),
                seckill: seckill_service::configuration::SeckillSettings {
                    require_token: options.require_token,
                    sold_out_recheck_ms: options.sold_out_recheck_ms,
                    reconcile_interval_secs: 1,
                    reconcile_after_secs: options.reconcile_after_secs,
                    rebuild_settle_ms: 500,
                    ..Default::default()
                },
                trust: keys::trust_settings(Peer::Seckill),
                room: keys::room_settings(),
                ..Default::default()
            };
            RunningService::start(move || seckill_service::startup::build(s))
        })
        .collect();

    let order_settings = order_service::Settings {
        http: http_settings(&options),
        database: database(&order_db),
        redis: redis.clone(),
        amqp,
        upstreams: upstreams("", ""),
        order: order_service::configuration::OrderSettings {
            ttl_secs: options.order_ttl_secs,
            outage_pause_ms: 200,
            sweep_interval_secs: 1,
            sweep_grace_secs: 3,
            ..Default::default()
        },
        trust: keys::trust_settings(Peer::Order),
        ..Default::default()
    };
    let s = order_settings.clone();
    let order = RunningService::start(move || order_service::startup::build(s));
    order_relay.point_at(order.port);

    let replicas: Vec<String> = seckill.iter().map(RunningService::url).collect();
    let s = gateway::configuration::Settings {
        http: http_settings(&options),
        auth: seckill_common::config::AuthSettings {
            jwt_secret: Some(JWT_SECRET.into()),
            dev_tokens: true,
            ..Default::default()
        },
        upstreams: upstreams(&replicas.join(","), &order_url),
        // Every buyer of a test mints a dev token from the one loopback address: no limit per
        // address. A user's limits are wide enough for tests that click and poll quickly, and
        // one user's script hammering the buy button still meets its limit.
        rate_limit: options.rate_limits.clone().unwrap_or_else(|| {
            let mut limits = gateway::configuration::RateLimitSettings::default();
            let user = gateway::configuration::LimitSettings { per_sec: Some(20), burst: Some(40) };
            (limits.buy, limits.poll, limits.orders, limits.admin) = (user, user, user, user);
            limits.anonymous =
                gateway::configuration::LimitSettings { per_sec: Some(1_000_000), burst: Some(1_000_000) };
            limits.join = limits.anonymous;
            limits
        }),
        redis: redis.clone(),
        trust: keys::trust_settings(Peer::Gateway),
        room: keys::room_settings(),
        storefront: gateway::configuration::StorefrontSettings {
            dir: options.storefront_dir.clone(),
            ..Default::default()
        },
        // A lost notice shows within a test: a silent stream re-reads after a second; one with
        // nothing to tell ends after a few (a client's request does not hang for ten minutes).
        push: gateway::configuration::PushSettings {
            reread_secs: 1,
            idle_secs: options.stream_idle_secs,
            ..Default::default()
        },
        ..Default::default()
    };
    let gateway = RunningService::start(move || gateway::startup::build(s));

    System {
        gateway,
        front: None,
        seckill,
        order: std::sync::Mutex::new(Some(order)),
        order_settings,
        order_relay,
        stock,
        http: reqwest::Client::builder().pool_max_idle_per_host(256).build().unwrap(),
        redis_keys,
        redis_settings: redis,
        amqp_names,
        stock_db,
        order_db,
        names,
    }
}

/// A TCP relay on a loopback port of its own, forwarding each connection to the port it points
/// at now (0: none, and the connection is closed, as a service that is down). It lets a test
/// restart a service on a new port while the others keep its address: reusing the old port
/// could race with other tests' services taking it.
pub struct Relay {
    pub port: u16,
    target: std::sync::Arc<std::sync::atomic::AtomicU16>,
}

impl Relay {
    fn start() -> Self {
        use std::sync::atomic::{AtomicU16, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a relay port");
        listener.set_nonblocking(true).expect("a non-blocking relay");
        let port = listener.local_addr().expect("the relay's address").port();
        let target = std::sync::Arc::new(AtomicU16::new(0));
        let to = target.clone();
        // Its own thread and runtime, like the services; it ends with the test process.
        std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
            rt.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else { return };
                while let Ok((mut inbound, _)) = listener.accept().await {
                    let port = AtomicU16::load(&to, Ordering::Relaxed);
                    tokio::spawn(async move {
                        if port == 0 {
                            return;
                        }
                        if let Ok(mut outbound) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
                            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    });
                }
            });
        });
        Self { port, target }
    }

    fn point_at(&self, port: u16) {
        self.target.store(port, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A buyer's open event stream, read as it arrives.
pub struct EventStream {
    res: reqwest::Response,
    reader: seckill_common::push::SseReader,
    ready: std::collections::VecDeque<seckill_common::push::SseEvent>,
}

impl EventStream {
    async fn of(res: reqwest::Response) -> Result<Self, Answer> {
        if res.status() != 200 {
            return Err(answer(res).await);
        }
        let kind = res.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
        assert!(kind.starts_with("text/event-stream"), "a stream's content type: {kind}");
        Ok(Self { res, reader: Default::default(), ready: Default::default() })
    }

    /// The next event; None when the stream ended. Panics after `within` without one.
    pub async fn next(&mut self, within: Duration) -> Option<seckill_common::push::SseEvent> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(event);
            }
            let chunk = tokio::time::timeout_at(deadline, self.res.chunk())
                .await
                .unwrap_or_else(|_| panic!("no event within {within:?}"));
            match chunk {
                Ok(Some(bytes)) => self.ready.extend(self.reader.push(&String::from_utf8_lossy(&bytes))),
                Ok(None) | Err(_) => return None,
            }
        }
    }

    /// Every event until the stream ends (panics if it has not within `within`).
    pub async fn to_end(mut self, within: Duration) -> Vec<seckill_common::push::SseEvent> {
        let deadline = tokio::time::Instant::now() + within;
        let mut events = Vec::new();
        while let Some(event) =
            self.next(deadline.saturating_duration_since(tokio::time::Instant::now())).await
        {
            events.push(event);
        }
        events
    }
}

/// A response's status and JSON body (Null when it has none).
pub type Answer = (u16, Value);

async fn answer(res: reqwest::Response) -> Answer {
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

impl System {
    /// Stops order-service gracefully (as on SIGTERM): buy requests then wait in the queue.
    pub async fn stop_order(&self) {
        let running = self.order.lock().unwrap().take();
        if let Some(order) = running {
            self.order_relay.point_at(0);
            order.stop().await;
        }
    }

    /// Starts order-service again, with the same databases, behind the same address.
    pub fn start_order(&self) {
        let s = self.order_settings.clone();
        let mut slot = self.order.lock().unwrap();
        assert!(slot.is_none(), "order-service is running");
        let order = RunningService::start(move || order_service::startup::build(s));
        self.order_relay.point_at(order.port);
        *slot = Some(order);
    }

    /// What a Redis restart without persistence does to this system: every key gone (only this
    /// test's keys; the connections stay, as other tests share the server).
    pub async fn lose_redis_data(&self) {
        let mut conn = self.redis().await;
        let keys: Vec<String> = conn.keys(format!("{}*", self.redis_keys.prefix())).await.unwrap();
        if !keys.is_empty() {
            let _: () = conn.del(keys).await.unwrap();
        }
    }

    /// The URL of `path` where the helpers send requests: the gateway, or what is in front.
    pub fn url(&self, path: &str) -> String {
        match &self.front {
            Some(front) => format!("{front}{path}"),
            None => format!("{}{path}", self.gateway.url()),
        }
    }

    /// From now on the helpers go through `base` (`http://host:port`), which passes to the
    /// gateway what it does not answer itself.
    pub fn serve_through(&mut self, base: String) {
        self.front = Some(base);
    }

    /// order-service's own address (through the relay that outlives its restarts).
    pub fn order_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.order_relay.port)
    }

    /// A user token for each of `users`, a hundred minted at a time.
    pub async fn dev_tokens(&self, users: &[i64]) -> HashMap<i64, String> {
        use futures_util::StreamExt;
        futures_util::stream::iter(
            users.iter().map(|u| async move { (*u, self.dev_token(*u, "user").await) }),
        )
        .buffer_unordered(100)
        .collect()
        .await
    }

    pub async fn dev_token(&self, user: i64, role: &str) -> String {
        let (status, body) =
            self.post("/api/auth/dev-token", None, json!({"user_id": user, "role": role})).await;
        assert_eq!(status, 200, "dev token: {body}");
        body["token"].as_str().unwrap().to_owned()
    }

    pub async fn post(&self, path: &str, token: Option<&str>, body: Value) -> Answer {
        let mut req = self.http.post(self.url(path)).json(&body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        answer(req.send().await.unwrap()).await
    }

    pub async fn get(&self, path: &str, token: Option<&str>) -> Answer {
        let mut req = self.http.get(self.url(path));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        answer(req.send().await.unwrap()).await
    }

    /// Creates a sale through the gateway as an admin; `start`/`end` relative to now.
    pub async fn create_sale(&self, stock: i64, start: chrono::Duration, end: chrono::Duration) -> Goods {
        self.create_sale_in(stock, 1, start, end).await
    }

    /// As [`System::create_sale`], its stock split over `buckets` buckets.
    pub async fn create_sale_in(
        &self,
        stock: i64,
        buckets: u8,
        start: chrono::Duration,
        end: chrono::Duration,
    ) -> Goods {
        self.create_goods(sale_body(stock, buckets, start, end)).await
    }

    /// As [`System::create_sale`], behind a waiting room.
    pub async fn create_room_sale(
        &self,
        stock: i64,
        start: chrono::Duration,
        end: chrono::Duration,
        room: WaitingRoom,
    ) -> Goods {
        let mut body = sale_body(stock, 1, start, end);
        body["waiting_room"] = serde_json::to_value(room).unwrap();
        self.create_goods(body).await
    }

    async fn create_goods(&self, body: Value) -> Goods {
        let admin = self.dev_token(1, "admin").await;
        let (status, body) = self.post("/api/admin/goods", Some(&admin), body).await;
        assert_eq!(status, 201, "create sale: {body}");
        serde_json::from_value(body).unwrap()
    }

    /// A sale open now for an hour, its stock split over `buckets` buckets.
    pub async fn open_sale_in(&self, stock: i64, buckets: u8) -> Goods {
        self.create_sale_in(stock, buckets, chrono::Duration::seconds(-5), chrono::Duration::hours(1)).await
    }

    /// Each bucket's stock in Redis (None: not loaded), bucket 0 first.
    pub async fn redis_bucket_stocks(&self, g: GoodsId, buckets: u8) -> Vec<Option<i64>> {
        let mut redis = self.redis().await;
        let mut out = Vec::new();
        for at in SaleBucket::all(g, buckets) {
            out.push(redis.get(self.redis_keys.bucket_stock(at)).await.unwrap());
        }
        out
    }

    /// Each bucket's reservations in Redis, bucket 0 first.
    pub async fn redis_bucket_users(&self, g: GoodsId, buckets: u8) -> Vec<i64> {
        let mut redis = self.redis().await;
        let mut out = Vec::new();
        for at in SaleBucket::all(g, buckets) {
            out.push(redis.hlen(self.redis_keys.bucket_users(at)).await.unwrap());
        }
        out
    }

    /// What a Redis Cluster node restarted empty does to the buckets on it: every key of one
    /// bucket of a sale gone (its stock, reservations, results, transfers), the others kept.
    pub async fn lose_bucket(&self, at: SaleBucket) {
        let probe = self.redis_keys.bucket_stock(at);
        let pattern = format!("{}*", probe.strip_suffix("stock").expect("a stock key ends so"));
        for node in self.redis_settings.url.split(',') {
            seckill_infra::redis::delete_matching(node.trim(), &pattern).await.unwrap();
        }
    }

    /// A sale open now for an hour.
    pub async fn open_sale(&self, stock: i64) -> Goods {
        self.create_sale(stock, chrono::Duration::seconds(-5), chrono::Duration::hours(1)).await
    }

    /// Joins the sale's waiting room (`POST /api/seckill/{g}/queue`, no ticket), doing the
    /// proof of work first when the room asks for it.
    pub async fn join_room(&self, user_token: &str, g: GoodsId) -> Answer {
        let path = format!("/api/seckill/{g}/queue");
        let (status, body) = self.post(&path, Some(user_token), json!({})).await;
        if body["code"] != "CHALLENGE_REQUIRED" {
            return (status, body);
        }
        let (status, challenge) =
            self.post(&format!("/api/seckill/{g}/queue/challenge"), Some(user_token), Value::Null).await;
        assert_eq!(status, 200, "a challenge: {challenge}");
        let (Some(text), Some(difficulty)) =
            (challenge["challenge"].as_str(), challenge["difficulty"].as_u64())
        else {
            panic!("a challenge and its difficulty: {challenge}");
        };
        let answer =
            seckill_common::room::Challenge::solve(text, u8::try_from(difficulty).unwrap_or(u8::MAX));
        self.post(&path, Some(user_token), json!({"challenge": text, "answer": answer})).await
    }

    pub async fn path_token(&self, user_token: &str, g: GoodsId) -> Answer {
        self.post(&format!("/api/seckill/{g}/token"), Some(user_token), Value::Null).await
    }

    pub async fn order(&self, user_token: &str, g: GoodsId, path_token: Option<&str>) -> Answer {
        let mut req = self.http.post(self.url(&format!("/api/seckill/{g}/orders"))).bearer_auth(user_token);
        if let Some(t) = path_token {
            req = req.header("x-seckill-token", t);
        }
        answer(req.send().await.unwrap()).await
    }

    /// Path token then order, as a buyer's client does.
    pub async fn buy(&self, user_token: &str, g: GoodsId) -> Answer {
        let (status, body) = self.path_token(user_token, g).await;
        if status != 200 {
            return (status, body);
        }
        self.order(user_token, g, body["token"].as_str()).await
    }

    /// Path token then order, again after a 503 (a dependency down or the sale being restored),
    /// as a buyer's client does, for up to `within`.
    pub async fn buy_retrying(&self, user_token: &str, g: GoodsId, within: Duration) -> Answer {
        let deadline = Instant::now() + within;
        loop {
            let (status, body) = self.buy(user_token, g).await;
            if status != 503 || Instant::now() > deadline {
                return (status, body);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The admin's audit of a sale.
    pub async fn audit(&self, g: GoodsId) -> seckill_common::api::SaleAudit {
        let admin = self.dev_token(1, "admin").await;
        let (status, body) = self.get(&format!("/api/admin/goods/{g}/audit"), Some(&admin)).await;
        assert_eq!(status, 200, "audit: {body}");
        serde_json::from_value(body).unwrap()
    }

    /// The buyer's result. A 503 (a dependency slow to answer on a loaded machine) is retried,
    /// as a client would; anything else but 200 fails the test.
    pub async fn result(&self, user_token: &str, g: GoodsId) -> SeckillResult {
        for _ in 0..20 {
            let (status, body) = self.get(&format!("/api/seckill/{g}/result"), Some(user_token)).await;
            match status {
                200 => return serde_json::from_value(body).unwrap(),
                503 => tokio::time::sleep(Duration::from_millis(250)).await,
                _ => panic!("result: {status} {body}"),
            }
        }
        panic!("result: 503 twenty times in a row");
    }

    /// Polls until the result is no longer `queued` (or `within` passes: then the last one).
    pub async fn final_result(&self, user_token: &str, g: GoodsId, within: Duration) -> SeckillResult {
        let deadline = Instant::now() + within;
        loop {
            let r = self.result(user_token, g).await;
            if r.status != SeckillStatus::Queued || Instant::now() > deadline {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Opens `user_token`'s event stream of `g` (with `headers` besides the bearer token: a
    /// place ticket, a `Last-Event-ID`); a refusal is its status and body.
    pub async fn open_stream(
        &self,
        user_token: &str,
        g: GoodsId,
        headers: &[(&str, &str)],
    ) -> Result<EventStream, Answer> {
        let mut req = self.http.get(self.url(&format!("/api/seckill/{g}/events"))).bearer_auth(user_token);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        EventStream::of(req.send().await.unwrap()).await
    }

    /// Opens a stream with a ticket (`POST .../events/ticket` as `user_token`, then the stream
    /// without the token, as a browser's EventSource would).
    pub async fn open_stream_with_ticket(&self, user_token: &str, g: GoodsId) -> Result<EventStream, Answer> {
        let (status, body) =
            self.post(&format!("/api/seckill/{g}/events/ticket"), Some(user_token), json!({})).await;
        assert_eq!(status, 200, "stream ticket: {body}");
        self.stream_by_ticket(g, body["ticket"].as_str().unwrap()).await
    }

    pub async fn stream_by_ticket(&self, g: GoodsId, ticket: &str) -> Result<EventStream, Answer> {
        // A ticket is letters, digits, `.`, `-` and `_`: nothing to escape in a query.
        let url = self.url(&format!("/api/seckill/{g}/events?ticket={ticket}"));
        EventStream::of(self.http.get(url).send().await.unwrap()).await
    }

    pub async fn order_by_id(&self, user_token: &str, id: i64) -> Answer {
        self.get(&format!("/api/orders/{id}"), Some(user_token)).await
    }

    pub async fn goods(&self, g: GoodsId) -> Goods {
        let (status, body) = self.get(&format!("/api/goods/{g}"), None).await;
        assert_eq!(status, 200);
        serde_json::from_value(body).unwrap()
    }

    /// A connection to the services' Redis (on a cluster, commands go to their keys' nodes).
    pub async fn redis(&self) -> seckill_infra::redis::Redis {
        seckill_infra::redis::connect(&self.redis_settings).unwrap()
    }

    pub async fn redis_stock(&self, g: GoodsId) -> Option<i64> {
        self.redis().await.get(self.redis_keys.stock(g)).await.unwrap()
    }

    pub async fn redis_users(&self, g: GoodsId) -> i64 {
        self.redis().await.hlen(self.redis_keys.users(g)).await.unwrap()
    }

    /// Active (unpaid or paid) orders of a sale, straight from the order database, and the
    /// most any one user holds.
    pub async fn active_orders(&self, g: GoodsId) -> (i64, i64) {
        #[derive(diesel::QueryableByName)]
        struct Row {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            orders: i64,
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            most_per_user: i64,
        }
        let mut conn = self.order_db.connect().await;
        let row: Row = diesel::sql_query(
            "WITH active AS (SELECT user_id FROM orders WHERE goods_id = $1 AND status IN ('unpaid', 'paid')) \
             SELECT (SELECT COUNT(*) FROM active)::BIGINT AS orders, \
                    (SELECT COALESCE(MAX(n), 0) FROM (SELECT COUNT(*) AS n FROM active GROUP BY user_id) u)::BIGINT \
                    AS most_per_user",
        )
        .bind::<diesel::sql_types::BigInt, _>(g.get())
        .get_result(&mut conn)
        .await
        .unwrap();
        (row.orders, row.most_per_user)
    }

    /// The request id (the order key at stock-service) of an order, from the order database.
    pub async fn order_key_of(&self, order_id: i64) -> String {
        #[derive(diesel::QueryableByName)]
        struct Row {
            #[diesel(sql_type = diesel::sql_types::Text)]
            key: String,
        }
        let mut conn = self.order_db.connect().await;
        let row: Row = diesel::sql_query("SELECT request_id::TEXT AS key FROM orders WHERE id = $1")
            .bind::<diesel::sql_types::BigInt, _>(order_id)
            .get_result(&mut conn)
            .await
            .unwrap();
        row.key
    }

    /// Units held by unreleased deductions at stock-service, straight from its database.
    pub async fn held_at_stock(&self, g: GoodsId) -> i64 {
        let mut conn = self.stock_db.connect().await;
        stock_service::ledger::held(&mut conn, g.get()).await.unwrap()
    }

    /// Messages waiting in a queue of this test.
    pub async fn queue_depth(&self, queue: &str) -> u32 {
        let conn =
            lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default()).await.unwrap();
        let channel = conn.create_channel().await.unwrap();
        let q = channel
            .queue_declare(
                queue.into(),
                lapin::options::QueueDeclareOptions { passive: true, ..Default::default() },
                Default::default(),
            )
            .await
            .unwrap();
        let _ = conn.close(200, "checked".into()).await;
        q.message_count()
    }
}

/// A new sale's body for `POST /api/admin/goods`; `start`/`end` relative to now.
fn sale_body(stock: i64, buckets: u8, start: chrono::Duration, end: chrono::Duration) -> Value {
    let now = Utc::now();
    json!({"name": "flash phone", "price_cents": 99_900, "seckill_price_cents": 49_900,
        "stock_total": stock, "start_at": now + start, "end_at": now + end, "buckets": buckets})
}

pub fn order_of(body: &Value) -> Order {
    serde_json::from_value(body.clone()).unwrap()
}

impl System {
    pub async fn pay(&self, user_token: &str, order_id: i64) -> Answer {
        self.post(&format!("/api/orders/{order_id}/pay"), Some(user_token), Value::Null).await
    }

    pub async fn cancel(&self, user_token: &str, order_id: i64) -> Answer {
        self.post(&format!("/api/orders/{order_id}/cancel"), Some(user_token), Value::Null).await
    }

    /// Buys and waits for the order: its id.
    pub async fn buy_order(&self, user_token: &str, g: GoodsId) -> i64 {
        let (status, body) = self.buy(user_token, g).await;
        assert_eq!(status, 202, "buy: {body}");
        let r = self.final_result(user_token, g, Duration::from_secs(20)).await;
        assert_eq!(r.status, SeckillStatus::Success, "{r:?}");
        r.order_id.unwrap().get()
    }

    pub async fn order_status(&self, user_token: &str, order_id: i64) -> String {
        let (status, body) = self.order_by_id(user_token, order_id).await;
        assert_eq!(status, 200, "{body}");
        body["status"].as_str().unwrap().to_owned()
    }

    /// Waits until `check` holds (polling every 100 ms), or panics naming `what` after `within`.
    pub async fn eventually<F, Fut>(&self, what: &str, within: Duration, check: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        eventually(what, within, Duration::from_millis(100), check).await;
    }

    /// Publishes a raw body to a queue of this test, as a foreign or broken publisher would.
    /// Publishes `body` as `from` would, signed for `to` (the queue's consumer).
    pub async fn publish_as(&self, from: Peer, to: Peer, queue: &str, body: &[u8]) {
        let signature = keys::trust(from).sign_message(to, body);
        let mut headers = lapin::types::FieldTable::default();
        headers.insert(
            seckill_common::trust::SIGNATURE_HEADER.into(),
            lapin::types::AMQPValue::LongString(signature.into()),
        );
        self.publish_with(queue, body, lapin::BasicProperties::default().with_headers(headers)).await;
    }

    /// Publishes `body` unsigned, as an intruder on the broker would.
    pub async fn publish_raw(&self, queue: &str, body: &[u8]) {
        self.publish_with(queue, body, lapin::BasicProperties::default()).await;
    }

    async fn publish_with(&self, queue: &str, body: &[u8], properties: lapin::BasicProperties) {
        let conn =
            lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default()).await.unwrap();
        let channel = conn.create_channel().await.unwrap();
        channel.confirm_select(Default::default()).await.unwrap();
        channel
            .basic_publish(
                "".into(),
                queue.into(),
                Default::default(),
                body,
                properties.with_delivery_mode(2),
            )
            .await
            .unwrap()
            .await
            .unwrap();
        let _ = conn.close(200, "published".into()).await;
    }

    /// Closes, from the broker's side, every connection of this test whose name contains
    /// `part` (as `rabbitmqctl close_connection` does for an operator). Returns how many.
    pub fn close_connections(&self, part: &str) -> usize {
        let out = std::process::Command::new("rabbitmqctl")
            .args(["list_connections", "pid", "client_properties", "-q"])
            .output()
            .expect("rabbitmqctl runs");
        // One line a connection: the pid, a tab, the client properties, among them
        // {"connection_name","<name>"}.
        let wanted = self.amqp_names.prefix().to_owned();
        let mut closed = 0;
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Some((pid, properties)) = line.split_once('\t') else { continue };
            let name = properties
                .split_once("{\"connection_name\",\"")
                .and_then(|(_, rest)| rest.split('"').next())
                .unwrap_or_default();
            let named = name.starts_with(&wanted) && name.contains(part);
            if named {
                let status = std::process::Command::new("rabbitmqctl")
                    .args(["close_connection", pid, "test closes it", "-q"])
                    .status()
                    .unwrap();
                assert!(status.success(), "close_connection {pid}");
                closed += 1;
            }
        }
        closed
    }
}

/// Waits until `check` holds (asking every `every`), or panics naming `what` after `within`.
pub async fn eventually<F, Fut>(what: &str, within: Duration, every: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(every).await;
    }
}
