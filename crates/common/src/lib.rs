//! Wire types and shared plumbing of the seckill services.
//!
//! Everything two services must agree on lives here, once: the HTTP bodies, the error codes,
//! the AMQP messages, the Redis key names, the AMQP names, the header names, configuration
//! loading and tracing set-up. No database or web framework types: each service converts.

pub mod amqp;
pub mod api;
pub mod config;
pub mod error;
pub mod headers;
pub mod ids;
pub mod keys;
pub mod listing;
pub mod push;
pub mod ready;
pub mod room;
pub mod sale;
pub mod scripts;
pub mod shutdown;
pub mod telemetry;
pub mod trust;

pub use error::{ErrorBody, ErrorCode};
pub use ids::{GoodsId, OrderId, UserId};
pub use shutdown::shutdown_signal;
