//! The synchronous design's database: a throw-away database of its own on the server under
//! test (created, given its two tables, dropped at the end), a pool of connections to it, the
//! buy transaction, and the figures read back to check the sale.

use anyhow::{Context, bail};
use diesel::prelude::*;
use diesel::result::{DatabaseErrorKind, Error as QueryError};
use diesel_async::pooled_connection::AsyncDieselConnectionManager;
use diesel_async::pooled_connection::deadpool::Pool;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use futures_util::future::try_join_all;

pub type PgPool = Pool<AsyncPgConnection>;

/// The one sale of the run.
pub const GOODS_ID: i64 = 1;

diesel::table! {
    stock (goods_id) {
        goods_id -> BigInt,
        total -> BigInt,
        available -> BigInt,
    }
}

diesel::table! {
    orders (id) {
        id -> BigInt,
        goods_id -> BigInt,
        user_id -> BigInt,
    }
}

/// The two tables: the stock row every buy updates, and the orders, one per (sale, user).
const SCHEMA: &str = "
CREATE TABLE stock (
    goods_id BIGINT PRIMARY KEY,
    total BIGINT NOT NULL,
    available BIGINT NOT NULL CHECK (available >= 0)
);
CREATE TABLE orders (
    id BIGSERIAL PRIMARY KEY,
    goods_id BIGINT NOT NULL,
    user_id BIGINT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX orders_one_per_user ON orders (goods_id, user_id);
";

/// `url` (a server, with or without a database) pointing at database `name` instead.
pub fn with_database(url: &str, name: &str) -> anyhow::Result<String> {
    let (base, query) = url.find('?').map_or((url, ""), |at| url.split_at(at));
    let scheme_end = base.find("://").map(|i| i + 3).with_context(|| format!("`{url}` is not a URL"))?;
    let server = match base[scheme_end..].find('/') {
        Some(slash) => &base[..scheme_end + slash],
        None => base,
    };
    Ok(format!("{server}/{name}{query}"))
}

/// A database of the run's own; [`Scratch::drop_now`] removes it.
pub struct Scratch {
    server: String,
    name: String,
}

impl Scratch {
    /// Creates database `name` on the server at `server_url` (dropping one an interrupted run
    /// left), its tables, and the sale's stock row of `units`.
    pub async fn create(server_url: &str, name: &str, units: i64) -> anyhow::Result<Self> {
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            bail!("database name `{name}`: lower-case letters, digits and underscores only");
        }
        let scratch = Self { server: server_url.to_owned(), name: name.to_owned() };
        let mut admin = scratch.admin().await?;
        // One statement a call: neither may run inside the implicit transaction of a batch.
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await?;
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .with_context(|| format!("creating {name}"))?;
        let mut conn = AsyncPgConnection::establish(&scratch.url()?).await?;
        conn.batch_execute(SCHEMA).await.context("creating the tables")?;
        diesel::insert_into(stock::table)
            .values((stock::goods_id.eq(GOODS_ID), stock::total.eq(units), stock::available.eq(units)))
            .execute(&mut conn)
            .await?;
        Ok(scratch)
    }

    pub fn url(&self) -> anyhow::Result<String> {
        with_database(&self.server, &self.name)
    }

    async fn admin(&self) -> anyhow::Result<AsyncPgConnection> {
        let url = with_database(&self.server, "postgres")?;
        AsyncPgConnection::establish(&url)
            .await
            .with_context(|| format!("connecting to {}", crate::baseline::redact(&url)))
    }

    /// Drops the database, whoever is still connected to it.
    pub async fn drop_now(self) -> anyhow::Result<()> {
        let mut admin = self.admin().await?;
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name)).await?;
        Ok(())
    }
}

/// A pool of `size` connections to `url`, every one of them opened now (before the clock).
pub async fn pool(url: &str, size: usize) -> anyhow::Result<PgPool> {
    let manager = AsyncDieselConnectionManager::<AsyncPgConnection>::new(url);
    let pool = Pool::builder(manager).max_size(size.max(1)).build()?;
    let opened = try_join_all((0..size.max(1)).map(|_| pool.get())).await.context("opening the pool")?;
    drop(opened);
    Ok(pool)
}

/// What one buy came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bought {
    /// Committed: a unit taken, this order written.
    Order(i64),
    SoldOut,
    /// The user already holds an order of this sale; nothing changed.
    Repeated,
}

/// Why a buy transaction was rolled back.
enum Rollback {
    Repeated,
    Query(QueryError),
}

impl From<QueryError> for Rollback {
    fn from(e: QueryError) -> Self {
        Self::Query(e)
    }
}

/// One buy, one transaction: take a unit if one is left, write the user's order (the unique
/// index refuses a second one, and the whole transaction is rolled back), commit.
pub async fn buy(conn: &mut AsyncPgConnection, goods: i64, user: i64) -> QueryResult<Bought> {
    let done = conn
        .transaction::<_, Rollback, _>(async move |conn| {
            let taken =
                diesel::update(stock::table.filter(stock::goods_id.eq(goods)).filter(stock::available.gt(0)))
                    .set(stock::available.eq(stock::available - 1))
                    .execute(conn)
                    .await?;
            if taken == 0 {
                return Ok(Bought::SoldOut);
            }
            match diesel::insert_into(orders::table)
                .values((orders::goods_id.eq(goods), orders::user_id.eq(user)))
                .returning(orders::id)
                .get_result::<i64>(conn)
                .await
            {
                Ok(id) => Ok(Bought::Order(id)),
                Err(QueryError::DatabaseError(DatabaseErrorKind::UniqueViolation, _)) => {
                    Err(Rollback::Repeated)
                }
                Err(e) => Err(e.into()),
            }
        })
        .await;
    match done {
        Ok(bought) => Ok(bought),
        Err(Rollback::Repeated) => Ok(Bought::Repeated),
        Err(Rollback::Query(e)) => Err(e),
    }
}

/// The sale as the database has it after the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub orders: i64,
    pub distinct_users: i64,
    pub total: i64,
    pub available: i64,
}

pub async fn tally(conn: &mut AsyncPgConnection, goods: i64) -> QueryResult<Tally> {
    let of_sale = orders::table.filter(orders::goods_id.eq(goods));
    let orders = of_sale.count().get_result::<i64>(conn).await?;
    let distinct_users = of_sale
        .select(diesel::dsl::count(orders::user_id).aggregate_distinct())
        .get_result::<i64>(conn)
        .await?;
    let (total, available) =
        stock::table.find(goods).select((stock::total, stock::available)).first::<(i64, i64)>(conn).await?;
    Ok(Tally { orders, distinct_users, total, available })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_name_replaces_the_urls() {
        let with = |u: &str| with_database(u, "scratch").unwrap();
        assert_eq!(with("postgres://postgres@127.0.0.1:5432"), "postgres://postgres@127.0.0.1:5432/scratch");
        assert_eq!(with("postgres://u:p@h:5432/"), "postgres://u:p@h:5432/scratch");
        assert_eq!(with("postgres://u:p@h/seckill_stock"), "postgres://u:p@h/scratch");
        assert_eq!(with("postgres://h/db?sslmode=require"), "postgres://h/scratch?sslmode=require");
        assert!(with_database("127.0.0.1:5432", "x").is_err());
    }
}
