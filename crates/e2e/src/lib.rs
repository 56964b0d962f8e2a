//! The whole system in one process, for tests and tools: `spawn_system()` starts the four
//! services on port 0 against the real PostgreSQL, Redis and RabbitMQ, each run with its own
//! databases, Redis key prefix and queue names (all removed when the `System` is dropped), and
//! `System` has one method per call a buyer or an admin makes through the gateway, plus direct
//! looks into the databases, Redis and the queues for checking invariants.
//!
//! The end-to-end tests are in `tests/`; the load tool's smoke test uses the same harness.
//!
//! The harness's parts: `calls` (through the gateway, as a buyer or an admin), `stores` (looks
//! into Redis, the databases and the queues, and raw publishing), `faults` (stopping services,
//! losing data, closing connections, and the plumbing: the relay, `serve_through`, `eventually`).

mod calls;
mod faults;
mod stores;

use seckill_common::amqp::AmqpNames;
use seckill_common::config::HttpSettings;
use seckill_common::keys::RedisKeys;
use seckill_common::trust::Peer;
use seckill_testkit::{RunningService, TestDb, TestNames, amqp_url, keys, redis_url};

pub use calls::{Answer, EventStream, order_of};
pub use faults::{Relay, eventually};

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
        storefront: gateway::configuration::StorefrontSettings::default(),
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
