//! seckill-service binary: the shared runner (`seckill_web::runner`) reads the settings,
//! starts the logs and serves until SIGTERM.

seckill_web::service_main!(seckill_service::configuration::Settings);
