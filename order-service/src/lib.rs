//! order-service: turns accepted buy requests into orders. Consumes `seckill.orders` in
//! batches, deducts at stock-service (the authority), writes the orders, tells the buyer
//! through Redis, and only then acks. Serves the buyer's orders.

pub mod configuration;
pub mod consumer;
pub mod fulfil;
pub mod orders;
pub mod results;
pub mod routes;
pub mod schema;
pub mod startup;

pub use configuration::Settings;
