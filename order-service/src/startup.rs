//! Builds order-service from its settings: database (created and migrated on first start),
//! Redis, the broker, the consumers, the sweeper, the HTTP server.

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
use seckill_web::{Application, Door, Lifecycle};

use crate::configuration::{SERVICE, STANDARD_PORT, Settings};
use crate::fulfil::Fulfiller;
use crate::releases::{self, Releaser};
use crate::results::ResultStore;
use crate::state::AppState;
use crate::{consumer as handlers, routes};

pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations");

/// Creates and migrates the database, then returns: the `migrate` mode of the binary, for a
/// Job or an init container that prepares the database once per rollout.
pub async fn migrate(settings: &Settings) -> anyhow::Result<()> {
    seckill_db::prepare(&settings.database_url(), MIGRATIONS).await
}

pub async fn build(settings: Settings) -> anyhow::Result<Application> {
    settings.validate()?;
    let trust = Arc::new(Trust::for_service(Peer::Order, &settings.trust)?);
    let url = settings.database_url();
    seckill_db::prepare(&url, MIGRATIONS).await?;
    let pool = seckill_db::pool(&settings.database, &url)?;
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
    let releaser = Arc::new(Releaser::new(pool, publisher.clone(), names.clone()));

    let lifecycle = Lifecycle::new();
    let pause = settings.order.outage_pause();
    for index in 0..settings.order.consumers.max(1) {
        let spec = ConsumerSpec {
            name: format!("{SERVICE}-orders-{index}"),
            source: Source::Queue(names.orders_queue()),
            from: Peer::Seckill,
            trust: trust.clone(),
            declares: vec![Declare::WorkQueue(names.orders_queue())],
            prefetch: settings.order.prefetch,
            batch_size: settings.order.batch_size,
        };
        let fulfiller = fulfiller.clone();
        lifecycle.spawn(consumer::run(settings.amqp.clone(), spec, lifecycle.cancel.clone(), move |inbox| {
            let fulfiller = fulfiller.clone();
            async move { handlers::handle_orders(&fulfiller, inbox, pause).await }
        }));
    }
    let spec = ConsumerSpec {
        name: format!("{SERVICE}-expire"),
        source: Source::Queue(names.order_expire_queue()),
        from: Peer::Order,
        trust: trust.clone(),
        declares: vec![Declare::OrderDelay { ttl_secs }],
        prefetch: 100,
        batch_size: 50,
    };
    let (r, f) = (releaser.clone(), fulfiller.clone());
    lifecycle.spawn(consumer::run(settings.amqp.clone(), spec, lifecycle.cancel.clone(), move |inbox| {
        let (r, f) = (r.clone(), f.clone());
        async move { handlers::handle_expiries(&r, &f, inbox, pause).await }
    }));
    lifecycle.spawn(releases::run_sweeper(
        releaser.clone(),
        Duration::from_secs(settings.order.sweep_interval_secs.max(1)),
        Duration::from_secs(settings.order.sweep_grace_secs),
        lifecycle.cancel.clone(),
    ));
    let closing = publisher.clone();
    let cancel = lifecycle.cancel.clone();
    lifecycle.spawn(async move {
        cancel.cancelled().await;
        closing.close().await;
    });

    let state = web::Data::new(AppState { fulfiller, releaser, publisher });
    let (server, port) =
        seckill_web::serve(&settings.http, STANDARD_PORT, Door::Trusted(trust), move |cfg| {
            cfg.app_data(state.clone()).configure(routes::configure);
        })?;
    tracing::info!(port, "order-service listening");
    Ok(Application::new(port, server, lifecycle))
}
