//! The system a benchmark run measures, and the processes beside it that its baselines need.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use tokio::process::{Child, Command};

use super::{PREFIX, SuiteArgs};
use crate::cleanup;
use crate::fleet::{self, Backends, Fleet, Svc, Unit};
use seckill_harness::ports;

/// The settings the system's gateways run with that the reports record (`key`, `value`): set
/// explicitly (they are the gateway's defaults), so the record cannot drift from them.
pub const SHARED_SETTINGS: [(&str, &str); 3] =
    [("rate_limit.shared", "true"), ("rate_limit.lease", "1"), ("sold_out.remember_ms", "1000")];

/// A gateway beside the system's, a replica of it with settings of its own (on the system's
/// gateway port + 10 x its replica number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extra {
    /// The one-hop baseline: its stock upstream is the trivial server; its limits stay in its
    /// own memory (no Redis call per request) and it forwards every buy click, so sold-out
    /// clicked through it is the gateway before shared limits.
    Hop,
    /// Sharing the system's limits but forwarding every buy click (no answers of its own for
    /// a sale seckill-service called gone): the shared limit's cost on a forwarded click.
    Forwarded,
    /// The system's gateway's twin: one user clicking over two gateways.
    Twin,
}

impl Extra {
    pub const ALL: [Extra; 3] = [Extra::Hop, Extra::Forwarded, Extra::Twin];

    fn unit(self) -> Unit {
        Unit::new(Svc::Gateway, self as usize + 1)
    }

    /// Its name in the reports' process tables.
    pub fn name(self) -> &'static str {
        match self {
            Self::Hop => "gateway-hop",
            Self::Forwarded => "gateway-forwarded",
            Self::Twin => "gateway-twin",
        }
    }

    /// Its settings over the system gateway's (recorded with the reports it is measured in).
    pub fn settings(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Self::Hop => &[("rate_limit.shared", "false"), ("sold_out.remember_ms", "0")],
            Self::Forwarded => &[("rate_limit.shared", "true"), ("sold_out.remember_ms", "0")],
            Self::Twin => &[],
        }
    }
}

/// `rate_limit.shared` as the environment variable that sets it.
fn env_var(setting: &str) -> String {
    format!("SECKILL__{}", setting.replace('.', "__").to_uppercase())
}

pub struct System {
    fleet: Fleet,
    upstream_pid_file: PathBuf,
    extras: Fleet,
    upstream: Child,
    upstream_port: u16,
    backends: Backends,
    /// The order TTLs the services may have named a delay queue after (the clean-up's input).
    order_ttls: Vec<u64>,
}

impl System {
    /// Removes what an interrupted run left, then starts the system, the trivial upstream
    /// and the extra gateways.
    pub async fn start(a: &SuiteArgs, bench: &Path, storm_ttl_secs: u64) -> anyhow::Result<Self> {
        let backends = Backends {
            pg_url: a.pg_url.trim_end_matches('/').to_owned(),
            redis_url: a.redis_url.clone(),
            amqp_url: a.amqp_url.clone(),
            prefix: Some(PREFIX.into()),
        };
        let order_ttls = vec![storm_ttl_secs];
        let mut fleet = Fleet::new(&a.bin_dir, &a.scratch, a.port, backends.clone())?;
        let mut extras = fleet.sibling(&a.scratch.join("extra"))?;
        let upstream_pid_file = a.scratch.join("upstream.pid");
        for dir in [fleet.pid_dir(), extras.pid_dir()] {
            for killed in fleet::stop_leftovers(&dir) {
                eprintln!("bench: an interrupted run left {killed}: killed");
            }
        }
        let _ = std::fs::remove_file(&upstream_pid_file);
        eprintln!("bench: removing what an interrupted run may have left under the scratch names {PREFIX}*");
        cleanup::remove(&backends, &order_ttls, &[super::baselines::amqp_scratch_queue()]).await?;

        let gateway = Unit::first(Svc::Gateway);
        for (setting, value) in SHARED_SETTINGS {
            fleet.set(gateway, &env_var(setting), value);
        }
        // Named here, as the clean-up names its delay queue (the default; the storm's later).
        fleet.set(Unit::first(Svc::Order), "SECKILL__ORDER__TTL_SECS", cleanup::ORDER_TTL_SECS.to_string());
        eprintln!("bench: starting the system (gateway on :{})", a.port);
        fleet.ensure_all(1).await?;

        let upstream_port = a.port + 5;
        let log = std::fs::File::create(a.scratch.join("upstream.log"))?;
        let upstream = Command::new(bench)
            .args(["upstream", "--port", &upstream_port.to_string()])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .context("starting seckill-bench upstream")?;
        std::fs::write(&upstream_pid_file, format!("{}\n", upstream.id().unwrap_or(0)))?;
        let upstream_url = format!("http://127.0.0.1:{upstream_port}");
        ports::await_port(upstream_port, true, Duration::from_secs(30))
            .await
            .context("the trivial upstream")?;

        for extra in Extra::ALL {
            let unit = extra.unit();
            for (setting, value) in SHARED_SETTINGS.iter().chain(extra.settings()) {
                extras.set(unit, &env_var(setting), *value);
            }
            if extra == Extra::Hop {
                extras.set(unit, "SECKILL__UPSTREAMS__STOCK", upstream_url.clone());
            }
            eprintln!("bench: starting {} on :{}", extra.name(), extras.port(unit));
            extras.start(unit).await?;
        }
        Ok(Self { fleet, upstream_pid_file, extras, upstream, upstream_port, backends, order_ttls })
    }

    /// The base URL of the system's gateway (None) or of an extra one.
    pub fn url(&self, extra: Option<Extra>) -> String {
        match extra {
            None => self.fleet.url(Unit::first(Svc::Gateway)),
            Some(e) => self.extras.url(e.unit()),
        }
    }

    pub fn upstream_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.upstream_port)
    }

    /// The system's four pid files (a measurement's `--run-dir`).
    pub fn pid_dir(&self) -> PathBuf {
        self.fleet.pid_dir()
    }

    /// `--pid` of an extra gateway: `<name>=<pid>`.
    pub fn pid_arg(&self, extra: Extra) -> String {
        format!("{}={}", extra.name(), self.extras.pid(extra.unit()).unwrap_or(0))
    }

    pub fn upstream_pid_arg(&self) -> String {
        format!("upstream={}", self.upstream.id().unwrap_or(0))
    }

    pub fn order_pid(&self) -> anyhow::Result<u32> {
        self.fleet.pid(Unit::first(Svc::Order)).context("order-service is not running")
    }

    /// Phase B: seckill-service takes orders without a path token.
    pub async fn restart_seckill_without_tokens(&mut self) -> anyhow::Result<()> {
        self.restart(Unit::first(Svc::Seckill), "SECKILL__SECKILL__REQUIRE_TOKEN", "false").await
    }

    /// Phase C: order-service with a short order TTL, so the storm's orders come due soon.
    pub async fn restart_order_with_ttl(&mut self, secs: u64) -> anyhow::Result<()> {
        self.restart(Unit::first(Svc::Order), "SECKILL__ORDER__TTL_SECS", &secs.to_string()).await
    }

    async fn restart(&mut self, unit: Unit, var: &str, value: &str) -> anyhow::Result<()> {
        eprintln!("\nbench: restarting {unit} with {var}={value}");
        self.fleet.set(unit, var, value);
        let took = self.fleet.restart(unit).await?;
        eprintln!("bench: {unit} ready again after {:.1} s", took.as_secs_f64());
        Ok(())
    }

    /// Stops everything (a paused order-service is resumed first) and removes the scratch
    /// data.
    pub async fn stop(mut self) {
        eprintln!("\nbench: stopping the system, removing the scratch data");
        self.extras.stop_all().await;
        self.fleet.stop_all().await;
        let _ = self.upstream.start_kill();
        let _ = self.upstream.wait().await;
        let _ = std::fs::remove_file(&self.upstream_pid_file);
        if let Err(e) =
            cleanup::remove(&self.backends, &self.order_ttls, &[super::baselines::amqp_scratch_queue()]).await
        {
            eprintln!("bench: the scratch data was not all removed: {e:#}");
        }
    }
}
