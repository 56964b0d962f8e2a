//! order-service: turns accepted buy requests into orders. Consumes `seckill.orders` in
//! batches, deducts at stock-service (the authority), writes the orders, tells the buyer
//! through Redis, and only then acks. Serves the buyer's orders and their life: pay, cancel,
//! expiry through a TTL queue, and the release of the unit of every cancelled or expired order.

pub mod configuration;
pub mod consumer;
pub mod fulfil;
pub mod orders;
pub mod pace;
pub mod releases;
pub mod results;
pub mod routes;
pub mod schema;
pub mod startup;
pub mod state;

pub use configuration::Settings;
