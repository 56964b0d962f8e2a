//! order-service on its own: a real stock-service to deduct at, real PostgreSQL, Redis and
//! RabbitMQ under this test's own names; the test plays seckill-service (the reservation in
//! Redis, the signed buy request) and the gateway (the signed identity).

mod batches;
mod expiry;
mod fulfil;
mod helpers;
mod internal;
mod orders;
mod read_bounds;
mod startup;
mod sweeper;
