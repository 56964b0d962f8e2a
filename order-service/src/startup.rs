//! Builds order-service from its settings: database (created and migrated on first start),
//! Redis, the consumers, the HTTP server.

use std::sync::Arc;

use actix_web::web;
use anyhow::Context;
use diesel_migrations::{EmbeddedMigrations, embed_migrations};
use seckill_common::amqp::AmqpNames;
use seckill_common::keys::RedisKeys;
use seckill_infra::stock_client::StockClient;
use seckill_web::{Application, Lifecycle};

use crate::configuration::{STANDARD_PORT, Settings};
use crate::consumer::{self, ConsumerConfig};
use crate::fulfil::Fulfiller;
use crate::results::ResultStore;
use crate::routes;

pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations");

pub async fn build(settings: Settings) -> anyhow::Result<Application> {
    settings.validate()?;
    let url = settings.database_url();
    seckill_db::ensure_database(&url).await?;
    seckill_db::run_migrations(&url, MIGRATIONS).await?;
    let pool = seckill_db::pool(&settings.database, &url)?;
    let redis = seckill_infra::redis::pool(&settings.redis)?;
    let results = ResultStore::new(redis, RedisKeys::new(settings.redis.key_prefix.clone()));
    results
        .load_scripts()
        .await
        .with_context(|| format!("cannot load scripts into redis at {}", settings.redis.url))?;
    let stock = StockClient::new(&settings.upstreams)?;
    let fulfiller = Arc::new(Fulfiller::new(pool, stock, results, settings.order.ttl()));

    let lifecycle = Lifecycle::new();
    let config = Arc::new(ConsumerConfig {
        amqp: settings.amqp.clone(),
        order: settings.order.clone(),
        names: AmqpNames::new(settings.amqp.prefix.clone()),
    });
    for index in 0..settings.order.consumers.max(1) {
        lifecycle.spawn(consumer::run(
            index,
            config.clone(),
            fulfiller.clone(),
            lifecycle.cancel.clone(),
        ));
    }

    let data = web::Data::from(fulfiller);
    let (server, port) = seckill_web::serve(&settings.http, STANDARD_PORT, move |cfg| {
        cfg.app_data(data.clone()).configure(routes::configure);
    })?;
    tracing::info!(port, "order-service listening");
    Ok(Application::new(port, server, lifecycle))
}
