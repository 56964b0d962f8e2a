//! What the handlers share.

use std::sync::Arc;

use seckill_common::amqp::AmqpNames;
use seckill_infra::amqp::Publisher;
use seckill_infra::stock_client::StockClient;

use crate::configuration::SeckillSettings;
use crate::confirmations::Confirmations;
use crate::gate::Gate;
use crate::sales::SaleBook;

pub struct AppState {
    pub settings: SeckillSettings,
    pub gate: Arc<Gate>,
    pub sales: SaleBook,
    pub publisher: Publisher,
    pub stock: Arc<StockClient>,
    pub names: AmqpNames,
    pub confirmations: Confirmations,
}
