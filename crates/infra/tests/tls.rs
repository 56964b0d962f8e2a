//! `rediss://` and `amqps://` through the services' own connect functions, to servers whose
//! certificates come from a throwaway CA (for the name `localhost`) trusted through
//! `SSL_CERT_FILE`, as a deployment with a private CA would: a private `redis-server` with
//! TLS; for AMQP, the shared broker behind a TLS front of this test's own (a private RabbitMQ
//! node with a TLS listener is too heavy to start per test; the broker's side of TLS is its own
//! configuration). The name, and the issuer, are checked.
//!
//! Tests may not set environment variables (no unsafe code), and `SSL_CERT_FILE` must be set
//! before any client reads it: so the checks run in a child process of this test binary,
//! started with it. Skipped, with the reason printed, where a server or `openssl` is missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use redis::AsyncCommands;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use seckill_common::config::RedisSettings;
use seckill_testkit::tls::{Certs, ServerProcess, TempDir, find_binary, free_port};
use tokio::net::{TcpListener, TcpStream};

/// Where the parent made the certificates; set only in the child.
const CHILD_DIR: &str = "SECKILL_TLS_TEST_DIR";
const CHILD_TEST: &str = "checks_with_the_private_ca_trusted";

#[test]
fn redis_and_amqp_connect_over_tls_and_check_the_certificate() {
    let dir = TempDir::new("tls").unwrap();
    if let Err(reason) = Certs::create(dir.path()) {
        eprintln!("skipped: cannot make certificates: {reason}");
        return;
    }
    let (out, err) = (dir.path().join("child.out"), dir.path().join("child.err"));
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", CHILD_TEST, "--ignored", "--nocapture", "--test-threads=1"])
        .env("SSL_CERT_FILE", dir.path().join("ca.pem"))
        .env(CHILD_DIR, dir.path())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let shown = format!(
        "{}{}",
        std::fs::read_to_string(&out).unwrap_or_default(),
        std::fs::read_to_string(&err).unwrap_or_default()
    );
    eprintln!("{shown}");
    assert!(status.is_some_and(|s| s.success()), "the child failed or hung ({status:?})");
    assert!(shown.contains("1 passed"), "the child ran no test");
}

/// The checks, in the child (see the parent above).
#[test]
#[ignore = "started by redis_and_amqp_connect_over_tls_and_check_the_certificate with SSL_CERT_FILE set"]
fn checks_with_the_private_ca_trusted() {
    let Some(dir) = std::env::var_os(CHILD_DIR).map(PathBuf::from) else {
        eprintln!(
            "skipped: runs only as the child of redis_and_amqp_connect_over_tls_and_check_the_certificate"
        );
        return;
    };
    let certs = Certs::at(&dir);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        redis_over_tls(&dir, &certs).await;
        amqp_over_tls(&certs).await;
    });
}

async fn redis_over_tls(dir: &Path, certs: &Certs) {
    let Some(binary) = find_binary("redis-server") else {
        eprintln!("skipped Redis: no redis-server on PATH");
        return;
    };
    let port = free_port();
    let mut command = Command::new(binary);
    command
        .args(["--port", "0", "--tls-port", &port.to_string(), "--bind", "127.0.0.1"])
        .arg("--tls-cert-file")
        .arg(&certs.cert)
        .arg("--tls-key-file")
        .arg(&certs.key)
        .arg("--tls-ca-cert-file")
        .arg(&certs.ca)
        .args(["--tls-auth-clients", "no", "--save", "", "--appendonly", "no", "--dir"])
        .arg(dir);
    let mut server = ServerProcess::spawn(command, "TERM", dir.join("redis.log")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        if let Some(status) = server.exited() {
            eprintln!("skipped Redis: redis-server cannot listen with TLS ({status}): {}", server.log());
            return;
        }
        assert!(Instant::now() < deadline, "redis-server did not listen within 10 s: {}", server.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let connect = |url: String| {
        seckill_infra::redis::connect(&RedisSettings { url, ..RedisSettings::default() }).unwrap()
    };

    let redis = connect(format!("rediss://localhost:{port}"));
    seckill_infra::redis::ping(&redis).await.unwrap();
    let mut conn = redis.clone();
    let () = conn.set("tls-probe", "over tls").await.unwrap();
    assert_eq!(conn.get::<_, String>("tls-probe").await.unwrap(), "over tls");

    // The certificate is for localhost only.
    let e = seckill_infra::redis::ping(&connect(format!("rediss://127.0.0.1:{port}"))).await.unwrap_err();
    assert!(e.contains("not valid for name"), "{e}");
    // A certificate from a CA nobody trusts.
    let untrusted = tls_front(&certs.other_cert, &certs.other_key, ("127.0.0.1", port)).await;
    let e =
        seckill_infra::redis::ping(&connect(format!("rediss://localhost:{untrusted}"))).await.unwrap_err();
    assert!(e.contains("UnknownIssuer"), "{e}");
    eprintln!("Redis over TLS: checked");
}

async fn amqp_over_tls(certs: &Certs) {
    // `amqp://user:pass@host:port/vhost`: the shared broker, reached over TLS through a front.
    let url = seckill_testkit::amqp_url();
    let Some((credentials, host, vhost)) = url
        .strip_prefix("amqp://")
        .and_then(|rest| rest.split_once('/'))
        .map(|(authority, vhost)| match authority.rsplit_once('@') {
            Some((credentials, host)) => (format!("{credentials}@"), host.to_owned(), vhost.to_owned()),
            None => (String::new(), authority.to_owned(), vhost.to_owned()),
        })
    else {
        eprintln!("skipped AMQP: cannot read {url}");
        return;
    };
    let Ok(Ok(broker)) = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(&host)).await else {
        eprintln!("skipped AMQP: no broker at {host}");
        return;
    };
    let broker = broker.peer_addr().unwrap();
    let connect = |host: &str, port: u16| {
        let url = format!("amqps://{credentials}{host}:{port}/{vhost}");
        async move {
            tokio::time::timeout(
                Duration::from_secs(10),
                seckill_infra::amqp::connect(&url, "seckill-tls-test"),
            )
            .await
            .expect("connecting over TLS hung")
        }
    };

    let front = tls_front(&certs.cert, &certs.key, broker).await;
    let connection = connect("localhost", front).await.unwrap();
    let channel = connection.create_channel().await.unwrap();
    let queue = channel
        .queue_declare(
            "".into(),
            QueueDeclareOptions { exclusive: true, auto_delete: true, ..QueueDeclareOptions::default() },
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert!(!queue.name().as_str().is_empty());
    seckill_infra::amqp::close_quietly(&connection).await;

    let e = connect("127.0.0.1", front).await.err().unwrap().to_string();
    assert!(e.contains("not valid for name"), "{e}");
    let untrusted = tls_front(&certs.other_cert, &certs.other_key, broker).await;
    let e = connect("localhost", untrusted).await.err().unwrap().to_string();
    assert!(e.contains("UnknownIssuer"), "{e}");
    eprintln!("AMQP over TLS: checked");
}

/// A TLS server on a free loopback port presenting `cert`, passing the clear bytes on to
/// `upstream`. It lives as long as the runtime.
async fn tls_front(
    cert: &Path,
    key: &Path,
    upstream: impl tokio::net::ToSocketAddrs + Send + Clone + 'static,
) -> u16 {
    let chain = CertificateDer::pem_file_iter(cert).unwrap().collect::<Result<Vec<_>, _>>().unwrap();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let config =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, upstream) = (acceptor.clone(), upstream.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                let Ok(mut upstream) = TcpStream::connect(upstream).await else { return };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut upstream).await;
            });
        }
    });
    port
}
