//! seckill-service binary: wiring only.

use seckill_service::{Settings, startup};

// Many small, short-lived allocations on every request, across threads: glibc's malloc took
// about a fifth of the CPU under load (perf); mimalloc takes much less.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
