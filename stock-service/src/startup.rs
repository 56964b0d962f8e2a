//! Builds stock-service from its settings: database (created and migrated in the background,
//! as soon as PostgreSQL answers), pool, the release consumer, HTTP server. It starts and
//! serves while PostgreSQL or RabbitMQ is away; `/readyz` says what it waits for.

use std::sync::Arc;

use actix_web::web;
use diesel_migrations::{EmbeddedMigrations, embed_migrations};
use seckill_common::amqp::AmqpNames;
use seckill_common::trust::{Peer, Trust};
use seckill_db::Database;
use seckill_infra::amqp::{Declare, Destination};
use seckill_infra::broker_use::BrokerUse;
use seckill_infra::consumer::{self, Source};
use seckill_web::{Application, Lifecycle, Service};

use crate::configuration::{SERVICE, STANDARD_PORT, Settings};
use crate::releases::ReleaseHandler;
use crate::routes;
use crate::state::AppState;

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

/// What stock-service does on the broker: it consumes releases and forwards them as restocks.
/// `start` builds its publisher and consumer from it; crates/deploy-check derives its broker
/// user's permissions from it.
pub fn broker_use(names: &AmqpNames) -> BrokerUse {
    BrokerUse {
        publisher_declares: vec![Declare::WorkQueue(names.restock_queue())],
        publishes: vec![Destination::Queue(names.restock_queue())],
        consumers: vec![(
            Source::Queue(names.stock_release_queue()),
            vec![Declare::WorkQueue(names.stock_release_queue())],
        )],
    }
}

/// Builds from settings already checked: the database (created and migrated in the
/// background), the publisher (connected in the background), the release consumer, the HTTP
/// server. Fails only on a setting that is wrong, never on a server that is away.
async fn start(settings: Settings) -> anyhow::Result<Application> {
    let trust = Arc::new(Trust::for_service(Peer::Stock, &settings.trust)?);
    let lifecycle = Lifecycle::new();
    let database = Database::open(&settings.database, &settings.database_url())?;
    lifecycle.spawn_start_up(database.prepared().clone(), database.prepare(&MIGRATIONS));

    let names = AmqpNames::new(settings.amqp.prefix.clone());
    let broker = broker_use(&names);
    let publisher = Arc::new(broker.unconnected_publisher(&settings.amqp, SERVICE, trust.clone())?);
    lifecycle.spawn_start_up(publisher.ready(), publisher.clone().keep_connected());
    let handler = Arc::new(ReleaseHandler {
        pool: database.pool().clone(),
        publisher,
        names: names.clone(),
        outage_pause: settings.stock.outage_pause(),
    });
    let spec = broker.consumer(
        format!("{SERVICE}-release"),
        Source::Queue(names.stock_release_queue()),
        Peer::Order,
        trust.clone(),
    )?;
    let h = handler.clone();
    lifecycle.spawn(consumer::run(settings.amqp.clone(), spec, lifecycle.cancel.clone(), move |inbox| {
        let h = h.clone();
        async move { h.handle(inbox).await }
    }));
    lifecycle.at_shutdown(async move { handler.publisher.close().await });

    let state = web::Data::new(AppState::new(database));
    seckill_web::serve_internal(&settings.http, STANDARD_PORT, trust, state, routes::configure, lifecycle)
}
