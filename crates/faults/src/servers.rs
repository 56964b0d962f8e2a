//! The suite's own PostgreSQL, Redis and RabbitMQ, started, stopped, restarted and flushed by
//! the driver: never the user's, because the cases restart them, FLUSHALL Redis and kill
//! connections. All three live in `<scratch>/` on ports of their own, loopback only:
//!
//! - PostgreSQL: a cluster made by `initdb` in `pg/data` (trust on loopback, no Unix socket),
//!   run as the `postgres` OS user when the driver is root (PostgreSQL refuses root);
//! - Redis: `redis-server` without persistence, so a restart loses every key;
//! - RabbitMQ: a second node with its own name, ports, data, logs, configuration files and
//!   Erlang cookie (its HOME), so neither the system's node nor /etc/rabbitmq is involved. The
//!   scripts in /usr/lib/rabbitmq/bin are called directly: Debian's /usr/sbin wrappers switch
//!   to the rabbitmq user and write /var/log/rabbitmq.
//!
//! The programs are found, not installed: scripts/faults.sh installs what is missing. `psql`
//! reads the two databases for the checks.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::process::Command;

use seckill_harness::ports::{await_port, port_open};
use seckill_harness::redis_server;

use super::cases::Server;

/// What a case does to a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Start,
    Stop,
    Restart,
    /// Redis: FLUSHALL, then CLIENT KILL TYPE normal: what a restart without persistence, or a
    /// failover to a replica that missed writes, does to the clients.
    FlushKill,
    /// RabbitMQ: the broker refuses connections while its node stays up (back in seconds).
    StopApp,
    StartApp,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Start => "start",
            Self::Stop => "stop",
            Self::Restart => "restart",
            Self::FlushKill => "flush-kill",
            Self::StopApp => "stop-app",
            Self::StartApp => "start-app",
        })
    }
}

/// The servers' ports.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub pg: u16,
    pub redis: u16,
    pub amqp: u16,
    /// RabbitMQ's distribution port; rabbitmqctl uses the ten after it.
    pub rabbit_dist: u16,
}

const RABBIT_NODE: &str = "seckill-faults@localhost";

pub struct Servers {
    dir: PathBuf,
    ports: Ports,
    pg_bin: PathBuf,
    /// Run PostgreSQL's programs as the `postgres` OS user (the driver is root).
    as_postgres: bool,
}

impl Servers {
    /// Finds the programs; `dir` is the run's scratch directory.
    pub fn new(dir: &Path, ports: Ports) -> anyhow::Result<Self> {
        let dir = std::path::absolute(dir)?;
        let pg_bin = pg_bindir().context("pg_ctl not found (the postgresql package)")?;
        let as_postgres = rustix::process::geteuid().is_root();
        Ok(Self { dir, ports, pg_bin, as_postgres })
    }

    pub fn pg_url(&self) -> String {
        format!("postgres://postgres:postgres@127.0.0.1:{}", self.ports.pg)
    }

    pub fn redis_url(&self) -> String {
        redis_server::url(self.ports.redis)
    }

    pub fn amqp_url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.ports.amqp)
    }

    /// Makes and starts all three.
    pub async fn start_all(&self) -> anyhow::Result<()> {
        self.pg_init().await?;
        self.control(Server::Postgres, Action::Start).await?;
        println!("faults: private PostgreSQL up on 127.0.0.1:{}", self.ports.pg);
        self.control(Server::Redis, Action::Start).await?;
        println!("faults: private Redis up on 127.0.0.1:{}", self.ports.redis);
        self.rabbit_init()?;
        println!(
            "faults: starting RabbitMQ node {RABBIT_NODE} (AMQP port {}); this can take a minute",
            self.ports.amqp
        );
        self.control(Server::RabbitMq, Action::Start).await?;
        println!("faults: private RabbitMQ up on 127.0.0.1:{}", self.ports.amqp);
        Ok(())
    }

    /// Stops whatever of the three runs (a run's, or one an interrupted run left).
    pub async fn stop_all(&self) {
        if port_open(self.ports.redis).await {
            println!("faults: stopping the private redis-server (port {})", self.ports.redis);
            let _ = self.control(Server::Redis, Action::Stop).await;
        }
        if self.dir.join("pg/data/postmaster.pid").exists() {
            println!("faults: stopping the private PostgreSQL (port {})", self.ports.pg);
            let _ = self.pg_stop().await;
        }
        if port_open(self.ports.amqp).await || self.dir.join("rabbitmq/rabbit.pid").exists() {
            println!("faults: stopping the private RabbitMQ node {RABBIT_NODE}");
            let _ = self.control(Server::RabbitMq, Action::Stop).await;
        }
    }

    /// Does `action` to `server`; returns how long it took.
    pub async fn control(&self, server: Server, action: Action) -> anyhow::Result<Duration> {
        let started = Instant::now();
        match (server, action) {
            (Server::Postgres, Action::Start) => self.pg_start().await?,
            (Server::Postgres, Action::Stop) => self.pg_stop().await?,
            (Server::Postgres, Action::Restart) => {
                self.pg_stop().await?;
                self.pg_start().await?;
            }
            (Server::Redis, Action::Start) => self.redis_start().await?,
            (Server::Redis, Action::Stop) => redis_server::stop(self.ports.redis).await?,
            (Server::Redis, Action::Restart) => {
                redis_server::stop(self.ports.redis).await?;
                self.redis_start().await?;
            }
            (Server::Redis, Action::FlushKill) => {
                let mut conn =
                    redis::Client::open(self.redis_url())?.get_multiplexed_async_connection().await?;
                let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await?;
                // Every client but this one (SKIPME yes, the default).
                let _: i64 =
                    redis::cmd("CLIENT").arg(&["KILL", "TYPE", "normal"][..]).query_async(&mut conn).await?;
            }
            (Server::RabbitMq, Action::Start) => {
                let log = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.rabbit_dir().join("start.log"))?;
                let status = self
                    .rabbit_cmd("rabbitmq-server")
                    .arg("-detached")
                    .stdout(log.try_clone()?)
                    .stderr(log)
                    .status()
                    .await?;
                if !status.success() {
                    bail!(
                        "rabbitmq-server -detached failed ({status}); see {}/start.log",
                        self.rabbit_dir().display()
                    );
                }
                self.rabbit_await_up().await?;
            }
            (Server::RabbitMq, Action::Stop) => {
                let _ = self.rabbitmqctl(&["shutdown"]).await;
                await_port(self.ports.amqp, false, Duration::from_secs(30))
                    .await
                    .context("RabbitMQ did not stop")?;
            }
            // As the clients see a broker restart: every connection closed, durable queues and
            // their persistent messages recovered from disk.
            (Server::RabbitMq, Action::Restart) => {
                self.rabbitmqctl(&["-q", "stop_app"]).await?;
                self.rabbitmqctl(&["-q", "start_app"]).await?;
                self.rabbit_await_up().await?;
            }
            (Server::RabbitMq, Action::StopApp) => self.rabbitmqctl(&["-q", "stop_app"]).await?,
            (Server::RabbitMq, Action::StartApp) => self.rabbitmqctl(&["-q", "start_app"]).await?,
            _ => bail!("{} has no {action}", server.kind()),
        }
        Ok(started.elapsed())
    }

    /// Runs one query on `db` and returns its rows (fields split on tabs). Retried for up to
    /// 20 s: the server may be coming back from a restart.
    pub async fn sql(&self, db: &str, query: &str) -> anyhow::Result<Vec<Vec<String>>> {
        let deadline = Instant::now() + Duration::from_secs(20);
        let psql = self.pg_bin.join("psql");
        loop {
            let out = Command::new(&psql)
                .args(["-X", "-q", "-A", "-t", "-F", "\t", "-v", "ON_ERROR_STOP=1", "-d"])
                .arg(format!("{}/{db}", self.pg_url()))
                .args(["-c", query])
                .env("PGCONNECT_TIMEOUT", "5")
                .output()
                .await
                .with_context(|| format!("running {}", psql.display()))?;
            if out.status.success() {
                let text = String::from_utf8_lossy(&out.stdout);
                return Ok(text
                    .lines()
                    .filter(|l| !l.is_empty())
                    .map(|l| l.split('\t').map(str::to_owned).collect())
                    .collect());
            }
            if Instant::now() >= deadline {
                bail!("psql on {db}: {} ({query})", String::from_utf8_lossy(&out.stderr).trim());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The servers' logs, to keep when the scratch directory goes.
    pub fn logs(&self) -> Vec<PathBuf> {
        let mut logs = vec![
            self.dir.join("pg/postgres.log"),
            self.dir.join("redis/redis.log"),
            self.rabbit_dir().join("start.log"),
        ];
        let rabbit_logs = std::fs::read_dir(self.rabbit_dir().join("log")).into_iter().flatten().flatten();
        logs.extend(rabbit_logs.map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "log")));
        logs
    }

    /// A PostgreSQL program, as the postgres OS user when the driver is root.
    fn pg_program(&self, program: &str) -> Command {
        let path = self.pg_bin.join(program);
        if self.as_postgres {
            let mut cmd = Command::new("runuser");
            cmd.args(["-u", "postgres", "--"]).arg(path);
            cmd
        } else {
            Command::new(path)
        }
    }

    async fn pg_start(&self) -> anyhow::Result<()> {
        let log = self.dir.join("pg/postgres.log").display().to_string();
        self.pg_ctl(&["-l", &log, "-w", "-t", "60", "start"]).await
    }

    async fn pg_stop(&self) -> anyhow::Result<()> {
        self.pg_ctl(&["-m", "fast", "-w", "-t", "60", "stop"]).await
    }

    async fn redis_start(&self) -> anyhow::Result<()> {
        redis_server::start(&self.dir.join("redis"), self.ports.redis, false).await
    }

    async fn pg_ctl(&self, args: &[&str]) -> anyhow::Result<()> {
        let data = self.dir.join("pg/data");
        run(self.pg_program("pg_ctl").arg("-D").arg(&data).args(args), "pg_ctl").await
    }

    /// A cluster of its own: TCP on loopback only, no Unix socket (nothing else reaches it by
    /// accident).
    async fn pg_init(&self) -> anyhow::Result<()> {
        let dir = self.dir.join("pg");
        std::fs::create_dir_all(&dir)?;
        if self.as_postgres {
            run(Command::new("chown").arg("postgres:").arg(&dir), "chown").await?;
        }
        println!(
            "faults: initdb: a private PostgreSQL cluster in {}/data (port {}, trust on loopback)",
            dir.display(),
            self.ports.pg
        );
        let data = dir.join("data");
        run(
            self.pg_program("initdb").arg("-D").arg(&data).args([
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
            ]),
            "initdb (is the checkout's directory reachable by the postgres OS user?)",
        )
        .await?;
        let conf = format!(
            "\n# a private server for the fault suite\nlisten_addresses = '127.0.0.1'\nport = {}\nunix_socket_directories = ''\nmax_connections = 200\n",
            self.ports.pg
        );
        // Root may append to the postgres user's file; otherwise it is the driver's own.
        let mut file = std::fs::OpenOptions::new().append(true).open(data.join("postgresql.conf"))?;
        std::io::Write::write_all(&mut file, conf.as_bytes())?;
        Ok(())
    }

    fn rabbit_dir(&self) -> PathBuf {
        self.dir.join("rabbitmq")
    }

    /// The node's files: its own cookie (the CLI finds it in the same HOME), no plugins, no
    /// settings from /etc/rabbitmq.
    fn rabbit_init(&self) -> anyhow::Result<()> {
        let d = self.rabbit_dir();
        for sub in ["home", "mnesia", "log"] {
            std::fs::create_dir_all(d.join(sub))?;
        }
        let cookie = d.join("home/.erlang.cookie");
        std::fs::write(
            &cookie,
            format!("SECKILLFAULTS{}", uuid::Uuid::new_v4().simple().to_string().to_uppercase()),
        )?;
        std::fs::set_permissions(&cookie, std::os::unix::fs::PermissionsExt::from_mode(0o400))?;
        std::fs::write(d.join("enabled_plugins"), "[].\n")?;
        std::fs::write(d.join("advanced.config"), "[].\n")?;
        std::fs::write(d.join("rabbitmq-env.conf"), "# no settings from /etc/rabbitmq/rabbitmq-env.conf\n")?;
        std::fs::write(
            d.join("rabbitmq.conf"),
            format!(
                "# a private node for the fault suite, on loopback only\nlisteners.tcp.default = 127.0.0.1:{}\nlog.console = false\nlog.file.level = info\n",
                self.ports.amqp
            ),
        )?;
        Ok(())
    }

    /// A RabbitMQ program with the node's environment.
    fn rabbit_cmd(&self, program: &str) -> Command {
        let d = self.rabbit_dir();
        let installed = Path::new("/usr/lib/rabbitmq/bin").join(program);
        let mut cmd = Command::new(if installed.exists() { installed } else { PathBuf::from(program) });
        let dist = self.ports.rabbit_dist;
        let path = |p: &str| d.join(p).display().to_string();
        cmd.envs([
            ("HOME", path("home")),
            ("RABBITMQ_NODENAME", RABBIT_NODE.into()),
            ("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1".into()),
            ("RABBITMQ_NODE_PORT", self.ports.amqp.to_string()),
            ("RABBITMQ_DIST_PORT", dist.to_string()),
            ("RABBITMQ_CTL_DIST_PORT_MIN", (dist + 1).to_string()),
            ("RABBITMQ_CTL_DIST_PORT_MAX", (dist + 10).to_string()),
            ("RABBITMQ_MNESIA_BASE", path("mnesia")),
            ("RABBITMQ_LOG_BASE", path("log")),
            ("RABBITMQ_PID_FILE", path("rabbit.pid")),
            ("RABBITMQ_ENABLED_PLUGINS_FILE", path("enabled_plugins")),
            ("RABBITMQ_CONFIG_FILE", path("rabbitmq.conf")),
            ("RABBITMQ_ADVANCED_CONFIG_FILE", path("advanced.config")),
            ("RABBITMQ_CONF_ENV_FILE", path("rabbitmq-env.conf")),
            ("ERL_EPMD_ADDRESS", "127.0.0.1".into()),
            ("RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS", "-kernel inet_dist_use_interface {127,0,0,1}".into()),
        ]);
        cmd
    }

    async fn rabbitmqctl(&self, args: &[&str]) -> anyhow::Result<()> {
        let mut cmd = self.rabbit_cmd("rabbitmqctl");
        cmd.args(["-n", RABBIT_NODE]).args(args);
        tokio::time::timeout(Duration::from_secs(90), run(&mut cmd, "rabbitmqctl"))
            .await
            .context("rabbitmqctl hung")?
    }

    /// Up when the node has started and its AMQP port accepts connections (120 s at most).
    async fn rabbit_await_up(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let started = self.rabbitmqctl(&["-q", "await_startup"]).await.is_ok();
            if started && port_open(self.ports.amqp).await {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "RabbitMQ node {RABBIT_NODE} did not start within 120 s; see {}/log/",
                    self.rabbit_dir().display()
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// Runs a command to its end; fails with its output unless it succeeded.
async fn run(cmd: &mut Command, what: &str) -> anyhow::Result<()> {
    let out =
        cmd.stdin(std::process::Stdio::null()).output().await.with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        );
    }
    Ok(())
}

/// The newest /usr/lib/postgresql/<version>/bin (Debian), else where pg_ctl is on the PATH.
fn pg_bindir() -> Option<PathBuf> {
    let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, bin): &(u32, PathBuf)| bin.join("pg_ctl").is_file())
        .collect();
    debian.sort();
    debian.pop().map(|(_, bin)| bin).or_else(|| {
        std::env::var_os("PATH")
            .and_then(|paths| std::env::split_paths(&paths).find(|p| p.join("pg_ctl").is_file()))
    })
}
