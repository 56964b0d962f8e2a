//! The machine a run measured: where its CPU time went during the run (from `/proc/stat` and
//! every `/proc/<pid>/stat`, read with `procfs`), so a figure disturbed by someone else's build
//! says so; and the static facts (cores, memory, CPU model, kernel) for BENCHMARKS.md.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use procfs::process::Stat;
use procfs::{Current, CurrentSI, Meminfo};
use serde::{Deserialize, Serialize};

use crate::memory::{ProcMemory, ProcTarget, Sampler};

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
    /// The kernel's clock ticks per second (`CLK_TCK`), to turn ticks into time.
    ticks_per_sec: u64,
    procs: HashMap<u32, (String, u64)>,
}

/// Busy and total ticks of all cores (the `cpu` line of `/proc/stat`).
fn busy_and_total(cpu: &procfs::CpuTime) -> (u64, u64) {
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let iowait = cpu.iowait.unwrap_or(0);
    let total = [cpu.user, cpu.nice, cpu.system, cpu.idle, iowait]
        .into_iter()
        .chain([cpu.irq, cpu.softirq, cpu.steal].into_iter().flatten())
        .sum::<u64>();
    let idle = cpu.idle + iowait;
    (total - idle, total)
}

/// A process's name and user+system ticks (`/proc/<pid>/stat`).
fn name_and_ticks(stat: Stat) -> Option<(u32, (String, u64))> {
    Some((u32::try_from(stat.pid).ok()?, (stat.comm, stat.utime + stat.stime)))
}

pub fn snapshot() -> CpuSnapshot {
    let (busy, total) = procfs::KernelStats::current().map_or((0, 0), |k| busy_and_total(&k.total));
    // A process that ends while the list is read is simply left out.
    let procs = procfs::process::all_processes()
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|p| p.stat().ok())
        .filter_map(name_and_ticks)
        .collect();
    CpuSnapshot { at: Instant::now(), busy, total, ticks_per_sec: procfs::ticks_per_second(), procs }
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
    pub tracked: Vec<ProcTarget>,
}

impl Involved {
    /// A measurement of the whole system (the scenarios).
    pub fn system(tracked: Vec<ProcTarget>) -> Self {
        Self { names: None, tracked }
    }

    /// A measurement that only uses processes named with these prefixes (the baselines).
    pub fn only(names: &[&'static str], tracked: Vec<ProcTarget>) -> Self {
        Self { names: Some(names.to_vec()), tracked }
    }

    fn name_of(&self, pid: u32, comm: &str) -> String {
        let tracked_name =
            |t: &ProcTarget| t.name.get(..15).unwrap_or(&t.name) == comm || t.name.starts_with(comm);
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

/// A measurement's CPU and memory, watched from its start.
pub struct Watch {
    cpu_before: CpuSnapshot,
    sampler: Sampler,
}

impl Watch {
    /// Takes the CPU snapshot and samples the processes' memory every `every` from now on.
    pub fn start(procs: Vec<ProcTarget>, every: Duration) -> Self {
        Self { cpu_before: snapshot(), sampler: Sampler::start(procs, every) }
    }

    /// Where the CPU went since the start; `involved` says which processes the measurement uses.
    pub fn cpu(&self, involved: &Involved) -> CpuReport {
        cpu_between(&self.cpu_before, &snapshot(), involved)
    }

    /// Stops sampling: each process's memory over the measurement.
    pub fn memory(self) -> Vec<ProcMemory> {
        self.sampler.stop()
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
    let ticks_per_sec = b.ticks_per_sec.max(1) as f64;
    let to_cores = |ticks: u64| ticks as f64 / ticks_per_sec / wall_secs;
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
    let cpu_model = procfs::CpuInfo::current()
        .ok()
        .and_then(|info| info.model_name(0).map(|m| m.trim().to_owned()))
        .unwrap_or_else(|| "unknown".into());
    // procfs gives bytes.
    let memory_mib = Meminfo::current().map_or(0, |m| m.mem_total / (1_024 * 1_024));
    MachineFacts {
        nproc: cores(),
        memory_mib,
        cpu_model,
        kernel: rustix::system::uname().release().to_string_lossy().into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_baseline_counts_the_servers_it_does_not_use_as_disturbance() {
        // Pids 1 and 3 are both named gateway; only pid 1 is tracked.
        let snapshot = |at, busy, total, [gateway, postgres, other_gateway]: [u64; 3]| CpuSnapshot {
            at,
            busy,
            total,
            ticks_per_sec: 100,
            procs: HashMap::from([
                (1, ("gateway".to_owned(), gateway)),
                (2, ("postgres".to_owned(), postgres)),
                (3, ("gateway".to_owned(), other_gateway)),
            ]),
        };
        let at = Instant::now();
        let a = snapshot(at, 0, 0, [0, 0, 0]);
        let b = snapshot(at + std::time::Duration::from_secs(1), 150, 200, [100, 30, 20]);
        let tracked = vec![ProcTarget { name: "gateway".into(), pid: 1 }];
        let r = cpu_between(&a, &b, &Involved::only(&["gateway", "seckill-bench"], tracked.clone()));
        assert!((r.others_cores - 0.5).abs() < 1e-9, "{r:?}");
        assert!(r.by_process.iter().any(|p| p.name == "gateway (not ours)" && !p.ours), "{r:?}");
        assert!(r.disturbed);
        // The same run judged as a measurement of the whole system: postgres is ours.
        let r = cpu_between(&a, &b, &Involved::system(tracked));
        assert!((r.others_cores - 0.2).abs() < 1e-9, "{r:?}");
    }

    #[test]
    fn proc_stat_figures_are_read() {
        use procfs::{ExplicitSystemInfo, FromBufReadSI, FromRead, KernelStats};
        let si = ExplicitSystemInfo {
            boot_time_secs: 0,
            ticks_per_second: 100,
            page_size: 4_096,
            is_little_endian: true,
        };
        let t = "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4\nctxt 1\nbtime 1\nprocesses 1\n";
        let k = KernelStats::from_buf_read(t.as_bytes(), &si).unwrap();
        assert_eq!(busy_and_total(&k.total), (150, 1_000));
        let rest = "0 -1 4194304 99 0 0 0 300 40 0 0 20 0 1 0 430789 3133440 358 18446744073709551615 1 2 3 \
                    0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 4 5 6 7 8 9 10 0";
        let stat = |head: &str| Stat::from_read(format!("{head} {rest}").as_bytes()).unwrap();
        let p = name_and_ticks(stat("1234 (seckill-service) S 1 2 3"));
        assert_eq!(p, Some((1234, ("seckill-service".into(), 340))));
        let odd = name_and_ticks(stat("77 (a (b) c) R 1 2 3"));
        assert_eq!(odd, Some((77, ("a (b) c".into(), 340))));
    }

    #[test]
    fn a_snapshot_sees_this_process_and_the_machine() {
        let s = snapshot();
        assert!(s.total > 0 && s.busy <= s.total, "{s:?}");
        assert!(s.ticks_per_sec > 0);
        assert!(s.procs.contains_key(&std::process::id()));
        let f = facts();
        assert!(f.memory_mib > 0 && !f.kernel.is_empty(), "{f:?}");
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
            ticks_per_sec: 100,
            procs: HashMap::from([(1, proc("gateway", 0)), (2, proc("rustc", 0))]),
        };
        let b = CpuSnapshot {
            at: a.at + std::time::Duration::from_secs(1),
            busy: 140,
            total: 200,
            ticks_per_sec: 100,
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
