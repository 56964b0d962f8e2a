//! The whole system, in-process on port 0, against the real PostgreSQL, Redis and RabbitMQ:
//! each test has its own databases, Redis key prefix and queue names.

mod bad_input;
mod flash_sale;
mod helpers;
mod lifecycle;
mod purchase;
mod queues;
