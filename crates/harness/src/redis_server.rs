//! Private `redis-server`s on loopback for the tools (the fault suite's, the scaling
//! benchmark's nodes): no persistence, each node's files in a directory of its own, started
//! daemonized and stopped with `SHUTDOWN NOSAVE`. A restart loses every key, on purpose.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::process::Command;

use crate::ports::await_port;

pub fn url(port: u16) -> String {
    format!("redis://127.0.0.1:{port}")
}

/// Starts a node on `port` with its files in `dir` (created), a Redis Cluster node when
/// `cluster`, and waits until it accepts connections.
pub async fn start(dir: &Path, port: u16, cluster: bool) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    // redis-server enters `--dir` before it opens the other files: they must not be relative.
    let dir = &std::path::absolute(dir)?;
    let mut cmd = Command::new("redis-server");
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args(["--daemonize", "yes", "--dir"])
        .arg(dir)
        .arg("--pidfile")
        .arg(dir.join("redis.pid"))
        .arg("--logfile")
        .arg(dir.join("redis.log"));
    if cluster {
        cmd.args(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"])
            .args(["--cluster-node-timeout", "2000"]);
    }
    let out = cmd.output().await.context("running redis-server (is it installed?)")?;
    if !out.status.success() {
        bail!(
            "redis-server on port {port} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    await_port(port, true, Duration::from_secs(30))
        .await
        .with_context(|| format!("redis-server does not answer; see {}", dir.join("redis.log").display()))
}

/// `SHUTDOWN NOSAVE`, then waits until the port refuses connections.
pub async fn stop(port: u16) -> anyhow::Result<()> {
    let mut conn = redis::Client::open(url(port))?.get_multiplexed_async_connection().await?;
    // The server closes the connection instead of answering.
    let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").arg("NOSAVE").query_async(&mut conn).await;
    await_port(port, false, Duration::from_secs(30)).await.context("redis-server did not stop")
}
