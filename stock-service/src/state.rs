//! What the handlers share.

use seckill_db::{Database, PgPool};

use crate::goods::{FirstPages, LIST_CACHE_TTL};

pub struct AppState {
    pub pool: PgPool,
    /// For `/readyz`: migrated yet, and answering.
    pub database: Database,
    /// `GET /api/goods`'s first pages, kept for [`LIST_CACHE_TTL`].
    pub goods_lists: FirstPages,
}

impl AppState {
    pub fn new(database: Database) -> Self {
        Self { pool: database.pool().clone(), database, goods_lists: FirstPages::new(LIST_CACHE_TTL) }
    }
}
