use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use chrono::Utc;
use redis::AsyncCommands;
use reqwest::Method;
use seckill_common::amqp::{AmqpNames, OrderRequest, decode_order_requests};
use seckill_common::api::{ActiveOrder, Goods, Role};
use seckill_common::config::{AmqpSettings, DatabaseSettings, HttpSettings, RedisSettings, UpstreamSettings};
use seckill_common::keys::RedisKeys;
use seckill_common::trust::{AUTH_HEADER, Peer, RequestFacts};
use seckill_common::{GoodsId, UserId, headers};
use seckill_service::Settings;
use seckill_service::configuration::SeckillSettings;
use seckill_service::gate::Gate;
use seckill_testkit::{RunningService, TestDb, TestNames, amqp_url, keys, redis_url};
use serde_json::{Value, json};

/// Fields drop in order: the services stop before the database and the names go.
pub struct TestApp {
    pub service: RunningService,
    /// Held so stock-service runs until the test ends.
    pub _stock: RunningService,
    pub orders: FakeOrders,
    pub http: reqwest::Client,
    pub redis_keys: RedisKeys,
    pub amqp_names: AmqpNames,
    pub _stock_db: TestDb,
    /// Held so this test's Redis keys and queues are deleted when it ends.
    pub _names: TestNames,
    /// What the service was started with: another replica starts from it.
    pub settings: Settings,
}

pub fn spawn_app() -> TestApp {
    spawn_app_with(|_| {})
}

/// seckill-service against a real stock-service (the sales) and a stand-in for order-service's
/// internal API, on this test's own Redis prefix and queue names; `configure` adjusts its
/// settings first.
pub fn spawn_app_with(configure: impl FnOnce(&mut Settings)) -> TestApp {
    spawn(|_| {}, configure, true)
}

/// As [`spawn_app_with`], returning as soon as seckill-service serves, ready or not (its
/// servers may be away); stock-service is started ready.
pub fn spawn_unready_with(configure: impl FnOnce(&mut Settings)) -> TestApp {
    spawn(|_| {}, configure, false)
}

/// As [`spawn_app_with`], with `seed` run against stock-service's database (created and
/// migrated) before seckill-service starts: what its start-up finds there.
pub fn spawn_app_seeded(seed: impl FnOnce(&TestDb), configure: impl FnOnce(&mut Settings)) -> TestApp {
    spawn(seed, configure, true)
}

fn spawn(seed: impl FnOnce(&TestDb), configure: impl FnOnce(&mut Settings), until_ready: bool) -> TestApp {
    let mut names = TestNames::new();
    let amqp = AmqpSettings {
        url: amqp_url(),
        prefix: names.amqp_prefix.clone(),
        retry_delay_ms: 200,
        ..Default::default()
    };
    let amqp_names = AmqpNames::new(amqp.prefix.clone());
    names.cleanup_amqp(
        amqp_names.all_queues(1_800, amqp.retry_delay_ms),
        vec![amqp_names.broadcast_exchange()],
    );
    let redis =
        RedisSettings { url: redis_url(), key_prefix: names.redis_prefix.clone(), ..Default::default() };
    let http = || HttpSettings { host: "127.0.0.1".into(), port: Some(0), workers: 2, ..Default::default() };

    let stock_db = TestDb::new("stock");
    let s = stock_service::Settings {
        http: http(),
        database: DatabaseSettings { url: Some(stock_db.url().to_owned()), ..Default::default() },
        amqp: amqp.clone(),
        trust: keys::trust_settings(Peer::Stock),
        ..Default::default()
    };
    let stock = RunningService::start(move || stock_service::startup::build(s));
    seed(&stock_db);
    let orders = FakeOrders::start();

    let mut settings = Settings {
        http: http(),
        redis: redis.clone(),
        amqp,
        upstreams: UpstreamSettings {
            seckill: String::new(),
            order: orders.url(),
            stock: stock.url(),
            ..Default::default()
        },
        seckill: SeckillSettings { reconcile_interval_secs: 1, ..Default::default() },
        trust: keys::trust_settings(Peer::Seckill),
        room: keys::room_settings(),
        ..Default::default()
    };
    configure(&mut settings);
    let kept = settings.clone();
    let build = move || seckill_service::startup::build(settings);
    let service =
        if until_ready { RunningService::start(build) } else { RunningService::start_unready(build) };
    TestApp {
        service,
        _stock: stock,
        orders,
        http: reqwest::Client::new(),
        redis_keys: RedisKeys::new(redis.key_prefix),
        amqp_names,
        _stock_db: stock_db,
        _names: names,
        settings: kept,
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

    /// A request as the gateway forwards it for `user` (signed for seckill-service).
    pub fn as_user(&self, user: i64, role: Role, method: Method, path: &str) -> reqwest::RequestBuilder {
        let (name, value) = keys::as_user(Peer::Seckill, method.as_str(), path, user, role);
        self.http.request(method, self.url(path)).header(name, value)
    }

    /// Publishes a sale through seckill-service as an admin: created at stock-service, loaded
    /// into Redis. Open for an hour.
    pub async fn open_sale(&self, stock: i64) -> Goods {
        let start = Utc::now() - chrono::Duration::seconds(5);
        self.publish(stock, start, Value::Null).await
    }

    /// `POST /api/admin/goods` of a sale of `stock` units from `start` for an hour, with a
    /// waiting room when `room` is not null; asserts the 201.
    async fn publish(&self, stock: i64, start: chrono::DateTime<Utc>, room: Value) -> Goods {
        let mut body = json!({"name": "test phone", "price_cents": 10_000, "seckill_price_cents": 5_000,
            "stock_total": stock, "start_at": start, "end_at": start + chrono::Duration::hours(1)});
        if !room.is_null() {
            body["waiting_room"] = room;
        }
        let res =
            self.as_user(1, Role::Admin, Method::POST, "/api/admin/goods").json(&body).send().await.unwrap();
        let (status, body) = answer(res).await;
        assert_eq!(status, 201, "create sale: {body}");
        serde_json::from_value(body).unwrap()
    }

    /// Another replica of seckill-service on the same Redis, broker and stock-service.
    pub fn replica(&self) -> RunningService {
        let settings = self.settings.clone();
        RunningService::start(move || seckill_service::startup::build(settings))
    }

    /// Publishes a sale with a waiting room (`room`, as `NewGoods::waiting_room`) that starts
    /// in `starts_in` and lasts an hour.
    pub async fn room_sale(&self, stock: i64, starts_in: Duration, room: Value) -> Goods {
        let start = Utc::now() + chrono::Duration::from_std(starts_in).unwrap();
        self.publish(stock, start, room).await
    }

    /// `POST /api/seckill/{g}/queue` with `body` (none when null).
    pub async fn join(&self, user: i64, g: GoodsId, body: Value) -> Answer {
        let path = format!("/api/seckill/{g}/queue");
        let mut req = self.as_user(user, Role::User, Method::POST, &path);
        if !body.is_null() {
            req = req.json(&body);
        }
        answer(req.send().await.unwrap()).await
    }

    /// `GET /api/seckill/{g}/queue` with a place ticket.
    pub async fn standing(&self, user: i64, g: GoodsId, ticket: &str) -> Answer {
        let path = format!("/api/seckill/{g}/queue");
        let req = self.as_user(user, Role::User, Method::GET, &path).header(headers::ROOM_TICKET, ticket);
        answer(req.send().await.unwrap()).await
    }

    pub async fn path_token(&self, user: i64, g: GoodsId) -> Answer {
        let path = format!("/api/seckill/{g}/token");
        answer(self.as_user(user, Role::User, Method::POST, &path).send().await.unwrap()).await
    }

    pub async fn order(&self, user: i64, g: GoodsId, token: Option<&str>) -> Answer {
        let path = format!("/api/seckill/{g}/orders");
        let mut req = self.as_user(user, Role::User, Method::POST, &path);
        if let Some(t) = token {
            req = req.header(headers::SECKILL_TOKEN, t);
        }
        answer(req.send().await.unwrap()).await
    }

    /// Path token then order, as a buyer's client does.
    pub async fn buy(&self, user: i64, g: GoodsId) -> Answer {
        let (status, body) = self.path_token(user, g).await;
        if status != 200 {
            return (status, body);
        }
        self.order(user, g, body["token"].as_str()).await
    }

    pub async fn result(&self, user: i64, g: GoodsId) -> Answer {
        let path = format!("/api/seckill/{g}/result");
        answer(self.as_user(user, Role::User, Method::GET, &path).send().await.unwrap()).await
    }

    pub async fn redis(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(redis_url()).unwrap().get_multiplexed_async_connection().await.unwrap()
    }

    pub async fn redis_stock(&self, g: GoodsId) -> Option<i64> {
        self.redis().await.get(self.redis_keys.stock(g)).await.unwrap()
    }

    /// What the sale's users hash says a buyer holds (a request id, `c:` or `o:` one).
    pub async fn held_by(&self, g: GoodsId, user: i64) -> Option<String> {
        self.redis().await.hget(self.redis_keys.users(g), user).await.unwrap()
    }

    /// The sale's pending (unconfirmed) entries.
    pub async fn pending(&self, g: GoodsId) -> Vec<String> {
        self.redis().await.zrange(self.redis_keys.pending(g), 0, -1).await.unwrap()
    }

    /// This test's own handle on the sale's Redis data, with the scripts seckill-service runs.
    pub async fn gate(&self) -> Gate {
        let redis = RedisSettings {
            url: redis_url(),
            key_prefix: self.redis_keys.prefix().to_owned(),
            ..Default::default()
        };
        let gate = Gate::new(seckill_infra::redis::connect(&redis).unwrap(), self.redis_keys.clone());
        gate.load_scripts().await.unwrap();
        gate
    }

    /// Takes every message waiting in the orders queue, each checked to be signed by
    /// seckill-service for order-service (the consumer's own check): the requests of each.
    pub async fn take_order_batches(&self) -> Vec<Vec<OrderRequest>> {
        let bodies = take_signed_bodies(&self.amqp_names.orders_queue(), Peer::Seckill, Peer::Order).await;
        bodies.iter().map(|b| decode_order_requests(b).expect("an orders message of either form")).collect()
    }

    /// The requests of every message waiting in the orders queue (see `take_order_batches`).
    pub async fn take_order_messages(&self) -> Vec<OrderRequest> {
        self.take_order_batches().await.into_iter().flatten().collect()
    }

    /// Polls the orders queue until `n` requests have been taken in all, or `within` passes.
    pub async fn wait_for_order_messages(&self, n: usize, within: Duration) -> Vec<OrderRequest> {
        let deadline = Instant::now() + within;
        let mut taken = Vec::new();
        while taken.len() < n && Instant::now() < deadline {
            taken.extend(self.take_order_messages().await);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        taken
    }
}

use seckill_testkit::keys::take_signed_bodies;

/// A stand-in for order-service's internal API (`/internal/orders/active`, `/count`): answers
/// from the active orders a test gives it, and only to seckill-service's credential.
pub struct FakeOrders {
    pub port: u16,
    pub book: Arc<OrderBook>,
    handle: actix_web::dev::ServerHandle,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
pub struct OrderBook {
    active: Mutex<HashMap<(GoodsId, UserId), ActiveOrder>>,
    /// Calls that carried seckill-service's credential.
    pub signed_calls: AtomicUsize,
    /// Calls refused for want of it.
    pub refused_calls: AtomicUsize,
    /// How long `/internal/orders/active` takes to answer (a slow order authority).
    pub delay_ms: AtomicU64,
}

impl OrderBook {
    pub fn add(&self, g: GoodsId, order: ActiveOrder) {
        self.active.lock().unwrap().insert((g, order.user_id), order);
    }
}

impl FakeOrders {
    fn start() -> Self {
        let book = Arc::new(OrderBook::default());
        let data = web::Data::from(book.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        // Its own thread and runtime, like the services it stands in for.
        let thread = std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                let server = HttpServer::new(move || {
                    App::new()
                        .app_data(data.clone())
                        .route("/internal/orders/active", web::get().to(active))
                        .route("/internal/orders/count", web::get().to(count))
                })
                .workers(1)
                .bind(("127.0.0.1", 0))
                .expect("a port for the fake order-service");
                let port = server.addrs()[0].port();
                let server = server.run();
                let _ = tx.send((port, server.handle()));
                let _ = server.await;
            });
        });
        let (port, handle) = rx.recv().expect("the fake order-service started");
        Self { port, book, handle, thread: Some(thread) }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for FakeOrders {
    fn drop(&mut self) {
        // Sends the stop at once; the thread then ends.
        drop(self.handle.stop(false));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Whether the request carries seckill-service's credential for order-service.
fn from_seckill(req: &HttpRequest, book: &OrderBook) -> bool {
    let facts = RequestFacts { method: req.method().as_str(), path: req.path(), request_id: "" };
    let value = req.headers().get(AUTH_HEADER).map(|v| v.as_bytes());
    let good =
        matches!(keys::trust(Peer::Order).verify_request(value, &facts), Ok(c) if c.peer == Peer::Seckill);
    let counter = if good { &book.signed_calls } else { &book.refused_calls };
    counter.fetch_add(1, Ordering::SeqCst);
    good
}

fn query_id<T: std::str::FromStr>(q: &HashMap<String, String>, name: &str) -> Option<T> {
    q.get(name).and_then(|v| v.parse().ok())
}

async fn active(
    req: HttpRequest,
    book: web::Data<OrderBook>,
    q: web::Query<HashMap<String, String>>,
) -> HttpResponse {
    if !from_seckill(&req, &book) {
        return HttpResponse::Unauthorized().finish();
    }
    let delay = book.delay_ms.load(Ordering::SeqCst);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let Some(g) = query_id::<GoodsId>(&q, "goods_id") else { return HttpResponse::BadRequest().finish() };
    let user = query_id::<UserId>(&q, "user_id");
    let page: Vec<ActiveOrder> = book
        .active
        .lock()
        .unwrap()
        .iter()
        .filter(|((og, ou), _)| *og == g && user.is_none_or(|u| u == *ou))
        .map(|(_, o)| *o)
        .collect();
    HttpResponse::Ok().json(page)
}

async fn count(
    req: HttpRequest,
    book: web::Data<OrderBook>,
    q: web::Query<HashMap<String, String>>,
) -> HttpResponse {
    if !from_seckill(&req, &book) {
        return HttpResponse::Unauthorized().finish();
    }
    let Some(g) = query_id::<GoodsId>(&q, "goods_id") else { return HttpResponse::BadRequest().finish() };
    let n = book.active.lock().unwrap().keys().filter(|(og, _)| *og == g).count();
    HttpResponse::Ok().json(json!({ "active": n }))
}
