//! The whole system, in-process on port 0, against the real PostgreSQL, Redis and RabbitMQ:
//! each test has its own databases, Redis key prefix and queue names.

mod bad_input;
mod buckets;
mod cluster;
mod flash_sale;
mod forwarded_headers;
mod history;
/// The harness, under the name the tests use.
mod helpers {
    pub use seckill_e2e::*;
}
mod lifecycle;
mod purchase;
mod push;
mod queues;
mod read_bounds;
mod redis_loss;
mod room;
mod sale_input;
mod security;
mod storefront;
mod storm;
mod web_server;
