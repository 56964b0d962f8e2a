//! Builds order-service from its settings: database (created and migrated in the background,
//! as soon as PostgreSQL answers), Redis, the broker, the consumers, the sweeper, the HTTP
//! server. It starts and serves while any of its servers is away; `/readyz` says what it
//! waits for, and its consumers hand back what they cannot do yet.

use std::sync::Arc;
use std::time::Duration;

use actix_web::web;
use diesel_migrations::{EmbeddedMigrations, embed_migrations};
use seckill_common::amqp::AmqpNames;
use seckill_common::keys::RedisKeys;
use seckill_common::trust::{Peer, Trust};
use seckill_db::Database;
use seckill_infra::amqp::{Declare, Destination};
use seckill_infra::broker_use::BrokerUse;
use seckill_infra::consumer::{self, Source};
use seckill_infra::stock_client::StockClient;
use seckill_web::{Application, Lifecycle, Service};

use crate::configuration::{SERVICE, STANDARD_PORT, Settings};
use crate::fulfil::Fulfiller;
use crate::pace::ExpiryPace;
use crate::releases::{self, Releaser};
use crate::results::ResultStore;
use crate::state::AppState;
use crate::{consumer as handlers, routes};

pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations");

/// How the binary runs the service (`seckill_web::runner`): built by `start`, and
/// `<binary> migrate` prepares its database.
impl Service for Settings {
    async fn start(self) -> anyhow::Result<Application> {
        start(self).await
    }

    fn migrate(&self) -> Option<impl Future<Output = anyhow::Result<()>>> {
        let url = self.database_url();
        Some(async move { seckill_db::migrate(&url, &MIGRATIONS).await })
    }
}

/// Checks the settings, then builds: where tests and the e2e suite start a service.
pub use seckill_web::runner::build;

/// What order-service does on the broker: it consumes buy requests and expiries, and publishes
/// releases and the expiries of new orders (to the delay queue of `ttl_secs`). `start` builds
/// its publisher and consumers from it; crates/deploy-check derives its broker user's
/// permissions from it.
pub fn broker_use(names: &AmqpNames, ttl_secs: u64) -> BrokerUse {
    BrokerUse {
        publisher_declares: vec![
            Declare::WorkQueue(names.stock_release_queue()),
            Declare::OrderDelay { ttl_secs },
        ],
        publishes: vec![
            Destination::Queue(names.stock_release_queue()),
            Destination::Queue(names.order_delay_queue(ttl_secs)),
        ],
        consumers: vec![
            (Source::Queue(names.orders_queue()), vec![Declare::WorkQueue(names.orders_queue())]),
            (Source::Queue(names.order_expire_queue()), vec![Declare::OrderDelay { ttl_secs }]),
        ],
    }
}

/// Builds from settings already checked; fails only on a setting that is wrong, never on a
/// server that is away (the database, the scripts and the publisher become ready in the
/// background).
async fn start(settings: Settings) -> anyhow::Result<Application> {
    let trust = Arc::new(Trust::for_service(Peer::Order, &settings.trust)?);
    let lifecycle = Lifecycle::new();
    let database = Database::open(&settings.database, &settings.database_url())?;
    lifecycle.spawn_start_up(database.prepared().clone(), database.prepare(&MIGRATIONS));
    let pool = database.pool().clone();
    let redis = seckill_infra::redis::connect(&settings.redis)?;
    let results = ResultStore::new(redis, RedisKeys::new(settings.redis.key_prefix.clone()));
    let stock = Arc::new(StockClient::new(&settings.upstreams, trust.clone())?);
    let names = AmqpNames::new(settings.amqp.prefix.clone());
    let ttl_secs = settings.order.ttl_secs;
    let broker = broker_use(&names, ttl_secs);
    let publisher = Arc::new(broker.unconnected_publisher(&settings.amqp, SERVICE, trust.clone())?);
    lifecycle.spawn_start_up(publisher.ready(), publisher.clone().keep_connected());
    let fulfiller = Arc::new(Fulfiller::new(
        pool.clone(),
        stock,
        results,
        publisher.clone(),
        names.clone(),
        settings.order.ttl(),
    ));
    let releaser = Arc::new(Releaser::new(pool.clone(), publisher.clone(), names.clone()));
    let loading = fulfiller.clone();
    let (scripts, loading) = seckill_infra::redis::load_scripts_in_background(move || {
        let fulfiller = loading.clone();
        async move { fulfiller.results().load_scripts().await }
    });
    lifecycle.spawn_start_up(scripts.clone(), loading);

    let pause = settings.order.outage_pause();
    for index in 0..settings.order.consumers {
        let spec = broker
            .consumer(
                format!("{SERVICE}-orders-{index}"),
                Source::Queue(names.orders_queue()),
                Peer::Seckill,
                trust.clone(),
            )?
            .batches(settings.order.prefetch, settings.order.batch_size);
        let (fulfiller, batch_size) = (fulfiller.clone(), settings.order.batch_size);
        lifecycle.spawn(consumer::run(settings.amqp.clone(), spec, lifecycle.cancel.clone(), move |inbox| {
            let fulfiller = fulfiller.clone();
            async move { handlers::handle_orders(&fulfiller, inbox, batch_size, pause).await }
        }));
    }
    let spec = broker.consumer(
        format!("{SERVICE}-expire"),
        Source::Queue(names.order_expire_queue()),
        Peer::Order,
        trust.clone(),
    )?;
    let (r, f) = (releaser.clone(), fulfiller.clone());
    let pace = Arc::new(ExpiryPace::new(settings.order.expiries_per_sec, handlers::EXPIRE_CHUNK));
    lifecycle.spawn(consumer::run(settings.amqp.clone(), spec, lifecycle.cancel.clone(), move |inbox| {
        let (r, f, pace) = (r.clone(), f.clone(), pace.clone());
        async move { handlers::handle_expiries(&r, &f, &pace, inbox, pause).await }
    }));
    lifecycle.spawn(releases::run_sweeper(
        releaser.clone(),
        Duration::from_secs(settings.order.sweep_interval_secs),
        Duration::from_secs(settings.order.sweep_grace_secs),
        lifecycle.cancel.clone(),
    ));
    let closing = publisher.clone();
    lifecycle.at_shutdown(async move { closing.close().await });

    let state = web::Data::new(AppState { pool, database, scripts, fulfiller, releaser, publisher });
    seckill_web::serve_internal(&settings.http, STANDARD_PORT, trust, state, routes::configure, lifecycle)
}
