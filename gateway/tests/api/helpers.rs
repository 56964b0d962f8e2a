//! A gateway on port 0 in front of echo upstreams, a client, and token helpers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use gateway::configuration::Settings;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use seckill_common::ErrorBody;
use seckill_common::config::HttpSettings;
use seckill_common::trust::Peer;
use seckill_testkit::{RunningService, TestNames, keys, redis_url};
use seckill_web::{Application, Door, Lifecycle};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub const SECRET: &str = "gateway-test-jwt-secret-at-least-32-bytes";

/// How an echo upstream answers every path but `/healthz` and `/metrics`.
#[derive(Debug, Clone)]
pub struct Echo {
    pub name: &'static str,
    pub status: u16,
    pub delay: Duration,
    /// A fixed JSON body instead of the echo of the request.
    pub body: Option<&'static str>,
    pub headers: Vec<(&'static str, &'static str)>,
    /// Taken for the whole of each answer's delay when set: one request at a time, the others
    /// queue (an upstream whose latency grows with the load, not one merely slow).
    pub serial: Option<Arc<tokio::sync::Mutex<()>>>,
    /// Requests it answered (every path but `/healthz` and `/metrics`), shared by its clones.
    pub calls: Arc<AtomicUsize>,
    /// Every such request's path and headers as they arrived, in order, shared by its clones.
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

/// One request an echo upstream received: its path and every header line (name, value).
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub headers: Vec<(String, String)>,
}

impl Echo {
    pub fn new(name: &'static str) -> Self {
        Self {
            name,
            status: 200,
            delay: Duration::ZERO,
            body: None,
            headers: Vec::new(),
            serial: None,
            calls: Arc::new(AtomicUsize::new(0)),
            seen: Arc::default(),
        }
    }

    pub fn status(mut self, status: u16) -> Self {
        self.status = status;
        self
    }

    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// One request at a time, each taking the delay.
    pub fn one_at_a_time(mut self) -> Self {
        self.serial = Some(Arc::default());
        self
    }

    pub fn body(mut self, body: &'static str) -> Self {
        self.body = Some(body);
        self
    }

    pub fn header(mut self, name: &'static str, value: &'static str) -> Self {
        self.headers.push((name, value));
        self
    }

    /// Starts it on its own thread and port. An echo named after a service (`seckill`,
    /// `order-live`, `stock-a`) checks the gateway's credential as that service would; others
    /// (`other`, `slow`) take anything.
    pub fn start(self) -> RunningService {
        let me = self.name.split('-').next().and_then(Peer::parse);
        RunningService::start(move || async move {
            let door = me.map_or(Door::Public, |me| Door::Trusted(keys::trust(me)));
            let (server, port) = seckill_web::serve(&test_http(), 0, door, move |cfg| {
                cfg.app_data(web::Data::new(self.clone())).service(web::resource("/{tail:.*}").to(echo));
            })?;
            Ok(Application::new(port, server, Lifecycle::new()))
        })
    }
}

/// Answers with what it received: `{"upstream", "method", "path", "query", "headers", "body",
/// "caller", "user"}` (repeated headers joined with ", "; `user` is `{"id", "role"}` as the
/// gateway's signed credential vouched, or null), unless the `Echo` gives a fixed body.
async fn echo(req: HttpRequest, body: web::Bytes, echo: web::Data<Echo>) -> HttpResponse {
    echo.calls.fetch_add(1, Ordering::SeqCst);
    let lines = req
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect();
    echo.seen.lock().unwrap().push(Seen { path: req.path().to_owned(), headers: lines });
    if !echo.delay.is_zero() {
        let _turn = match &echo.serial {
            Some(serial) => Some(serial.lock().await),
            None => None,
        };
        tokio::time::sleep(echo.delay).await;
    }
    let mut res = HttpResponse::build(StatusCode::from_u16(echo.status).unwrap());
    for (name, value) in &echo.headers {
        res.append_header((*name, *value));
    }
    if let Some(fixed) = echo.body {
        return res.content_type("application/json").body(fixed);
    }
    let caller = seckill_web::trust::caller(&req);
    let mut headers = Map::new();
    for name in req.headers().keys() {
        let values: Vec<&str> =
            req.headers().get_all(name).map(|v| v.to_str().unwrap_or("<binary>")).collect();
        headers.insert(name.as_str().to_owned(), Value::from(values.join(", ")));
    }
    res.json(json!({
        "upstream": echo.name,
        "method": req.method().as_str(),
        "path": req.path(),
        "query": req.query_string(),
        "headers": headers,
        "body": String::from_utf8_lossy(&body),
        "caller": caller.map(|c| c.peer.as_str()),
        "user": caller.and_then(|c| c.user).map(|(id, role)| json!({"id": id.get(), "role": role.as_str()})),
    }))
}

/// Loopback, port 0, one worker, a short drain on stop (a slow echo may still be sleeping).
pub fn test_http() -> HttpSettings {
    HttpSettings {
        host: "127.0.0.1".into(),
        port: Some(0),
        workers: 1,
        shutdown_timeout_secs: 1,
        ..HttpSettings::default()
    }
}

/// A base URL on loopback where nothing listens: connections are refused at once.
pub fn refused_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}")
}

/// Gateway settings for tests: dev tokens on, the test secret, upstreams to fill in.
pub fn settings(seckill: &str, order: &str, stock: &str) -> Settings {
    let mut s = Settings { http: HttpSettings { workers: 2, ..test_http() }, ..Settings::default() };
    s.auth.jwt_secret = Some(SECRET.into());
    s.auth.dev_tokens = true;
    s.upstreams.seckill = seckill.into();
    s.upstreams.order = order.into();
    s.upstreams.stock = stock.into();
    s.upstreams.connect_timeout_ms = 500;
    s.upstreams.timeout_ms = 3_000;
    s.trust = keys::trust_settings(Peer::Gateway);
    s.room = keys::room_settings();
    s.redis.url = redis_url();
    s
}

pub struct TestApp {
    pub address: String,
    /// The admin listener (`/metrics`, the detailed `/readyz`).
    pub admin: String,
    pub client: reqwest::Client,
    // Dropped after the gateway (fields drop in order): the gateway stops first.
    _gateway: RunningService,
    _upstreams: Vec<RunningService>,
    /// The shared rate-limit buckets' key prefix, removed at the end.
    _names: TestNames,
}

impl TestApp {
    /// The gateway with `settings`, keeping `upstreams` alive as long as it runs. Settings
    /// without a Redis key prefix get one of this test's own.
    pub fn start(mut settings: Settings, upstreams: Vec<RunningService>) -> Self {
        let names = TestNames::new();
        if settings.redis.key_prefix.is_empty() {
            settings.redis.key_prefix = names.redis_prefix.clone();
        }
        let (admin_port_tx, admin_port) = std::sync::mpsc::channel();
        let gateway = RunningService::start(move || async move {
            let (app, admin_port) = gateway::startup::build_with_admin_port(settings).await?;
            let _ = admin_port_tx.send(admin_port);
            Ok(app)
        });
        let admin = format!("http://127.0.0.1:{}", admin_port.recv().expect("the admin port"));
        let client = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(20)).build().unwrap();
        Self {
            address: gateway.url(),
            admin,
            client,
            _gateway: gateway,
            _upstreams: upstreams,
            _names: names,
        }
    }

    /// A GET on the admin listener.
    pub fn admin_get(&self, path: &str) -> reqwest::RequestBuilder {
        self.client.get(format!("{}{path}", self.admin))
    }

    pub fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.client.get(format!("{}{path}", self.address))
    }

    pub fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.client.post(format!("{}{path}", self.address))
    }

    /// A token from the gateway's own dev-token endpoint.
    pub async fn dev_token(&self, user_id: i64, role: &str) -> String {
        let res = self
            .post("/api/auth/dev-token")
            .json(&json!({"user_id": user_id, "role": role}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        res.json::<Value>().await.unwrap()["token"].as_str().unwrap().to_owned()
    }
}

/// Three echo upstreams named `seckill`, `order` and `stock`, and the gateway before them.
pub fn spawn_app() -> TestApp {
    spawn_app_with(|_| {})
}

/// As `spawn_app`, with the settings changed by `change` first.
pub fn spawn_app_with(change: impl FnOnce(&mut Settings)) -> TestApp {
    let seckill = Echo::new("seckill").start();
    let order = Echo::new("order").start();
    let stock = Echo::new("stock").start();
    let mut s = settings(&seckill.url(), &order.url(), &stock.url());
    change(&mut s);
    TestApp::start(s, vec![seckill, order, stock])
}

/// A token signed here, as another issuer sharing the secret would.
pub fn sign(alg: Algorithm, secret: &str, claims: &Value) -> String {
    let key = EncodingKey::from_secret(secret.as_bytes()).unwrap();
    jsonwebtoken::encode(&Header::new(alg), claims, &key).unwrap()
}

/// A valid user token for `user_id`, an hour to live.
pub fn user_token(user_id: i64) -> String {
    sign(Algorithm::HS256, SECRET, &json!({"sub": user_id.to_string(), "exp": in_an_hour()}))
}

/// A valid admin token for `user_id`, an hour to live.
pub fn admin_token(user_id: i64) -> String {
    sign(Algorithm::HS256, SECRET, &json!({"sub": user_id.to_string(), "role": "admin", "exp": in_an_hour()}))
}

pub fn in_an_hour() -> i64 {
    chrono::Utc::now().timestamp() + 3600
}

/// Asserts the status and the error code of a gateway error, returning its message.
pub async fn assert_error(res: reqwest::Response, status: u16, code: &str) -> String {
    assert_eq!(res.status(), status, "unexpected status");
    assert_eq!(res.headers().get("content-type").and_then(|v| v.to_str().ok()), Some("application/json"));
    let body: ErrorBody = res.json().await.expect("a JSON error body");
    assert_eq!(body.code, code, "message: {}", body.message);
    body.message
}

/// The echo of an upstream's view of the request.
pub async fn echoed(res: reqwest::Response) -> Value {
    assert_eq!(res.status(), 200, "expected the echo upstream's answer");
    res.json().await.unwrap()
}

/// Sends `request` on a fresh connection; returns the response head and its body (read by its
/// content-length, so a connection kept alive does not matter).
pub async fn raw_exchange(address: &str, request: &str) -> (String, String) {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "connection closed before a whole response");
        raw.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&raw);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap())
                })
                .expect("a content-length");
            if body.len() >= length {
                return (head.to_owned(), body[..length].to_owned());
            }
        }
    }
}

/// One unlabelled metric's value on `app`'s admin port.
pub async fn metric(app: &TestApp, name: &str) -> f64 {
    let text = app.admin_get("/metrics").send().await.unwrap().text().await.unwrap();
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .unwrap_or_else(|| panic!("no {name}:\n{text}"))
}
