//! `database.url` with `sslmode`: a private PostgreSQL cluster with `ssl=on`, its certificate
//! from a throwaway CA for the name `localhost`, reached through the services' own path
//! (`prepare`, `pool`, `connect`). Each mode encrypts, and checks the certificate, as it says;
//! no `sslmode` stays plain. Skipped, with the reason printed, where no cluster can be started.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use diesel::sql_types::Bool;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use diesel_migrations::{EmbeddedMigrations, embed_migrations};
use seckill_common::config::DatabaseSettings;
use seckill_testkit::tls::{Certs, ServerProcess, TempDir, find_binary, free_port};

const MIGRATIONS: EmbeddedMigrations = embed_migrations!("tests/migrations");

/// A cluster of the test's own, stopped and deleted when dropped (server before directory).
struct PrivatePostgres {
    _server: ServerProcess,
    port: u16,
    certs: Certs,
    _dir: TempDir,
}

impl PrivatePostgres {
    async fn start() -> Result<Self, String> {
        let bin = server_binaries().ok_or("no PostgreSQL server binaries (/usr/lib/postgresql/*/bin)")?;
        let dir = TempDir::new("pg-tls").map_err(|e| e.to_string())?;
        let certs = Certs::create(dir.path())?;
        // PostgreSQL refuses to run as root: then it runs as the `postgres` user.
        let owner = match command_output("id", &["-u"])?.as_str() {
            "0" => Some(
                user_ids("postgres")
                    .ok_or("running as root, which PostgreSQL refuses, and there is no `postgres` user")?,
            ),
            _ => None,
        };
        std::fs::set_permissions(&certs.key, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| e.to_string())?;
        if let Some((uid, gid)) = owner {
            for entry in std::fs::read_dir(dir.path()).map_err(|e| e.to_string())?.flatten() {
                std::os::unix::fs::chown(entry.path(), Some(uid), Some(gid)).map_err(|e| e.to_string())?;
            }
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).map_err(|e| e.to_string())?;
        }
        let as_owner = |program: PathBuf| {
            let mut command = Command::new(program);
            command.current_dir(dir.path());
            if let Some((uid, gid)) = owner {
                command.uid(uid).gid(gid);
            }
            command
        };
        let data = dir.path().join("data");
        let initdb = as_owner(bin.join("initdb"))
            .args(["-U", "postgres", "-A", "trust", "--no-sync", "--no-locale", "-E", "UTF8", "-D"])
            .arg(&data)
            .output()
            .map_err(|e| format!("cannot run initdb: {e}"))?;
        if !initdb.status.success() {
            return Err(format!("initdb failed: {}", String::from_utf8_lossy(&initdb.stderr)));
        }
        let port = free_port();
        let mut postgres = as_owner(bin.join("postgres"));
        postgres.arg("-D").arg(&data).args(["-p", &port.to_string(), "-k"]).arg(dir.path());
        for setting in [
            "listen_addresses=127.0.0.1".to_owned(),
            "ssl=on".to_owned(),
            format!("ssl_cert_file={}", certs.cert.display()),
            format!("ssl_key_file={}", certs.key.display()),
            "fsync=off".to_owned(),
            "max_connections=20".to_owned(),
            "dynamic_shared_memory_type=mmap".to_owned(),
        ] {
            postgres.args(["-c", &setting]);
        }
        let mut server = ServerProcess::spawn(postgres, "INT", dir.path().join("postgres.log"))?;
        // Ready once it answers a plain connection (the one mode needing nothing of TLS).
        let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if seckill_db::connect(&url).await.is_ok() {
                break;
            }
            if let Some(status) = server.exited() {
                return Err(format!("postgres exited ({status}): {}", server.log()));
            }
            if Instant::now() > deadline {
                return Err(format!("postgres did not answer within 30 s: {}", server.log()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(Self { _server: server, port, certs, _dir: dir })
    }

    /// A URL for `host` and database `name`, with `options` as its query.
    fn url(&self, host: &str, name: &str, options: &str) -> String {
        let query = if options.is_empty() { String::new() } else { format!("?{options}") };
        format!("postgres://postgres@{host}:{}/{name}{query}", self.port)
    }
}

/// The newest `/usr/lib/postgresql/<version>/bin` with a server, else `pg_config --bindir`.
fn server_binaries() -> Option<PathBuf> {
    let newest = std::fs::read_dir("/usr/lib/postgresql")
        .ok()
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse::<u32>().ok()?, e.path().join("bin"))))
        .filter(|(_, bin)| bin.join("postgres").is_file() && bin.join("initdb").is_file())
        .max_by_key(|(version, _)| *version)
        .map(|(_, bin)| bin);
    newest.or_else(|| {
        find_binary("pg_config")?;
        let bin = PathBuf::from(command_output("pg_config", &["--bindir"]).ok()?);
        bin.join("postgres").is_file().then_some(bin)
    })
}

fn command_output(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program).args(args).output().map_err(|e| format!("cannot run {program}: {e}"))?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn user_ids(user: &str) -> Option<(u32, u32)> {
    let uid = command_output("id", &["-u", user]).ok()?.parse().ok()?;
    let gid = command_output("id", &["-g", user]).ok()?.parse().ok()?;
    Some((uid, gid))
}

#[derive(diesel::QueryableByName)]
struct Ssl {
    #[diesel(sql_type = Bool)]
    ssl: bool,
}

/// Whether the server sees this session as encrypted.
async fn encrypted(conn: &mut AsyncPgConnection) -> bool {
    diesel::sql_query("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .get_result::<Ssl>(conn)
        .await
        .unwrap()
        .ssl
}

/// Connects to `url` and tells whether the session is encrypted, or why it failed.
async fn try_url(url: &str) -> Result<bool, String> {
    let mut conn = seckill_db::connect(url).await.map_err(|e| e.to_string())?;
    Ok(encrypted(&mut conn).await)
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_connections_are_encrypted_and_checked_as_sslmode_says() {
    let pg = match PrivatePostgres::start().await {
        Ok(pg) => pg,
        Err(reason) => {
            eprintln!("skipped: no private PostgreSQL with TLS: {reason}");
            return;
        }
    };
    let ca = path(&pg.certs.ca);
    let full = format!("sslmode=verify-full&sslrootcert={ca}");

    // The services' start: database created and migrated, then the pool, all over TLS.
    let url = pg.url("localhost", "tls_probe", &full);
    seckill_db::prepare(&url, &MIGRATIONS).await.unwrap();
    let pool = seckill_db::pool(&DatabaseSettings::default(), &url).unwrap();
    let mut conn = pool.get().await.unwrap();
    assert!(encrypted(&mut conn).await, "a pool connection is not encrypted");
    seckill_db::ping(&pool).await.unwrap();
    // The per-connection settings were applied on the TLS connection too.
    #[derive(diesel::QueryableByName)]
    struct Setting {
        #[diesel(sql_type = diesel::sql_types::Text)]
        plan_cache_mode: String,
    }
    let setting = diesel::sql_query("SHOW plan_cache_mode").get_result::<Setting>(&mut conn).await.unwrap();
    assert_eq!(setting.plan_cache_mode, "force_custom_plan");
    drop(conn);

    // No sslmode, or disable: plain, as before.
    assert_eq!(try_url(&pg.url("localhost", "postgres", "")).await, Ok(false));
    assert_eq!(try_url(&pg.url("localhost", "postgres", "sslmode=disable")).await, Ok(false));

    // require and prefer encrypt without checking the certificate (libpq's meaning) ...
    assert_eq!(try_url(&pg.url("127.0.0.1", "postgres", "sslmode=require")).await, Ok(true));
    assert_eq!(try_url(&pg.url("127.0.0.1", "postgres", "sslmode=prefer")).await, Ok(true));
    // ... unless given a root file: then the chain is checked, as libpq does.
    let other = path(&pg.certs.other_ca);
    let e = try_url(&pg.url("localhost", "postgres", &format!("sslmode=require&sslrootcert={other}"))).await;
    assert!(e.as_ref().is_err_and(|e| e.contains("UnknownIssuer")), "{e:?}");

    // verify-ca: the chain, not the name (the certificate is for localhost only).
    let ca_only = format!("sslmode=verify-ca&sslrootcert={ca}");
    assert_eq!(try_url(&pg.url("127.0.0.1", "postgres", &ca_only)).await, Ok(true));
    let e =
        try_url(&pg.url("localhost", "postgres", &format!("sslmode=verify-ca&sslrootcert={other}"))).await;
    assert!(e.as_ref().is_err_and(|e| e.contains("UnknownIssuer")), "{e:?}");

    // verify-full: the chain and the name.
    assert_eq!(try_url(&pg.url("localhost", "postgres", &full)).await, Ok(true));
    let e = try_url(&pg.url("127.0.0.1", "postgres", &full)).await;
    assert!(e.as_ref().is_err_and(|e| e.contains("not valid for name")), "{e:?}");
    // Without sslrootcert the roots are the system's, which do not hold the private CA.
    let e = try_url(&pg.url("localhost", "postgres", "sslmode=verify-full")).await;
    assert!(e.as_ref().is_err_and(|e| e.contains("UnknownIssuer")), "{e:?}");

    // A mistake in the settings stops the start: `prepare`, and the pool is not even built.
    let wrong = pg.url("localhost", "tls_probe", "sslmode=verify_full");
    let e = seckill_db::prepare(&wrong, &MIGRATIONS).await.unwrap_err().to_string();
    assert!(e.contains("sslmode=verify_full"), "{e}");
    assert!(seckill_db::pool(&DatabaseSettings::default(), &wrong).is_err());
}
