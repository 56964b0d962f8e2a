//! Idempotent deduct and release, keyed by order key.
//!
//! Correctness lives in SQL: a batch locks its goods rows first (in id order, so two batches
//! cannot deadlock), claims each order key with an `INSERT ... ON CONFLICT DO NOTHING` into the
//! ledger, and takes stock with one aggregated `UPDATE` per sale. A key seen before deducts
//! nothing again; a `CHECK` keeps `stock_available` in range even if this code were wrong.

use std::collections::{BTreeMap, HashMap, HashSet};

use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use seckill_common::api::{DeductItemResult, DeductOutcome, DeductRequest, HeldResponse};
use uuid::Uuid;

use crate::schema::{goods, stock_ledger};

/// Most keys one batch call may carry.
pub const MAX_BATCH: usize = 1_000;

#[derive(Debug, Insertable)]
#[diesel(table_name = stock_ledger)]
struct NewLedgerRow {
    order_key: Uuid,
    goods_id: i64,
    quantity: i32,
}

/// Deducts every key of `items` that fits, in the order given, in one transaction. Items must
/// have a positive quantity (checked by the caller). A key repeated within `items` gets the
/// first occurrence's outcome.
pub async fn deduct_batch(
    conn: &mut AsyncPgConnection,
    items: &[DeductRequest],
) -> QueryResult<Vec<DeductItemResult>> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let items = items.to_vec();
    let outcomes = conn
        .transaction::<_, diesel::result::Error, _>(async move |conn| deduct_in_tx(conn, &items).await)
        .await?;
    Ok(outcomes)
}

async fn deduct_in_tx(
    conn: &mut AsyncPgConnection,
    items: &[DeductRequest],
) -> QueryResult<Vec<DeductItemResult>> {
    let mut goods_ids: Vec<i64> = items.iter().map(|i| i.goods_id.get()).collect();
    goods_ids.sort_unstable();
    goods_ids.dedup();
    // Lock the sales' rows first: every writer of these rows queues here, in id order.
    let mut available: BTreeMap<i64, i64> = goods::table
        .filter(goods::id.eq_any(&goods_ids))
        .order(goods::id)
        .select((goods::id, goods::stock_available))
        .for_update()
        .load::<(i64, i64)>(conn)
        .await?
        .into_iter()
        .collect();

    let mut outcome: HashMap<Uuid, DeductOutcome> = HashMap::with_capacity(items.len());
    let mut candidates = Vec::with_capacity(items.len());
    let mut distinct = HashSet::with_capacity(items.len());
    for item in items {
        if !distinct.insert(item.order_key) {
            continue;
        }
        if available.contains_key(&item.goods_id.get()) {
            candidates.push(NewLedgerRow {
                order_key: item.order_key,
                goods_id: item.goods_id.get(),
                quantity: item.quantity,
            });
        } else {
            outcome.insert(item.order_key, DeductOutcome::UnknownGoods);
        }
    }

    let claimed: Vec<Uuid> = if candidates.is_empty() {
        Vec::new()
    } else {
        diesel::insert_into(stock_ledger::table)
            .values(&candidates)
            .on_conflict_do_nothing()
            .returning(stock_ledger::order_key)
            .get_results(conn)
            .await?
    };
    let claimed: HashSet<Uuid> = claimed.into_iter().collect();

    // Keys seen before: deducted earlier (idempotent success) or deducted and since released.
    let seen: Vec<Uuid> = candidates.iter().map(|c| c.order_key).filter(|k| !claimed.contains(k)).collect();
    if !seen.is_empty() {
        let rows: Vec<(Uuid, bool)> = stock_ledger::table
            .filter(stock_ledger::order_key.eq_any(&seen))
            .select((stock_ledger::order_key, stock_ledger::released_at.is_not_null()))
            .load(conn)
            .await?;
        for (key, released) in rows {
            let o = if released { DeductOutcome::Released } else { DeductOutcome::Deducted };
            outcome.insert(key, o);
        }
    }

    // New keys take stock in request order while it lasts.
    let mut taken: BTreeMap<i64, i64> = BTreeMap::new();
    let mut refused = Vec::new();
    for c in candidates.iter().filter(|c| claimed.contains(&c.order_key)) {
        let left = available.get_mut(&c.goods_id).expect("locked above");
        let q = i64::from(c.quantity);
        if *left >= q {
            *left -= q;
            *taken.entry(c.goods_id).or_default() += q;
            outcome.insert(c.order_key, DeductOutcome::Deducted);
        } else {
            refused.push(c.order_key);
            outcome.insert(c.order_key, DeductOutcome::OutOfStock);
        }
    }
    for (goods_id, q) in taken {
        diesel::update(goods::table.find(goods_id))
            .set(goods::stock_available.eq(goods::stock_available - q))
            .execute(conn)
            .await?;
    }
    if !refused.is_empty() {
        diesel::delete(stock_ledger::table.filter(stock_ledger::order_key.eq_any(&refused)))
            .execute(conn)
            .await?;
    }

    Ok(items
        .iter()
        .map(|i| DeductItemResult {
            order_key: i.order_key,
            // Every key got an outcome above; a row that vanished between statements cannot
            // happen inside the transaction, but answering "out of stock" would be the safe side.
            outcome: outcome.get(&i.order_key).copied().unwrap_or(DeductOutcome::OutOfStock),
        })
        .collect())
}

/// Gives back the stock of `order_key` once. Returns false when the key is unknown or was
/// already released (a no-op).
pub async fn release(conn: &mut AsyncPgConnection, order_key: Uuid) -> QueryResult<bool> {
    Ok(!release_batch(conn, &[order_key]).await?.is_empty())
}

/// Gives back the stock of every key of `order_keys` not released yet, in one transaction:
/// one `UPDATE` marks their ledger rows, one `UPDATE` per sale adds their units back (in goods
/// id order, as a deduct locks them). Unknown, already released and repeated keys are no-ops.
/// Returns the keys released now. A second release of a key waits on its ledger row's lock,
/// then finds nothing to do. At most [`MAX_BATCH`] keys a call.
pub async fn release_batch(conn: &mut AsyncPgConnection, order_keys: &[Uuid]) -> QueryResult<Vec<Uuid>> {
    if order_keys.is_empty() {
        return Ok(Vec::new());
    }
    let order_keys = order_keys.to_vec();
    conn.transaction::<_, diesel::result::Error, _>(async move |conn| {
        let rows: Vec<(Uuid, i64, i32)> = diesel::update(
            stock_ledger::table
                .filter(stock_ledger::order_key.eq_any(&order_keys))
                .filter(stock_ledger::released_at.is_null()),
        )
        .set(stock_ledger::released_at.eq(diesel::dsl::now))
        .returning((stock_ledger::order_key, stock_ledger::goods_id, stock_ledger::quantity))
        .get_results(conn)
        .await?;
        let mut back: BTreeMap<i64, i64> = BTreeMap::new();
        for (_, goods_id, quantity) in &rows {
            *back.entry(*goods_id).or_default() += i64::from(*quantity);
        }
        for (goods_id, units) in back {
            diesel::update(goods::table.find(goods_id))
                .set(goods::stock_available.eq(goods::stock_available + units))
                .execute(conn)
                .await?;
        }
        Ok(rows.into_iter().map(|(key, _, _)| key).collect())
    })
    .await
}

/// Units held by deductions not released, per the ledger (for conservation checks).
pub async fn held(conn: &mut AsyncPgConnection, goods_id: i64) -> QueryResult<i64> {
    stock_ledger::table
        .filter(stock_ledger::goods_id.eq(goods_id))
        .filter(stock_ledger::released_at.is_null())
        .select(diesel::dsl::sum(stock_ledger::quantity))
        .first::<Option<i64>>(conn)
        .await
        .map(Option::unwrap_or_default)
}

/// A sale's counts at one instant (one repeatable-read transaction), and how many of
/// `order_keys` hold a unit (deducted, not released): what the audit and the repair of the
/// Redis data compare against. None when there is no such goods.
pub async fn counts(
    conn: &mut AsyncPgConnection,
    goods_id: i64,
    order_keys: &[Uuid],
) -> QueryResult<Option<HeldResponse>> {
    let order_keys = order_keys.to_vec();
    conn.build_transaction()
        .repeatable_read()
        .read_only()
        .run::<_, diesel::result::Error, _>(async move |conn| {
            let Some((stock_total, stock_available)) = goods::table
                .find(goods_id)
                .select((goods::stock_total, goods::stock_available))
                .first::<(i64, i64)>(conn)
                .await
                .optional()?
            else {
                return Ok(None);
            };
            let held_units = held(conn, goods_id).await?;
            let keys_held = if order_keys.is_empty() {
                0
            } else {
                stock_ledger::table
                    .filter(stock_ledger::order_key.eq_any(&order_keys))
                    .filter(stock_ledger::goods_id.eq(goods_id))
                    .filter(stock_ledger::released_at.is_null())
                    .count()
                    .get_result(conn)
                    .await?
            };
            Ok(Some(HeldResponse { stock_total, stock_available, held_units, keys_held }))
        })
        .await
}
