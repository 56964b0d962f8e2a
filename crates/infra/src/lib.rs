//! Redis and RabbitMQ plumbing shared by seckill-service and order-service: the Redis pool and
//! the buy-path scripts, the AMQP connection, the queue topology (declared in one place), and
//! a publisher that waits for the broker's confirms.

pub mod amqp;
pub mod redis;
