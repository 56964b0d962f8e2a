//! order-service binary: the shared runner (`seckill_web::runner`) reads the settings, starts the
//! logs, and migrates (`order-service migrate`) or serves until SIGTERM.

// Many small, short-lived allocations on every request, across threads, took glibc's malloc
// about a fifth of the CPU under load (perf); mimalloc takes much less.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    seckill_web::runner::run::<order_service::configuration::Settings>()
}
