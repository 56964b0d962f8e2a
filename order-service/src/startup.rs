//! Builds order-service from its settings: database (created and migrated on first start),
//! Redis, the broker, the consumers, the sweeper, the HTTP server.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use actix_web::web;
use anyhow::Context;
use diesel_migrations::{EmbeddedMigrations, embed_migrations};
use seckill_common::amqp::AmqpNames;
use seckill_common::keys::RedisKeys;
use seckill_common::trust::{Peer, Trust};
use seckill_infra::amqp::{Declare, Publisher};
use seckill_infra::consumer::{self, ConsumerSpec, Source};
use seckill_infra::stock_client::StockClient;
use seckill_web::{Application, Lifecycle, Service};

use crate::configuration::{SERVICE, STANDARD_PORT, Settings};
use crate::fulfil::Fulfiller;
use crate::releases::{self, Releaser};
use crate::results::ResultStore;
use crate::state::AppState;
use crate::{consumer as handlers, routes};

pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations");

/// How the binary runs the service (`seckill_web::runner`).
impl Service for Settings {
    async fn start(self) -> anyhow::Result<Application> {
        start(self).await
    }

    fn migrate(&self) -> Option<impl Future<Output = anyhow::Result<()>>> {
        let url = self.database_url();
        Some(async move { seckill_db::prepare(&url, MIGRATIONS).await })
    }
}

/// Checks the settings, then builds: where tests and the e2e suite start a service.
pub use seckill_web::runner::build;

/// Builds from settings already checked.
async fn start(settings: Settings) -> anyhow::Result<Application> {
    let trust = Arc::new(Trust::for_service(Peer::Order, &settings.trust)?);
    let pool = seckill_db::open(&settings.database, &settings.database_url(), MIGRATIONS).await?;
    let redis = seckill_infra::redis::connect(&settings.redis)?;
    let results = ResultStore::new(redis, RedisKeys::new(settings.redis.key_prefix.clone()));
    results
        .load_scripts()
        .await
        .with_context(|| format!("cannot load scripts into redis at {}", settings.redis.url))?;
    let stock = Arc::new(StockClient::new(&settings.upstreams, trust.clone())?);
    let names = AmqpNames::new(settings.amqp.prefix.clone());
    let ttl_secs = settings.order.ttl_secs;
    let publisher = Arc::new(
        Publisher::connect(
            &settings.amqp,
            SERVICE,
            trust.clone(),
            vec![Declare::WorkQueue(names.stock_release_queue()), Declare::OrderDelay { ttl_secs }],
        )
        .await
        .context("cannot connect to RabbitMQ")?,
    );
    let fulfiller = Arc::new(Fulfiller::new(
        pool.clone(),
        stock,
        results,
        publisher.clone(),
        names.clone(),
        settings.order.ttl(),
    ));
    let releaser = Arc::new(Releaser::new(pool.clone(), publisher.clone(), names.clone()));

    let lifecycle = Lifecycle::new();
    let pause = settings.order.outage_pause();
    for index in 0..settings.order.consumers {
        let spec = ConsumerSpec::new(
            format!("{SERVICE}-orders-{index}"),
            Source::Queue(names.orders_queue()),
            Peer::Seckill,
            trust.clone(),
            vec![Declare::WorkQueue(names.orders_queue())],
        )
        .batches(settings.order.prefetch, settings.order.batch_size);
        let fulfiller = fulfiller.clone();
        lifecycle.spawn(consumer::run(settings.amqp.clone(), spec, lifecycle.cancel.clone(), move |inbox| {
            let fulfiller = fulfiller.clone();
            async move { handlers::handle_orders(&fulfiller, inbox, pause).await }
        }));
    }
    let spec = ConsumerSpec::new(
        format!("{SERVICE}-expire"),
        Source::Queue(names.order_expire_queue()),
        Peer::Order,
        trust.clone(),
        vec![Declare::OrderDelay { ttl_secs }],
    );
    let (r, f) = (releaser.clone(), fulfiller.clone());
    lifecycle.spawn(consumer::run(settings.amqp.clone(), spec, lifecycle.cancel.clone(), move |inbox| {
        let (r, f) = (r.clone(), f.clone());
        async move { handlers::handle_expiries(&r, &f, inbox, pause).await }
    }));
    lifecycle.spawn(releases::run_sweeper(
        releaser.clone(),
        Duration::from_secs(settings.order.sweep_interval_secs),
        Duration::from_secs(settings.order.sweep_grace_secs),
        lifecycle.cancel.clone(),
    ));
    let closing = publisher.clone();
    lifecycle.at_shutdown(async move { closing.close().await });

    let state = web::Data::new(AppState { pool, fulfiller, releaser, publisher });
    seckill_web::serve_internal(&settings.http, STANDARD_PORT, trust, state, routes::configure, lifecycle)
}
