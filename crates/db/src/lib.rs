//! PostgreSQL plumbing shared by the services that own a database (stock-service and
//! order-service): the pool, its per-connection settings, creating the database on first start,
//! embedded migrations without libpq, TLS when `database.url` asks for it (see [`tls`]), and
//! [`DbError`] with the one rule that tells a database outage from a query's own failure.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use diesel::ConnectionError;
use diesel::migration::{Migration, MigrationSource};
use diesel::pg::Pg;
use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
use diesel_async::pooled_connection::deadpool::{Object, Pool};
use diesel_async::pooled_connection::{AsyncDieselConnectionManager, ManagerConfig};
use diesel_async::{AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness};
use seckill_common::config::{ConfigError, DatabaseSettings};
use seckill_common::ready::{self, Readiness};

pub mod tls;

pub use tls::PgTarget;

pub type PgPool = Pool<AsyncPgConnection>;
/// A service's embedded migrations (`&MIGRATIONS`): a reference, so a start that waits for the
/// server can try them again.
pub type Migrations = &'static EmbeddedMigrations;
pub type PgConn = Object<AsyncPgConnection>;
pub use diesel_async::pooled_connection::deadpool::PoolError;

/// A pool whose connections carry `statement_timeout`, so a stuck query cannot hold a
/// connection (and a hot row's lock) for ever, and plan every statement for its own values.
///
/// Statements are prepared once per connection and cached. After five runs PostgreSQL may
/// switch a prepared statement to a generic plan, and keeps it until the table's statistics
/// change: a plan chosen while a table was nearly empty (a new database) became a growing
/// sequential scan where statistics lagged (autovacuum off or behind): the order consumer
/// fell from 4,900 to 2,800 orders/s over its first 150,000 orders. Planning each run costs
/// little next to a batch of 200 rows.
pub fn pool(settings: &DatabaseSettings, url: &str) -> anyhow::Result<PgPool> {
    gated_pool(settings, url, None)
}

/// [`pool`], whose connections are refused until `prepared` is ready: a database whose
/// migrations are not applied yet is never queried as if they were.
fn gated_pool(
    settings: &DatabaseSettings,
    url: &str,
    prepared: Option<Arc<Readiness>>,
) -> anyhow::Result<PgPool> {
    let statement_timeout_ms = settings.statement_timeout_ms;
    // Read once: the TLS settings and root certificates serve every connection of the pool.
    let target = Arc::new(PgTarget::parse(url)?);
    let mut manager_config = ManagerConfig::default();
    manager_config.custom_setup = Box::new(move |_url| {
        let target = target.clone();
        let prepared = prepared.clone();
        Box::pin(async move {
            if prepared.is_some_and(|p| !p.is_ready()) {
                return Err(ConnectionError::BadConnection(NOT_PREPARED.to_owned()));
            }
            let mut conn = target.connect().await?;
            conn.batch_execute(&format!(
                "SET statement_timeout = {statement_timeout_ms}; SET plan_cache_mode = force_custom_plan"
            ))
            .await
            .map_err(ConnectionError::CouldntSetupConfiguration)?;
            Ok(conn)
        })
    });
    let manager = AsyncDieselConnectionManager::<AsyncPgConnection>::new_with_config(url, manager_config);
    Ok(Pool::builder(manager)
        .max_size(settings.pool_size.max(1))
        .wait_timeout(Some(settings.acquire_timeout()))
        .create_timeout(Some(settings.acquire_timeout()))
        .recycle_timeout(Some(Duration::from_secs(1)))
        .runtime(deadpool::Runtime::Tokio1)
        .build()?)
}

/// Why a [`Database`]'s pool refuses a connection before its migrations are applied.
const NOT_PREPARED: &str = "migrations not applied yet";

/// A database service's database, which becomes ready in the background: the service starts
/// and serves while PostgreSQL is away, [`Database::prepare`] creates and migrates it as soon
/// as the server answers, and until then the pool hands out no connection (a query answers
/// [`DbError::Pool`], an outage: 503 on the API, a message handed back on a queue).
#[derive(Clone)]
pub struct Database {
    pool: PgPool,
    url: String,
    prepared: Arc<Readiness>,
}

impl Database {
    /// Checks `url` (a wrong one stops the start, naming `database.url`) and builds the pool;
    /// connects to nothing yet.
    pub fn open(settings: &DatabaseSettings, url: &str) -> anyhow::Result<Self> {
        let wrong = |e: anyhow::Error| ConfigError::at("database.url", format!("{e:#}"));
        PgTarget::parse(url).map_err(|e| wrong(e.into()))?;
        split_url(url).map_err(wrong)?;
        let prepared = Arc::new(Readiness::new("database", format!("{NOT_PREPARED} (not tried yet)")));
        let pool = gated_pool(settings, url, Some(prepared.clone())).map_err(wrong)?;
        Ok(Self { pool, url: url.to_owned(), prepared })
    }

    /// The pool: refuses connections until [`Database::prepare`] has finished.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Whether the database is created and migrated, and if not why; for waiting on it.
    pub fn prepared(&self) -> &Arc<Readiness> {
        &self.prepared
    }

    /// Creates and migrates the database ([`prepare`]), trying again with back-off while the
    /// server is away or refuses, until it is done; then the pool hands out connections.
    pub fn prepare(&self, migrations: Migrations) -> impl Future<Output = ()> + Send + 'static {
        let (url, prepared) = (self.url.clone(), self.prepared.clone());
        async move {
            ready::keep_trying(
                &prepared,
                |e: &anyhow::Error| format!("{NOT_PREPARED} ({e:#})"),
                || prepare(&url, migrations),
            )
            .await;
        }
    }

    /// `/readyz` line: waiting for the migrations (and why), else a connection answers `SELECT 1`.
    pub async fn readiness(&self) -> Result<(), String> {
        self.prepared.check()?;
        ping(&self.pool).await
    }
}

/// `<binary> migrate` (a pre-rollout Job, an init container): as a service's start does, waits
/// for the server with back-off rather than failing while it is away, so an init container
/// started before PostgreSQL waits instead of crash-looping; a wrong `database.url` stops it
/// at once.
pub async fn migrate(url: &str, migrations: Migrations) -> anyhow::Result<()> {
    let database = Database::open(&DatabaseSettings::default(), url)?;
    database.prepare(migrations).await;
    Ok(())
}

/// Makes the database ready: created if missing, migrations applied. Replicas starting
/// together (a rollout, a scale-up) take turns under a PostgreSQL advisory lock held on the
/// maintenance database, so one creates and migrates while the others wait and then find
/// nothing to do. Where the maintenance database cannot be reached (a managed database that
/// only grants its own), it goes ahead without the lock.
pub async fn prepare(url: &str, migrations: Migrations) -> anyhow::Result<()> {
    // A wrong `sslmode` or CA file is said as such, not as a missing maintenance database.
    PgTarget::parse(url)?;
    let (_, name, _) = split_url(url)?;
    let lock = match connect(&maintenance_url(url)?).await {
        Ok(mut conn) => {
            diesel::sql_query("SELECT pg_advisory_lock(hashtext('seckill-migrate:' || $1))")
                .bind::<diesel::sql_types::Text, _>(name)
                .execute(&mut conn)
                .await?;
            Some(conn)
        }
        Err(e) => {
            tracing::warn!(error = %e, "no maintenance database: migrating without the lock");
            None
        }
    };
    ensure_database(url).await?;
    run_migrations(url, migrations).await?;
    // Dropping the connection releases the lock.
    drop(lock);
    Ok(())
}

/// One connection to `url`, over TLS if its `sslmode` asks for it (see [`PgTarget`]).
pub async fn connect(url: &str) -> diesel::ConnectionResult<AsyncPgConnection> {
    PgTarget::parse(url)?.connect().await
}

/// `postgres://u:p@h:5432/name?x` -> (`postgres://u:p@h:5432`, `name`, `?x`). The query is cut
/// first: a `sslrootcert` path in it has slashes too.
fn split_url(url: &str) -> anyhow::Result<(&str, &str, &str)> {
    let (base, query) = url.find('?').map_or((url, ""), |at| url.split_at(at));
    let (server, name) =
        base.rsplit_once('/').ok_or_else(|| anyhow::anyhow!("database.url has no database name: {url}"))?;
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        anyhow::bail!("database name `{name}` must be letters, digits and underscores");
    }
    Ok((server, name, query))
}

/// The server's `postgres` database, reached the same way (TLS settings included) as `url`'s.
fn maintenance_url(url: &str) -> anyhow::Result<String> {
    let (server, _, query) = split_url(url)?;
    Ok(format!("{server}/postgres{query}"))
}

/// Connects once to check the server answers; creates the database if it does not exist yet
/// (so a fresh server needs no manual step). Creating needs the right to, which a managed
/// production database usually gives only to its owner: there the database already exists.
pub async fn ensure_database(url: &str) -> anyhow::Result<()> {
    match connect(url).await {
        Ok(_) => return Ok(()),
        Err(e) if !e.to_string().contains("does not exist") => {
            return Err(anyhow::anyhow!("cannot connect to PostgreSQL: {e}"));
        }
        Err(_) => {}
    }
    let (_, name, _) = split_url(url)?;
    let mut admin = connect(&maintenance_url(url)?)
        .await
        .map_err(|e| anyhow::anyhow!("cannot connect to the maintenance database: {e}"))?;
    match diesel::sql_query(format!("CREATE DATABASE {name}")).execute(&mut admin).await {
        Ok(_) => tracing::info!(database = name, "created database"),
        // Another replica created it meanwhile (one without the lock of `prepare`).
        Err(e) if e.to_string().contains("already exists") || e.to_string().contains("duplicate key") => {}
        Err(e) => return Err(anyhow::anyhow!("cannot create database {name}: {e}")),
    }
    Ok(())
}

/// Applies pending embedded migrations. Runs on a blocking thread, as diesel's migration
/// harness is synchronous; PostgreSQL's own locking (the `__diesel_schema_migrations` insert in
/// the migration's transaction) keeps two replicas from applying one migration twice.
pub async fn run_migrations(url: &str, migrations: Migrations) -> anyhow::Result<()> {
    // Connected here (the wrapper's own `establish` is always plain), driven from the blocking
    // thread through this runtime's handle.
    let conn = connect(url).await?;
    tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        let mut conn = AsyncConnectionWrapper::<AsyncPgConnection>::from(conn);
        let applied = conn
            .run_pending_migrations(Source(migrations))
            .map_err(|e| anyhow::anyhow!("migrations failed: {e}"))?;
        for m in applied {
            tracing::info!(migration = %m, "applied migration");
        }
        Ok(())
    })
    .await?
}

/// [`Migrations`] as diesel's harness takes them (it takes its source by value).
struct Source(Migrations);

impl MigrationSource<Pg> for Source {
    fn migrations(&self) -> diesel::migration::Result<Vec<Box<dyn Migration<Pg>>>> {
        MigrationSource::<Pg>::migrations(self.0)
    }
}

/// What went wrong with the database: no connection from the pool, or a query that failed.
/// Says nothing of HTTP; the services' API answers are made from it in one place
/// (`seckill_web::ApiError`'s `From`).
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("no database connection")]
    Pool(#[from] PoolError),
    #[error("database query failed")]
    Query(#[from] QueryError),
}

pub use diesel::result::Error as QueryError;

impl DbError {
    /// True when the database failed, not the query: see [`is_outage`].
    pub fn is_outage(&self) -> bool {
        match self {
            // Timeout, refused, failed setup: no connection to try the query on.
            DbError::Pool(_) => true,
            DbError::Query(e) => query_outage(e),
        }
    }

    /// The row asked for does not exist (`first` without `optional`).
    pub fn is_not_found(&self) -> bool {
        matches!(self, DbError::Query(QueryError::NotFound))
    }

    /// True when the query sent a value the database cannot store: see [`is_bad_value`]. Not
    /// an outage; where the value came from the request, the client's mistake (400).
    pub fn is_bad_value(&self) -> bool {
        matches!(self, DbError::Query(e) if is_bad_value(e))
    }
}

/// Primary messages of PostgreSQL's data exceptions (SQLSTATE class 22) a value can cause.
/// diesel-async reports them as `Unknown`, hiding the SQLSTATE (see [`OUTAGE_MESSAGES`]);
/// English texts, as there.
const BAD_VALUE_MESSAGES: [&str; 6] = [
    // 22021 character_not_in_repertoire: a NUL (`0x00`) in text.
    "invalid byte sequence for encoding",
    // 22P05 untranslatable_character: a server encoding other than UTF-8.
    "has no equivalent in encoding",
    // 22008 datetime_field_overflow (`timestamp out of range`, `date out of range`), 22003
    // numeric_value_out_of_range (`integer out of range`, `value ... is out of range for
    // type smallint`), 2202E array subscript: all say "out of range".
    "out of range",
    // 22001 string_data_right_truncation.
    "value too long for type",
    // 22P02 invalid_text_representation.
    "invalid input syntax for type",
    // 22P05 again, text with a `\u0000` escape into `jsonb`.
    "unsupported Unicode escape sequence",
];

/// A query's values are ones the database cannot store: a data exception (SQLSTATE class 22),
/// or a row a CHECK constraint refuses. Never an outage (those are told apart first).
pub fn is_bad_value(e: &QueryError) -> bool {
    use diesel::result::DatabaseErrorKind as Kind;
    match e {
        QueryError::DatabaseError(Kind::CheckViolation, _) => true,
        QueryError::DatabaseError(Kind::Unknown, info) => {
            !query_outage(e) && BAD_VALUE_MESSAGES.iter().any(|m| info.message().contains(m))
        }
        _ => false,
    }
}

/// Takes a connection from the pool.
pub async fn conn(pool: &PgPool) -> Result<PgConn, DbError> {
    Ok(pool.get().await?)
}

/// Primary messages of the server errors that mean the database, not the query, failed.
/// diesel-async reports SQLSTATEs it has no `DatabaseErrorKind` for as `Unknown` and its
/// `DatabaseErrorInformation` hides the code, so the message is the only signal left. They are
/// PostgreSQL's English texts: with another `lc_messages` these go unrecognised, but a
/// connection the server ended still fails as `UnableToSendCommand` on its next use.
const OUTAGE_MESSAGES: [&str; 3] = [
    // FATAL, the session is over: 57P01 admin_shutdown (`pg_terminate_backend`, a fast
    // shutdown), 57P02 crash_shutdown, 57P05 idle_session_timeout, recovery conflicts.
    "terminating connection",
    // 57P03 cannot_connect_now: starting up, shutting down, in recovery.
    "the database system is",
    // 57014 query_canceled, by our own `statement_timeout` (not by a user's cancel).
    "canceling statement due to statement timeout",
];

/// The query half of the one outage rule: the connection is lost, the server ended the
/// session, or the statement ran out of `statement_timeout`. Serialization failures and
/// deadlocks are not outages: they are the query's own conflicts.
fn query_outage(e: &QueryError) -> bool {
    use diesel::result::DatabaseErrorKind as Kind;
    match e {
        // diesel-async answers every client-side failure without a SQLSTATE (socket closed or
        // broken, its connection task gone) with `UnableToSendCommand`; diesel's libpq
        // connection says `ClosedConnection`.
        QueryError::DatabaseError(Kind::UnableToSendCommand | Kind::ClosedConnection, _) => true,
        QueryError::DatabaseError(_, info) => OUTAGE_MESSAGES.iter().any(|m| info.message().starts_with(m)),
        // A commit that failed with the connection, then its rollback too.
        QueryError::RollbackErrorOnCommit { rollback_error, commit_error } => {
            query_outage(commit_error) || query_outage(rollback_error)
        }
        _ => false,
    }
}

/// `/readyz` check: a connection from the pool answers `SELECT 1`.
pub async fn ping(pool: &PgPool) -> Result<(), String> {
    let mut conn = pool.get().await.map_err(|e| e.to_string())?;
    diesel::sql_query("SELECT 1").execute(&mut conn).await.map(|_| ()).map_err(|e| e.to_string())
}

/// The one outage rule, for an error chain: true when it holds a database outage (a
/// [`DbError`], a [`PoolError`] or a [`QueryError`] that [`DbError::is_outage`] calls one).
/// Retrying later, on another connection, can succeed: consumers then hand messages back
/// without counting a try against them, and the API answers 503.
pub fn is_outage(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        if let Some(e) = cause.downcast_ref::<DbError>() {
            e.is_outage()
        } else {
            cause.is::<PoolError>() || cause.downcast_ref::<QueryError>().is_some_and(query_outage)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_maintenance_database_is_reached_with_the_same_options() {
        let url = "postgres://u:p@h:5432/orders?sslmode=verify-full&sslrootcert=/etc/seckill/ca.pem";
        assert_eq!(
            split_url(url).unwrap(),
            ("postgres://u:p@h:5432", "orders", "?sslmode=verify-full&sslrootcert=/etc/seckill/ca.pem")
        );
        assert_eq!(
            maintenance_url(url).unwrap(),
            "postgres://u:p@h:5432/postgres?sslmode=verify-full&sslrootcert=/etc/seckill/ca.pem"
        );
        assert_eq!(maintenance_url("postgres://h/orders").unwrap(), "postgres://h/postgres");
        assert!(split_url("postgres://h/or-ders?x=1").is_err());
    }
}
