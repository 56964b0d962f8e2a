//! The HTTP server every service runs, and the shutdown that ends it and the service's
//! background tasks in the right order.

use std::future::Future;
use std::sync::Arc;

use actix_web::dev::Server;
use actix_web::middleware::{Condition, from_fn};
use actix_web::{App, HttpServer, web};
use anyhow::Context;
use seckill_common::ErrorCode;
use seckill_common::config::HttpSettings;
use seckill_common::ready::Readiness;
use seckill_common::trust::Trust;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::keep_alive::Watchdog;
use crate::read_bound::{self, ReadBound};
use crate::{ApiError, extract, health, metrics, request_id};

/// How long a connection being closed may linger: the server's answer flushed, the rest of a
/// refused body drained (`crate::read_bound`). Past it the socket is dropped.
pub const CLIENT_DISCONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// Who may call a server: every request but the probes needs a credential checked against
/// these keys ([`crate::trust`]), or, for the gateway alone, anyone may.
#[derive(Debug, Clone)]
pub enum Door {
    Trusted(Arc<Trust>),
    /// The public edge: the gateway checks its callers' bearer tokens itself.
    Public,
}

/// Binds the server (port 0 asks the OS) and returns it unstarted with the port it got.
/// `configure` adds the service's own routes and app data to every worker's app.
pub fn serve<F>(
    settings: &HttpSettings,
    standard_port: u16,
    door: Door,
    configure: F,
) -> std::io::Result<(Server, u16)>
where
    F: Fn(&mut web::ServiceConfig) + Send + Clone + 'static,
{
    metrics::handle();
    let limit = settings.body_limit_bytes;
    let bound = ReadBound::new(settings);
    let watchdog = Watchdog::start(settings.keep_alive(), bound.timeout)?;
    if !settings.keep_alive_outlives_callers_pools() {
        tracing::warn!(
            keep_alive_secs = settings.keep_alive_secs,
            callers_pool_idle_secs = seckill_common::config::CLIENT_POOL_IDLE.as_secs(),
            "http.keep_alive_secs is not above how long callers keep an idle pooled connection: \
             a request sent on one just as this server closes it fails"
        );
    }
    let trust = match door {
        Door::Trusted(trust) => Some(web::Data::new(trust)),
        Door::Public => None,
    };
    let mut server = HttpServer::new(move || {
        let checked = trust.is_some();
        let app = match &trust {
            Some(trust) => App::new().app_data(trust.clone()),
            None => App::new(),
        };
        app
            // Innermost: a refused request still gets its request id and is counted.
            .wrap(Condition::new(checked, from_fn(crate::trust::middleware)))
            // Outside the credential check: a refused request's body is bounded too. Inside the
            // metrics and the request id: a 408 is counted and can be found in the log.
            .wrap(from_fn(move |req, next| read_bound::middleware(bound, req, next)))
            .wrap(from_fn(metrics::middleware))
            .wrap(from_fn(request_id::middleware))
            .app_data(extract::json_config(limit))
            .app_data(extract::path_config())
            .app_data(extract::query_config())
            .app_data(web::PayloadConfig::new(limit))
            .configure(health::routes)
            // The public edge shows no metrics to outsiders: the gateway serves them on its
            // admin listener (`crate::admin`).
            .configure(move |cfg| {
                if checked {
                    metrics::routes(cfg);
                }
            })
            .configure(configure.clone())
            .default_service(web::to(not_found))
    })
    // Shutdown is ours to drive (see `Application::run_until_stopped`), so the service can finish its
    // background work after the last request.
    .disable_signals()
    .keep_alive(settings.keep_alive())
    // The head of a connection's first request; its body is `read_bound::middleware`'s, the
    // heads after it the watchdog's (`crate::keep_alive`).
    .client_request_timeout(bound.timeout)
    .on_connect(watchdog.on_connect())
    .client_disconnect_timeout(CLIENT_DISCONNECT_TIMEOUT)
    .shutdown_timeout(settings.shutdown_timeout_secs);
    if settings.workers > 0 {
        server = server.workers(settings.workers);
    }
    let server = server.bind((settings.host.as_str(), settings.port_or(standard_port)))?;
    let port = server.addrs().first().map(|a| a.port()).unwrap_or_default();
    Ok((server.run(), port))
}

/// [`serve`] for a service behind the gateway: every request checked against `trust`, `state`
/// shared by the handlers `routes` registers. Returns the service with its background tasks.
pub fn serve_internal<T: Send + Sync + 'static>(
    settings: &HttpSettings,
    standard_port: u16,
    trust: Arc<Trust>,
    state: web::Data<T>,
    routes: fn(&mut web::ServiceConfig),
    lifecycle: Lifecycle,
) -> anyhow::Result<Application> {
    let asked = settings.port_or(standard_port);
    let (server, port) = serve(settings, standard_port, Door::Trusted(trust), move |cfg| {
        cfg.app_data(state.clone()).configure(routes);
    })
    .with_context(|| format!("cannot listen on {}:{asked}", settings.host))?;
    Ok(Application::new(port, server, lifecycle))
}

async fn not_found() -> Result<actix_web::HttpResponse, ApiError> {
    Err(ApiError::new(ErrorCode::NotFound, "no such route"))
}

/// Background tasks of a service (consumers, warm-up, reconcilers) and the token that tells
/// them to stop.
#[derive(Debug, Clone, Default)]
pub struct Lifecycle {
    pub cancel: CancellationToken,
    /// Cancelled as soon as the service is told to stop, before the requests drain: what
    /// would hold a connection open for ever (an event stream) ends on it, so draining ends.
    pub draining: CancellationToken,
    pub tasks: TaskTracker,
    /// The parts becoming ready in the background ([`Lifecycle::spawn_start_up`]).
    starting: Arc<std::sync::Mutex<Vec<Arc<Readiness>>>>,
}

impl Lifecycle {
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `task` until it returns; it must watch `self.cancel` and return soon after.
    pub fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.tasks.spawn(task);
    }

    /// Makes a part of the service ready in the background (`task`, usually
    /// `seckill_common::ready::keep_trying`, sets `readiness`): the service serves meanwhile, and
    /// `task` is dropped where it stands if the service stops first (it holds nothing to finish).
    /// [`Application::started`] waits for every such part.
    pub fn spawn_start_up<F>(&self, readiness: Arc<Readiness>, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.starting.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(readiness);
        let cancel = self.cancel.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                () = cancel.cancelled() => {}
                () = task => {}
            }
        });
    }

    /// Runs `task` once the service is told to stop, after the last request has been
    /// answered (closing the broker connection cleanly, for one).
    pub fn at_shutdown<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let cancel = self.cancel.clone();
        self.tasks.spawn(async move {
            cancel.cancelled().await;
            task.await;
        });
    }
}

/// The clock of a periodic background task (a sweeper, a reconciler, a clean-up):
/// `while ticker.tick(&cancel).await { ... }` runs the body at once, then every period, until
/// the service stops. A period missed while the body ran is not made up.
#[derive(Debug)]
pub struct Ticker(tokio::time::Interval);

impl Ticker {
    pub fn new(every: std::time::Duration) -> Self {
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Self(interval)
    }

    /// Waits for the next period: true when it came, false when `cancel` came first.
    pub async fn tick(&mut self, cancel: &CancellationToken) -> bool {
        tokio::select! {
            () = cancel.cancelled() => false,
            _ = self.0.tick() => true,
        }
    }
}

/// A built service: its HTTP server, bound and not yet running, and its background tasks.
pub struct Application {
    port: u16,
    server: Server,
    lifecycle: Lifecycle,
    /// Servers run next to the main one (the gateway's admin listener); stopped after it.
    extra: Vec<Server>,
}

impl Application {
    pub fn new(port: u16, server: Server, lifecycle: Lifecycle) -> Self {
        Self { port, server, lifecycle, extra: Vec::new() }
    }

    /// Runs `server` (bound, not yet running) alongside the main one, from
    /// `run_until_stopped` until the main one has drained.
    #[must_use]
    pub fn with_extra_server(mut self, server: Server) -> Self {
        self.extra.push(server);
        self
    }

    /// The port the server got (the real one when port 0 was asked for).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Resolves once every part started in the background is ready: the database migrated,
    /// the publisher connected, the scripts loaded (tests wait for it; a service serves before).
    pub fn started(&self) -> impl Future<Output = ()> + Send + 'static {
        let parts = self.lifecycle.starting.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        async move {
            for part in parts {
                part.wait().await;
            }
        }
    }

    /// What [`Application::started`] still waits for, each part with why.
    pub fn waiting_for(&self) -> Vec<String> {
        let parts = self.lifecycle.starting.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        parts.iter().filter_map(|p| p.check().err().map(|why| format!("{}: {why}", p.what()))).collect()
    }

    /// Serves until `shutdown` resolves (or the server stops), then stops taking requests,
    /// lets in-flight requests finish, and only then cancels and awaits the background tasks,
    /// so a consumer finishes and acks what it holds.
    pub async fn run_until_stopped(self, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
        let Self { server, lifecycle, extra, .. } = self;
        let extra: Vec<_> = extra.into_iter().map(|s| (s.handle(), tokio::spawn(s))).collect();
        let handle = server.handle();
        let mut server = std::pin::pin!(server);
        let result = tokio::select! {
            result = &mut server => result,
            () = shutdown => {
                tracing::info!("shutdown requested: draining requests");
                lifecycle.draining.cancel();
                // `stop` sends the command at once; the server future (polled below) carries
                // it out, so awaiting the returned future first would wait for ever.
                drop(handle.stop(true));
                server.await
            }
        };
        for (handle, running) in extra {
            // Spawned, so polled elsewhere: awaiting the stop itself is fine here.
            handle.stop(true).await;
            match running.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "an extra server failed"),
                Err(e) => tracing::warn!(error = %e, "an extra server's task failed"),
            }
        }
        lifecycle.cancel.cancel();
        lifecycle.tasks.close();
        lifecycle.tasks.wait().await;
        tracing::info!("stopped");
        result
    }
}
