//! Web plumbing every seckill service shares: the error type and its JSON body, the extractors'
//! 4xx answers, request ids, Prometheus metrics, health routes, and an HTTP server with a
//! graceful shutdown that also waits for the service's background tasks.

pub mod admin;
pub mod error;
pub mod extract;
pub mod health;
pub mod keep_alive;
pub mod metrics;
pub mod read_bound;
pub mod request_id;
pub mod runner;
pub mod server;
pub mod shed;
pub mod trust;

pub use error::{ApiError, method_not_allowed};
pub use extract::AuthUser;
pub use runner::Service;
pub use seckill_common::shutdown_signal;
pub use server::{Application, Door, Lifecycle, Ticker, serve, serve_internal};
