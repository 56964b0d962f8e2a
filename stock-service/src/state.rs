//! What the handlers share.

use seckill_db::PgPool;

use crate::goods::{FirstPages, LIST_CACHE_TTL};

pub struct AppState {
    pub pool: PgPool,
    /// `GET /api/goods`'s first pages, kept for [`LIST_CACHE_TTL`].
    pub goods_lists: FirstPages,
}

impl AppState {
    pub fn new(pool: PgPool) -> Self {
        Self { pool, goods_lists: FirstPages::new(LIST_CACHE_TTL) }
    }
}
