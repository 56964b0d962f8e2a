//! What the handlers share.

use std::sync::Arc;

use seckill_common::amqp::AmqpNames;
use seckill_common::ready::Readiness;
use seckill_infra::amqp::Publisher;
use seckill_infra::order_client::OrderClient;
use seckill_infra::stock_client::StockClient;
use seckill_web::shed::InFlight;

use crate::batcher::Batcher;
use crate::buckets::Transfers;
use crate::configuration::SeckillSettings;
use crate::confirmations::Confirmations;
use crate::gate::Gate;
use crate::room::Rooms;
use crate::sales::SaleBook;

pub struct AppState {
    pub settings: SeckillSettings,
    pub gate: Arc<Gate>,
    /// For `/readyz`: the scripts loaded into Redis yet.
    pub scripts: Arc<Readiness>,
    /// Moves units between the buckets of a sale split over several.
    pub transfers: Transfers,
    pub sales: SaleBook,
    pub publisher: Arc<Publisher>,
    /// Gathers accepted requests into confirmed messages.
    pub batcher: Batcher,
    pub stock: Arc<StockClient>,
    pub orders: OrderClient,
    pub names: AmqpNames,
    pub confirmations: Confirmations,
    /// `amqp.retry_delay_ms`: names the orders queue's retry queue, whose waiting requests a
    /// rebuild counts.
    pub retry_delay_ms: u64,
    /// `amqp.confirm_timeout_ms`: the longest a publish of a lost epoch may still land.
    pub confirm_timeout_ms: u64,
    /// `seckill.*_in_flight`: the requests that reach Redis, under a bound that follows their
    /// latency.
    pub in_flight: InFlight,
    /// The waiting rooms of the sales that have one.
    pub rooms: Rooms,
}
