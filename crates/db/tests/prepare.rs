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
