//! Signals to the processes of the system under test (pause, resume, graceful stop): the
//! `kill(2)` system call through rustix's safe wrapper, no `kill` subprocess.

use anyhow::Context;
pub use rustix::process::Signal;
use rustix::process::{Pid, kill_process};

/// Sends `sig` to the process `pid`. Pid 0 and pids beyond `i32` are refused: `kill(2)` would
/// read them as a process group or every process.
pub fn send(pid: u32, sig: Signal) -> anyhow::Result<()> {
    let target = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .filter(|p| p.as_raw_nonzero().get() > 0)
        .with_context(|| format!("{pid} is not a process id"))?;
    kill_process(target, sig).with_context(|| format!("sending {sig:?} to pid {pid}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_reach_a_live_process_and_odd_pids_are_refused() {
        // SIGCONT to a running process changes nothing.
        send(std::process::id(), Signal::CONT).unwrap();
        assert!(send(0, Signal::CONT).is_err());
        assert!(send(u32::MAX, Signal::CONT).is_err());
        assert!(send(999_999_999, Signal::CONT).is_err());
    }
}
