//! seckill-service on its own: a real stock-service for the sales, a stand-in for
//! order-service's internal API, real Redis and RabbitMQ under this test's own names.

mod batch;
mod buckets;
mod buy;
mod ended;
mod helpers;
mod identity;
mod read_bounds;
mod reconcile;
mod room;
mod sale;
mod shed;
mod startup;
