use std::time::{Duration, Instant};

use chrono::Utc;
use diesel_async::RunQueryDsl;
use lapin::options::QueueDeclareOptions;
use lapin::types::{AMQPValue, FieldTable};
use redis::AsyncCommands;
use reqwest::Method;
use seckill_common::amqp::{AmqpNames, OrderBatch, OrderExpiry, OrderRequest, Release, decode_releases};
use seckill_common::api::{Goods, NewGoods, Order, OrderStatus, Role};
use seckill_common::config::{AmqpSettings, DatabaseSettings, HttpSettings, RedisSettings, UpstreamSettings};
use seckill_common::keys::RedisKeys;
use seckill_common::scripts::{Epoch, StoredResult};
use seckill_common::trust::{Peer, SIGNATURE_HEADER};
use seckill_common::{GoodsId, OrderId, UserId};
use seckill_infra::redis::Scripts;
use seckill_testkit::{RunningService, TestDb, TestNames, amqp_url, keys, redis_url};
use serde_json::Value;
use uuid::Uuid;

use order_service::Settings;
use order_service::configuration::OrderSettings;

/// Fields drop in order: the services stop before their databases and names go.
pub struct TestApp {
    pub service: RunningService,
    pub stock: RunningService,
    pub http: reqwest::Client,
    pub db: TestDb,
    pub redis_keys: RedisKeys,
    pub amqp_names: AmqpNames,
    /// order-service's broker settings, to declare its queues as it does.
    pub amqp: AmqpSettings,
    pub _stock_db: TestDb,
    /// Held so this test's Redis keys and queues are deleted when it ends.
    pub _names: TestNames,
    pub _stock_names: TestNames,
}

pub fn spawn_app() -> TestApp {
    spawn_app_with(|_| {})
}

/// order-service against a real stock-service (deductions) on this test's own database, Redis
/// prefix and queue names; `configure` adjusts its settings first. stock-service has queue
/// names of its own, so the releases order-service publishes wait in the queue for the test.
pub fn spawn_app_with(configure: impl FnOnce(&mut Settings)) -> TestApp {
    spawn(configure, true)
}

/// As [`spawn_app_with`], returning as soon as order-service serves, ready or not (its servers
/// may be away); stock-service is started ready.
pub fn spawn_unready_with(configure: impl FnOnce(&mut Settings)) -> TestApp {
    spawn(configure, false)
}

fn spawn(configure: impl FnOnce(&mut Settings), until_ready: bool) -> TestApp {
    let http = || HttpSettings { host: "127.0.0.1".into(), port: Some(0), workers: 2, ..Default::default() };
    let amqp_for = |names: &mut TestNames| {
        let amqp = AmqpSettings {
            url: amqp_url(),
            prefix: names.amqp_prefix.clone(),
            retry_delay_ms: 200,
            max_attempts: 3,
            ..Default::default()
        };
        let n = AmqpNames::new(amqp.prefix.clone());
        names.cleanup_amqp(
            n.all_queues(OrderSettings::default().ttl_secs, amqp.retry_delay_ms),
            vec![n.broadcast_exchange()],
        );
        amqp
    };

    let mut stock_names = TestNames::new();
    let stock_db = TestDb::new("stock");
    let s = stock_service::Settings {
        http: http(),
        database: DatabaseSettings { url: Some(stock_db.url().to_owned()), ..Default::default() },
        amqp: amqp_for(&mut stock_names),
        trust: keys::trust_settings(Peer::Stock),
        ..Default::default()
    };
    let stock = RunningService::start(move || stock_service::startup::build(s));

    let mut names = TestNames::new();
    let db = TestDb::new("order");
    let amqp = amqp_for(&mut names);
    let amqp_names = AmqpNames::new(amqp.prefix.clone());
    let redis =
        RedisSettings { url: redis_url(), key_prefix: names.redis_prefix.clone(), ..Default::default() };
    let mut settings = Settings {
        http: http(),
        database: DatabaseSettings { url: Some(db.url().to_owned()), ..Default::default() },
        redis: redis.clone(),
        amqp,
        upstreams: UpstreamSettings {
            seckill: String::new(),
            order: String::new(),
            stock: stock.url(),
            ..Default::default()
        },
        order: OrderSettings { consumers: 1, outage_pause_ms: 200, ..Default::default() },
        trust: keys::trust_settings(Peer::Order),
        ..Default::default()
    };
    configure(&mut settings);
    let amqp = settings.amqp.clone();
    let build = move || order_service::startup::build(settings);
    let service =
        if until_ready { RunningService::start(build) } else { RunningService::start_unready(build) };
    TestApp {
        service,
        stock,
        http: reqwest::Client::new(),
        db,
        redis_keys: RedisKeys::new(redis.key_prefix),
        amqp_names,
        amqp,
        _stock_db: stock_db,
        _names: names,
        _stock_names: stock_names,
    }
}

/// A response's status and JSON body (Null when it has none).
pub type Answer = (u16, Value);

pub async fn answer(res: reqwest::Response) -> Answer {
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.service.url())
    }

    /// A request as the gateway forwards it for `user` (signed for order-service).
    pub fn as_user(&self, user: i64, method: Method, path: &str) -> reqwest::RequestBuilder {
        let (name, value) = keys::as_user(Peer::Order, method.as_str(), path, user, Role::User);
        self.http.request(method, self.url(path)).header(name, value)
    }

    /// A call of `from`'s own to order-service (`path` may carry a query).
    pub fn as_service(&self, from: Peer, method: Method, path: &str) -> reqwest::RequestBuilder {
        let bare = path.split_once('?').map_or(path, |(p, _)| p);
        let (name, value) = keys::as_service(from, Peer::Order, method.as_str(), bare);
        self.http.request(method, self.url(path)).header(name, value)
    }

    pub async fn get(&self, user: i64, path: &str) -> Answer {
        answer(self.as_user(user, Method::GET, path).send().await.unwrap()).await
    }

    pub async fn post(&self, user: i64, path: &str) -> Answer {
        answer(self.as_user(user, Method::POST, path).send().await.unwrap()).await
    }

    /// A sale at stock-service (as seckill-service creates it), open for an hour, loaded into
    /// Redis as seckill-service loads it.
    pub async fn open_sale(&self, stock: i64) -> Goods {
        let (name, value) = keys::as_service(Peer::Seckill, Peer::Stock, "POST", "/internal/stock/goods");
        let res = self
            .http
            .post(format!("{}/internal/stock/goods", self.stock.url()))
            .header(name, value)
            .json(&NewGoods {
                name: "test phone".into(),
                price_cents: 10_000,
                seckill_price_cents: 5_000,
                stock_total: stock,
                start_at: Utc::now() - chrono::Duration::minutes(1),
                end_at: Utc::now() + chrono::Duration::hours(1),
                buckets: 1,
                waiting_room: None,
            })
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 201);
        let goods: Goods = res.json().await.unwrap();
        let (scripts, mut conn) = self.scripts().await;
        let _: i64 = scripts
            .load
            .key(self.redis_keys.stock(goods.id))
            .key(self.redis_keys.epoch(goods.id))
            .key(self.redis_keys.holdback(goods.id))
            .arg(stock)
            .arg(Epoch::new(Utc::now().timestamp_millis()).to_string())
            .arg("")
            .invoke_async(&mut conn)
            .await
            .unwrap();
        goods
    }

    /// The sale as stock-service (the authority) has it.
    pub async fn goods(&self, g: GoodsId) -> Goods {
        let path = format!("/api/goods/{g}");
        let (name, value) = keys::as_gateway(Peer::Stock, "GET", &path);
        let res =
            self.http.get(format!("{}{path}", self.stock.url())).header(name, value).send().await.unwrap();
        assert_eq!(res.status(), 200);
        res.json().await.unwrap()
    }

    async fn scripts(&self) -> (Scripts, redis::aio::MultiplexedConnection) {
        let conn =
            redis::Client::open(redis_url()).unwrap().get_multiplexed_async_connection().await.unwrap();
        (Scripts::new(), conn)
    }

    /// What seckill-service does for an accepted buy, short of publishing: the reserve script.
    /// Returns the message it would publish.
    pub async fn reserve(&self, g: GoodsId, user: i64) -> OrderRequest {
        let (scripts, mut conn) = self.scripts().await;
        let u = UserId::new(user).unwrap();
        let request_id = Uuid::new_v4();
        let now = Utc::now().timestamp_millis();
        let (left, epoch): (i64, Option<String>) = scripts
            .reserve
            .key(self.redis_keys.stock(g))
            .key(self.redis_keys.users(g))
            .key(self.redis_keys.pending(g))
            .key(self.redis_keys.result(g, u))
            .key(self.redis_keys.token(g, u))
            .key(self.redis_keys.epoch(g))
            .arg(user)
            .arg(request_id.to_string())
            .arg(now)
            .arg("")
            .invoke_async(&mut conn)
            .await
            .unwrap();
        assert!(left >= 0, "reserve refused: {left}");
        OrderRequest::new(request_id, u, g, now).with_epoch(epoch.as_deref().and_then(Epoch::parse))
    }

    /// Publishes a buy request signed by `from` (seckill-service is the one order-service takes).
    pub async fn publish_request(&self, from: Peer, request: &OrderRequest) {
        self.publish_order_body(from, &serde_json::to_vec(request).unwrap()).await;
    }

    /// Publishes several requests in one message of the batch form, signed by `from`.
    pub async fn publish_batch(&self, from: Peer, requests: &[OrderRequest]) {
        let body = serde_json::to_vec(&OrderBatch::new(requests.to_vec())).unwrap();
        self.publish_order_body(from, &body).await;
    }

    /// Publishes `body` to the orders queue, signed by `from`.
    pub async fn publish_order_body(&self, from: Peer, body: &[u8]) {
        publish_signed(&self.amqp_names.orders_queue(), from, body).await;
    }

    /// Publishes an expiry message for `ids` to the expire queue, as order-service's delay
    /// queue hands it on (signed by order-service itself).
    pub async fn publish_expiry(&self, ids: &[i64]) {
        let ids = ids.iter().map(|&id| OrderId::new(id).unwrap()).collect();
        let body = serde_json::to_vec(&OrderExpiry::new(ids)).unwrap();
        publish_signed(&self.amqp_names.order_expire_queue(), Peer::Order, &body).await;
    }

    /// Units left in the sale's Redis stock.
    pub async fn redis_stock(&self, g: GoodsId) -> Option<i64> {
        let (_, mut conn) = self.scripts().await;
        conn.get(self.redis_keys.stock(g)).await.unwrap()
    }

    /// The buyer's result in Redis, as order-service wrote it.
    pub async fn result(&self, g: GoodsId, user: i64) -> Option<StoredResult> {
        let (_, mut conn) = self.scripts().await;
        let raw: Option<String> =
            conn.get(self.redis_keys.result(g, UserId::new(user).unwrap())).await.unwrap();
        raw.as_deref().and_then(StoredResult::parse)
    }

    /// Waits until the buyer's result is final (not `queued`), or panics after `within`.
    pub async fn final_result(&self, g: GoodsId, user: i64, within: Duration) -> StoredResult {
        let deadline = Instant::now() + within;
        loop {
            match self.result(g, user).await {
                Some(r) if r != StoredResult::Queued => return r,
                other => assert!(Instant::now() < deadline, "user {user}'s result still {other:?}"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Reserve, publish as seckill-service, wait for the order: its id.
    pub async fn buy_order(&self, g: GoodsId, user: i64) -> i64 {
        let request = self.reserve(g, user).await;
        self.publish_request(seckill_common::trust::Peer::Seckill, &request).await;
        match self.final_result(g, user, Duration::from_secs(15)).await {
            StoredResult::Success(id) => id,
            other => panic!("user {user}: {other:?}"),
        }
    }

    pub async fn order(&self, user: i64, id: i64) -> Order {
        let (status, body) = self.get(user, &format!("/api/orders/{id}")).await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_value(body).unwrap()
    }

    /// Polls the order until it is `want`, failing after `within`.
    pub async fn wait_for_status(&self, user: i64, id: i64, want: OrderStatus, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let now = self.order(user, id).await.status;
            if now == want {
                return;
            }
            assert!(Instant::now() < deadline, "order {id} still {now:?}, not {want:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Runs SQL on order-service's database, as a crash or a lost message would leave it.
    pub async fn sql(&self, sql: &str) {
        let mut conn = self.db.connect().await;
        diesel::sql_query(sql).execute(&mut conn).await.unwrap();
    }

    /// Whether the order's release is recorded as sent (`release_sent_at`).
    pub async fn release_sent(&self, id: i64) -> bool {
        #[derive(diesel::QueryableByName)]
        struct Row {
            #[diesel(sql_type = diesel::sql_types::Bool)]
            sent: bool,
        }
        let mut conn = self.db.connect().await;
        let row: Row =
            diesel::sql_query("SELECT release_sent_at IS NOT NULL AS sent FROM orders WHERE id = $1")
                .bind::<diesel::sql_types::BigInt, _>(id)
                .get_result(&mut conn)
                .await
                .unwrap();
        row.sent
    }

    /// Takes every release waiting in the release queue, each checked to be signed by
    /// order-service for stock-service.
    /// Releases come one to a message or many in the batch form.
    pub async fn take_releases(&self) -> Vec<Release> {
        let bodies =
            take_signed_bodies(&self.amqp_names.stock_release_queue(), Peer::Order, Peer::Stock).await;
        bodies.iter().flat_map(|b| decode_releases(b).expect("releases of a known form")).collect()
    }

    /// Polls the release queue until `n` releases have been taken in all, or `within` passes.
    pub async fn wait_for_releases(&self, n: usize, within: Duration) -> Vec<Release> {
        let deadline = Instant::now() + within;
        let mut taken = Vec::new();
        while taken.len() < n && Instant::now() < deadline {
            taken.extend(self.take_releases().await);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        taken
    }

    /// Messages waiting in one of this test's queues.
    /// The queue's depth once it reaches `n`, or after 5 s of waiting for it.
    pub async fn settled_depth(&self, queue: &str, n: u32) -> u32 {
        for _ in 0..50 {
            if self.queue_depth(queue).await == n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.queue_depth(queue).await
    }

    pub async fn queue_depth(&self, queue: &str) -> u32 {
        let conn =
            lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default()).await.unwrap();
        let channel = conn.create_channel().await.unwrap();
        let passive = QueueDeclareOptions { passive: true, ..Default::default() };
        let q = channel.queue_declare(queue.into(), passive, Default::default()).await.unwrap();
        let _ = conn.close(200, "checked".into()).await;
        q.message_count()
    }
}

/// Publishes `body` to `queue` (one order-service consumes), signed by `from` for order-service,
/// and confirmed.
async fn publish_signed(queue: &str, from: Peer, body: &[u8]) {
    wait_for_consumer(queue).await;
    publish_signed_now(queue, from, body).await;
}

/// As [`publish_signed`], without waiting for a consumer: `queue` must exist.
pub async fn publish_signed_now(queue: &str, from: Peer, body: &[u8]) {
    let signature = keys::trust(from).sign_message(Peer::Order, body);
    let mut headers = FieldTable::default();
    headers.insert(SIGNATURE_HEADER.into(), AMQPValue::LongString(signature.into()));
    let properties = lapin::BasicProperties::default().with_headers(headers).with_delivery_mode(2);
    let conn = lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default()).await.unwrap();
    let channel = conn.create_channel().await.unwrap();
    channel.confirm_select(Default::default()).await.unwrap();
    channel
        .basic_publish("".into(), queue.into(), Default::default(), body, properties)
        .await
        .unwrap()
        .await
        .unwrap();
    let _ = conn.close(200, "published".into()).await;
}

/// Waits until `queue` exists and order-service consumes it: its consumers declare it once
/// started, and a message published before then would go nowhere.
async fn wait_for_consumer(queue: &str) {
    let conn = lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        // A passive declare of a missing queue closes its channel: a new one each look.
        let channel = conn.create_channel().await.unwrap();
        let passive = QueueDeclareOptions { passive: true, ..Default::default() };
        if let Ok(q) = channel.queue_declare(queue.into(), passive, Default::default()).await
            && q.consumer_count() > 0
        {
            break;
        }
        assert!(Instant::now() < deadline, "nobody consumes {queue}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = conn.close(200, "consumer found".into()).await;
}

use seckill_testkit::keys::take_signed_bodies;
