//! Builds stock-service from its settings: database (created and migrated on first start),
//! pool, HTTP server.

use actix_web::web;
use diesel_migrations::{EmbeddedMigrations, embed_migrations};
use seckill_web::{Application, Lifecycle};

use crate::configuration::{STANDARD_PORT, Settings};
use crate::routes;

pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations");

pub async fn build(settings: Settings) -> anyhow::Result<Application> {
    let url = settings.database_url();
    seckill_db::ensure_database(&url).await?;
    seckill_db::run_migrations(&url, MIGRATIONS).await?;
    let pool = web::Data::new(seckill_db::pool(&settings.database, &url)?);
    let (server, port) = seckill_web::serve(&settings.http, STANDARD_PORT, move |cfg| {
        cfg.app_data(pool.clone()).configure(routes::configure);
    })?;
    tracing::info!(port, "stock-service listening");
    Ok(Application::new(port, server, Lifecycle::new()))
}
