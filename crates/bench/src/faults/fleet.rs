//! The four release binaries, started, killed, stopped and paused by the driver itself.
//!
//! Each runs from the scratch directory (no `config/` there, and `SECKILL_CONFIG` is not set,
//! so only built-in defaults and the environment given here apply), with an environment of its
//! own sections only (every settings struct denies unknown sections), appending to
//! `<scratch>/services/<name>.log` with a marker line per start, and its pid in
//! `<scratch>/services/<name>.pid` so scripts/faults.sh can stop what an interrupted run left.
//! Signals other than SIGKILL go through the `kill` command: no libc binding needed.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::process::{Child, Command};

use seckill_common::trust::Peer;

use super::cases::Svc;
use crate::client::{Conn, Endpoint, Req};
use crate::signal::{self, Signal};

/// How long a service may take to answer /readyz after its start.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a graceful shutdown may take before it counts as hung and is killed: the services'
/// own drain (`http.shutdown_timeout_secs`, set to 10 here) plus margin.
const TERM_TIMEOUT: Duration = Duration::from_secs(40);
/// `http.shutdown_timeout_secs` given to every service.
pub const SHUTDOWN_TIMEOUT_SECS: u64 = 10;

/// Where the services' dependencies are.
#[derive(Debug, Clone)]
pub struct Backends {
    /// PostgreSQL server URL without a database name.
    pub pg_url: String,
    pub redis_url: String,
    pub amqp_url: String,
}

/// The settings every service gets beyond its addresses: short timings, so a recovery shows
/// within a case, and what makes sense for a test (the JWT secret, dev tokens).
pub fn tuned_settings() -> Vec<(Svc, &'static str, &'static str)> {
    vec![
        (Svc::Seckill, "SECKILL__AMQP__CONFIRM_TIMEOUT_MS", "3000"),
        (Svc::Seckill, "SECKILL__SECKILL__RECONCILE_INTERVAL_SECS", "1"),
        (Svc::Seckill, "SECKILL__SECKILL__RECONCILE_AFTER_SECS", "5"),
        (Svc::Order, "SECKILL__ORDER__OUTAGE_PAUSE_MS", "500"),
        (Svc::Order, "SECKILL__ORDER__SWEEP_INTERVAL_SECS", "2"),
        (Svc::Order, "SECKILL__ORDER__SWEEP_GRACE_SECS", "5"),
        (Svc::Seckill, "SECKILL__AMQP__RETRY_DELAY_MS", "500"),
        (Svc::Order, "SECKILL__AMQP__RETRY_DELAY_MS", "500"),
        (Svc::Stock, "SECKILL__AMQP__RETRY_DELAY_MS", "500"),
    ]
}

pub struct Fleet {
    bin_dir: PathBuf,
    dir: PathBuf,
    gateway_port: u16,
    backends: Backends,
    children: BTreeMap<Svc, Child>,
    /// Makes this run's link keys: random, so no key of the suite works anywhere else.
    key_seed: String,
}

impl Fleet {
    pub fn new(bin_dir: &Path, dir: &Path, gateway_port: u16, backends: Backends) -> anyhow::Result<Self> {
        for svc in Svc::ALL {
            let bin = bin_dir.join(svc.name());
            if !bin.is_file() {
                bail!(
                    "{} not found: build the release binaries first (cargo build --release --bins)",
                    bin.display()
                );
            }
        }
        std::fs::create_dir_all(dir.join("services"))
            .with_context(|| format!("creating {}", dir.join("services").display()))?;
        Ok(Self {
            bin_dir: bin_dir.to_owned(),
            dir: dir.to_owned(),
            gateway_port,
            backends,
            children: BTreeMap::new(),
            key_seed: uuid::Uuid::new_v4().simple().to_string(),
        })
    }

    pub fn port(&self, svc: Svc) -> u16 {
        self.gateway_port + svc.port_offset()
    }

    /// The gateway's admin listener (`/metrics`): the port after stock-service's.
    pub fn admin_port(&self) -> u16 {
        self.gateway_port + 4
    }

    pub fn url(&self, svc: Svc) -> String {
        format!("http://127.0.0.1:{}", self.port(svc))
    }

    pub fn log_path(&self, svc: Svc) -> PathBuf {
        self.dir.join("services").join(format!("{}.log", svc.name()))
    }

    fn pid_path(&self, svc: Svc) -> PathBuf {
        self.dir.join("services").join(format!("{}.pid", svc.name()))
    }

    /// The service's own settings, as environment variables.
    fn env(&self, svc: Svc) -> Vec<(String, String)> {
        let b = &self.backends;
        let mut env: Vec<(String, String)> = vec![
            ("SECKILL__HTTP__HOST".into(), "127.0.0.1".into()),
            ("SECKILL__HTTP__PORT".into(), self.port(svc).to_string()),
            ("SECKILL__HTTP__SHUTDOWN_TIMEOUT_SECS".into(), SHUTDOWN_TIMEOUT_SECS.to_string()),
            ("SECKILL__LOG__LEVEL".into(), "info".into()),
        ];
        let mut set = |k: &str, v: String| env.push((k.into(), v));
        match svc {
            Svc::Gateway => {
                set("SECKILL__AUTH__JWT_SECRET", "seckill-faults-only-jwt-secret-of-32-bytes-plus".into());
                set("SECKILL__AUTH__DEV_TOKENS", "true".into());
                // Its default, 9080, is the system gateway's when scripts/up.sh runs too.
                set("SECKILL__ADMIN__PORT", self.admin_port().to_string());
                // Every buyer mints its token from this one address: the per-address limit of
                // the anonymous routes would refuse most of them.
                set("SECKILL__RATE_LIMIT__ANONYMOUS__PER_SEC", "1000000".into());
                set("SECKILL__RATE_LIMIT__ANONYMOUS__BURST", "1000000".into());
                // The shared rate-limit buckets, on the private Redis the faults flush and stop.
                set("SECKILL__REDIS__URL", b.redis_url.clone());
            }
            Svc::Seckill => {
                set("SECKILL__REDIS__URL", b.redis_url.clone());
                set("SECKILL__AMQP__URL", b.amqp_url.clone());
            }
            Svc::Order => {
                set("SECKILL__DATABASE__URL", format!("{}/seckill_order", b.pg_url));
                set("SECKILL__REDIS__URL", b.redis_url.clone());
                set("SECKILL__AMQP__URL", b.amqp_url.clone());
            }
            Svc::Stock => {
                set("SECKILL__DATABASE__URL", format!("{}/seckill_stock", b.pg_url));
                set("SECKILL__AMQP__URL", b.amqp_url.clone());
            }
        }
        // Every service with an `upstreams` section gets all three private URLs, whichever it
        // calls today: a default would point at the system's own services on the standard ports.
        if svc != Svc::Stock {
            for (key, to) in [("SECKILL", Svc::Seckill), ("ORDER", Svc::Order), ("STOCK", Svc::Stock)] {
                env.push((format!("SECKILL__UPSTREAMS__{key}"), self.url(to)));
            }
        }
        let me = svc.peer();
        for &to in me.sends_to() {
            env.push((
                format!("SECKILL__TRUST__SEND__{}", to.as_str().to_uppercase()),
                self.link_key(me, to),
            ));
        }
        for &from in me.accepts_from() {
            env.push((
                format!("SECKILL__TRUST__ACCEPT__{}", from.as_str().to_uppercase()),
                self.link_key(from, me),
            ));
        }
        env.extend(
            tuned_settings().into_iter().filter(|t| t.0 == svc).map(|t| (t.1.to_owned(), t.2.to_owned())),
        );
        env
    }

    fn link_key(&self, from: Peer, to: Peer) -> String {
        format!("faults-{}-{from}-to-{to}", self.key_seed)
    }

    /// Is the process alive (not exited)?
    pub fn running(&mut self, svc: Svc) -> bool {
        self.children.get_mut(&svc).is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Does its /readyz answer 200?
    pub async fn ready(&self, svc: Svc) -> bool {
        let Ok(endpoint) = Endpoint::parse(&self.url(svc)) else { return false };
        Conn::new(endpoint, Duration::from_secs(2)).send(Req::get("/readyz")).await.status == 200
    }

    /// Starts the binary and waits until it is ready; returns how long that took.
    pub async fn start(&mut self, svc: Svc) -> anyhow::Result<Duration> {
        if self.running(svc) {
            bail!("{} is already running", svc.name());
        }
        let started = Instant::now();
        let log_path = self.log_path(svc);
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("opening {}", log_path.display()))?;
        writeln!(
            log,
            "\n===== seckill-bench faults: {} started at {} =====",
            svc.name(),
            crate::report::now_rfc3339()
        )?;
        let mut cmd = Command::new(self.bin_dir.join(svc.name()));
        cmd.current_dir(&self.dir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            // Plain text logs, greppable; a panic's backtrace is evidence.
            .env("NO_COLOR", "1")
            .env("RUST_BACKTRACE", "1")
            .envs(self.env(svc))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // If the driver itself fails, its services go with it.
            .kill_on_drop(true);
        let child = cmd.spawn().with_context(|| format!("starting {}", svc.name()))?;
        if let Some(pid) = child.id() {
            std::fs::write(self.pid_path(svc), format!("{pid}\n"))?;
        }
        self.children.insert(svc, child);
        loop {
            if let Some(child) = self.children.get_mut(&svc)
                && let Some(status) = child.try_wait()?
            {
                self.children.remove(&svc);
                bail!(
                    "{} exited during start-up ({status}); its log ends:\n{}",
                    svc.name(),
                    tail(&log_path, 15)
                );
            }
            if self.ready(svc).await {
                return Ok(started.elapsed());
            }
            if started.elapsed() > READY_TIMEOUT {
                bail!(
                    "{} not ready after {} s; its log ends:\n{}",
                    svc.name(),
                    READY_TIMEOUT.as_secs(),
                    tail(&log_path, 15)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGKILL and reap.
    pub async fn kill9(&mut self, svc: Svc) -> anyhow::Result<()> {
        let mut child =
            self.children.remove(&svc).with_context(|| format!("{} is not running", svc.name()))?;
        child.start_kill().with_context(|| format!("kill -9 {}", svc.name()))?;
        child.wait().await?;
        Ok(())
    }

    /// SIGTERM, then wait for the graceful exit; returns how long it took and the exit status.
    /// A process still alive after [`TERM_TIMEOUT`] is killed and that is an error.
    pub async fn term(&mut self, svc: Svc) -> anyhow::Result<(Duration, String)> {
        let started = Instant::now();
        self.signal(svc, Signal::TERM)?;
        let mut child =
            self.children.remove(&svc).with_context(|| format!("{} is not running", svc.name()))?;
        match tokio::time::timeout(TERM_TIMEOUT, child.wait()).await {
            Ok(status) => Ok((started.elapsed(), status?.to_string())),
            Err(_) => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                bail!("{} did not exit within {} s of SIGTERM; killed", svc.name(), TERM_TIMEOUT.as_secs())
            }
        }
    }

    /// Sends `sig` to the service's process.
    pub fn signal(&mut self, svc: Svc, sig: Signal) -> anyhow::Result<()> {
        let pid = self
            .children
            .get(&svc)
            .and_then(Child::id)
            .with_context(|| format!("{} is not running", svc.name()))?;
        signal::send(pid, sig).with_context(|| svc.name().to_owned())
    }

    /// Starts whatever is not running (in start order), and resumes a paused process; returns
    /// what it did. A case that failed half-way leaves the next one a whole system.
    pub async fn ensure_all(&mut self) -> anyhow::Result<Vec<String>> {
        let mut done = Vec::new();
        for svc in Svc::ALL {
            if self.running(svc) {
                // A process frozen by a failed case would never answer: SIGCONT is harmless.
                let _ = self.signal(svc, Signal::CONT);
                if self.ready(svc).await {
                    continue;
                }
                let deadline = Instant::now() + Duration::from_secs(20);
                while !self.ready(svc).await && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                if self.ready(svc).await {
                    continue;
                }
                let _ = self.kill9(svc).await;
                done.push(format!("{} was running but not ready for 20 s: killed", svc.name()));
            }
            let took = self.start(svc).await?;
            done.push(format!("{} started (ready after {:.1} s)", svc.name(), took.as_secs_f64()));
        }
        Ok(done)
    }

    /// SIGTERM to each, the gateway first, then SIGKILL to any still alive after 15 s.
    pub async fn stop_all(&mut self) {
        for svc in Svc::ALL.into_iter().rev() {
            if !self.running(svc) {
                self.children.remove(&svc);
                continue;
            }
            let _ = self.signal(svc, Signal::CONT);
            let _ = self.signal(svc, Signal::TERM);
            if let Some(mut child) = self.children.remove(&svc)
                && tokio::time::timeout(Duration::from_secs(15), child.wait()).await.is_err()
            {
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
            let _ = std::fs::remove_file(self.pid_path(svc));
        }
    }
}

/// The last `n` lines of a file (for an error message).
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet() -> Fleet {
        Fleet {
            bin_dir: "/nowhere".into(),
            dir: "/tmp".into(),
            gateway_port: 58080,
            backends: Backends {
                pg_url: "postgres://p@127.0.0.1:55432".into(),
                redis_url: "redis://127.0.0.1:56379".into(),
                amqp_url: "amqp://g:g@127.0.0.1:55672/%2f".into(),
            },
            children: BTreeMap::new(),
            key_seed: "test".into(),
        }
    }

    fn sections(env: &[(String, String)]) -> std::collections::BTreeSet<String> {
        env.iter().map(|(k, _)| k.split("__").nth(1).unwrap().to_lowercase()).collect()
    }

    #[test]
    fn each_service_gets_only_its_own_sections() {
        let f = fleet();
        // The settings structs deny unknown sections: a stray one would stop the binary.
        let allowed = |svc| match svc {
            Svc::Gateway => vec!["http", "log", "auth", "upstreams", "trust", "admin", "rate_limit"],
            Svc::Seckill => vec!["http", "log", "redis", "amqp", "upstreams", "seckill", "trust"],
            Svc::Order => vec!["http", "log", "database", "redis", "amqp", "upstreams", "order", "trust"],
            Svc::Stock => vec!["http", "log", "database", "amqp", "trust"],
        };
        for svc in Svc::ALL {
            let env = f.env(svc);
            for s in sections(&env) {
                assert!(allowed(svc).contains(&s.as_str()), "{} got section {s}", svc.name());
            }
            assert!(env.contains(&("SECKILL__HTTP__PORT".into(), f.port(svc).to_string())));
            // Both ends of a link get the same key; nobody gets a key of another's link.
            let keys = env.iter().filter(|(k, _)| k.starts_with("SECKILL__TRUST__")).count();
            assert_eq!(keys, svc.peer().sends_to().len() + svc.peer().accepts_from().len());
        }
        let key = |svc: Svc, var: &str| f.env(svc).into_iter().find(|(k, _)| k == var).unwrap().1;
        assert_eq!(
            key(Svc::Order, "SECKILL__TRUST__SEND__STOCK"),
            key(Svc::Stock, "SECKILL__TRUST__ACCEPT__ORDER")
        );
        assert_ne!(
            key(Svc::Order, "SECKILL__TRUST__SEND__STOCK"),
            key(Svc::Seckill, "SECKILL__TRUST__SEND__STOCK")
        );
        assert!(f.env(Svc::Order).contains(&(
            "SECKILL__DATABASE__URL".into(),
            "postgres://p@127.0.0.1:55432/seckill_order".into()
        )));
        // No upstream left at its default (the system's own services on the standard ports).
        for svc in [Svc::Gateway, Svc::Seckill, Svc::Order] {
            let env = f.env(svc);
            for (key, port) in [("SECKILL", 58081), ("ORDER", 58082), ("STOCK", 58083)] {
                let want = (format!("SECKILL__UPSTREAMS__{key}"), format!("http://127.0.0.1:{port}"));
                assert!(env.contains(&want), "{} lacks {want:?}", svc.name());
            }
        }
    }
}
