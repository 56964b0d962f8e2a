//! seckill-service binary: wiring only.

use seckill_service::{Settings, startup};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let settings = match Settings::load() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("seckill-service: {e}");
            std::process::exit(1);
        }
    };
    seckill_common::telemetry::init(&settings.log);
    let app = startup::build(settings).await?;
    app.run_until_stopped(seckill_web::shutdown_signal()).await?;
    Ok(())
}
