//! The driver's command line, its defaults, and the checks of the ports it is given.

use std::path::PathBuf;

use anyhow::bail;
use seckill_harness::fleet::replica_port;

use crate::cases::MAX_REPLICAS;
use crate::servers;

/// Ports of the system's own servers and services: the suite restarts, flushes and kills what
/// it is pointed at, so it refuses these.
const STANDARD_PORTS: [u16; 7] = [5432, 6379, 5672, 8080, 8081, 8082, 8083];

/// Everything a run needs: the command line of `seckill-faults`.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "seckill-faults",
    about = "The fault suite (scripts/faults.sh runs it against private servers): starts the four release \
             binaries, and per case a fresh sale, buyers arriving, one fault mid-sale (kill -9, SIGTERM, a \
             server restarted or flushed), then checks that nothing was lost. Exits 3 when a case broke an \
             invariant."
)]
pub struct Config {
    /// Cases to run (default: all of them; with --quick: the CI subset, `--list --quick`).
    pub cases: Vec<String>,
    /// Small sales and short outages; without case names, the CI subset.
    #[arg(long)]
    pub quick: bool,
    /// Print the cases (those named, checking the names; with --quick alone, the subset) and exit.
    #[arg(long)]
    pub list: bool,
    /// Where gateway, seckill-service, order-service and stock-service are.
    #[arg(long, default_value = "target/release")]
    pub bin_dir: PathBuf,
    /// The services' working directory, logs (services/*.log) and pid files.
    #[arg(long, default_value = "run/faults")]
    pub scratch: PathBuf,
    /// The private PostgreSQL's port (the system's standard ports are refused).
    #[arg(long, env = "FAULTS_PG_PORT", default_value_t = 25432)]
    pub pg_port: u16,
    /// The private Redis's port.
    #[arg(long, env = "FAULTS_REDIS_PORT", default_value_t = 26379)]
    pub redis_port: u16,
    /// The private RabbitMQ node's AMQP port.
    #[arg(long, env = "FAULTS_AMQP_PORT", default_value_t = 26672)]
    pub amqp_port: u16,
    /// Its distribution port; rabbitmqctl uses the ten after it.
    #[arg(long, env = "FAULTS_RABBITMQ_DIST_PORT", default_value_t = 26682)]
    pub rabbit_dist_port: u16,
    /// The gateway's port; seckill-, order- and stock-service take the next three, the
    /// gateway's admin listener the one after; replica k of each takes its port + 10k. Every
    /// default is below 32768, outside Linux's range for outgoing connections' local ports, so
    /// a service restarted mid-case never finds its port taken by a buyer's connection.
    #[arg(long, env = "FAULTS_HTTP_PORT", default_value_t = 28080)]
    pub http_port: u16,
    /// Stop what an interrupted run left (its services and servers), keep its logs in
    /// run/faults-logs/, remove the scratch directory, and exit (scripts/down.sh runs it).
    #[arg(long)]
    pub clean: bool,
    /// Units per sale (default 400, quick 150); three times as many buyers.
    #[arg(long)]
    pub units: Option<i64>,
    /// Write the report here (default: docs/RELIABILITY.md when every case runs, not --quick).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

impl Config {
    pub fn units(&self) -> i64 {
        self.units.unwrap_or(if self.quick { 150 } else { 400 })
    }

    /// Every port the run takes, with the variable that moves it: the servers', then each
    /// replica's listeners (the gateway's admin one among them).
    pub(crate) fn taken_ports(&self) -> Vec<(u16, &'static str)> {
        let servers = [
            (self.pg_port, "FAULTS_PG_PORT"),
            (self.redis_port, "FAULTS_REDIS_PORT"),
            (self.amqp_port, "FAULTS_AMQP_PORT"),
            (self.rabbit_dist_port, "FAULTS_RABBITMQ_DIST_PORT"),
        ];
        let services = (0..MAX_REPLICAS)
            .flat_map(|k| (0..5).map(move |i| (replica_port(self.http_port + i, k), "FAULTS_HTTP_PORT")));
        servers.into_iter().chain(services).collect()
    }

    /// Refuses a server or service on a standard port: the suite restarts and flushes what it
    /// is given.
    pub(crate) fn check_ports(&self) -> anyhow::Result<()> {
        match self.taken_ports().into_iter().find(|(p, _)| STANDARD_PORTS.contains(p)) {
            Some((port, what)) => {
                bail!("port {port} ({what}) is one of the system's own; give the suite others")
            }
            None => Ok(()),
        }
    }

    pub(crate) fn ports(&self) -> servers::Ports {
        servers::Ports {
            pg: self.pg_port,
            redis: self.redis_port,
            amqp: self.amqp_port,
            rabbit_dist: self.rabbit_dist_port,
        }
    }

    /// Where the report goes: `--out`, else docs/RELIABILITY.md for a whole run.
    pub fn report_path(&self) -> Option<PathBuf> {
        self.out
            .clone()
            .or_else(|| (!self.quick && self.cases.is_empty()).then(|| "docs/RELIABILITY.md".into()))
    }
}
