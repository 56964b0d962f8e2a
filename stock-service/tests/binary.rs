//! The real binary, configured by environment variables alone (no config file), as a container
//! runs it: it starts, answers, and stops gracefully on SIGTERM; a bad value stops it at once
//! with the key named.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use seckill_common::amqp::AmqpNames;
use seckill_common::trust::Peer;
use seckill_testkit::{TestDb, TestNames, amqp_url, keys};

fn binary() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_stock-service"));
    // An empty folder: no config/stock-service.toml to find.
    cmd.current_dir(std::env::temp_dir()).env_remove("SECKILL_CONFIG").env_remove("RUST_LOG");
    cmd
}

/// The link keys, as a container gets them from its Secret.
fn with_keys(cmd: &mut Command) -> &mut Command {
    let trust = keys::trust_settings(Peer::Stock);
    for (dir, map) in [("SEND", &trust.send), ("ACCEPT", &trust.accept)] {
        for (peer, key) in map {
            cmd.env(format!("SECKILL__TRUST__{dir}__{}", peer.to_uppercase()), key);
        }
    }
    cmd
}

#[tokio::test]
async fn starts_from_environment_variables_alone_and_stops_on_sigterm() {
    let db = TestDb::new("stockbin");
    let mut names = TestNames::new();
    let n = AmqpNames::new(names.amqp_prefix.clone());
    names.cleanup_amqp(n.all_queues(1_800, 1_000), Vec::new());
    let mut child = with_keys(&mut binary())
        .env("SECKILL__AMQP__URL", amqp_url())
        .env("SECKILL__AMQP__PREFIX", &names.amqp_prefix)
        .env("SECKILL__HTTP__HOST", "127.0.0.1")
        .env("SECKILL__HTTP__PORT", "0")
        .env("SECKILL__HTTP__WORKERS", "1")
        .env("SECKILL__LOG__FORMAT", "json")
        .env("SECKILL__DATABASE__URL", db.url())
        .env("SECKILL__DATABASE__POOL_SIZE", "2")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();

    // The JSON log line announcing the port.
    let stdout = child.stdout.take().unwrap();
    let port = tokio::task::spawn_blocking(move || {
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            let v: serde_json::Value = serde_json::from_str(&line).expect("log lines are JSON");
            if v["message"] == "stock-service listening" {
                return v["port"].as_u64().unwrap();
            }
        }
        panic!("the binary ended without listening");
    })
    .await
    .unwrap();

    // It listens first, then migrates its new database in the background: ready soon after.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let ready = reqwest::get(format!("http://127.0.0.1:{port}/readyz")).await.unwrap();
        if ready.status() == 200 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "not ready: {}", ready.text().await.unwrap());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let exit = tokio::task::spawn_blocking(move || child.wait().unwrap()).await.unwrap();
    assert!(exit.success(), "graceful exit on SIGTERM: {exit:?}");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

#[test]
fn a_bad_value_stops_it_with_the_key_named() {
    let out = binary().env("SECKILL__HTTP__PORT", "not-a-port").output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("port"), "names the key: {stderr}");
}

#[test]
fn without_its_link_keys_it_does_not_start() {
    let out = binary().env("SECKILL__DATABASE__URL", "postgres://127.0.0.1:1/none").output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("SECKILL__TRUST__"), "names the key: {stderr}");
}

#[tokio::test]
async fn migrate_mode_prepares_the_database_and_exits() {
    use diesel_async::RunQueryDsl;
    let db = TestDb::new("stockmig");
    let out = binary().arg("migrate").env("SECKILL__DATABASE__URL", db.url()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut conn = db.connect().await;
    let rows = diesel::sql_query("SELECT id FROM goods").execute(&mut conn).await;
    assert_eq!(rows.ok(), Some(0), "the tables exist and are empty");
}
