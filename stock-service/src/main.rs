//! stock-service binary: wiring only.

use stock_service::{Settings, startup};

// The same allocator as the gateway and seckill-service, where glibc's malloc took about a
// fifth of the CPU under load (perf) and mimalloc much less.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let settings = match Settings::load() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("stock-service: {e}");
            std::process::exit(1);
        }
    };
    seckill_common::telemetry::init(&settings.log);
    // `<binary> migrate`: prepare the database and exit (a pre-rollout Job or init container).
    if std::env::args().nth(1).as_deref() == Some("migrate") {
        startup::migrate(&settings).await?;
        tracing::info!("database ready");
        return Ok(());
    }
    let app = startup::build(settings).await?;
    app.run_until_stopped(seckill_web::shutdown_signal()).await?;
    Ok(())
}
