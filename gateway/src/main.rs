//! The gateway binary: configuration, telemetry, build, serve until SIGTERM or Ctrl-C.

use gateway::configuration::Settings;

// Many small, short-lived allocations on every request, across threads: glibc's malloc took
// about a fifth of the CPU under load (perf); mimalloc takes much less.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let settings = match Settings::load() {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("gateway: {e}");
            std::process::exit(1);
        }
    };
    seckill_common::telemetry::init(&settings.log);
    let app = gateway::startup::build(settings).await?;
    app.run_until_stopped(seckill_web::shutdown_signal()).await?;
    Ok(())
}
