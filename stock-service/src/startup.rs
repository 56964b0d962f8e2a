//! Builds stock-service from its settings: database (created and migrated on first start),
//! pool, the release consumer, HTTP server.

use std::future::Future;
use std::sync::Arc;

use actix_web::web;
use anyhow::Context;
use diesel_migrations::{EmbeddedMigrations, embed_migrations};
use seckill_common::amqp::AmqpNames;
use seckill_common::trust::{Peer, Trust};
use seckill_infra::amqp::{Declare, Publisher};
use seckill_infra::consumer::{self, ConsumerSpec, Source};
use seckill_web::{Application, Lifecycle, Service};

use crate::configuration::{SERVICE, STANDARD_PORT, Settings};
use crate::releases::ReleaseHandler;
use crate::routes;
use crate::state::AppState;

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

/// Builds from settings already checked: the database (created and migrated on first
/// start), the release consumer, the HTTP server.
async fn start(settings: Settings) -> anyhow::Result<Application> {
    let trust = Arc::new(Trust::for_service(Peer::Stock, &settings.trust)?);
    let pool = seckill_db::open(&settings.database, &settings.database_url(), MIGRATIONS).await?;

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
        outage_pause: settings.stock.outage_pause(),
    });
    let lifecycle = Lifecycle::new();
    let spec = ConsumerSpec::new(
        format!("{SERVICE}-release"),
        Source::Queue(names.stock_release_queue()),
        Peer::Order,
        trust.clone(),
        vec![Declare::WorkQueue(names.stock_release_queue())],
    );
    let h = handler.clone();
    lifecycle.spawn(consumer::run(settings.amqp.clone(), spec, lifecycle.cancel.clone(), move |inbox| {
        let h = h.clone();
        async move { h.handle(inbox).await }
    }));
    lifecycle.at_shutdown(async move { handler.publisher.close().await });

    let state = web::Data::new(AppState::new(pool));
    seckill_web::serve_internal(&settings.http, STANDARD_PORT, trust, state, routes::configure, lifecycle)
}
