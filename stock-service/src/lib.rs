//! stock-service: the authority on goods and stock. Owns the stock database; deducts and
//! releases stock idempotently, keyed by the caller's order key; consumes the releases of
//! cancelled and expired orders and forwards each to seckill-service once it is done here.

pub mod configuration;
pub mod goods;
pub mod ledger;
pub mod releases;
pub mod rooms;
pub mod routes;
pub mod schema;
pub mod startup;
pub mod state;

pub use configuration::Settings;
