//! The private servers, seen from the driver: `scripts/faults.sh server KIND ACTION` restarts,
//! stops or flushes them (the script knows their directories, ports and users), and `psql`
//! reads the two databases for the checks. Both are external programs on purpose: the load
//! tool keeps no database driver of its own.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::process::Command;

use super::cases::Server;

pub struct Servers {
    /// scripts/faults.sh.
    pub ctl: PathBuf,
    pub psql: String,
    /// Server URL without a database name.
    pub pg_url: String,
}

impl Servers {
    /// `bash <ctl> server KIND ACTION`; returns how long it took.
    pub async fn control(&self, server: Server, action: &str) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let out = Command::new("bash")
            .arg(&self.ctl)
            .args(["server", server.kind(), action])
            .output()
            .await
            .with_context(|| format!("running {}", self.ctl.display()))?;
        if !out.status.success() {
            bail!(
                "{} server {} {action} failed ({}): {}",
                self.ctl.display(),
                server.kind(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(started.elapsed())
    }

    /// Runs one query on `db` and returns its rows (fields split on tabs). Retried for up to
    /// 20 s: the server may be coming back from a restart.
    pub async fn sql(&self, db: &str, query: &str) -> anyhow::Result<Vec<Vec<String>>> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let out = Command::new(&self.psql)
                .args(["-X", "-q", "-A", "-t", "-F", "\t", "-v", "ON_ERROR_STOP=1", "-d"])
                .arg(format!("{}/{db}", self.pg_url))
                .args(["-c", query])
                .env("PGCONNECT_TIMEOUT", "5")
                .output()
                .await
                .with_context(|| format!("running {}", self.psql))?;
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
}
