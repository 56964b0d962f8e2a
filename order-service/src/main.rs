//! order-service binary: the shared runner (`seckill_web::runner`) reads the settings, starts the
//! logs, and migrates (`order-service migrate`) or serves until SIGTERM.

seckill_web::service_main!(order_service::configuration::Settings);
