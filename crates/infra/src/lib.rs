//! Redis and RabbitMQ plumbing shared by seckill-service and order-service: the Redis pool and
//! the buy-path scripts, the AMQP connection, the queue topology (declared in one place), and
//! a publisher that waits for the broker's confirms, and the typed client of stock-service.

pub mod amqp;
pub mod redis;
pub mod stock_client;
