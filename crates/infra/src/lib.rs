//! Redis and RabbitMQ plumbing shared by seckill-service and order-service: the shared Redis connection and
//! the buy-path scripts, the AMQP connection, the queue topology (declared in one place), and
//! a publisher that waits for the broker's confirms, and the typed clients of stock-service
//! and order-service.

pub mod amqp;
pub mod broker_use;
pub mod consumer;
pub mod order_client;
pub mod redis;
pub mod stock_client;
pub mod upstream;

/// True when the error chain holds an outage of Redis, the broker or stock-service (after its
/// retries): consumers then hand messages back without counting a try against them.
pub fn is_outage(e: &anyhow::Error) -> bool {
    use ::redis::RedisError;
    e.chain().any(|cause| {
        if let Some(e) = cause.downcast_ref::<RedisError>() {
            return e.is_io_error()
                || e.is_connection_dropped()
                || e.is_connection_refusal()
                || e.is_timeout()
                // A cluster in a failover or resharding, or with no node for a slot.
                || e.is_cluster_error()
                || matches!(
                    e.kind(),
                    ::redis::ErrorKind::ClusterConnectionNotFound
                        | ::redis::ErrorKind::Server(::redis::ServerErrorKind::MasterDown)
                );
        }
        if let Some(e) = cause.downcast_ref::<upstream::UpstreamError>() {
            return matches!(e, upstream::UpstreamError::Unavailable(_));
        }
        cause
            .downcast_ref::<amqp::PublishError>()
            .is_some_and(|e| !matches!(e, amqp::PublishError::Undeclared { .. }))
            || cause.is::<lapin::Error>()
    })
}
