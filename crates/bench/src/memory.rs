//! Each service's memory during a run: VmRSS sampled from `/proc/<pid>/status` (read with
//! `procfs`) while the clock
//! runs (the peak of the run itself), and VmHWM at the end (the peak of the process's whole
//! life, earlier runs included). Pids come from `run/*.pid` (scripts/up.sh writes them) and
//! from `--pid name=PID`.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A process to watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcTarget {
    pub name: String,
    pub pid: u32,
}

impl ProcTarget {
    /// Parses `name=PID`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let (name, pid) = s.split_once('=').ok_or_else(|| format!("`{s}`: expected name=PID"))?;
        let pid = pid.trim().parse().map_err(|_| format!("`{s}`: PID must be a number"))?;
        Ok(Self { name: name.trim().into(), pid })
    }
}

/// Every live process named by a `<dir>/<name>.pid` file, then `extra`.
pub fn discover(dir: &Path, extra: &[ProcTarget]) -> Vec<ProcTarget> {
    let mut found = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "pid") {
                continue;
            }
            let (Some(name), Ok(text)) =
                (path.file_stem().and_then(|s| s.to_str()), std::fs::read_to_string(&path))
            else {
                continue;
            };
            if let Ok(pid) = text.trim().parse::<u32>()
                && read_status(pid).is_some()
            {
                found.push(ProcTarget { name: name.into(), pid });
            }
        }
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    for e in extra {
        found.retain(|f| f.name != e.name);
        found.push(e.clone());
    }
    found
}

/// VmRSS and VmHWM in KiB of a live process (`None`: it is gone, or not a process id).
fn read_status(pid: u32) -> Option<(Option<u64>, Option<u64>)> {
    let status = procfs::process::Process::new(i32::try_from(pid).ok()?).ok()?.status().ok()?;
    Some((status.vmrss, status.vmhwm))
}

/// A process's memory over one run, in MiB.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcMemory {
    pub name: String,
    pub pid: u32,
    /// The largest VmRSS sampled during the run.
    pub peak_rss_mib: f64,
    /// VmRSS at the end of the run.
    pub end_rss_mib: f64,
    /// VmHWM at the end: the process's peak over its whole life so far.
    pub vm_hwm_mib: f64,
    pub samples: u64,
    /// False when the process went away during the run.
    pub alive_at_end: bool,
}

/// Samples VmRSS of each target every `every` on a thread of its own until stopped.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<ProcMemory>>>,
}

impl Sampler {
    pub fn start(targets: Vec<ProcTarget>, every: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut peaks = vec![(0u64, 0u64); targets.len()];
            loop {
                let last = flag.load(Ordering::Relaxed);
                for (t, (peak, n)) in targets.iter().zip(peaks.iter_mut()) {
                    if let Some((Some(rss), _)) = read_status(t.pid) {
                        *peak = (*peak).max(rss);
                        *n += 1;
                    }
                }
                if last {
                    break;
                }
                std::thread::sleep(every);
            }
            let mib = |kib: u64| kib as f64 / 1_024.0;
            targets
                .iter()
                .zip(peaks)
                .map(|(t, (peak, samples))| {
                    let status = read_status(t.pid);
                    let (rss, hwm) = status.unwrap_or((None, None));
                    ProcMemory {
                        name: t.name.clone(),
                        pid: t.pid,
                        peak_rss_mib: mib(peak.max(rss.unwrap_or(0))),
                        end_rss_mib: mib(rss.unwrap_or(0)),
                        vm_hwm_mib: mib(hwm.unwrap_or(0)),
                        samples,
                        alive_at_end: status.is_some(),
                    }
                })
                .collect()
        });
        Self { stop, thread: Some(thread) }
    }

    /// Takes a last sample and returns the figures.
    pub fn stop(mut self) -> Vec<ProcMemory> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or_default()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields_are_read_in_kib() {
        let (rss, hwm) = read_status(std::process::id()).unwrap();
        let (rss, hwm) = (rss.unwrap(), hwm.unwrap());
        // More than a MiB and less than a TiB: KiB, not bytes or pages.
        assert!(rss > 1_024 && rss < 1 << 30 && hwm >= rss, "{rss} {hwm}");
        assert_eq!(read_status(999_999_999), None);
    }

    #[test]
    fn targets_are_parsed_and_this_process_is_sampled() {
        assert_eq!(ProcTarget::parse("gateway=42").unwrap(), ProcTarget { name: "gateway".into(), pid: 42 });
        assert!(ProcTarget::parse("gateway").is_err());
        assert!(ProcTarget::parse("gateway=x").is_err());

        let me = ProcTarget { name: "self".into(), pid: std::process::id() };
        let sampler = Sampler::start(vec![me], Duration::from_millis(5));
        std::thread::sleep(Duration::from_millis(30));
        let mem = sampler.stop();
        assert_eq!(mem.len(), 1);
        assert!(mem[0].samples >= 2, "{mem:?}");
        assert!(mem[0].peak_rss_mib > 0.0 && mem[0].vm_hwm_mib >= mem[0].end_rss_mib * 0.5);
        assert!(mem[0].alive_at_end);
    }

    #[test]
    fn pid_files_name_the_processes() {
        let dir = std::env::temp_dir().join(format!("seckill-bench-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("gateway.pid"), format!("{}\n", std::process::id())).unwrap();
        std::fs::write(dir.join("dead.pid"), "999999999\n").unwrap();
        std::fs::write(dir.join("notes.txt"), "1\n").unwrap();
        let extra = ProcTarget { name: "other".into(), pid: 1 };
        let found = discover(&dir, std::slice::from_ref(&extra));
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].name, "gateway");
        assert_eq!(found[1], extra);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
