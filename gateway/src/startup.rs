//! Builds the gateway from its settings: checks them, creates the shared state once (JWT keys,
//! the upstream client, the rate limiter), binds the server and starts the background clean-up.

use std::sync::Arc;
use std::time::Duration;

use actix_web::web;
use seckill_web::{Application, Lifecycle};

use crate::auth::Authenticator;
use crate::configuration::Settings;
use crate::proxy::Proxy;
use crate::rate_limit::UserRateLimiter;
use crate::routes::{self, Gateway};

/// The gateway's standard port (`http.port` overrides it; 0 asks the OS, as tests do).
pub const STANDARD_PORT: u16 = 8080;

/// A bound, not yet running gateway. Fails, naming the key, on unusable settings (no JWT
/// secret, no upstream replica, a zero limit) and when the port cannot be bound.
pub async fn build(settings: Settings) -> anyhow::Result<Application> {
    settings.validate()?;
    let auth = Authenticator::new(settings.jwt_secret()?, Duration::from_secs(settings.dev_token.ttl_secs))?;
    let proxy = Proxy::new(&settings.upstreams)?;
    let limiter = Arc::new(UserRateLimiter::new(settings.quota()?));
    let gateway = web::Data::new(Gateway {
        auth,
        proxy,
        limiter: limiter.clone(),
        body_limit: settings.http.body_limit_bytes,
    });

    let dev_tokens = settings.auth.dev_tokens;
    let (server, port) = seckill_web::serve(&settings.http, STANDARD_PORT, move |cfg| {
        routes::configure(cfg, gateway.clone(), dev_tokens);
    })?;

    let lifecycle = Lifecycle::new();
    limiter.spawn_cleanup(&lifecycle, settings.rate_limit.cleanup_interval());
    if dev_tokens {
        tracing::warn!("auth.dev_tokens is on: anyone can mint a token at POST /api/auth/dev-token");
    }
    tracing::info!(
        port,
        seckill = %settings.upstreams.seckill,
        order = %settings.upstreams.order,
        stock = %settings.upstreams.stock,
        "gateway listening"
    );
    Ok(Application::new(port, server, lifecycle))
}
