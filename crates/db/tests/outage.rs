//! PostgreSQL outages, as diesel-async shows them, are outages: `is_outage` of an error chain
//! (consumers requeue without counting a try) and `DbError::is_outage` (the API's 503) agree on
//! a killed connection, a refused one, a pool with no connection to spare and a statement timeout; a query's own
//! failures (a unique violation, a serialization failure) are not outages, and a value the
//! database cannot store (a NUL in text, a year before 4713 BC) is a bad value, not an outage.

use std::time::{Duration, Instant};

use diesel::result::{DatabaseErrorKind, Error};
use diesel::sql_types::Integer;
use diesel_async::{AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use seckill_common::config::DatabaseSettings;
use seckill_db::{DbError, PgPool, is_outage};
use seckill_testkit::TestDb;

/// A scratch database of this test's own, dropped at the end.
async fn scratch(purpose: &str) -> TestDb {
    let db = TestDb::new(purpose);
    seckill_db::ensure_database(db.url()).await.unwrap();
    db
}

fn pool(url: &str, settings: DatabaseSettings) -> PgPool {
    seckill_db::pool(&settings, url).unwrap()
}

#[derive(Debug, diesel::QueryableByName)]
struct Pid {
    #[diesel(sql_type = Integer)]
    pid: i32,
}

async fn backend_pid(conn: &mut AsyncPgConnection) -> i32 {
    diesel::sql_query("SELECT pg_backend_pid() AS pid").get_result::<Pid>(conn).await.unwrap().pid
}

/// Terminates `pid` from a connection of its own, waiting (up to 5 s) until it has exited.
async fn terminate(db: &TestDb, pid: i32) {
    let mut admin = db.connect().await;
    diesel::sql_query("SELECT pg_terminate_backend($1, 5000)")
        .bind::<Integer, _>(pid)
        .execute(&mut admin)
        .await
        .unwrap();
}

/// Every classification calls it an outage: the handler's `DbError` (the API answers 503) and
/// a consumer's error chain, with the bare error or the `DbError` in it.
fn assert_outage(e: Error) {
    let shown = format!("{e:?}");
    assert_eq!(classified(e), [true; 3], "not an outage: {shown}");
}

/// No classification calls it an outage (the API answers 500).
fn assert_not_outage(e: Error) {
    let shown = format!("{e:?}");
    assert_eq!(classified(e), [false; 3], "an outage: {shown}");
}

fn classified(e: Error) -> [bool; 3] {
    // Wrapped as a consumer's step would be: found down the chain.
    let wrapped = anyhow::Error::from(e).context("releasing a unit");
    let in_chain = is_outage(&wrapped);
    let e = DbError::from(wrapped.downcast::<Error>().unwrap());
    let handler = e.is_outage();
    [handler, in_chain, is_outage(&anyhow::Error::from(e).context("a handler's step"))]
}

#[tokio::test]
async fn a_terminated_idle_connection_is_an_outage_and_the_pool_replaces_it() {
    let db = scratch("outage_idle").await;
    let pool = pool(db.url(), DatabaseSettings::default());
    let mut conn = pool.get().await.unwrap();
    let pid = backend_pid(&mut conn).await;
    terminate(&db, pid).await;
    let e = diesel::sql_query("SELECT 1").execute(&mut conn).await.unwrap_err();
    assert_outage(e);
    drop(conn);
    // The pool tries a connection before lending it: the dead one is replaced.
    let mut conn = pool.get().await.unwrap();
    assert_ne!(backend_pid(&mut conn).await, pid);
}

#[tokio::test]
async fn a_query_whose_backend_is_terminated_under_it_is_an_outage() {
    let db = scratch("outage_busy").await;
    let pool = pool(db.url(), DatabaseSettings::default());
    let mut conn = pool.get().await.unwrap();
    let pid = backend_pid(&mut conn).await;
    let kill = async {
        let mut watch = db.connect().await;
        #[derive(diesel::QueryableByName)]
        struct Busy {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            n: i64,
        }
        let started = Instant::now();
        loop {
            let busy: Busy = diesel::sql_query(
                "SELECT COUNT(*) AS n FROM pg_stat_activity WHERE pid = $1 AND query LIKE 'SELECT pg_sleep%'",
            )
            .bind::<Integer, _>(pid)
            .get_result(&mut watch)
            .await
            .unwrap();
            if busy.n == 1 {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(10), "the query never started");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        terminate(&db, pid).await;
    };
    let (result, ()) = tokio::join!(diesel::sql_query("SELECT pg_sleep(30)").execute(&mut conn), kill);
    // 57P01 `terminating connection due to administrator command` when the server's answer
    // reaches the query, `connection closed` when the closed socket does first.
    assert_outage(result.unwrap_err());
}

#[tokio::test]
async fn no_connection_from_the_pool_is_an_outage() {
    let settings = DatabaseSettings { acquire_timeout_ms: 500, ..DatabaseSettings::default() };
    // Nothing listens on port 1: refused.
    let refused = pool("postgres://postgres@127.0.0.1:1/nothing", settings.clone());
    let e = refused.get().await.err().expect("nothing listens there");
    assert!(is_outage(&anyhow::Error::from(e).context("releasing a unit")));
    assert!(seckill_db::conn(&refused).await.err().is_some_and(|e| e.is_outage()));

    // Every connection busy past the acquire timeout.
    let db = scratch("outage_pool").await;
    let busy = pool(db.url(), DatabaseSettings { pool_size: 1, acquire_timeout_ms: 100, ..settings });
    let _held = busy.get().await.unwrap();
    let e = busy.get().await.err().expect("its one connection is held");
    assert!(matches!(e, seckill_db::PoolError::Timeout(_)), "{e:?}");
    assert!(is_outage(&anyhow::Error::from(e)));
    assert!(seckill_db::conn(&busy).await.err().is_some_and(|e| e.is_outage()));
}

#[tokio::test]
async fn a_statement_timeout_is_an_outage_and_the_connection_stays_usable() {
    let db = scratch("outage_timeout").await;
    let pool = pool(db.url(), DatabaseSettings { statement_timeout_ms: 50, ..DatabaseSettings::default() });
    let mut conn = pool.get().await.unwrap();
    let e = diesel::sql_query("SELECT pg_sleep(1)").execute(&mut conn).await.unwrap_err();
    assert!(e.to_string().contains("statement timeout"), "{e:?}");
    assert_outage(e);
    diesel::sql_query("SELECT 1").execute(&mut conn).await.unwrap();
}

#[tokio::test]
async fn a_query_s_own_failures_are_not_outages() {
    let db = scratch("outage_not").await;
    let pool = pool(db.url(), DatabaseSettings::default());
    let mut conn = pool.get().await.unwrap();
    conn.batch_execute("CREATE TABLE t (id INT PRIMARY KEY, n INT NOT NULL); INSERT INTO t VALUES (1, 0)")
        .await
        .unwrap();

    let e = diesel::sql_query("INSERT INTO t VALUES (1, 0)").execute(&mut conn).await.unwrap_err();
    assert!(matches!(e, Error::DatabaseError(DatabaseErrorKind::UniqueViolation, _)), "{e:?}");
    assert_not_outage(e);

    // A repeatable-read transaction updating a row changed since its snapshot.
    let mut other = pool.get().await.unwrap();
    conn.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT n FROM t").await.unwrap();
    other.batch_execute("UPDATE t SET n = 1").await.unwrap();
    let e = conn.batch_execute("UPDATE t SET n = 2").await.unwrap_err();
    assert!(matches!(e, Error::DatabaseError(DatabaseErrorKind::SerializationFailure, _)), "{e:?}");
    assert_not_outage(e);
    conn.batch_execute("ROLLBACK").await.unwrap();

    let e = diesel::sql_query("SELECT 1 AS pid WHERE false").get_result::<Pid>(&mut conn).await.unwrap_err();
    let e = DbError::from(e);
    assert!(e.is_not_found() && !e.is_outage(), "{e:?}");
}

/// The server errors diesel-async passes on as `Unknown` are told apart by their message (it
/// hides the SQLSTATE); the ones not provoked above, built as diesel-async builds them.
#[test]
fn server_errors_are_classified_by_what_they_mean() {
    use DatabaseErrorKind::*;
    let error = |kind, message: &str| Error::DatabaseError(kind, Box::new(message.to_owned()));
    for (kind, message, expected) in [
        (Unknown, "terminating connection due to administrator command", true), // 57P01
        (Unknown, "terminating connection because of crash of another server process", true), // 57P02
        (Unknown, "the database system is shutting down", true),                // 57P03
        (Unknown, "the database system is starting up", true),                  // 57P03
        (Unknown, "terminating connection due to idle-session timeout", true),  // 57P05
        (UnableToSendCommand, "error communicating with the server: broken pipe", true),
        (ClosedConnection, "server closed the connection unexpectedly", true),
        (Unknown, "deadlock detected", false), // 40P01
        (Unknown, "canceling statement due to user request", false), // 57014, not ours
        (SerializationFailure, "could not serialize access due to concurrent update", false),
    ] {
        assert_eq!(classified(error(kind, message)), [expected; 3], "{message}");
    }
    // A commit lost with the connection, and its rollback too.
    let lost = Error::RollbackErrorOnCommit {
        rollback_error: Box::new(error(UnableToSendCommand, "connection closed")),
        commit_error: Box::new(error(Unknown, "terminating connection due to administrator command")),
    };
    assert_outage(lost);
}

/// Values the database cannot store, sent as the services send them (bound parameters): each a
/// bad value (stock-service answers 400 for a sale's), none an outage (never a 503).
#[tokio::test]
async fn a_value_the_database_cannot_store_is_a_bad_value_not_an_outage() {
    use chrono::{DateTime, NaiveDate, NaiveTime, Utc};
    use diesel::sql_types::{Text, Timestamptz};

    let db = scratch("bad_value").await;
    let pool = pool(db.url(), DatabaseSettings::default());
    let mut conn = pool.get().await.unwrap();
    conn.batch_execute(
        "CREATE TABLE t (name TEXT, at TIMESTAMPTZ, n SMALLINT, p BIGINT CHECK (p >= 0), v VARCHAR(3))",
    )
    .await
    .unwrap();
    let nul = diesel::sql_query("INSERT INTO t (name) VALUES ($1)").bind::<Text, _>("a\0b");
    // A year chrono reads and PostgreSQL's timestamptz (from 4713 BC) does not hold.
    let long_ago: DateTime<Utc> =
        NaiveDate::from_ymd_opt(-5000, 1, 1).unwrap().and_time(NaiveTime::MIN).and_utc();
    let too_early = diesel::sql_query("INSERT INTO t (at) VALUES ($1)").bind::<Timestamptz, _>(long_ago);
    let mut errors = vec![
        ("a NUL in text", nul.execute(&mut conn).await.unwrap_err()),
        ("5001 BC", too_early.execute(&mut conn).await.unwrap_err()),
    ];
    for (what, sql) in [
        ("a smallint overflow", "INSERT INTO t (n) SELECT 40000"),
        ("a CHECK", "INSERT INTO t (p) VALUES (-1)"),
        ("too long", "INSERT INTO t (v) VALUES ('abcd')"),
        ("not a number", "SELECT 'x'::int"),
    ] {
        errors.push((what, conn.batch_execute(sql).await.unwrap_err()));
    }
    for (what, e) in errors {
        let shown = format!("{what}: {e:?}");
        assert!(seckill_db::is_bad_value(&e), "not a bad value: {shown}");
        assert_not_outage(e);
    }
    // A query's other failures are not bad values.
    let e = conn.batch_execute("SELECT * FROM missing").await.unwrap_err();
    assert!(!seckill_db::is_bad_value(&e), "{e:?}");
    assert!(!DbError::from(e).is_bad_value());
}
