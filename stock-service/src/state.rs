//! What the handlers share.

use seckill_db::PgPool;

use crate::goods::{LIST_CACHE_TTL, ListCache};

pub struct AppState {
    pub pool: PgPool,
    /// `GET /api/goods`'s answer, kept for [`LIST_CACHE_TTL`].
    pub goods_list: ListCache,
}

impl AppState {
    pub fn new(pool: PgPool) -> Self {
        Self { pool, goods_list: ListCache::new(LIST_CACHE_TTL) }
    }
}
