//! The release binaries, started, killed, stopped and paused by the driver itself, one or more
//! replicas of each service.
//!
//! Each runs from the scratch directory (no `config/` there, and `SECKILL_CONFIG` is not set,
//! so only built-in defaults and the environment given here apply), with an environment of its
//! own sections only (every settings struct denies unknown sections), appending to
//! `<scratch>/services/<stem>.log` with a marker line per start, and its pid in
//! `<scratch>/services/<stem>.pid` so scripts/faults.sh can stop what an interrupted run left
//! (the stem is the binary's name for replica 0, `<name>-<k>` for replica k, as scripts/up.sh
//! names its files). Replica k listens on its service's port + [`PORT_STEP`]`*k`, as with
//! scripts/up.sh, and every caller's `upstreams.*` lists every replica of the callee.
//! Signals go through [`crate::signal`] (`kill(2)` by rustix's safe wrapper).

use std::collections::BTreeMap;
use std::fmt;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::process::{Child, Command};

use seckill_common::keys::RedisKeys;
use seckill_common::trust::Peer;

use crate::client::{Answer, Conn, Endpoint, Req};
use crate::signal::{self, Signal};

/// One of the four services.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Svc {
    Stock,
    Seckill,
    Order,
    Gateway,
}

impl Svc {
    /// In start order: nothing calls a service started after it.
    pub const ALL: [Svc; 4] = [Svc::Stock, Svc::Seckill, Svc::Order, Svc::Gateway];

    /// Its name among the peers that hold link keys.
    pub fn peer(self) -> seckill_common::trust::Peer {
        use seckill_common::trust::Peer;
        match self {
            Self::Gateway => Peer::Gateway,
            Self::Seckill => Peer::Seckill,
            Self::Order => Peer::Order,
            Self::Stock => Peer::Stock,
        }
    }

    /// The binary's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Gateway => "gateway",
            Self::Seckill => "seckill-service",
            Self::Order => "order-service",
            Self::Stock => "stock-service",
        }
    }

    /// Its port is the gateway's plus this (the standard ports keep the same order).
    pub fn port_offset(self) -> u16 {
        match self {
            Self::Gateway => 0,
            Self::Seckill => 1,
            Self::Order => 2,
            Self::Stock => 3,
        }
    }

    /// Its short name, in the fault cases' names.
    pub fn short(self) -> &'static str {
        match self {
            Self::Gateway => "gateway",
            Self::Seckill => "seckill",
            Self::Order => "order",
            Self::Stock => "stock",
        }
    }
}

/// One process: replica `replica` of `svc` (replica 0 is the one the single-replica cases run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Unit {
    pub svc: Svc,
    pub replica: usize,
}

impl Unit {
    pub const fn new(svc: Svc, replica: usize) -> Self {
        Self { svc, replica }
    }

    /// Replica 0.
    pub const fn first(svc: Svc) -> Self {
        Self::new(svc, 0)
    }

    /// `<name>` for replica 0, `<name>-<k>` otherwise: the stem of its log and pid files, as
    /// scripts/up.sh names them.
    pub fn stem(self) -> String {
        if self.replica == 0 {
            self.svc.name().to_owned()
        } else {
            format!("{}-{}", self.svc.name(), self.replica)
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.stem())
    }
}

/// How long a service may take to answer /readyz after its start.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a graceful shutdown may take before it counts as hung and is killed: the services'
/// own drain (`http.shutdown_timeout_secs`, set to 10 here) plus margin.
const TERM_TIMEOUT: Duration = Duration::from_secs(40);
/// `http.shutdown_timeout_secs` given to every service.
pub const SHUTDOWN_TIMEOUT_SECS: u64 = 10;
/// Replica k of a service listens on the service's port + this * k (the gateway's admin
/// listener likewise): the five base ports differ in their last digit, so no two meet.
pub const PORT_STEP: u16 = 10;
/// The buy class's limit per user (`rate_limit.buy.*`: the gateway's defaults, set explicitly
/// so the suite's check of one limit across gateways reads them from here).
pub const BUY_PER_SEC: u32 = 5;
pub const BUY_BURST: u32 = 10;

/// Where the services' dependencies are.
#[derive(Debug, Clone)]
pub struct Backends {
    /// PostgreSQL server URL without a database name.
    pub pg_url: String,
    pub redis_url: String,
    pub amqp_url: String,
    /// Names of the fleet's own on shared servers (`seckill-bench idle`): databases
    /// `<prefix>_stock` and `<prefix>_order`, Redis keys under `<prefix>:`, queues under
    /// `<prefix>.`. None: the standard names, on the fault suite's private servers.
    pub prefix: Option<String>,
}

impl Backends {
    /// The database `svc` keeps its data in (`stock` or `order`).
    pub fn database(&self, kind: &str) -> String {
        match &self.prefix {
            Some(p) => format!("{p}_{kind}"),
            None => format!("seckill_{kind}"),
        }
    }

    /// The services' Redis key prefix (`redis.key_prefix`): the run's own, or none.
    pub fn redis_keys(&self) -> RedisKeys {
        RedisKeys::new(self.prefix.as_ref().map(|p| format!("{p}:")).unwrap_or_default())
    }
}

/// The settings every service gets beyond its addresses: short timings, so a recovery shows
/// within a case; and a longer wait for the gateways' shared rate-limit bucket: the driver's
/// load shares the machine's cores with the system, and a Redis answer slower than the
/// default 100 ms there is the machine's, not an outage (each gateway would limit alone for a
/// second). The JWT secret, dev tokens and limits are set in [`Fleet`]'s environment.
pub fn tuned_settings() -> Vec<(Svc, &'static str, &'static str)> {
    vec![
        (Svc::Gateway, "SECKILL__RATE_LIMIT__SHARED_TIMEOUT_MS", "1000"),
        (Svc::Seckill, "SECKILL__AMQP__CONFIRM_TIMEOUT_MS", "3000"),
        (Svc::Seckill, "SECKILL__SECKILL__RECONCILE_INTERVAL_SECS", "1"),
        (Svc::Seckill, "SECKILL__SECKILL__RECONCILE_AFTER_SECS", "5"),
        // Each batch of accepted requests gathers for 50 ms (1 ms by default): with buyers
        // arriving every few milliseconds, a kill -9 of seckill-service always finds a batch
        // half-filled, whose buyers were never answered and whose reservations wait pending.
        (Svc::Seckill, "SECKILL__SECKILL__BATCH_WINDOW_MS", "50"),
        (Svc::Order, "SECKILL__ORDER__OUTAGE_PAUSE_MS", "500"),
        (Svc::Order, "SECKILL__ORDER__SWEEP_INTERVAL_SECS", "2"),
        (Svc::Order, "SECKILL__ORDER__SWEEP_GRACE_SECS", "5"),
        (Svc::Seckill, "SECKILL__AMQP__RETRY_DELAY_MS", "500"),
        (Svc::Order, "SECKILL__AMQP__RETRY_DELAY_MS", "500"),
        (Svc::Stock, "SECKILL__AMQP__RETRY_DELAY_MS", "500"),
    ]
}

/// The port of replica `k` of a service whose replica 0 listens on `base`.
pub fn replica_port(base: u16, k: usize) -> u16 {
    base + PORT_STEP * u16::try_from(k).unwrap_or(u16::MAX / PORT_STEP)
}

/// The `upstreams.*` value for a service of `replicas` replicas whose replica 0 listens on
/// `base`: every replica's URL, comma-separated.
pub fn upstream_list(base: u16, replicas: usize) -> String {
    (0..replicas.max(1))
        .map(|k| format!("http://127.0.0.1:{}", replica_port(base, k)))
        .collect::<Vec<_>>()
        .join(",")
}

/// A process the fleet started, and the environment it was started with: one started for
/// another number of replicas lists other upstreams, and is restarted.
struct Running {
    child: Child,
    env: Vec<(String, String)>,
}

pub struct Fleet {
    bin_dir: PathBuf,
    dir: PathBuf,
    gateway_port: u16,
    backends: Backends,
    /// Replicas of every service the fleet runs now (set by [`Fleet::ensure_all`]).
    replicas: usize,
    children: BTreeMap<Unit, Running>,
    /// Makes this run's link keys: random, so no key of the suite works anywhere else.
    key_seed: String,
    /// Apply [`tuned_settings`] (the fault suite's short timings); off, the services run with
    /// their defaults, as shipped (the benchmarks).
    tuned: bool,
    /// Settings of one unit's own, over the fleet's, from its next start (see [`Fleet::set`]).
    overrides: BTreeMap<Unit, Vec<(String, String)>>,
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
            replicas: 1,
            children: BTreeMap::new(),
            key_seed: uuid::Uuid::new_v4().simple().to_string(),
            tuned: false,
            overrides: BTreeMap::new(),
        })
    }

    /// Another fleet of the same system (binaries, servers, link and room keys, ports, settings)
    /// keeping its logs and pid files in `dir`: units started through it are twins of this
    /// fleet's (a gateway replica with settings of its own) that its pid files do not list.
    pub fn sibling(&self, dir: &Path) -> anyhow::Result<Self> {
        let mut twin = Self::new(&self.bin_dir, dir, self.gateway_port, self.backends.clone())?;
        twin.key_seed.clone_from(&self.key_seed);
        twin.tuned = self.tuned;
        Ok(twin)
    }

    /// The directory of the fleet's pid files, `<name>.pid` each.
    pub fn pid_dir(&self) -> PathBuf {
        self.dir.join("services")
    }

    /// The services run with [`tuned_settings`]: short timings, so a recovery shows within a
    /// fault case.
    pub fn with_tuned_settings(mut self) -> Self {
        self.tuned = true;
        self
    }

    /// Sets `var` (`SECKILL__SECTION__KEY`) to `value` for `unit` alone, over what the fleet
    /// gives it, from its next start: a service restarted with another setting, or a replica
    /// started as a differently configured twin (the benchmarks' hop gateway).
    pub fn set(&mut self, unit: Unit, var: &str, value: impl Into<String>) {
        let list = self.overrides.entry(unit).or_default();
        list.retain(|(k, _)| k != var);
        list.push((var.to_owned(), value.into()));
    }

    /// SIGTERM, the graceful exit awaited, then a start with its settings of now; returns how
    /// long the start took.
    pub async fn restart(&mut self, unit: Unit) -> anyhow::Result<Duration> {
        self.term(unit).await?;
        self.start(unit).await
    }

    /// The Redis the services use.
    pub fn redis_url(&self) -> &str {
        &self.backends.redis_url
    }

    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// Every replica of `svc` the fleet runs now.
    pub fn units(&self, svc: Svc) -> Vec<Unit> {
        (0..self.replicas).map(|k| Unit::new(svc, k)).collect()
    }

    pub fn port(&self, unit: Unit) -> u16 {
        replica_port(self.gateway_port + unit.svc.port_offset(), unit.replica)
    }

    /// Gateway replica k's admin listener (`/metrics`): the port after stock-service's, + 10k.
    pub fn admin_port(&self, replica: usize) -> u16 {
        replica_port(self.gateway_port + 4, replica)
    }

    pub fn url(&self, unit: Unit) -> String {
        format!("http://127.0.0.1:{}", self.port(unit))
    }

    pub fn log_path(&self, unit: Unit) -> PathBuf {
        self.dir.join("services").join(format!("{}.log", unit.stem()))
    }

    fn pid_path(&self, unit: Unit) -> PathBuf {
        self.pid_dir().join(format!("{}.pid", unit.stem()))
    }

    /// The process's own settings, as environment variables.
    fn env(&self, unit: Unit) -> Vec<(String, String)> {
        let b = &self.backends;
        let svc = unit.svc;
        let mut env: Vec<(String, String)> = vec![
            ("SECKILL__HTTP__HOST".into(), "127.0.0.1".into()),
            ("SECKILL__HTTP__PORT".into(), self.port(unit).to_string()),
            ("SECKILL__HTTP__SHUTDOWN_TIMEOUT_SECS".into(), SHUTDOWN_TIMEOUT_SECS.to_string()),
            ("SECKILL__LOG__LEVEL".into(), "info".into()),
        ];
        let mut set = |k: &str, v: String| env.push((k.into(), v));
        match svc {
            Svc::Gateway => {
                set("SECKILL__AUTH__JWT_SECRET", "seckill-faults-only-jwt-secret-of-32-bytes-plus".into());
                set("SECKILL__AUTH__DEV_TOKENS", "true".into());
                // Its default, 9080, is the system gateway's when scripts/up.sh runs too.
                set("SECKILL__ADMIN__PORT", self.admin_port(unit.replica).to_string());
                // Every buyer mints its token from this one address: the per-address limit of
                // the anonymous routes would refuse most of them.
                set("SECKILL__RATE_LIMIT__ANONYMOUS__PER_SEC", "1000000".into());
                set("SECKILL__RATE_LIMIT__ANONYMOUS__BURST", "1000000".into());
                // And joins a waiting room for each of them (`rate_limit.join`, per address).
                set("SECKILL__RATE_LIMIT__JOIN__PER_SEC", "1000000".into());
                set("SECKILL__RATE_LIMIT__JOIN__BURST", "1000000".into());
                set("SECKILL__RATE_LIMIT__BUY__PER_SEC", BUY_PER_SEC.to_string());
                set("SECKILL__RATE_LIMIT__BUY__BURST", BUY_BURST.to_string());
                // The shared rate-limit buckets, on the private Redis the faults flush and stop.
                set("SECKILL__REDIS__URL", b.redis_url.clone());
            }
            Svc::Seckill => {
                set("SECKILL__REDIS__URL", b.redis_url.clone());
                set("SECKILL__AMQP__URL", b.amqp_url.clone());
            }
            Svc::Order => {
                set("SECKILL__DATABASE__URL", format!("{}/{}", b.pg_url, b.database("order")));
                set("SECKILL__REDIS__URL", b.redis_url.clone());
                set("SECKILL__AMQP__URL", b.amqp_url.clone());
            }
            Svc::Stock => {
                set("SECKILL__DATABASE__URL", format!("{}/{}", b.pg_url, b.database("stock")));
                set("SECKILL__AMQP__URL", b.amqp_url.clone());
            }
        }
        if let Some(p) = &b.prefix {
            // Each only where it has the section: stock-service no Redis, the gateway no broker.
            if svc != Svc::Stock {
                env.push(("SECKILL__REDIS__KEY_PREFIX".into(), b.redis_keys().prefix().to_owned()));
            }
            if svc != Svc::Gateway {
                env.push(("SECKILL__AMQP__PREFIX".into(), format!("{p}.")));
            }
        }
        // Every service with an `upstreams` section gets all three private lists, whichever it
        // calls today: a default would point at the system's own services on the standard ports.
        if svc != Svc::Stock {
            for (key, to) in [("SECKILL", Svc::Seckill), ("ORDER", Svc::Order), ("STOCK", Svc::Stock)] {
                env.push((
                    format!("SECKILL__UPSTREAMS__{key}"),
                    upstream_list(self.gateway_port + to.port_offset(), self.replicas),
                ));
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
        if matches!(svc, Svc::Gateway | Svc::Seckill) {
            env.push((
                "SECKILL__ROOM__KEY".into(),
                format!("faults-{}-room-key-of-the-fleet", self.key_seed),
            ));
        }
        if self.tuned {
            env.extend(
                tuned_settings().into_iter().filter(|t| t.0 == svc).map(|t| (t.1.to_owned(), t.2.to_owned())),
            );
        }
        for (var, value) in self.overrides.get(&unit).into_iter().flatten() {
            env.retain(|(k, _)| k != var);
            env.push((var.clone(), value.clone()));
        }
        env
    }

    /// The key of the link `from` -> `to` (the driver signs as the gateway with it to ask a
    /// replica directly).
    pub fn link_key(&self, from: Peer, to: Peer) -> String {
        format!("faults-{}-{from}-to-{to}", self.key_seed)
    }

    /// The unit's process id, while the fleet runs it.
    pub fn pid(&self, unit: Unit) -> Option<u32> {
        self.children.get(&unit).and_then(|r| r.child.id())
    }

    /// Is the process alive (not exited)?
    pub fn running(&mut self, unit: Unit) -> bool {
        self.children.get_mut(&unit).is_some_and(|r| matches!(r.child.try_wait(), Ok(None)))
    }

    /// `GET path` on the unit's own port (2 s timeout).
    pub async fn get(&self, unit: Unit, path: &str) -> Answer {
        match Endpoint::parse(&self.url(unit)) {
            Ok(endpoint) => Conn::new(endpoint, Duration::from_secs(2)).send(Req::get(path)).await,
            Err(_) => Answer::new(crate::client::STATUS_ERROR, Default::default()),
        }
    }

    /// Does its /readyz answer 200?
    pub async fn ready(&self, unit: Unit) -> bool {
        self.get(unit, "/readyz").await.status == 200
    }

    /// Starts the binary and waits until it is ready; returns how long that took.
    pub async fn start(&mut self, unit: Unit) -> anyhow::Result<Duration> {
        let started = Instant::now();
        self.spawn(unit)?;
        self.await_ready_since(unit, started).await
    }

    /// Starts the binary while a server it needs is down: waits until it serves `/healthz`
    /// (an exit fails the step), and returns how long that took and what its `/readyz` says.
    pub async fn start_waiting(&mut self, unit: Unit) -> anyhow::Result<(Duration, String)> {
        let started = Instant::now();
        self.spawn(unit)?;
        loop {
            self.check_alive(unit, "during start-up")?;
            if self.get(unit, "/healthz").await.status == 200 {
                break;
            }
            if started.elapsed() > READY_TIMEOUT {
                bail!("{unit} did not serve /healthz within {} s", READY_TIMEOUT.as_secs());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let took = started.elapsed();
        // Its first tries fail meanwhile: what it says it waits for.
        tokio::time::sleep(Duration::from_millis(500)).await;
        self.check_alive(unit, "while its server was down")?;
        let ready = self.get(unit, "/readyz").await;
        Ok((took, format!("/readyz {} {}", ready.status, String::from_utf8_lossy(&ready.body).trim())))
    }

    /// Waits until a running unit is ready (no restart); returns how long that took.
    pub async fn await_ready(&mut self, unit: Unit) -> anyhow::Result<Duration> {
        self.await_ready_since(unit, Instant::now()).await
    }

    fn spawn(&mut self, unit: Unit) -> anyhow::Result<()> {
        if self.running(unit) {
            bail!("{unit} is already running");
        }
        let log_path = self.log_path(unit);
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("opening {}", log_path.display()))?;
        writeln!(
            log,
            "\n===== {unit} started at {} by the fleet (seckill-harness) =====",
            chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        )?;
        let env = self.env(unit);
        let mut cmd = Command::new(self.bin_dir.join(unit.svc.name()));
        cmd.current_dir(&self.dir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            // Plain text logs, greppable; a panic's backtrace is evidence. An error value's is
            // not, and capturing one for every error (anyhow does when RUST_BACKTRACE is set)
            // would cost the measured services what the deployed ones, without it, never pay.
            .env("NO_COLOR", "1")
            .env("RUST_BACKTRACE", "1")
            .env("RUST_LIB_BACKTRACE", "0")
            .envs(env.iter().cloned())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // If the driver itself fails, its services go with it.
            .kill_on_drop(true);
        let child = cmd.spawn().with_context(|| format!("starting {unit}"))?;
        if let Some(pid) = child.id() {
            std::fs::write(self.pid_path(unit), format!("{pid}\n"))?;
        }
        self.children.insert(unit, Running { child, env });
        Ok(())
    }

    /// Fails, with the end of its log, if the unit has exited.
    fn check_alive(&mut self, unit: Unit, when: &str) -> anyhow::Result<()> {
        let Some(r) = self.children.get_mut(&unit) else {
            bail!("{unit} is not running");
        };
        if let Some(status) = r.child.try_wait()? {
            self.children.remove(&unit);
            bail!("{unit} exited {when} ({status}); its log ends:\n{}", tail(&self.log_path(unit), 15));
        }
        Ok(())
    }

    async fn await_ready_since(&mut self, unit: Unit, started: Instant) -> anyhow::Result<Duration> {
        loop {
            self.check_alive(unit, "before it was ready")?;
            if self.ready(unit).await {
                return Ok(started.elapsed());
            }
            if started.elapsed() > READY_TIMEOUT {
                bail!(
                    "{unit} not ready after {} s; its log ends:\n{}",
                    READY_TIMEOUT.as_secs(),
                    tail(&self.log_path(unit), 15)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGKILL to every one of `units` first, then reap them: they die at the same instant.
    pub async fn kill9(&mut self, units: &[Unit]) -> anyhow::Result<()> {
        let mut killed = Vec::new();
        for &unit in units {
            let mut r = self.children.remove(&unit).with_context(|| format!("{unit} is not running"))?;
            r.child.start_kill().with_context(|| format!("kill -9 {unit}"))?;
            killed.push(r);
        }
        for mut r in killed {
            r.child.wait().await?;
        }
        Ok(())
    }

    /// SIGTERM, then wait for the graceful exit; returns how long it took and the exit status.
    /// A process still alive after [`TERM_TIMEOUT`] is killed and that is an error.
    pub async fn term(&mut self, unit: Unit) -> anyhow::Result<(Duration, String)> {
        let started = Instant::now();
        self.signal(unit, Signal::TERM)?;
        let mut r = self.children.remove(&unit).with_context(|| format!("{unit} is not running"))?;
        match tokio::time::timeout(TERM_TIMEOUT, r.child.wait()).await {
            Ok(status) => Ok((started.elapsed(), status?.to_string())),
            Err(_) => {
                let _ = r.child.start_kill();
                let _ = r.child.wait().await;
                bail!("{unit} did not exit within {} s of SIGTERM; killed", TERM_TIMEOUT.as_secs())
            }
        }
    }

    /// Sends `sig` to the unit's process.
    pub fn signal(&mut self, unit: Unit, sig: Signal) -> anyhow::Result<()> {
        let pid = self
            .children
            .get(&unit)
            .and_then(|r| r.child.id())
            .with_context(|| format!("{unit} is not running"))?;
        signal::send(pid, sig).with_context(|| unit.to_string())
    }

    /// Makes the fleet `replicas` replicas of every service, whole and ready, and returns what
    /// it did: replicas beyond that number stopped (gracefully, the gateways first); a process
    /// started for another number of replicas (its upstream lists) restarted; whatever is not
    /// running started (in start order); a paused process resumed. A case that failed
    /// half-way leaves the next one a whole system.
    pub async fn ensure_all(&mut self, replicas: usize) -> anyhow::Result<Vec<String>> {
        let mut done = Vec::new();
        self.replicas = replicas.max(1);
        let extra: Vec<Unit> = self.children.keys().filter(|u| u.replica >= self.replicas).copied().collect();
        for unit in extra.into_iter().rev() {
            done.push(self.stop(unit).await);
        }
        for svc in Svc::ALL {
            for unit in self.units(svc) {
                if self.running(unit) && self.children.get(&unit).is_some_and(|r| r.env != self.env(unit)) {
                    let stopped = self.stop(unit).await;
                    done.push(format!("{stopped}, to list {} replicas upstream", self.replicas));
                }
                if self.running(unit) {
                    // A process frozen by a failed case would never answer: SIGCONT is harmless.
                    let _ = self.signal(unit, Signal::CONT);
                    if self.ready(unit).await {
                        continue;
                    }
                    let deadline = Instant::now() + Duration::from_secs(20);
                    while !self.ready(unit).await && Instant::now() < deadline {
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                    if self.ready(unit).await {
                        continue;
                    }
                    let _ = self.kill9(&[unit]).await;
                    done.push(format!("{unit} was running but not ready for 20 s: killed"));
                }
                let took = self.start(unit).await?;
                done.push(format!("{unit} started (ready after {:.1} s)", took.as_secs_f64()));
            }
        }
        Ok(done)
    }

    /// SIGCONT and SIGTERM, then SIGKILL if still alive after 15 s; removes the pid file.
    async fn stop(&mut self, unit: Unit) -> String {
        let mut r = self.children.remove(&unit);
        let alive = r.as_mut().is_some_and(|r| matches!(r.child.try_wait(), Ok(None)));
        let what = match r {
            Some(mut r) if alive => {
                if let Some(pid) = r.child.id() {
                    let _ = signal::send(pid, Signal::CONT);
                    let _ = signal::send(pid, Signal::TERM);
                }
                if tokio::time::timeout(Duration::from_secs(15), r.child.wait()).await.is_err() {
                    let _ = r.child.start_kill();
                    let _ = r.child.wait().await;
                    format!("{unit} stopped (killed 15 s after SIGTERM)")
                } else {
                    format!("{unit} stopped")
                }
            }
            _ => format!("{unit} was not running"),
        };
        let _ = std::fs::remove_file(self.pid_path(unit));
        what
    }

    /// Stops every process, the gateways first (units sort in start order).
    pub async fn stop_all(&mut self) {
        let units: Vec<Unit> = self.children.keys().copied().collect();
        for unit in units.into_iter().rev() {
            self.stop(unit).await;
        }
    }
}

/// Kills (SIGCONT, then SIGKILL) what an interrupted run left of the processes whose pid files
/// are in `dir` (`<name>.pid`, `<name>-<k>.pid`), each only if it still runs the binary its
/// file names (a pid may have been reused), and removes the files; returns what it killed.
pub fn stop_leftovers(dir: &Path) -> Vec<String> {
    let mut killed = Vec::new();
    for path in std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.path()) {
        let Some(stem) = path
            .file_stem()
            .and_then(|s| s.to_str())
            .filter(|_| path.extension().is_some_and(|e| e == "pid"))
        else {
            continue;
        };
        let binary =
            stem.rsplit_once('-').filter(|(_, k)| k.parse::<usize>().is_ok()).map_or(stem, |(name, _)| name);
        if let Some(pid) = running(&path, binary) {
            let _ = signal::send(pid, Signal::CONT);
            if signal::send(pid, Signal::KILL).is_ok() {
                killed.push(format!("{stem} (pid {pid})"));
            }
        }
        let _ = std::fs::remove_file(&path);
    }
    killed
}

/// The pid in `pid_file` when that process is alive and runs the binary `binary` (a stale file's
/// pid may have been reused by another program).
pub fn running(pid_file: &Path, binary: &str) -> Option<u32> {
    let pid = std::fs::read_to_string(pid_file).ok()?.trim().parse::<u32>().ok()?;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    (exe.file_name()? == binary).then_some(pid)
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
            gateway_port: 28080,
            backends: Backends {
                pg_url: "postgres://p@127.0.0.1:25432".into(),
                redis_url: "redis://127.0.0.1:26379".into(),
                amqp_url: "amqp://g:g@127.0.0.1:26672/%2f".into(),
                prefix: None,
            },
            replicas: 1,
            children: BTreeMap::new(),
            key_seed: "test".into(),
            tuned: true,
            overrides: BTreeMap::new(),
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
            Svc::Gateway => {
                vec!["http", "log", "auth", "upstreams", "trust", "admin", "rate_limit", "redis", "room"]
            }
            Svc::Seckill => vec!["http", "log", "redis", "amqp", "upstreams", "seckill", "trust", "room"],
            Svc::Order => vec!["http", "log", "database", "redis", "amqp", "upstreams", "order", "trust"],
            Svc::Stock => vec!["http", "log", "database", "amqp", "trust"],
        };
        for svc in Svc::ALL {
            let unit = Unit::first(svc);
            let env = f.env(unit);
            for s in sections(&env) {
                assert!(allowed(svc).contains(&s.as_str()), "{} got section {s}", svc.name());
            }
            assert!(env.contains(&("SECKILL__HTTP__PORT".into(), f.port(unit).to_string())));
            // Both ends of a link get the same key; nobody gets a key of another's link.
            let keys = env.iter().filter(|(k, _)| k.starts_with("SECKILL__TRUST__")).count();
            assert_eq!(keys, svc.peer().sends_to().len() + svc.peer().accepts_from().len());
        }
        let key =
            |svc: Svc, var: &str| f.env(Unit::first(svc)).into_iter().find(|(k, _)| k == var).unwrap().1;
        assert_eq!(
            key(Svc::Order, "SECKILL__TRUST__SEND__STOCK"),
            key(Svc::Stock, "SECKILL__TRUST__ACCEPT__ORDER")
        );
        assert_ne!(
            key(Svc::Order, "SECKILL__TRUST__SEND__STOCK"),
            key(Svc::Seckill, "SECKILL__TRUST__SEND__STOCK")
        );
        // The room key: the same in the gateway and seckill-service, which answer its polls.
        assert_eq!(key(Svc::Gateway, "SECKILL__ROOM__KEY"), key(Svc::Seckill, "SECKILL__ROOM__KEY"));
        assert!(f.env(Unit::first(Svc::Order)).contains(&(
            "SECKILL__DATABASE__URL".into(),
            "postgres://p@127.0.0.1:25432/seckill_order".into()
        )));
        // No upstream left at its default (the system's own services on the standard ports).
        for svc in [Svc::Gateway, Svc::Seckill, Svc::Order] {
            let env = f.env(Unit::first(svc));
            for (key, port) in [("SECKILL", 28081), ("ORDER", 28082), ("STOCK", 28083)] {
                let want = (format!("SECKILL__UPSTREAMS__{key}"), format!("http://127.0.0.1:{port}"));
                assert!(env.contains(&want), "{} lacks {want:?}", svc.name());
            }
        }
    }

    #[test]
    fn a_units_own_settings_win_and_the_tuned_ones_are_opt_in() {
        let mut f = fleet();
        let gateway = Unit::first(Svc::Gateway);
        let twin = Unit::new(Svc::Gateway, 1);
        f.set(twin, "SECKILL__RATE_LIMIT__SHARED", "false");
        f.set(twin, "SECKILL__UPSTREAMS__STOCK", "http://127.0.0.1:1");
        f.set(twin, "SECKILL__UPSTREAMS__STOCK", "http://127.0.0.1:2");
        let env = f.env(twin);
        let all =
            |var: &str| env.iter().filter(|(k, _)| k == var).map(|(_, v)| v.as_str()).collect::<Vec<_>>();
        assert_eq!(all("SECKILL__UPSTREAMS__STOCK"), ["http://127.0.0.1:2"], "one value, the last set");
        assert_eq!(all("SECKILL__RATE_LIMIT__SHARED"), ["false"]);
        assert!(!f.env(gateway).iter().any(|(k, _)| k == "SECKILL__RATE_LIMIT__SHARED"), "the twin's own");
        let tuned =
            |f: &Fleet| f.env(gateway).iter().any(|(k, _)| k == "SECKILL__RATE_LIMIT__SHARED_TIMEOUT_MS");
        assert!(tuned(&f));
        f.tuned = false;
        assert!(!tuned(&f), "the services' defaults, as shipped");
    }

    #[test]
    fn leftovers_are_killed_only_when_they_run_the_binary_their_file_names() {
        let dir = std::env::temp_dir().join(format!("fleet-leftovers-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut sleeper = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = sleeper.id();
        // A stale file whose pid now runs another binary: the process stays, the file goes.
        std::fs::write(dir.join("gateway-1.pid"), format!("{pid}\n")).unwrap();
        std::fs::write(dir.join("notes.txt"), "not a pid file").unwrap();
        assert!(stop_leftovers(&dir).is_empty());
        assert!(sleeper.try_wait().unwrap().is_none(), "not a gateway: left alone");
        assert!(!dir.join("gateway-1.pid").exists() && dir.join("notes.txt").exists());
        std::fs::write(dir.join("sleep.pid"), format!("{pid}\n")).unwrap();
        assert_eq!(stop_leftovers(&dir), [format!("sleep (pid {pid})")]);
        assert!(!sleeper.wait().unwrap().success());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn replica_k_takes_the_ports_plus_ten_k() {
        let mut f = fleet();
        f.replicas = 2;
        assert_eq!(f.port(Unit::new(Svc::Gateway, 0)), 28080);
        assert_eq!(f.port(Unit::new(Svc::Seckill, 1)), 28091);
        assert_eq!(f.port(Unit::new(Svc::Stock, 1)), 28093);
        assert_eq!((f.admin_port(0), f.admin_port(1)), (28084, 28094));
        let env = f.env(Unit::new(Svc::Gateway, 1));
        assert!(env.contains(&("SECKILL__HTTP__PORT".into(), "28090".into())));
        assert!(env.contains(&("SECKILL__ADMIN__PORT".into(), "28094".into())));
        // No two listeners of any replica meet.
        let mut ports: Vec<u16> = (0..2).flat_map(|k| Svc::ALL.map(|s| f.port(Unit::new(s, k)))).collect();
        ports.extend([f.admin_port(0), f.admin_port(1)]);
        let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
        assert_eq!(f.log_path(Unit::new(Svc::Order, 1)), Path::new("/tmp/services/order-service-1.log"));
        assert_eq!(f.pid_path(Unit::first(Svc::Order)), Path::new("/tmp/services/order-service.pid"));
    }

    #[test]
    fn every_caller_lists_every_replica_of_its_callee() {
        assert_eq!(upstream_list(28081, 1), "http://127.0.0.1:28081");
        assert_eq!(upstream_list(28082, 2), "http://127.0.0.1:28082,http://127.0.0.1:28092");
        let mut f = fleet();
        f.replicas = 2;
        for unit in [Unit::new(Svc::Gateway, 1), Unit::new(Svc::Seckill, 0), Unit::new(Svc::Order, 1)] {
            let env = f.env(unit);
            for (key, port) in [("SECKILL", 28081), ("ORDER", 28082), ("STOCK", 28083)] {
                let want = format!("http://127.0.0.1:{port},http://127.0.0.1:{}", port + 10);
                assert!(env.contains(&(format!("SECKILL__UPSTREAMS__{key}"), want)), "{unit}: {env:?}");
            }
        }
        // Both gateways get the same limits; a process started for one replica is stale for two.
        let one = fleet().env(Unit::first(Svc::Gateway));
        assert_ne!(one, f.env(Unit::first(Svc::Gateway)));
        assert_eq!(
            fleet().env(Unit::first(Svc::Stock)),
            f.env(Unit::first(Svc::Stock)),
            "stock calls nobody"
        );
        assert!(one.contains(&("SECKILL__RATE_LIMIT__BUY__BURST".into(), BUY_BURST.to_string())));
    }
}
