//! Builds the gateway from its settings: creates the shared state once (JWT keys,
//! the upstream client, the rate limiters), binds the public server and the admin listener
//! (metrics, detailed readiness) and starts the background clean-up.

use std::sync::Arc;
use std::time::Duration;

use actix_web::web;
use anyhow::Context;
use seckill_common::trust::{Peer, Trust};
use seckill_web::{Application, Door, Lifecycle, Service};

use crate::auth::Authenticator;
use crate::configuration::{STANDARD_PORT, Settings};
use crate::proxy::Proxy;
use crate::rate_limit::{AddressRateLimiter, UserRateLimiter};
use crate::routes;
use crate::state::{Gateway, LastReadiness};

/// How the binary runs the gateway (`seckill_web::runner`).
impl Service for Settings {
    async fn start(self) -> anyhow::Result<Application> {
        Ok(start(self).await?.0)
    }
}

/// Checks the settings, then builds: where tests and the e2e suite start a service.
pub use seckill_web::runner::build;

/// As `build`, with the port the admin listener got (the real one when 0 was asked for).
pub async fn build_with_admin_port(settings: Settings) -> anyhow::Result<(Application, u16)> {
    settings.validate()?;
    start(settings).await
}

/// Builds from settings already checked.
async fn start(settings: Settings) -> anyhow::Result<(Application, u16)> {
    let auth = Authenticator::new(settings.jwt_secret()?, Duration::from_secs(settings.dev_token.ttl_secs))?
        .with_rules(&settings.auth);
    let trust = Arc::new(Trust::for_service(Peer::Gateway, &settings.trust)?);
    let proxy = Proxy::new(&settings.upstreams, trust)?;
    let limiter = Arc::new(UserRateLimiter::new(settings.quota()?));
    let anonymous = Arc::new(AddressRateLimiter::new(settings.anonymous_quota()?));
    let gateway = web::Data::new(Gateway {
        auth,
        proxy,
        limiter: limiter.clone(),
        anonymous: anonymous.clone(),
        proxy_hops: settings.rate_limit.trusted_proxy_hops,
        body_limit: settings.http.body_limit_bytes,
        last_readiness: LastReadiness::default(),
    });

    let dev_tokens = settings.auth.dev_tokens;
    let public = gateway.clone();
    let (server, port) = seckill_web::serve(&settings.http, STANDARD_PORT, Door::Public, move |cfg| {
        routes::configure(cfg, public.clone(), dev_tokens);
    })?;
    let (admin, admin_port) =
        seckill_web::admin::serve_admin(settings.admin_host(), settings.admin_port(), move |cfg| {
            routes::admin_routes(cfg, gateway.clone());
        })
        .with_context(|| format!("cannot bind the admin listener (admin.port {})", settings.admin_port()))?;

    let lifecycle = Lifecycle::new();
    limiter.spawn_cleanup(&lifecycle, settings.rate_limit.cleanup_interval());
    anonymous.spawn_cleanup(&lifecycle, settings.rate_limit.cleanup_interval());
    if dev_tokens {
        tracing::warn!("auth.dev_tokens is on: anyone can mint a token at POST /api/auth/dev-token");
    }
    tracing::info!(
        admin_port,
        seckill = %settings.upstreams.seckill,
        order = %settings.upstreams.order,
        stock = %settings.upstreams.stock,
        "gateway upstreams and admin listener"
    );
    Ok((Application::new(port, server, lifecycle).with_extra_server(admin), admin_port))
}
