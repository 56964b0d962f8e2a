//! The `sync` scenario against the real PostgreSQL (SECKILL_TEST_DATABASE_URL, default
//! loopback): the buy transaction's three answers, and a small run whose database checks hold
//! and whose throw-away database is gone afterwards.

use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use seckill_bench::cli;
use seckill_bench::sync::db::{self, Bought, GOODS_ID, Scratch};
use seckill_bench::sync::{self, SyncConfig};

fn pg_url() -> String {
    std::env::var("SECKILL_TEST_DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
}

fn scratch_name() -> String {
    format!("seckill_bench_sync_t{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
}

async fn database_exists(name: &str) -> bool {
    let mut conn =
        AsyncPgConnection::establish(&db::with_database(&pg_url(), "postgres").unwrap()).await.unwrap();
    diesel::sql_query("SELECT 1 AS one FROM pg_database WHERE datname = $1")
        .bind::<diesel::sql_types::Text, _>(name)
        .execute(&mut conn)
        .await
        .unwrap()
        == 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buy_is_an_order_sold_out_or_repeated() {
    let name = scratch_name();
    let scratch = Scratch::create(&pg_url(), &name, 2).await.unwrap();
    let pool = db::pool(&scratch.url().unwrap(), 2).await.unwrap();
    let mut conn = pool.get().await.unwrap();

    assert!(matches!(db::buy(&mut conn, GOODS_ID, 1).await.unwrap(), Bought::Order(_)));
    // The second order of user 1: the unit it took is given back with the rolled-back insert.
    assert_eq!(db::buy(&mut conn, GOODS_ID, 1).await.unwrap(), Bought::Repeated);
    let t = db::tally(&mut conn, GOODS_ID).await.unwrap();
    assert_eq!((t.orders, t.distinct_users, t.available, t.total), (1, 1, 1, 2));
    assert!(matches!(db::buy(&mut conn, GOODS_ID, 2).await.unwrap(), Bought::Order(_)));
    assert_eq!(db::buy(&mut conn, GOODS_ID, 3).await.unwrap(), Bought::SoldOut);
    let t = db::tally(&mut conn, GOODS_ID).await.unwrap();
    assert_eq!((t.orders, t.available), (2, 0));

    drop(conn);
    drop(pool);
    scratch.drop_now().await.unwrap();
    assert!(!database_exists(&name).await);
}

/// 2,000 new users for 300 units on 20 connections through the HTTP server: 300 orders, the
/// rest sold out, every check holds, and the database is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_sync_run_holds_its_checks() {
    let (url, database) = (pg_url(), scratch_name());
    let options = ["--pg-url", &url, "--database", &database, "--buys", "2000", "--stock", "300", "-c", "20"];
    let cfg: SyncConfig =
        cli::parse_options(&[&options[..], &["--pool-size", "8", "--no-progress"]].concat()).unwrap();
    let report = sync::run(&cfg).await.expect("the run");
    println!("{}", report.render());

    assert!(report.invariants_hold(), "{:#?}", report.invariants);
    assert_eq!(report.invariants.len(), 4);
    let s = report.sync.as_ref().expect("a sync summary");
    assert_eq!((s.accepted, s.sold_out, s.repeated, s.other), (300, 1_700, 0, 0));
    assert_eq!((s.orders, s.distinct_users, s.available, s.total), (300, 300, 0, 300));
    assert!(s.accepted_per_sec > 0.0);
    assert_eq!(report.row("buy", "all").map(|r| r.count), Some(2_000));
    assert_eq!(report.row("buy", "200").map(|r| r.count), Some(300));
    assert_eq!(report.primary(), s.accepted_per_sec);
    assert!(!database_exists(&cfg.database).await, "{} was not dropped", cfg.database);
}
