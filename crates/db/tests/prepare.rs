//! Replicas starting together against a fresh server: every one finds its database created and
//! migrated exactly once, none crashes on the race.

use diesel_async::RunQueryDsl;
use diesel_migrations::{EmbeddedMigrations, embed_migrations};
use futures_util::future::join_all;
use seckill_testkit::TestDb;

const MIGRATIONS: EmbeddedMigrations = embed_migrations!("tests/migrations");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_starts_create_and_migrate_once() {
    let db = TestDb::new("prepare");
    let results = join_all((0..6).map(|_| seckill_db::prepare(db.url(), &MIGRATIONS))).await;
    for r in &results {
        assert!(r.is_ok(), "{r:?}");
    }
    #[derive(diesel::QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let mut conn = db.connect().await;
    let applied: Count = diesel::sql_query("SELECT COUNT(*) AS n FROM __diesel_schema_migrations")
        .get_result(&mut conn)
        .await
        .unwrap();
    assert_eq!(applied.n, 1);
    diesel::sql_query("INSERT INTO probe DEFAULT VALUES").execute(&mut conn).await.unwrap();
}

/// Every pooled connection carries the statement timeout and plans each statement for its
/// own values (no generic plan kept from when a table was empty).
#[tokio::test]
async fn pooled_connections_carry_their_session_settings() {
    let db = TestDb::new("settings");
    seckill_db::prepare(db.url(), &MIGRATIONS).await.unwrap();
    let settings = seckill_common::config::DatabaseSettings {
        statement_timeout_ms: 1_234,
        ..seckill_common::config::DatabaseSettings::default()
    };
    let pool = seckill_db::pool(&settings, db.url()).unwrap();
    let mut conn = pool.get().await.unwrap();
    #[derive(diesel::QueryableByName)]
    struct Setting {
        #[diesel(sql_type = diesel::sql_types::Text)]
        value: String,
    }
    let show = |name: &'static str| diesel::sql_query(format!("SELECT current_setting('{name}') AS value"));
    let timeout: Setting = show("statement_timeout").get_result(&mut conn).await.unwrap();
    let plans: Setting = show("plan_cache_mode").get_result(&mut conn).await.unwrap();
    assert_eq!((timeout.value.as_str(), plans.value.as_str()), ("1234ms", "force_custom_plan"));
}

/// A database's pool hands out no connection before its migrations are applied, even with the
/// server up: no query runs against a schema older than the code. Then it does, at once.
#[tokio::test]
async fn the_pool_waits_for_the_migrations() {
    let db = TestDb::new("gated");
    // The database exists and answers: only its migrations are missing.
    seckill_db::ensure_database(db.url()).await.unwrap();
    let database = seckill_db::Database::open(&Default::default(), db.url()).unwrap();
    let refused = database.pool().get().await.err().expect("no connection before the migrations").to_string();
    assert!(refused.contains("migrations not applied yet"), "{refused}");
    // An outage to the API (503) and to the consumers (handed back), not a query's failure.
    let Err(e) = database.pool().get().await else { panic!("a connection before the migrations") };
    assert!(seckill_db::DbError::from(e).is_outage());
    let waiting = database.readiness().await.unwrap_err();
    assert!(waiting.starts_with("waiting: migrations not applied yet"), "{waiting}");

    database.prepare(&MIGRATIONS).await;
    assert_eq!(database.readiness().await, Ok(()));
    let mut conn = database.pool().get().await.unwrap();
    diesel::sql_query("INSERT INTO probe DEFAULT VALUES").execute(&mut conn).await.unwrap();
}

/// A `database.url` that is wrong stops the start, naming the key; a server that is away does not.
#[test]
fn only_a_wrong_url_is_refused() {
    let e = seckill_db::Database::open(&Default::default(), "postgres://127.0.0.1:1/bad-name").err().unwrap();
    assert!(e.to_string().contains("SECKILL__DATABASE__URL"), "{e}");
    assert!(seckill_db::Database::open(&Default::default(), "postgres://127.0.0.1:1/fine").is_ok());
}
