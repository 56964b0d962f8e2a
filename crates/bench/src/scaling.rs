//! `seckill-bench scaling` (scripts/bench-scaling.sh): the gate's throughput for one hot sale
//! as Redis grows, in ONE run: one Redis server, then Redis Clusters of 1, 2 and 3 primaries,
//! each with the sale's stock in 1, 2, 4 and 8 buckets ([`gate_load`]: the reserve script
//! alone, as seckill-service calls it). Prints a Markdown table (calls/s, and the ratio to one
//! server with one bucket, the run's own baseline), each node's share of the calls and the CPU
//! a call costs a node; docs/SCALING.md holds a run's tables and the arithmetic for a real
//! cluster.
//!
//! Private servers on loopback, none of the user's touched: one Redis on `--port` (7400) and
//! the clusters' nodes on ten, twenty and twenty-one, thirty to thirty-two ports above it
//! (their cluster buses 10,000 higher), no persistence, under `--dir`, all stopped and removed
//! at the end. On a machine with fewer cores than primaries the nodes share the cores with each
//! other and with the load tool: the table shows how a sale spreads over the shards, and the
//! per-call CPU what each shard on a core of its own would add.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;

use crate::gate_load::{self, GateArgs, GateReport};
use seckill_harness::n0;
use seckill_harness::ports::port_open;
use seckill_harness::redis_server;

#[derive(Debug, Clone, Args)]
pub struct ScalingArgs {
    /// Seconds of each run.
    #[arg(long, env = "BENCH_SECS", default_value_t = 5.0)]
    pub secs: f64,
    /// Calls in flight.
    #[arg(long, env = "BENCH_CONNECTIONS", default_value_t = 64)]
    pub connections: usize,
    /// Bucket counts the stock is split over, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub buckets: Vec<u8>,
    /// The single server's port; the clusters' nodes follow it (see above).
    #[arg(long, default_value_t = 7400)]
    pub port: u16,
    /// The nodes' files (removed at the end).
    #[arg(long, default_value = "run/bench-scaling")]
    pub dir: PathBuf,
}

/// The Redis setups measured, in the table's column order.
struct Setup {
    label: String,
    ports: Vec<u16>,
    cluster: bool,
}

fn setups(base: u16) -> Vec<Setup> {
    let single = Setup { label: "one server".into(), ports: vec![base], cluster: false };
    let clusters = (1..=3u16).map(|n| Setup {
        label: format!("cluster of {n}"),
        ports: (0..n).map(|i| base + 10 * n + i).collect(),
        cluster: true,
    });
    std::iter::once(single).chain(clusters).collect()
}

pub async fn run(a: &ScalingArgs) -> anyhow::Result<()> {
    let setups = setups(a.port);
    let ports: Vec<u16> = setups.iter().flat_map(|s| s.ports.clone()).collect();
    for &p in &ports {
        if port_open(p).await || (p < u16::MAX - 10_000 && port_open(p + 10_000).await) {
            bail!("port {p} (or its cluster bus, + 10,000) is taken: free them or choose another --port");
        }
    }
    let _ = std::fs::remove_dir_all(&a.dir);
    let measured = measure(a, &setups).await;
    for &p in &ports {
        if port_open(p).await {
            let _ = redis_server::stop(p).await;
        }
    }
    let _ = std::fs::remove_dir_all(&a.dir);
    print_tables(a, &setups, &measured?);
    Ok(())
}

async fn measure(a: &ScalingArgs, setups: &[Setup]) -> anyhow::Result<Vec<GateReport>> {
    for s in setups {
        for &p in &s.ports {
            redis_server::start(&a.dir.join(p.to_string()), p, s.cluster).await?;
        }
        if s.cluster {
            form_cluster(&s.ports).await.with_context(|| format!("the {}", s.label))?;
        }
    }
    eprintln!("bench-scaling: servers ready: one Redis on {}; clusters of 1, 2 and 3 primaries", a.port);
    let mut reports = Vec::new();
    for &buckets in &a.buckets {
        for s in setups {
            eprintln!("bench-scaling: {}, {buckets} bucket(s)", s.label);
            let urls: Vec<String> = s.ports.iter().map(|&p| redis_server::url(p)).collect();
            let report = gate_load::run(&GateArgs {
                redis: urls.join(","),
                cluster: s.cluster,
                buckets,
                connections: a.connections,
                secs: a.secs,
                prefix: "seckill-bench-gate:".into(),
                label: s.label.clone(),
            })
            .await?;
            reports.push(report);
        }
    }
    Ok(reports)
}

/// The 16,384 slots split evenly over `ports` (CLUSTER ADDSLOTSRANGE and MEET by hand, as
/// `redis-cli --cluster create` wants at least three primaries), then awaited whole.
async fn form_cluster(ports: &[u16]) -> anyhow::Result<()> {
    let n = ports.len();
    let mut conns = Vec::new();
    for (i, &p) in ports.iter().enumerate() {
        let mut conn = redis::Client::open(redis_server::url(p))?.get_multiplexed_async_connection().await?;
        let (lo, hi) = (16_384 * i / n, 16_384 * (i + 1) / n - 1);
        let _: () = redis::cmd("CLUSTER").arg("ADDSLOTSRANGE").arg(lo).arg(hi).query_async(&mut conn).await?;
        conns.push(conn);
    }
    for &p in &ports[1..] {
        let _: () =
            redis::cmd("CLUSTER").arg("MEET").arg("127.0.0.1").arg(p).query_async(&mut conns[0]).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut whole = true;
        for conn in &mut conns {
            let info: String = redis::cmd("CLUSTER").arg("INFO").query_async(conn).await?;
            let field = |name: &str| info.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
            whole &= field("cluster_state:") == Some("ok")
                && field("cluster_known_nodes:") == Some(&n.to_string());
        }
        if whole {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the cluster on ports {ports:?} did not form within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn print_tables(a: &ScalingArgs, setups: &[Setup], reports: &[GateReport]) {
    let row = |label: &str, buckets: u8| reports.iter().find(|r| r.label == label && r.buckets == buckets);
    let base = row("one server", 1).map_or(0.0, |r| r.calls_per_sec).max(1e-9);
    println!(
        "Gate calls/s for one hot sale ({} calls in flight, {} s each; ratio to one server, one bucket):\n",
        a.connections, a.secs
    );
    let labels: Vec<&str> = setups.iter().map(|s| s.label.as_str()).collect();
    println!("| buckets | {} |\n|---|{}", labels.join(" | "), "---|".repeat(labels.len()));
    for &b in &a.buckets {
        let cells: Vec<String> = labels
            .iter()
            .map(|l| {
                row(l, b).map_or("-".into(), |r| {
                    format!("{} ({:.2})", n0(r.calls_per_sec), r.calls_per_sec / base)
                })
            })
            .collect();
        println!("| {b} | {} |", cells.join(" | "));
    }
    println!("\nEach node's share of the calls, and the Redis CPU (main thread) per call:\n");
    println!(
        "| run | buckets | calls per node | µs of CPU a call | p50 ms | p99 ms |\n|---|---|---|---|---|---|"
    );
    for r in reports {
        let share: Vec<String> = r.calls_per_node.iter().map(|&c| n0(c as f64)).collect();
        println!(
            "| {} | {} | {} | {:.1} | {:.2} | {:.2} |",
            r.label,
            r.buckets,
            share.join(" / "),
            r.cpu_us_per_call,
            r.p50_ms,
            r.p99_ms
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setups_take_distinct_ports_after_the_base() {
        let s = setups(7400);
        let ports: Vec<u16> = s.iter().flat_map(|s| s.ports.clone()).collect();
        assert_eq!(ports, [7400, 7410, 7420, 7421, 7430, 7431, 7432]);
        assert_eq!(
            s.iter().map(|s| s.label.as_str()).collect::<Vec<_>>(),
            ["one server", "cluster of 1", "cluster of 2", "cluster of 3"]
        );
        assert!(!s[0].cluster && s[1..].iter().all(|s| s.cluster));
    }
}
