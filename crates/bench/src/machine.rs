//! The machine a run measured: where its CPU time went during the run (from `/proc/stat` and
//! every `/proc/<pid>/stat`), so a figure disturbed by someone else's build says so; and the
//! static facts (cores, memory, CPU model, kernel) for BENCHMARKS.md.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// Kernel clock ticks per second (`getconf CLK_TCK`; 100 on every Linux this runs on).
const TICKS_PER_SEC: f64 = 100.0;

/// Process names that belong to the measured system or its tools; anything else using CPU
/// during a run is a disturbance.
const OURS: &[&str] = &[
    "gateway",
    "seckill-service",
    "order-service",
    "stock-service",
    "seckill-bench",
    "seckill_bench-", // the test binary (its name is cut to 15 characters)
    "redis-server",
    "beam.smp",
    "erl_child_setup",
    "inet_gethost",
    "epmd",
    "postgres",
    "pgbench",
    "redis-benchmark",
];

/// Kernel threads that do the network and timer work of the run itself.
fn is_kernel(comm: &str) -> bool {
    ["ksoftirqd", "kworker", "rcu_", "migration", "kthreadd", "kcompactd", "kdamond"]
        .iter()
        .any(|p| comm.starts_with(p))
}

/// Kernel threads grouped by kind (`kworker/1:2-events` -> `kworker`), processes by name.
fn group_name(comm: &str) -> String {
    if is_kernel(comm) {
        comm.split(['/', '-', ':']).next().unwrap_or(comm).to_owned()
    } else {
        comm.to_owned()
    }
}

fn is_ours(comm: &str) -> bool {
    OURS.iter().any(|o| comm.starts_with(o))
}

/// Busy and total ticks of all cores, and each live process's name and ticks.
#[derive(Debug, Clone)]
pub struct CpuSnapshot {
    at: Instant,
    busy: u64,
    total: u64,
    procs: HashMap<u32, (String, u64)>,
}

/// Busy and total ticks from the first line of `/proc/stat`.
pub fn parse_proc_stat(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    if v.len() < 4 {
        return None;
    }
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let total: u64 = v.iter().take(8).sum();
    let idle = v[3] + v.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// Name and user+system ticks from the text of `/proc/<pid>/stat`.
pub fn parse_pid_stat(text: &str) -> Option<(String, u64)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_owned();
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // After the name: state is field 3, utime field 14, stime field 15.
    let utime: u64 = rest.get(11)?.parse().ok()?;
    let stime: u64 = rest.get(12)?.parse().ok()?;
    Some((comm, utime + stime))
}

pub fn snapshot() -> CpuSnapshot {
    let (busy, total) =
        std::fs::read_to_string("/proc/stat").ok().and_then(|t| parse_proc_stat(&t)).unwrap_or((0, 0));
    let mut procs = HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(p) =
                std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|t| parse_pid_stat(&t))
            {
                procs.insert(pid, p);
            }
        }
    }
    CpuSnapshot { at: Instant::now(), busy, total, procs }
}

/// CPU use of one process name during a run, in cores (1.0 = one core busy all the time).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcCpu {
    pub name: String,
    pub cores: f64,
    pub ours: bool,
}

/// Where the CPU went during a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuReport {
    pub wall_secs: f64,
    pub cores: usize,
    /// Busy fraction of the whole machine (1.0 = every core busy).
    pub busy: f64,
    /// The busiest process names, ours and others.
    pub by_process: Vec<ProcCpu>,
    /// Cores used by processes the measurement does not involve (not of the system under
    /// test, the tool, the servers it uses or the kernel), including processes that started and
    /// ended within the run (compilers, linkers).
    pub others_cores: f64,
    /// True when others used more than 0.15 of a core over a run of a second or more: the
    /// figures are disturbed.
    pub disturbed: bool,
}

impl CpuReport {
    /// "other processes used 0.52 cores during the run (postgres 0.48, ...): ..." for a note.
    pub fn disturbance(&self) -> String {
        format!(
            "processes this measurement does not use took {:.2} cores during it ({}): the figures are disturbed",
            self.others_cores,
            self.busiest_others(5)
        )
    }

    /// The `n` busiest processes the measurement does not use, with their cores
    /// ("postgres 0.48, kworker 0.02").
    pub fn busiest_others(&self, n: usize) -> String {
        let names: Vec<String> = self
            .by_process
            .iter()
            .filter(|p| !p.ours && p.cores >= 0.01)
            .take(n)
            .map(|p| format!("{} {:.2}", p.name, p.cores))
            .collect();
        if names.is_empty() { "short-lived processes".into() } else { names.join(", ") }
    }
}

pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Which processes a measurement is expected to use: anything else busy during it is a
/// disturbance (another session's build, tests or copy of the system on the same servers).
#[derive(Debug, Clone, Default)]
pub struct Involved {
    /// Process name prefixes the measurement uses (`None`: every name of the system).
    pub names: Option<Vec<&'static str>>,
    /// The processes of the system under test (from `run/*.pid`, `--pid`): another process
    /// with one of their names is someone else's copy, shown as `<name> (not ours)`.
    pub tracked: Vec<crate::memory::ProcTarget>,
}

impl Involved {
    /// A measurement of the whole system (the scenarios).
    pub fn system(tracked: Vec<crate::memory::ProcTarget>) -> Self {
        Self { names: None, tracked }
    }

    /// A measurement that only uses processes named with these prefixes (the baselines).
    pub fn only(names: &[&'static str], tracked: Vec<crate::memory::ProcTarget>) -> Self {
        Self { names: Some(names.to_vec()), tracked }
    }

    fn name_of(&self, pid: u32, comm: &str) -> String {
        let tracked_name = |t: &crate::memory::ProcTarget| {
            t.name.get(..15).unwrap_or(&t.name) == comm || t.name.starts_with(comm)
        };
        if self.tracked.iter().any(|t| t.pid == pid) {
            return group_name(comm);
        }
        if !is_kernel(comm) && self.tracked.iter().any(tracked_name) {
            return format!("{comm} (not ours)");
        }
        group_name(comm)
    }

    fn uses(&self, name: &str) -> bool {
        if is_kernel(name) {
            return true;
        }
        if name.ends_with("(not ours)") {
            return false;
        }
        match &self.names {
            None => is_ours(name),
            Some(names) => names.iter().any(|n| name.starts_with(n)),
        }
    }
}

/// What happened between two snapshots.
pub fn cpu_between(a: &CpuSnapshot, b: &CpuSnapshot, involved: &Involved) -> CpuReport {
    let wall_secs = b.at.duration_since(a.at).as_secs_f64().max(1e-3);
    let mut by_name: BTreeMap<String, u64> = BTreeMap::new();
    for (pid, (comm, ticks)) in &b.procs {
        // By pid alone: a kernel worker's name changes with the work it does.
        let before = a.procs.get(pid).map_or(0, |(_, t)| *t);
        let delta = if *ticks >= before { ticks - before } else { *ticks };
        *by_name.entry(involved.name_of(*pid, comm)).or_default() += delta;
    }
    let seen: u64 = by_name.values().sum();
    let busy_ticks = b.busy.saturating_sub(a.busy);
    let total_ticks = b.total.saturating_sub(a.total).max(1);
    let to_cores = |ticks: u64| ticks as f64 / TICKS_PER_SEC / wall_secs;
    let visible_others: u64 = by_name.iter().filter(|(n, _)| !involved.uses(n)).map(|(_, t)| *t).sum();
    // Busy time no live process accounts for: processes that ended during the run (ours do
    // not end) and interrupt work. Counted as others' when large.
    let unaccounted = busy_ticks.saturating_sub(seen);
    let others_cores = to_cores(visible_others) + (to_cores(unaccounted) - 0.05).max(0.0);
    let mut by_process: Vec<ProcCpu> = by_name
        .into_iter()
        .filter(|(_, t)| *t > 0)
        .map(|(name, t)| ProcCpu { ours: involved.uses(&name), cores: to_cores(t), name })
        .collect();
    by_process.sort_by(|x, y| y.cores.total_cmp(&x.cores));
    by_process.truncate(12);
    CpuReport {
        wall_secs,
        cores: cores(),
        busy: busy_ticks as f64 / total_ticks as f64,
        by_process,
        others_cores,
        // Under a second, a compiler starting or ending swings the figure: not judged.
        disturbed: others_cores > 0.15 && wall_secs >= 1.0,
    }
}

/// Static facts about this machine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineFacts {
    pub nproc: usize,
    pub memory_mib: u64,
    pub cpu_model: String,
    pub kernel: String,
}

pub fn facts() -> MachineFacts {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpu_model = read("/proc/cpuinfo")
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_owned())
        .unwrap_or_else(|| "unknown".into());
    let memory_mib = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib / 1_024);
    MachineFacts {
        nproc: cores(),
        memory_mib,
        cpu_model,
        kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_baseline_counts_the_servers_it_does_not_use_as_disturbance() {
        let proc = |name: &str, ticks: u64| (name.to_owned(), ticks);
        let at = Instant::now();
        let a = CpuSnapshot {
            at,
            busy: 0,
            total: 0,
            procs: HashMap::from([
                (1, proc("gateway", 0)),
                (2, proc("postgres", 0)),
                (3, proc("gateway", 0)),
            ]),
        };
        let b = CpuSnapshot {
            at: at + std::time::Duration::from_secs(1),
            busy: 150,
            total: 200,
            procs: HashMap::from([
                (1, proc("gateway", 100)),
                (2, proc("postgres", 30)),
                (3, proc("gateway", 20)),
            ]),
        };
        let tracked = vec![crate::memory::ProcTarget { name: "gateway".into(), pid: 1 }];
        let r = cpu_between(&a, &b, &Involved::only(&["gateway", "seckill-bench"], tracked.clone()));
        assert!((r.others_cores - 0.5).abs() < 1e-9, "{r:?}");
        assert!(r.by_process.iter().any(|p| p.name == "gateway (not ours)" && !p.ours), "{r:?}");
        assert!(r.disturbed);
        // The same run judged as a measurement of the whole system: postgres is ours.
        let r = cpu_between(&a, &b, &Involved::system(tracked));
        assert!((r.others_cores - 0.2).abs() < 1e-9, "{r:?}");
    }

    #[test]
    fn proc_stat_lines_are_parsed() {
        let t = "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4\n";
        assert_eq!(parse_proc_stat(t), Some((150, 1_000)));
        let p = "1234 (seckill-service) S 1 2 3 4 5 6 7 8 9 10 300 40 0 0 20 0 8";
        assert_eq!(parse_pid_stat(p), Some(("seckill-service".into(), 340)));
        let odd = "77 (a (b) c) R 1 2 3 4 5 6 7 8 9 10 5 6 0";
        assert_eq!(parse_pid_stat(odd), Some(("a (b) c".into(), 11)));
    }

    #[test]
    fn others_are_told_apart_from_the_system() {
        assert!(is_ours("seckill-service") && is_ours("beam.smp") && is_ours("postgres"));
        assert!(!is_ours("rustc") && !is_ours("cc1"));
        assert!(is_kernel("ksoftirqd/0") && is_kernel("kworker/u8:1"));
        assert_eq!(group_name("kworker/1:2-events_freezable"), "kworker");
        assert_eq!(group_name("seckill-service"), "seckill-service");
        let proc = |name: &str, ticks: u64| (name.to_owned(), ticks);
        let a = CpuSnapshot {
            at: Instant::now(),
            busy: 0,
            total: 0,
            procs: HashMap::from([(1, proc("gateway", 0)), (2, proc("rustc", 0))]),
        };
        let b = CpuSnapshot {
            at: a.at + std::time::Duration::from_secs(1),
            busy: 140,
            total: 200,
            procs: HashMap::from([(1, proc("gateway", 80)), (2, proc("rustc", 60))]),
        };
        let mut a = a;
        a.procs.insert(3, proc("kworker/0:1-events", 5_000));
        let mut b = b;
        b.procs.insert(3, proc("kworker/0:1-mm_percpu_wq", 5_000));
        let r = cpu_between(&a, &b, &Involved::default());
        assert!((r.busy - 0.7).abs() < 1e-9);
        assert_eq!(r.by_process[0].name, "gateway");
        assert!((r.others_cores - 0.6).abs() < 1e-9, "{r:?}");
        assert!(r.disturbed);
    }
}
