use chrono::{Duration, Utc};
use seckill_common::amqp::AmqpNames;
use seckill_common::api::{Goods, NewGoods};
use seckill_common::config::{AmqpSettings, DatabaseSettings, HttpSettings};
use seckill_common::trust::Peer;
use seckill_testkit::{RunningService, TestDb, TestNames, amqp_url, keys};
use serde_json::{Value, json};
use stock_service::Settings;
use uuid::Uuid;

/// Fields drop in order: the service stops before its database is dropped.
pub struct TestApp {
    pub service: RunningService,
    pub http: reqwest::Client,
    pub db: TestDb,
    /// The broker settings the service was given (this test's prefix).
    pub amqp: AmqpSettings,
    /// Held so its queues are deleted when the test ends.
    pub _names: TestNames,
}

pub fn spawn_app() -> TestApp {
    spawn_app_with(|_| {})
}

/// As [`spawn_app`], with the settings adjusted by `configure` first.
pub fn spawn_app_with(configure: impl FnOnce(&mut Settings)) -> TestApp {
    spawn(configure, true)
}

/// As [`spawn_app_with`], returning as soon as it serves, ready or not (its servers may be away).
pub fn spawn_unready_with(configure: impl FnOnce(&mut Settings)) -> TestApp {
    spawn(configure, false)
}

/// The settings a test's service gets: its own database, its own queue names.
pub fn test_settings(db: &TestDb, names: &mut TestNames) -> Settings {
    Settings {
        http: HttpSettings { host: "127.0.0.1".into(), port: Some(0), workers: 2, ..Default::default() },
        database: DatabaseSettings { url: Some(db.url().to_owned()), ..Default::default() },
        amqp: test_amqp(names),
        trust: keys::trust_settings(Peer::Stock),
        ..Default::default()
    }
}

fn spawn(configure: impl FnOnce(&mut Settings), until_ready: bool) -> TestApp {
    let db = TestDb::new("stock");
    let mut names = TestNames::new();
    let mut settings = test_settings(&db, &mut names);
    configure(&mut settings);
    let amqp = settings.amqp.clone();
    let build = move || stock_service::startup::build(settings);
    let service =
        if until_ready { RunningService::start(build) } else { RunningService::start_unready(build) };
    TestApp { service, http: reqwest::Client::new(), db, amqp, _names: names }
}

/// The broker under this test's own prefix, its queues deleted at the end.
pub fn test_amqp(names: &mut TestNames) -> AmqpSettings {
    let amqp = AmqpSettings { url: amqp_url(), prefix: names.amqp_prefix.clone(), ..Default::default() };
    let n = AmqpNames::new(amqp.prefix.clone());
    names.cleanup_amqp(n.all_queues(1_800, amqp.retry_delay_ms), vec![n.broadcast_exchange()]);
    amqp
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.service.url())
    }

    /// A request signed as `from` would sign it (the gateway: no user).
    pub fn signed(&self, from: Peer, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let bare = path.split_once('?').map_or(path, |(p, _)| p);
        let (name, value) = keys::as_service(from, Peer::Stock, method.as_str(), bare);
        self.http.request(method, self.url(path)).header(name, value)
    }

    pub async fn create_goods(&self, stock: i64) -> Goods {
        let res = self
            .signed(Peer::Seckill, reqwest::Method::POST, "/internal/stock/goods")
            .json(&NewGoods {
                name: "test phone".into(),
                price_cents: 10_000,
                seckill_price_cents: 5_000,
                stock_total: stock,
                start_at: Utc::now() - Duration::minutes(1),
                end_at: Utc::now() + Duration::hours(1),
                buckets: 1,
                waiting_room: None,
            })
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 201);
        res.json().await.unwrap()
    }

    pub async fn deduct(&self, key: Uuid, goods: &Goods) -> (u16, Value) {
        self.post("/internal/stock/deduct", json!({"order_key": key, "goods_id": goods.id})).await
    }

    pub async fn release(&self, key: Uuid) -> (u16, Value) {
        self.post("/internal/stock/release", json!({"order_key": key})).await
    }

    /// A call of order-service's (deduct, release).
    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.post_as(Peer::Order, path, body).await
    }

    pub async fn post_as(&self, from: Peer, path: &str, body: Value) -> (u16, Value) {
        let res = self.signed(from, reqwest::Method::POST, path).json(&body).send().await.unwrap();
        let status = res.status().as_u16();
        (status, res.json().await.unwrap_or(Value::Null))
    }

    pub async fn goods(&self, goods: &Goods) -> Goods {
        self.signed(Peer::Gateway, reqwest::Method::GET, &format!("/api/goods/{}", goods.id))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// Units held by unreleased ledger rows, read straight from the database.
    pub async fn held(&self, goods: &Goods) -> i64 {
        let mut conn = self.db.connect().await;
        stock_service::ledger::held(&mut conn, goods.id.get()).await.unwrap()
    }

    /// Conservation: total = available + held, read from the database.
    pub async fn assert_conserved(&self, goods: &Goods) {
        let now = self.goods(goods).await;
        assert_eq!(
            now.stock_total,
            now.stock_available + self.held(goods).await,
            "conservation broken: {now:?}"
        );
    }
}
