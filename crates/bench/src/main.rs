//! `seckill-bench`: see `seckill-bench --help` and the crate documentation.

fn main() -> std::process::ExitCode {
    seckill_bench::cli::main()
}
