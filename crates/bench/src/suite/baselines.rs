//! The servers' own limits, measured by their own tools (redis-benchmark, pgbench), and the
//! versions of what the run measured. A tool that is not installed leaves a record saying so,
//! and the document shows the figure as not measured.

use std::path::Path;
use std::process::Stdio;

use anyhow::Context;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use seckill_common::ids::{GoodsId, UserId};
use seckill_common::keys::RedisKeys;
use tokio::process::Command;

use super::{PREFIX, Sizes, SuiteArgs};
use crate::cli::write_json;
use crate::markdown::{External, KIND_EXTERNAL, names};
use crate::report::now_rfc3339;

/// The queue `amqp-publish` publishes to (under the run's prefix, so the clean-up deletes it).
pub fn amqp_scratch_queue() -> String {
    format!("{PREFIX}.scratch.amqp-publish")
}

/// One record: a figure, or why there is none.
fn record(out: &Path, file: &str, e: External) -> anyhow::Result<()> {
    write_json(
        &out.join(format!("{file}.json")),
        &External { kind: KIND_EXTERNAL.into(), started_at: now_rfc3339(), ..e },
    )
}

fn skipped(out: &Path, name: &str, why: String) -> anyhow::Result<()> {
    eprintln!("bench: {name} skipped: {why}");
    record(out, name, External { name: name.into(), skipped: Some(why), ..External::default() })
}

/// Is `program` on the PATH (it answers `--version`)?
async fn installed(program: &str) -> bool {
    Command::new(program).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().await.is_ok()
}

/// EVALSHA of the gate's reserve script (the one seckill-service runs for every buy) on a
/// scratch sale with a big stock, users random in 1..10^9 so nearly every call takes the
/// decrement path; 50 clients, unpipelined and pipelined by 16.
pub async fn redis(a: &SuiteArgs, s: &Sizes, out: &Path) -> anyhow::Result<()> {
    if !installed("redis-benchmark").await {
        for name in [names::REDIS, names::REDIS_PIPELINED] {
            skipped(
                out,
                name,
                "redis-benchmark not installed (it comes with redis-server / redis-tools)".into(),
            )?;
        }
        return Ok(());
    }
    let mut conn = redis::Client::open(a.redis_url.as_str())?.get_multiplexed_async_connection().await?;
    let sha: String = redis::Script::new(seckill_common::scripts::RESERVE).load_async(&mut conn).await?;
    let (keys, g) = (RedisKeys::new(format!("{PREFIX}:scratch:")), GoodsId::new(1).context("goods id")?);
    let u = UserId::new(1).context("user id")?;
    // The script's KEYS, in its order (seckill_common::scripts::RESERVE).
    let script_keys =
        [keys.stock(g), keys.users(g), keys.pending(g), keys.result(g, u), keys.token(g, u), keys.epoch(g)];
    for k in 1..=s.repeat {
        for (name, pipeline) in [(names::REDIS, 1), (names::REDIS_PIPELINED, 16)] {
            let _: () = redis::cmd("DEL").arg(&script_keys).query_async(&mut conn).await?;
            let _: () =
                redis::cmd("SET").arg(&script_keys[0]).arg(1_000_000_000_i64).query_async(&mut conn).await?;
            let mut args: Vec<String> = ["-c", "50", "-n", &s.redis_calls.to_string(), "-r", "1000000000"]
                .into_iter()
                .map(String::from)
                .collect();
            args.extend(["-P".into(), pipeline.to_string(), "--csv".into(), "EVALSHA".into(), sha.clone()]);
            args.push(script_keys.len().to_string());
            args.extend(script_keys.iter().cloned());
            args.extend(["__rand_int__", "__rand_int__", "0", ""].map(String::from));
            let shown =
                format!("redis-benchmark -u $SECKILL_REDIS_URL {}", args.join(" ")).replace(&sha, "$SHA");
            eprintln!("bench: {name} #{k}: {shown}");
            let output =
                Command::new("redis-benchmark").arg("-u").arg(&a.redis_url).args(&args).output().await?;
            let file = format!("{name}.{k}");
            match parse_redis_benchmark_csv(&String::from_utf8_lossy(&output.stdout)) {
                Some(row) => record(
                    out,
                    &file,
                    External {
                        name: name.into(),
                        value: Some(row.rps),
                        unit: "calls/s".into(),
                        p50_ms: Some(row.p50_ms),
                        p99_ms: Some(row.p99_ms),
                        detail: format!(
                            "redis-benchmark, 50 clients, pipeline {pipeline}: EVALSHA of the gate script, decrement path on a big stock"
                        ),
                        command: shown,
                        ..External::default()
                    },
                )?,
                None => skipped(
                    out,
                    &file,
                    format!(
                        "redis-benchmark gave no figure: {}",
                        String::from_utf8_lossy(&output.stderr).trim()
                    ),
                )?,
            }
        }
    }
    let _: () = redis::cmd("DEL").arg(&script_keys).query_async(&mut conn).await?;
    Ok(())
}

/// redis-benchmark's `--csv` result row.
#[derive(Debug, PartialEq)]
struct RedisRow {
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
}

/// The last row of redis-benchmark's `--csv` output: `"test","rps","avg_latency_ms",
/// "min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"`.
fn parse_redis_benchmark_csv(text: &str) -> Option<RedisRow> {
    let line = text.lines().rev().find(|l| !l.trim().is_empty())?;
    let fields: Vec<&str> = line.trim().trim_matches('"').split("\",\"").collect();
    let num = |i: usize| fields.get(i)?.parse::<f64>().ok();
    Some(RedisRow { rps: num(1)?, p50_ms: num(4)?, p99_ms: num(6)? })
}

/// The order-service's orders table and a stock row like stock-service's goods.
const PG_SCHEMA: &str = "
CREATE TABLE goods (
    id BIGINT PRIMARY KEY,
    stock_total BIGINT NOT NULL,
    stock_available BIGINT NOT NULL CHECK (stock_available >= 0)
);
INSERT INTO goods VALUES (1, 1000000000, 1000000000);
CREATE TABLE orders (
    id BIGSERIAL PRIMARY KEY,
    request_id UUID NOT NULL UNIQUE,
    user_id BIGINT NOT NULL,
    goods_id BIGINT NOT NULL,
    price_cents BIGINT NOT NULL,
    status TEXT NOT NULL DEFAULT 'unpaid',
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX orders_one_active_per_user ON orders (user_id, goods_id) WHERE status IN ('unpaid', 'paid');
CREATE INDEX orders_by_user ON orders (user_id, id DESC);
";

/// One order per transaction: the hot row's conditional decrement and the order's insert.
const PG_SCRIPT: &str = "\\set u random(1, 1000000000)
BEGIN;
UPDATE goods SET stock_available = stock_available - 1 WHERE id = 1 AND stock_available > 0;
INSERT INTO orders (request_id, user_id, goods_id, price_cents, expires_at)
    VALUES (gen_random_uuid(), :u, 1, 49900, now() + interval '30 minutes') ON CONFLICT DO NOTHING;
END;
";

/// pgbench, 16 clients: one order per transaction on one hot stock row, in a scratch database
/// (`<prefix>_scratch`, dropped afterwards).
pub async fn postgres(a: &SuiteArgs, s: &Sizes, out: &Path) -> anyhow::Result<()> {
    if !installed("pgbench").await {
        return skipped(
            out,
            names::PG,
            "pgbench not installed (it comes with the PostgreSQL server package)".into(),
        );
    }
    let (server, db) = (a.pg_url.trim_end_matches('/'), format!("{PREFIX}_scratch"));
    let mut admin = AsyncPgConnection::establish(&format!("{server}/postgres")).await?;
    // Each its own statement: DROP DATABASE cannot run in a transaction, even an implicit one.
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)")).await?;
    admin.batch_execute(&format!("CREATE DATABASE {db}")).await?;
    AsyncPgConnection::establish(&format!("{server}/{db}")).await?.batch_execute(PG_SCHEMA).await?;
    let script = std::path::absolute(a.scratch.join("pg-order.sql"))?;
    std::fs::write(&script, PG_SCRIPT)?;
    let args = [
        "-n",
        "-M",
        "prepared",
        "-c",
        "16",
        "-j",
        "2",
        "-T",
        &s.pg_secs.to_string(),
        "-f",
        &script.display().to_string(),
    ]
    .map(String::from);
    for k in 1..=s.repeat {
        let shown = format!("pgbench {} $SECKILL_PG_URL/<scratch db>", args.join(" "));
        eprintln!("bench: {} #{k}: {shown}", names::PG);
        let output = Command::new("pgbench").args(&args).arg(format!("{server}/{db}")).output().await?;
        let file = format!("{}.{k}", names::PG);
        match parse_pgbench(&String::from_utf8_lossy(&output.stdout)) {
            Some(run) => record(
                out,
                &file,
                External {
                    name: names::PG.into(),
                    value: Some(run.tps),
                    unit: "orders/s".into(),
                    detail: format!(
                        "pgbench, 16 clients, {} s: one order per transaction (UPDATE goods ... WHERE stock_available > 0 on one row + INSERT INTO orders); average latency {} ms",
                        s.pg_secs,
                        run.latency_ms.map_or("?".into(), |l| format!("{l:.3}"))
                    ),
                    command: format!(
                        "{shown}  # script: seckill-bench suite (crates/bench/src/suite/baselines.rs)"
                    ),
                    ..External::default()
                },
            )?,
            None => skipped(
                out,
                &file,
                format!("pgbench failed: {}", String::from_utf8_lossy(&output.stderr).trim()),
            )?,
        }
    }
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)")).await?;
    Ok(())
}

/// pgbench's summary (it has no machine-readable one): `tps = ...` and `latency average = ... ms`.
#[derive(Debug, PartialEq)]
struct PgbenchRun {
    tps: f64,
    latency_ms: Option<f64>,
}

fn parse_pgbench(text: &str) -> Option<PgbenchRun> {
    let after = |prefix: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next()?.parse::<f64>().ok())
    };
    Some(PgbenchRun { tps: after("tps = ")?, latency_ms: after("latency average = ") })
}

/// What the run measured: the compiler, the servers, the commit.
pub async fn versions(a: &SuiteArgs) -> std::collections::BTreeMap<String, String> {
    let first_line = |program: &'static str, args: &'static [&'static str]| async move {
        let output = Command::new(program).args(args).stderr(Stdio::null()).output().await.ok()?;
        let text = String::from_utf8_lossy(&output.stdout).lines().next()?.trim().to_owned();
        (output.status.success() && !text.is_empty()).then_some(text)
    };
    let pg = async {
        let mut conn = AsyncPgConnection::establish(&format!("{}/postgres", a.pg_url.trim_end_matches('/')))
            .await
            .ok()?;
        diesel::select(diesel::dsl::sql::<diesel::sql_types::Text>("current_setting('server_version')"))
            .get_result::<String>(&mut conn)
            .await
            .ok()
    };
    let redis = async {
        let mut conn =
            redis::Client::open(a.redis_url.as_str()).ok()?.get_multiplexed_async_connection().await.ok()?;
        let info: String = redis::cmd("INFO").arg("server").query_async(&mut conn).await.ok()?;
        info.lines().find_map(|l| l.strip_prefix("redis_version:")).map(|v| v.trim().to_owned())
    };
    // What the run itself writes is not a change to the code it measured.
    let (out, doc) = (a.out.display().to_string(), a.doc.display().to_string());
    let commit = seckill_harness::git_commit(&[&out, &doc]);
    let unknown = |v: Option<String>| v.unwrap_or_else(|| "unknown".into());
    [
        ("rustc", unknown(first_line("rustc", &["--version"]).await)),
        ("PostgreSQL server", unknown(pg.await)),
        ("Redis server", unknown(redis.await)),
        (
            "RabbitMQ (Debian package)",
            unknown(first_line("dpkg-query", &["-W", "-f", "${Version}\n", "rabbitmq-server"]).await),
        ),
        ("git commit", commit),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_benchmark_csv_gives_its_rate_and_percentiles() {
        let out = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\
                   \"EVALSHA abc 6 k1 k2 __rand_int__\",\"81234.56\",\"0.580\",\"0.100\",\"0.551\",\"0.800\",\"1.023\",\"3.100\"\n";
        assert_eq!(
            parse_redis_benchmark_csv(out),
            Some(RedisRow { rps: 81_234.56, p50_ms: 0.551, p99_ms: 1.023 })
        );
        assert_eq!(parse_redis_benchmark_csv("ERR unknown command\n"), None);
        assert_eq!(parse_redis_benchmark_csv(""), None);
    }

    #[test]
    fn pgbench_summary_gives_tps_and_latency() {
        let out = "transaction type: pg-order.sql\nnumber of clients: 16\nlatency average = 2.345 ms\n\
                   initial connection time = 12.1 ms\ntps = 6821.123456 (without initial connection time)\n";
        assert_eq!(parse_pgbench(out), Some(PgbenchRun { tps: 6_821.123_456, latency_ms: Some(2.345) }));
        assert_eq!(parse_pgbench("pgbench: error: connection refused\n"), None);
    }
}
