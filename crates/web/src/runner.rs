//! The one `main` of every service binary: read and check the settings, start the logs, then
//! either prepare the database and exit (`<binary> migrate`) or build the service and serve
//! until SIGTERM or Ctrl-C. A service's `main.rs` only names its [`Service`].

use std::future::Future;

use seckill_common::config::ServiceSettings;

use crate::{Application, shutdown_signal};

/// What a service gives the runner, implemented by its settings type: how to build the
/// service from them and, for a service with a database, how to migrate it.
pub trait Service: ServiceSettings {
    /// Builds the service, bound and not yet running, from settings already validated.
    fn start(self) -> impl Future<Output = anyhow::Result<Application>>;

    /// `<binary> migrate`: creates and migrates the database, then returns (a pre-rollout Job
    /// or an init container). None for a service without a database: the argument is ignored.
    fn migrate(&self) -> Option<impl Future<Output = anyhow::Result<()>>> {
        None::<std::future::Ready<anyhow::Result<()>>>
    }
}

/// Implements [`Service`] for the settings of a service that owns a database (whose settings
/// have `database_url()`): built by `$start`, and `<binary> migrate` prepares the database
/// with `$migrations` (`seckill_db::migrate`):
/// `seckill_web::database_service!(Settings, start, MIGRATIONS);`.
#[cfg(feature = "db")]
#[macro_export]
macro_rules! database_service {
    ($settings:ty, $start:path, $migrations:expr) => {
        impl $crate::Service for $settings {
            async fn start(self) -> ::anyhow::Result<$crate::Application> {
                $start(self).await
            }

            fn migrate(&self) -> Option<impl ::std::future::Future<Output = ::anyhow::Result<()>>> {
                let url = self.database_url();
                Some(async move { $crate::runner::seckill_db::migrate(&url, &$migrations).await })
            }
        }
    };
}

/// For [`database_service!`]: the database crate, named from the crate that expands it.
#[cfg(feature = "db")]
#[doc(hidden)]
pub use seckill_db;

/// The whole `main.rs` of a service binary: `seckill_web::service_main!(order_service::Settings);`.
/// The binary's crate depends on `mimalloc` and `anyhow`.
///
/// The allocator is mimalloc: many small, short-lived allocations on every request, across
/// threads, took glibc's malloc about a fifth of the CPU under load (perf); mimalloc takes much
/// less.
#[macro_export]
macro_rules! service_main {
    ($service:ty) => {
        #[global_allocator]
        static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

        fn main() -> anyhow::Result<()> {
            $crate::runner::run::<$service>()
        }
    };
}

/// Runs service `S` as its binary does; returns when it has stopped.
pub fn run<S: Service>() -> anyhow::Result<()> {
    let settings = match S::load() {
        Ok(settings) => settings,
        Err(e) => {
            // Before the logs exist: said plainly, naming the key, and the process stops.
            eprintln!("{}: {e}", S::SERVICE);
            std::process::exit(1);
        }
    };
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(async {
        seckill_common::telemetry::init(settings.log());
        if std::env::args().nth(1).as_deref() == Some("migrate")
            && let Some(migrating) = settings.migrate()
        {
            migrating.await?;
            tracing::info!("database ready");
            return Ok(());
        }
        let app = settings.start().await?;
        // The line a deployment (and `stock-service/tests/binary.rs`) waits for.
        tracing::info!(port = app.port(), "{} listening", S::SERVICE);
        app.run_until_stopped(shutdown_signal()).await?;
        Ok(())
    })
}

/// Checks `settings`, then builds: the entry of tests and of anything else that starts a
/// service in process from settings it made itself.
pub async fn build<S: Service>(settings: S) -> anyhow::Result<Application> {
    settings.validate()?;
    settings.start().await
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use seckill_common::config::{ConfigError, LogSettings};
    use serde::Deserialize;

    use super::*;
    use crate::Lifecycle;

    #[derive(Default, Deserialize)]
    struct Fake {
        log: LogSettings,
        workers: u32,
    }

    impl Fake {
        fn validate(&self) -> Result<(), ConfigError> {
            ConfigError::check_positive("fake.workers", u64::from(self.workers))
        }
    }

    seckill_common::service_settings!(Fake, "fake-service");

    impl Service for Fake {
        async fn start(self) -> anyhow::Result<Application> {
            anyhow::bail!("started with {} workers", self.workers)
        }
    }

    #[actix_web::test]
    async fn build_checks_the_settings_before_starting() {
        let refused = build(Fake::default()).await.err().unwrap().to_string();
        assert!(refused.contains("SECKILL__FAKE__WORKERS"), "{refused}");
        let started = build(Fake { workers: 2, ..Fake::default() }).await.err().unwrap().to_string();
        assert_eq!(started, "started with 2 workers");
        assert!(Fake::default().migrate().is_none(), "no database, no migrate mode");
        assert_eq!(Fake::SERVICE, "fake-service");
    }

    #[actix_web::test]
    async fn a_shutdown_task_waits_for_the_stop() {
        let lifecycle = Lifecycle::new();
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        lifecycle.at_shutdown(async move { flag.store(true, Ordering::SeqCst) });
        tokio::task::yield_now().await;
        assert!(!done.load(Ordering::SeqCst), "ran before the stop");
        lifecycle.cancel.cancel();
        lifecycle.tasks.close();
        lifecycle.tasks.wait().await;
        assert!(done.load(Ordering::SeqCst));
    }
}
