//! What the handlers share.

use std::sync::Arc;

use seckill_infra::amqp::Publisher;

use crate::fulfil::Fulfiller;
use crate::releases::Releaser;

pub struct AppState {
    pub fulfiller: Arc<Fulfiller>,
    pub releaser: Arc<Releaser>,
    pub publisher: Arc<Publisher>,
}
