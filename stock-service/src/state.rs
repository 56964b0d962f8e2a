//! What the handlers share.

use seckill_db::{Database, PgPool};

use crate::goods::{LIST_CACHE_TTL, ListCache};

pub struct AppState {
    pub pool: PgPool,
    /// For `/readyz`: migrated yet, and answering.
    pub database: Database,
    /// `GET /api/goods`'s answer, kept for [`LIST_CACHE_TTL`].
    pub goods_list: ListCache,
}

impl AppState {
    pub fn new(database: Database) -> Self {
        Self { pool: database.pool().clone(), database, goods_list: ListCache::new(LIST_CACHE_TTL) }
    }
}
