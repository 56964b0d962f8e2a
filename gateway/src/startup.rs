//! Builds the gateway from its settings: creates the shared state once (JWT keys,
//! the upstream client, the rate limiters), binds the public server and the admin listener
//! (metrics, detailed readiness) and starts the background clean-up.

use std::sync::Arc;
use std::time::Duration;

use actix_web::web;
use anyhow::Context;
use seckill_common::config::ServiceSettings;
use seckill_common::keys::RedisKeys;
use seckill_common::trust::{Peer, Trust};
use seckill_infra::redis::{Redis, RedisUse};
use seckill_web::shed::InFlight;
use seckill_web::{Application, Door, Lifecycle, Service};

use crate::auth::Authenticator;
use crate::closed::ClosedSales;
use crate::configuration::{STANDARD_PORT, Settings};
use crate::proxy::Proxy;
use crate::push::{self, Push};
use crate::rate_limit::Limits;
use crate::rate_limit::shared::{self, SharedLimits};
use crate::rooms::{self, RoomMirrors};
use crate::routes;
use crate::state::{Gateway, LastReadiness};
use crate::storefront::Storefront;

/// What the gateway runs on Redis: the shared rate limit's script (`rate_limit::shared`), the
/// stream tickets' one-use mark (SET) and the notice channel it listens on (`push`). Its ACL
/// user allows exactly these (crates/deploy-check).
pub const REDIS_USE: RedisUse = RedisUse {
    scripts: shared::REDIS_USE.scripts,
    commands: &["set", "subscribe", "unsubscribe"],
    channels: true,
};

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
    // One connection for the shared limits and the stream tickets (lazy: the first call connects).
    let redis = seckill_infra::redis::connect(&settings.redis).context("redis.url")?;
    let keys = RedisKeys::new(settings.redis.key_prefix.clone());
    let limits =
        Arc::new(Limits::new(|class| settings.quota(class), shared_limits(&settings, &redis, &keys))?);
    let storefront = Storefront::new(&settings.storefront, settings.auth.dev_tokens)?;
    let lifecycle = Lifecycle::new();
    let push = Arc::new(Push::new(
        settings.push.clone(),
        lifecycle.draining.clone(),
        settings.jwt_secret()?,
        redis,
        &settings.redis,
        keys,
    )?);
    let gateway = web::Data::new(Gateway {
        auth,
        proxy,
        limits: limits.clone(),
        proxy_hops: settings.rate_limit.trusted_proxy_hops,
        body_limit: settings.http.body_limit_bytes,
        last_readiness: LastReadiness::default(),
        closed: ClosedSales::new(settings.sold_out.remember()),
        buys_in_flight: InFlight::new(settings.overload.limits()?, "gateway", "gateway_requests_shed_total"),
        storefront,
        rooms: RoomMirrors::new(settings.room.key()?),
        push: push.clone(),
    });

    let dev_tokens = settings.auth.dev_tokens;
    let public = gateway.clone();
    let gateway_for_rooms = gateway.clone();
    let (server, port) = seckill_web::serve(&settings.http, STANDARD_PORT, Door::Public, move |cfg| {
        routes::configure(cfg, public.clone(), dev_tokens);
    })?;
    let (admin, admin_port) = seckill_web::admin::serve_admin(
        settings.admin_host(),
        settings.admin_port(),
        &settings.http,
        move |cfg| {
            routes::admin_routes(cfg, gateway.clone());
        },
    )
    .with_context(|| format!("cannot bind the admin listener (admin.port {})", settings.admin_port()))?;

    limits.spawn_cleanup(&lifecycle, settings.rate_limit.cleanup_interval());
    rooms::spawn_reader(&lifecycle, gateway_for_rooms);
    push::spawn_channel(&lifecycle, push);
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

/// The shared buckets, when `rate_limit.shared`. Nothing is connected yet: the first request
/// connects, and a Redis that does not answer leaves each replica limiting alone (logged),
/// so the gateway starts and serves without it.
fn shared_limits(settings: &Settings, redis: &Redis, keys: &RedisKeys) -> Option<SharedLimits> {
    if !settings.rate_limit.shared {
        tracing::warn!("rate_limit.shared is off: each gateway replica limits alone");
        return None;
    }
    Some(SharedLimits::new(
        redis.clone(),
        keys.clone(),
        settings.rate_limit.lease,
        Duration::from_millis(settings.rate_limit.shared_timeout_ms),
    ))
}
