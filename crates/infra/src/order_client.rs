//! The typed client of order-service's internal API, used by seckill-service when Redis has
//! lost what it knew: a buyer's active order for the result poll, every active order of a sale
//! for a rebuild, the count for the audit.

use std::sync::Arc;

use reqwest::Method;
use seckill_common::api::{ActiveOrder, OrderCount};
use seckill_common::config::UpstreamSettings;
use seckill_common::trust::{Peer, Trust};
use seckill_common::{GoodsId, UserId};

use crate::upstream::Upstream;
pub use crate::upstream::UpstreamError as OrderError;

/// Orders asked for in one page of a rebuild.
pub const PAGE: usize = 5_000;

pub struct OrderClient {
    upstream: Upstream,
}

impl OrderClient {
    pub fn new(settings: &UpstreamSettings, trust: Arc<Trust>) -> anyhow::Result<Self> {
        let upstream = Upstream::new(
            "order-service",
            trust,
            Peer::Order,
            &settings.order,
            "upstreams.order (SECKILL__UPSTREAMS__ORDER)",
            settings,
        )?;
        Ok(Self { upstream })
    }

    /// The buyer's active order of the sale, if any. One attempt: a buyer's poll that finds
    /// order-service down is a quick 503, and the buyer polls again.
    pub async fn active_of(&self, g: GoodsId, u: UserId) -> Result<Option<ActiveOrder>, OrderError> {
        let page: Vec<ActiveOrder> = self
            .upstream
            .call::<(), _>(
                Method::GET,
                &format!("/internal/orders/active?goods_id={g}&user_id={u}"),
                None,
                &[],
            )
            .await?;
        Ok(page.into_iter().next())
    }

    /// Every active order of the sale, a page at a time.
    pub async fn all_active(&self, g: GoodsId) -> Result<Vec<ActiveOrder>, OrderError> {
        let mut all = Vec::new();
        let mut after = 0;
        loop {
            let path = format!("/internal/orders/active?goods_id={g}&after_id={after}&limit={PAGE}");
            let page: Vec<ActiveOrder> = self.upstream.retried::<(), _>(Method::GET, &path, None).await?;
            let full = page.len() == PAGE;
            if let Some(last) = page.last() {
                after = last.order_id.get();
            }
            all.extend(page);
            if !full {
                return Ok(all);
            }
        }
    }

    pub async fn count_active(&self, g: GoodsId) -> Result<i64, OrderError> {
        let count: OrderCount = self
            .upstream
            .retried::<(), _>(Method::GET, &format!("/internal/orders/count?goods_id={g}"), None)
            .await?;
        Ok(count.active)
    }
}
