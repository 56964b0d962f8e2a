//! Builds stock-service from its settings: database (created and migrated on first start),
//! pool, the release consumer, HTTP server.

use std::sync::Arc;
use std::time::Duration;

use actix_web::web;
use anyhow::Context;
use diesel_migrations::{EmbeddedMigrations, embed_migrations};
use seckill_common::amqp::AmqpNames;
use seckill_common::trust::{Peer, Trust};
use seckill_infra::amqp::{Declare, Publisher};
use seckill_infra::consumer::{self, ConsumerSpec, Source};
use seckill_web::{Application, Door, Lifecycle};

use crate::configuration::{SERVICE, STANDARD_PORT, Settings};
use crate::goods::{LIST_CACHE_TTL, ListCache};
use crate::releases::ReleaseHandler;
use crate::routes;

pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations");

/// Creates and migrates the database, then returns: the `migrate` mode of the binary, for a
/// Job or an init container that prepares the database once per rollout.
pub async fn migrate(settings: &Settings) -> anyhow::Result<()> {
    seckill_db::prepare(&settings.database_url(), MIGRATIONS).await
}

pub async fn build(settings: Settings) -> anyhow::Result<Application> {
    let trust = Arc::new(Trust::for_service(Peer::Stock, &settings.trust)?);
    let url = settings.database_url();
    seckill_db::prepare(&url, MIGRATIONS).await?;
    let pool = seckill_db::pool(&settings.database, &url)?;

    let names = AmqpNames::new(settings.amqp.prefix.clone());
    let publisher = Publisher::connect(
        &settings.amqp,
        SERVICE,
        trust.clone(),
        vec![Declare::WorkQueue(names.restock_queue())],
    )
    .await
    .context("cannot connect to RabbitMQ")?;
    let handler = Arc::new(ReleaseHandler {
        pool: pool.clone(),
        publisher,
        names: names.clone(),
        outage_pause: Duration::from_secs(1),
    });
    let lifecycle = Lifecycle::new();
    let spec = ConsumerSpec {
        name: format!("{SERVICE}-release"),
        source: Source::Queue(names.stock_release_queue()),
        from: Peer::Order,
        trust: trust.clone(),
        declares: vec![Declare::WorkQueue(names.stock_release_queue())],
        prefetch: 100,
        batch_size: 50,
    };
    let h = handler.clone();
    lifecycle.spawn(consumer::run(settings.amqp.clone(), spec, lifecycle.cancel.clone(), move |inbox| {
        let h = h.clone();
        async move { h.handle(inbox).await }
    }));
    let cancel = lifecycle.cancel.clone();
    lifecycle.spawn(async move {
        cancel.cancelled().await;
        handler.publisher.close().await;
    });

    let pool = web::Data::new(pool);
    let goods_list = web::Data::new(ListCache::new(LIST_CACHE_TTL));
    let (server, port) =
        seckill_web::serve(&settings.http, STANDARD_PORT, Door::Trusted(trust), move |cfg| {
            cfg.app_data(pool.clone()).app_data(goods_list.clone()).configure(routes::configure);
        })?;
    tracing::info!(port, "stock-service listening");
    Ok(Application::new(port, server, lifecycle))
}
