//! The gateway binary: the shared runner (`seckill_web::runner`) reads the settings, starts
//! the logs and serves until SIGTERM or Ctrl-C.

seckill_web::service_main!(gateway::configuration::Settings);
