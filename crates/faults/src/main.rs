//! `seckill-faults`: the fault suite (scripts/faults.sh builds it and runs it; it starts private
//! servers of its own). Exits 0 when every case passed, 3 when a case broke an invariant, 1 on an error.

use std::process::ExitCode;

use clap::Parser;
use seckill_faults::{CaseResult, Config, cases};

/// A case broke an invariant (as the load tool exits when a run's check broke).
const EXIT_INVARIANT: u8 = 3;

fn main() -> ExitCode {
    let cfg = Config::parse();
    if cfg.list {
        return match list(&cfg) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("seckill-faults: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("seckill-faults: no tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if cfg.clean {
        return match rt.block_on(seckill_faults::clean(&cfg)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("seckill-faults: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    match rt.block_on(seckill_faults::run(&cfg)) {
        Ok(results) if results.iter().all(CaseResult::passed) => ExitCode::SUCCESS,
        Ok(_) => {
            eprintln!("seckill-faults: a case broke an invariant (see above)");
            ExitCode::from(EXIT_INVARIANT)
        }
        Err(e) => {
            eprintln!("seckill-faults: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `--list`: the cases named (their names checked; scripts/faults.sh does so before it starts
/// any server), the CI subset with `--quick` alone, or all of them.
fn list(cfg: &Config) -> anyhow::Result<()> {
    let timing = cases::Timing::new(cfg.quick);
    let cases = if cfg.cases.is_empty() && !cfg.quick {
        cases::all(timing)
    } else {
        cases::select(timing, cfg.quick, &cfg.cases)?
    };
    for c in cases {
        let quick = if cases::QUICK.contains(&c.name.as_str()) { " [quick]" } else { "" };
        println!("{:<18} {}{quick}", c.name, c.fault);
    }
    Ok(())
}
