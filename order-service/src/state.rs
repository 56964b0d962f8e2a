//! What the handlers share.

use std::sync::Arc;

use seckill_common::ready::Readiness;
use seckill_db::{Database, PgPool};
use seckill_infra::amqp::Publisher;

use crate::fulfil::Fulfiller;
use crate::releases::Releaser;

pub struct AppState {
    /// The handlers' own way to the database (the consumers hold theirs).
    pub pool: PgPool,
    /// For `/readyz`: migrated yet, and answering.
    pub database: Database,
    /// For `/readyz`: the scripts loaded into Redis yet.
    pub scripts: Arc<Readiness>,
    /// For `/readyz`: the Redis the results are written to.
    pub fulfiller: Arc<Fulfiller>,
    /// Sends a cancelled order's release.
    pub releaser: Arc<Releaser>,
    /// For `/readyz`: the broker connection.
    pub publisher: Arc<Publisher>,
}
