//! Turns a batch of accepted buy requests into orders: the heart of order-service.
//!
//! Per batch: requests that already have an order are answered again (a re-delivery); the
//! rest claim their Redis reservation (a reservation given back in its epoch means the request
//! was answered 503 or failed, and it must not become an order; one that Redis lost is served
//! all the same, against the authorities); the claimed ones deduct at stock-service in one
//! call, the deducted ones become orders in one insert, and every buyer's result is written.
//! Any dependency failure returns an error before the batch is acked: the messages come back,
//! and every step above is idempotent, so the retry finishes the work without doing any twice.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use dashmap::DashMap;
use lapin::BasicProperties;
use seckill_common::amqp::{AmqpNames, OrderExpiry, OrderRequest};
use seckill_common::api::{DeductOutcome, DeductRequest};
use seckill_common::trust::Peer;
use seckill_common::{GoodsId, OrderId};
use seckill_db::PgPool;
use seckill_infra::amqp::Publisher;
use seckill_infra::stock_client::StockClient;
use uuid::Uuid;

use crate::orders::{self, Existing, NewOrder};
use crate::results::{Claim, ResultStore};

/// How a batch ended, for logs and metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BatchReport {
    /// New orders written.
    pub ordered: usize,
    /// Requests that already had an order (re-delivered).
    pub repeated: usize,
    /// Requests ended as `failed`.
    pub failed: usize,
    /// Requests whose reservation had been given back: dropped.
    pub stale: usize,
    /// Requests whose reservation Redis had lost: served against the authorities.
    pub recovered: usize,
    /// Requests whose buyer already held another active order: answered with that order.
    pub superseded: usize,
    /// Late copies of requests whose order has been cancelled or expired since.
    pub ended: usize,
}

pub struct Fulfiller {
    pool: PgPool,
    stock: Arc<StockClient>,
    results: ResultStore,
    publisher: Arc<Publisher>,
    names: AmqpNames,
    /// Seckill price per sale: fixed for a sale's life, so asked once.
    prices: DashMap<GoodsId, Option<i64>>,
    ttl: Duration,
}

impl Fulfiller {
    pub fn new(
        pool: PgPool,
        stock: Arc<StockClient>,
        results: ResultStore,
        publisher: Arc<Publisher>,
        names: AmqpNames,
        ttl: Duration,
    ) -> Self {
        Self { pool, stock, results, publisher, names, prices: DashMap::new(), ttl }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub fn results(&self) -> &ResultStore {
        &self.results
    }

    /// The seckill price, or None when stock-service knows no such goods.
    async fn price(&self, g: GoodsId) -> anyhow::Result<Option<i64>> {
        if let Some(p) = self.prices.get(&g) {
            return Ok(*p);
        }
        let price = self.stock.goods(g).await?.map(|goods| goods.seckill_price_cents);
        self.prices.insert(g, price);
        Ok(price)
    }

    /// Fulfils `requests` (distinct request ids). An error means nothing may be acked.
    pub async fn fulfil(&self, requests: &[OrderRequest]) -> anyhow::Result<BatchReport> {
        let mut report = BatchReport::default();
        let request_ids: Vec<Uuid> = requests.iter().map(|r| r.request_id).collect();
        let existing: HashMap<Uuid, Existing> = {
            let mut conn = self.pool.get().await?;
            orders::existing(&mut conn, &request_ids).await?.into_iter().collect()
        };
        let mut succeeded: Vec<(OrderRequest, i64)> = Vec::new();
        let mut fresh = Vec::new();
        for r in requests {
            match existing.get(&r.request_id) {
                Some(e) if e.active => succeeded.push((*r, e.order_id)),
                // Cancelled or expired since: the request ended long ago, and its reservation
                // was given back; a late copy must not write anything.
                Some(_) => report.ended += 1,
                None => fresh.push(*r),
            }
        }
        report.repeated = succeeded.len();

        let claims = self.results.claim(&fresh).await?;
        let mut mine = Vec::with_capacity(fresh.len());
        for (r, claim) in fresh.into_iter().zip(claims) {
            match claim {
                Claim::Claimed => mine.push(r),
                Claim::Lost => {
                    report.recovered += 1;
                    tracing::info!(request_id = %r.request_id, user_id = %r.user_id, goods_id = %r.goods_id,
                        "redis lost this reservation: served against the authorities");
                    mine.push(r);
                }
                Claim::GivenBack => {
                    report.stale += 1;
                    tracing::warn!(request_id = %r.request_id, user_id = %r.user_id, goods_id = %r.goods_id,
                        "reservation was given back before this message arrived: dropped");
                }
            }
        }

        let mut failed: Vec<(OrderRequest, bool)> = Vec::new();
        let mut priced = Vec::with_capacity(mine.len());
        for r in mine {
            match self.price(r.goods_id).await? {
                Some(price) => priced.push((r, price)),
                None => failed.push((r, false)),
            }
        }

        let deducted = self.deduct(&priced, &mut failed).await?;
        let expires_at = Utc::now() + chrono::Duration::from_std(self.ttl)?;
        let new: Vec<NewOrder> = deducted
            .iter()
            .map(|(r, price)| NewOrder {
                request_id: r.request_id,
                user_id: r.user_id.get(),
                goods_id: r.goods_id.get(),
                price_cents: *price,
                expires_at,
            })
            .collect();
        let inserted: HashMap<Uuid, i64> = {
            let mut conn = self.pool.get().await?;
            orders::insert_batch(&mut conn, &new).await?.into_iter().collect()
        };
        let mut conflicted = Vec::new();
        for (r, _) in &deducted {
            match inserted.get(&r.request_id) {
                Some(order_id) => {
                    succeeded.push((*r, *order_id));
                    report.ordered += 1;
                }
                None => conflicted.push(*r),
            }
        }
        let superseded = self.settle_conflicts(conflicted, &mut succeeded, &mut failed, &mut report).await?;

        // The expiry timers first: a buyer told `success` has an order that will expire. A
        // re-delivered request gets its timer again; a second expiry message is harmless.
        self.schedule_expiries(&succeeded).await?;
        self.results.succeed(&succeeded).await?;
        self.results.supersede(&superseded).await?;
        self.results.fail(&failed).await?;
        report.failed = failed.len();
        Ok(report)
    }

    /// One message for the batch's orders into the delay queue (the queue's TTL is the timer).
    async fn schedule_expiries(&self, orders: &[(OrderRequest, i64)]) -> anyhow::Result<()> {
        if orders.is_empty() {
            return Ok(());
        }
        let ids = orders
            .iter()
            .map(|(_, id)| OrderId::new(*id).ok_or_else(|| anyhow::anyhow!("order id {id}")))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let body = serde_json::to_vec(&OrderExpiry::new(ids))?;
        let properties = BasicProperties::default().with_content_type("application/json".into());
        self.publisher
            .publish(Peer::Order, &self.names.order_delay_queue(self.ttl.as_secs()), &body, properties)
            .await?;
        Ok(())
    }

    /// A request that ran out of tries: if it has no order, its deduction (if any) is released
    /// and its reservation given back, and the buyer sees `failed`; if it has one, the buyer is
    /// told so. Best effort: the message goes to the dead letters either way, with the log.
    pub async fn compensate(&self, r: &OrderRequest) -> anyhow::Result<()> {
        let existing = {
            let mut conn = self.pool.get().await?;
            orders::existing(&mut conn, &[r.request_id]).await?
        };
        if let Some((_, e)) = existing.first() {
            return if e.active { self.results.succeed(&[(*r, e.order_id)]).await } else { Ok(()) };
        }
        self.stock.release(r.request_id).await?;
        self.results.fail(&[(*r, true)]).await?;
        tracing::warn!(request_id = %r.request_id, "request out of tries: stock and reservation given back");
        Ok(())
    }

    /// Deducts the priced requests in one call. Returns the deducted ones; the others are
    /// added to `failed`, with their unit given back to Redis only where the authority still
    /// has it.
    async fn deduct(
        &self,
        priced: &[(OrderRequest, i64)],
        failed: &mut Vec<(OrderRequest, bool)>,
    ) -> anyhow::Result<Vec<(OrderRequest, i64)>> {
        if priced.is_empty() {
            return Ok(Vec::new());
        }
        let items = priced
            .iter()
            .map(|(r, _)| DeductRequest { order_key: r.request_id, goods_id: r.goods_id, quantity: 1 })
            .collect();
        let outcomes: HashMap<Uuid, DeductOutcome> =
            self.stock.deduct_batch(items).await?.into_iter().map(|o| (o.order_key, o.outcome)).collect();
        let mut deducted = Vec::with_capacity(priced.len());
        for (r, price) in priced {
            match outcomes.get(&r.request_id) {
                Some(DeductOutcome::Deducted) => deducted.push((*r, *price)),
                // Redis reserved a unit the authority does not have (Redis was ahead of it):
                // the buyer fails, and Redis keeps the lower count.
                Some(DeductOutcome::OutOfStock | DeductOutcome::UnknownGoods) | None => {
                    tracing::warn!(request_id = %r.request_id, goods_id = %r.goods_id, "authority refused the deduction");
                    failed.push((*r, false));
                }
                // Deducted by an earlier try and released since (a conflict below): the unit
                // is back at the authority, so it goes back to Redis too.
                Some(DeductOutcome::Released) => failed.push((*r, true)),
            }
        }
        Ok(deducted)
    }

    /// Deducted requests whose insert was skipped: either another consumer wrote the order
    /// meanwhile (answered as success), or the user already holds an active order of the sale
    /// (the deduction is released and the buyer is answered with that order; this happens when
    /// Redis lost the first request's reservation and the buyer was accepted again). Returns
    /// the latter: (request, the holding order's request id, its order id).
    async fn settle_conflicts(
        &self,
        conflicted: Vec<OrderRequest>,
        succeeded: &mut Vec<(OrderRequest, i64)>,
        failed: &mut Vec<(OrderRequest, bool)>,
        report: &mut BatchReport,
    ) -> anyhow::Result<Vec<(OrderRequest, Uuid, i64)>> {
        let mut superseded = Vec::new();
        if conflicted.is_empty() {
            return Ok(superseded);
        }
        let ids: Vec<Uuid> = conflicted.iter().map(|r| r.request_id).collect();
        let mut holders = Vec::new();
        {
            let mut conn = self.pool.get().await?;
            let now_existing: HashMap<Uuid, Existing> =
                orders::existing(&mut conn, &ids).await?.into_iter().collect();
            for r in conflicted {
                match now_existing.get(&r.request_id) {
                    Some(e) => {
                        succeeded.push((r, e.order_id));
                        report.repeated += 1;
                    }
                    None => {
                        holders.push((r, orders::active_of_user(&mut conn, r.goods_id, r.user_id).await?))
                    }
                }
            }
        }
        // The database connection is back in the pool before the calls to stock-service.
        for (r, holder) in holders {
            self.stock.release(r.request_id).await?;
            match holder {
                Some((order_id, holder_request)) => {
                    tracing::warn!(request_id = %r.request_id, user_id = %r.user_id, goods_id = %r.goods_id, order_id,
                        "user already holds an active order of this sale: deduction released, answered with it");
                    superseded.push((r, holder_request, order_id));
                    report.superseded += 1;
                }
                // The holding order ended meanwhile: this request fails, the user may try again.
                None => failed.push((r, true)),
            }
        }
        Ok(superseded)
    }
}

/// True when the error says a dependency is down (a lost connection, a pool or call timeout, a
/// 5xx after retries): the messages are not at fault, so their tries are not counted.
pub fn is_outage(e: &anyhow::Error) -> bool {
    seckill_db::is_outage(e) || seckill_infra::is_outage(e)
}
