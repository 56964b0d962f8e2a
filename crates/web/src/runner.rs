//! The one `main` of every service binary: read and check the settings, start the logs, then
//! either prepare the database and exit (`<binary> migrate`) or build the service and serve
//! until SIGTERM or Ctrl-C. A service's `main.rs` names its [`Service`] and its allocator.

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

    impl ServiceSettings for Fake {
        const SERVICE: &'static str = "fake-service";

        fn log(&self) -> &LogSettings {
            &self.log
        }

        fn validate(&self) -> Result<(), ConfigError> {
            Fake::validate(self)
        }
    }

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
