//! Builds seckill-service from its settings.

use std::sync::Arc;

use actix_web::web;
use seckill_common::amqp::AmqpNames;
use seckill_common::keys::RedisKeys;
use seckill_common::trust::{Peer, Trust};
use seckill_infra::amqp::{Declare, Destination};
use seckill_infra::broker_use::BrokerUse;
use seckill_infra::consumer::{self, ConsumerSpec, Source};
use seckill_infra::order_client::OrderClient;
use seckill_infra::stock_client::StockClient;
use seckill_web::shed::InFlight;
use seckill_web::{Application, Lifecycle, Service};

use crate::batcher::{BatchSettings, Batcher};
use crate::buckets::Transfers;
use crate::configuration::{SERVICE, STANDARD_PORT, Settings};
use crate::confirmations::Confirmations;
use crate::gate::Gate;
use crate::room::{RoomStore, Rooms};
use crate::sales::SaleBook;
use crate::state::AppState;
use crate::{broadcast, rebuild, reconcile, room, routes};

/// How the binary runs the service (`seckill_web::runner`).
impl Service for Settings {
    async fn start(self) -> anyhow::Result<Application> {
        start(self).await
    }
}

/// Checks the settings, then builds: where tests and the e2e suite start a service.
pub use seckill_web::runner::build;

/// What seckill-service does on the broker: it publishes buy requests and broadcasts, and
/// consumes restocks and its replicas' broadcasts. `start` builds its publisher and consumers
/// from it; crates/deploy-check derives its broker user's permissions from it.
pub fn broker_use(names: &AmqpNames) -> BrokerUse {
    BrokerUse {
        publisher_declares: vec![Declare::WorkQueue(names.orders_queue()), Declare::Broadcast],
        publishes: vec![
            Destination::Queue(names.orders_queue()),
            Destination::Exchange { exchange: names.broadcast_exchange(), routing_key: String::new() },
        ],
        consumers: vec![
            (
                Source::Queue(names.restock_queue()),
                vec![Declare::WorkQueue(names.restock_queue()), Declare::Broadcast],
            ),
            (Source::Fanout(names.broadcast_exchange()), vec![Declare::Broadcast]),
        ],
    }
}

/// Builds from settings already checked; fails only on a setting that is wrong, never on a
/// server that is away (the scripts and the publisher become ready in the background, the
/// sales warm up in the background).
async fn start(settings: Settings) -> anyhow::Result<Application> {
    let trust = Arc::new(Trust::for_service(Peer::Seckill, &settings.trust)?);
    let lifecycle = Lifecycle::new();
    let redis = seckill_infra::redis::connect(&settings.redis)?;
    let keys = RedisKeys::new(settings.redis.key_prefix.clone());
    let stock = Arc::new(StockClient::new(&settings.upstreams, trust.clone())?);
    let transfers = Transfers::new(redis.clone(), keys.clone());
    let rooms =
        Rooms::new(settings.room.required_key()?, RoomStore::new(redis.clone(), keys.clone(), stock.clone()));
    let gate = Arc::new(Gate::new(redis, keys));
    let loading = gate.clone();
    let (scripts, loading) = seckill_infra::redis::load_scripts_in_background(move || {
        let gate = loading.clone();
        async move { gate.load_scripts().await }
    });
    lifecycle.spawn_start_up(scripts.clone(), loading);
    let names = AmqpNames::new(settings.amqp.prefix.clone());
    let broker = broker_use(&names);
    let publisher = Arc::new(broker.unconnected_publisher(&settings.amqp, SERVICE, trust.clone())?);
    lifecycle.spawn_start_up(publisher.ready(), publisher.clone().keep_connected());
    let (confirmations, clearing) = Confirmations::start(gate.clone(), lifecycle.cancel.clone());
    lifecycle.spawn(clearing);
    let (batcher, batching) = Batcher::start(
        publisher.clone(),
        gate.clone(),
        confirmations.clone(),
        names.orders_queue(),
        BatchSettings {
            window: settings.seckill.batch_window(),
            max_requests: settings.seckill.batch_max_requests,
            capacity: settings.seckill.max_in_flight,
        },
        lifecycle.cancel.clone(),
    );
    lifecycle.spawn(batching);
    let state = web::Data::new(AppState {
        settings: settings.seckill.clone(),
        sales: SaleBook::new(stock.clone()),
        gate,
        scripts,
        transfers,
        publisher,
        batcher,
        stock,
        orders: OrderClient::new(&settings.upstreams, trust.clone())?,
        names: names.clone(),
        confirmations,
        retry_delay_ms: settings.amqp.retry_delay_ms,
        confirm_timeout_ms: settings.amqp.confirm_timeout_ms,
        in_flight: InFlight::new(settings.seckill.limits()?, "seckill", "seckill_requests_shed_total"),
        rooms,
    });

    // Warm-up in the background: a stock-service still starting must not stop this one; a
    // sale not warmed yet loads on its first request.
    let warming = state.clone();
    lifecycle.spawn(async move {
        match rebuild::warm_up(&warming).await {
            Ok(n) => tracing::info!(sales = n, "sales warmed up"),
            Err(e) => tracing::warn!(error = %e, "warm-up failed; sales load on first request"),
        }
    });
    lifecycle.spawn(reconcile::run(state.clone(), lifecycle.cancel.clone()));
    lifecycle.spawn(room::ticker::run(state.clone(), lifecycle.cancel.clone()));
    let restocks = broker.consumer(
        format!("{SERVICE}-restock"),
        Source::Queue(names.restock_queue()),
        Peer::Stock,
        trust.clone(),
    )?;
    let s = state.clone();
    lifecycle.spawn(consumer::run(settings.amqp.clone(), restocks, lifecycle.cancel.clone(), move |inbox| {
        broadcast::handle_restocks(s.clone(), inbox)
    }));
    // A broadcast is one small message for every replica: handled a hundred at a time.
    let broadcasts = broker
        .consumer(
            format!("{SERVICE}-broadcast"),
            Source::Fanout(names.broadcast_exchange()),
            Peer::Seckill,
            trust.clone(),
        )?
        .batches(ConsumerSpec::PREFETCH, 100);
    let s = state.clone();
    lifecycle.spawn(consumer::run(
        settings.amqp.clone(),
        broadcasts,
        lifecycle.cancel.clone(),
        move |inbox| broadcast::handle_broadcasts(s.clone(), inbox),
    ));
    let closing = state.clone();
    lifecycle.at_shutdown(async move { closing.publisher.close().await });

    seckill_web::serve_internal(&settings.http, STANDARD_PORT, trust, state, routes::configure, lifecycle)
}
