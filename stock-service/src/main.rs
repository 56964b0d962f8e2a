//! stock-service binary: the shared runner (`seckill_web::runner`) reads the settings, starts the
//! logs, and migrates (`stock-service migrate`) or serves until SIGTERM.

seckill_web::service_main!(stock_service::configuration::Settings);
