//! Order rows: batch insert for the consumer, lookups for the API.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use seckill_common::api::{ActiveOrder, Order, OrderStatus};
use seckill_common::{GoodsId, OrderId, UserId};
use uuid::Uuid;

use crate::schema::orders;

#[derive(Debug, Clone, Queryable, QueryableByName, Selectable)]
#[diesel(table_name = orders, check_for_backend(diesel::pg::Pg))]
pub struct OrderRow {
    pub id: i64,
    pub request_id: Uuid,
    pub user_id: i64,
    pub goods_id: i64,
    pub price_cents: i64,
    pub status: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Insertable)]
#[diesel(table_name = orders)]
pub struct NewOrder {
    pub request_id: Uuid,
    pub user_id: i64,
    pub goods_id: i64,
    pub price_cents: i64,
    pub expires_at: DateTime<Utc>,
}

/// A stored value the types refuse: the row is corrupt (a 500, never a client's fault).
fn corrupt(what: String) -> diesel::result::Error {
    diesel::result::Error::DeserializationError(what.into())
}

/// A stored id as its type, which takes positive values only.
fn id<T>(new: fn(i64) -> Option<T>, what: &str, value: i64) -> QueryResult<T> {
    new(value).ok_or_else(|| corrupt(format!("{what} {value} is not positive")))
}

impl TryFrom<OrderRow> for Order {
    type Error = diesel::result::Error;

    fn try_from(row: OrderRow) -> Result<Self, Self::Error> {
        Ok(Order {
            id: id(OrderId::new, "order id", row.id)?,
            user_id: id(UserId::new, "user id", row.user_id)?,
            goods_id: id(GoodsId::new, "goods id", row.goods_id)?,
            price_cents: row.price_cents,
            status: OrderStatus::parse(&row.status)
                .ok_or_else(|| corrupt(format!("status {}", row.status)))?,
            created_at: row.created_at,
            expires_at: row.expires_at,
        })
    }
}

/// An active order as seckill-service reads it.
pub fn active_order(order_id: i64, user_id: i64, request_id: Uuid) -> QueryResult<ActiveOrder> {
    Ok(ActiveOrder {
        order_id: id(OrderId::new, "order id", order_id)?,
        user_id: id(UserId::new, "user id", user_id)?,
        request_id,
    })
}

/// The statuses of an active order: the one a user may hold per sale.
const ACTIVE: [&str; 2] = [OrderStatus::Unpaid.as_str(), OrderStatus::Paid.as_str()];

/// An order already written for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Existing {
    pub order_id: i64,
    /// Unpaid or paid; false once cancelled or expired (the request has ended for good).
    pub active: bool,
}

/// Orders already written for these requests: request id -> the order.
pub async fn existing(
    conn: &mut AsyncPgConnection,
    request_ids: &[Uuid],
) -> QueryResult<Vec<(Uuid, Existing)>> {
    if request_ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<(Uuid, i64, String)> = orders::table
        .filter(orders::request_id.eq_any(request_ids))
        .select((orders::request_id, orders::id, orders::status))
        .load(conn)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(r, order_id, status)| (r, Existing { order_id, active: ACTIVE.contains(&status.as_str()) }))
        .collect())
}

/// The user's active order of a sale, if any: (order id, request id).
pub async fn active_of_user(
    conn: &mut AsyncPgConnection,
    goods: GoodsId,
    user: UserId,
) -> QueryResult<Option<(i64, Uuid)>> {
    orders::table
        .filter(orders::goods_id.eq(goods.get()))
        .filter(orders::user_id.eq(user.get()))
        .filter(orders::status.eq_any(ACTIVE))
        .select((orders::id, orders::request_id))
        .first(conn)
        .await
        .optional()
}

/// A page of a sale's active orders, by order id after `after_id`.
pub async fn active_of_sale(
    conn: &mut AsyncPgConnection,
    goods: GoodsId,
    after_id: i64,
    limit: i64,
) -> QueryResult<Vec<ActiveOrder>> {
    let rows: Vec<(i64, i64, Uuid)> = orders::table
        .filter(orders::goods_id.eq(goods.get()))
        .filter(orders::status.eq_any(ACTIVE))
        .filter(orders::id.gt(after_id))
        .order(orders::id)
        .limit(limit)
        .select((orders::id, orders::user_id, orders::request_id))
        .load(conn)
        .await?;
    rows.into_iter()
        .map(|(order_id, user_id, request_id)| active_order(order_id, user_id, request_id))
        .collect()
}

pub async fn count_active(conn: &mut AsyncPgConnection, goods: GoodsId) -> QueryResult<i64> {
    orders::table
        .filter(orders::goods_id.eq(goods.get()))
        .filter(orders::status.eq_any(ACTIVE))
        .count()
        .get_result(conn)
        .await
}

/// Inserts all in one statement; a row that conflicts (its request already has an order, or
/// the user already holds an active order of that sale) is skipped. Returns what was inserted:
/// request id -> order id.
pub async fn insert_batch(conn: &mut AsyncPgConnection, new: &[NewOrder]) -> QueryResult<Vec<(Uuid, i64)>> {
    if new.is_empty() {
        return Ok(Vec::new());
    }
    diesel::insert_into(orders::table)
        .values(new)
        .on_conflict_do_nothing()
        .returning((orders::request_id, orders::id))
        .get_results(conn)
        .await
}

/// At most this many orders are listed, newest first.
pub const LIST_LIMIT: i64 = 100;

pub async fn list_for_user(conn: &mut AsyncPgConnection, user: UserId) -> QueryResult<Vec<Order>> {
    orders::table
        .filter(orders::user_id.eq(user.get()))
        .order(orders::id.desc())
        .limit(LIST_LIMIT)
        .select(OrderRow::as_select())
        .load(conn)
        .await?
        .into_iter()
        .map(Order::try_from)
        .collect()
}

/// The order if it exists and belongs to `user`.
pub async fn find_for_user(
    conn: &mut AsyncPgConnection,
    id: OrderId,
    user: UserId,
) -> QueryResult<Option<Order>> {
    orders::table
        .filter(orders::id.eq(id.get()))
        .filter(orders::user_id.eq(user.get()))
        .select(OrderRow::as_select())
        .first(conn)
        .await
        .optional()?
        .map(Order::try_from)
        .transpose()
}

/// The conditional updates of an order's life. Each is ONE statement whose `WHERE` names the
/// state it leaves, so a pay racing an expiry or a cancel has exactly one winner.
pub mod transition {
    use super::*;

    /// What a buyer may do to an unpaid order of theirs.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Change {
        /// unpaid -> paid, only before it expires.
        Pay,
        /// unpaid -> cancelled, at any time.
        Cancel,
    }

    impl Change {
        fn to(self) -> OrderStatus {
            match self {
                Change::Pay => OrderStatus::Paid,
                Change::Cancel => OrderStatus::Cancelled,
            }
        }
    }

    /// Makes the owner's change to an unpaid order; `None` when it is not theirs, not unpaid
    /// or (to pay) past its payment deadline.
    pub async fn by_owner(
        conn: &mut AsyncPgConnection,
        id: OrderId,
        user: UserId,
        change: Change,
    ) -> QueryResult<Option<OrderRow>> {
        // A cancel is not bound to the deadline: true for it, bound as a parameter.
        let any_time = change != Change::Pay;
        diesel::update(
            orders::table
                .filter(orders::id.eq(id.get()))
                .filter(orders::user_id.eq(user.get()))
                .filter(orders::status.eq(OrderStatus::Unpaid.as_str()))
                .filter(
                    orders::expires_at
                        .gt(diesel::dsl::now)
                        .or(any_time.into_sql::<diesel::sql_types::Bool>()),
                ),
        )
        .set((orders::status.eq(change.to().as_str()), orders::updated_at.eq(diesel::dsl::now)))
        .returning(OrderRow::as_returning())
        .get_result(conn)
        .await
        .optional()
    }

    /// unpaid -> expired (their delay ran out), for those of `ids` still unpaid. Their releases
    /// are not owed to the sweeper (`release_sent_at` is set in the same statement): the expiry
    /// message in hand carries them, unacked until the broker confirmed them, and a copy of it
    /// that comes back sends them again ([`expired_among`]). One write of each row, not two.
    pub async fn expire(conn: &mut AsyncPgConnection, ids: &[OrderId]) -> QueryResult<Vec<OrderRow>> {
        let ids: Vec<i64> = ids.iter().map(|id| id.get()).collect();
        diesel::update(
            orders::table
                .filter(orders::id.eq_any(ids))
                .filter(orders::status.eq(OrderStatus::Unpaid.as_str())),
        )
        .set((
            orders::status.eq(OrderStatus::Expired.as_str()),
            orders::updated_at.eq(diesel::dsl::now),
            orders::release_sent_at.eq(diesel::dsl::now),
        ))
        .returning(OrderRow::as_returning())
        .get_results(conn)
        .await
    }

    /// Those of `ids` already expired: by an earlier try of the same expiry message that may
    /// have died before its releases were confirmed, or by the sweeper.
    pub async fn expired_among(conn: &mut AsyncPgConnection, ids: &[i64]) -> QueryResult<Vec<OrderRow>> {
        orders::table
            .filter(orders::id.eq_any(ids))
            .filter(orders::status.eq(OrderStatus::Expired.as_str()))
            .select(OrderRow::as_select())
            .load(conn)
            .await
    }

    /// The safety net behind the delay queue: unpaid orders `grace` past their expiry. Rows
    /// another sweeper (replica) holds are skipped, not waited for.
    pub async fn expire_overdue(
        conn: &mut AsyncPgConnection,
        grace: chrono::Duration,
        limit: i64,
    ) -> QueryResult<Vec<OrderRow>> {
        diesel::sql_query(
            "UPDATE orders SET status = 'expired', updated_at = now() \
             WHERE status = 'unpaid' AND id IN ( \
                 SELECT id FROM orders WHERE status = 'unpaid' AND expires_at < $1 \
                 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED) \
             RETURNING id, request_id, user_id, goods_id, price_cents, status, created_at, expires_at",
        )
        .bind::<diesel::sql_types::Timestamptz, _>(Utc::now() - grace)
        .bind::<diesel::sql_types::BigInt, _>(limit)
        .load(conn)
        .await
    }

    /// Cancelled or expired orders whose release is still owed, older than `settle`.
    pub async fn releases_owed(
        conn: &mut AsyncPgConnection,
        settle: chrono::Duration,
        limit: i64,
    ) -> QueryResult<Vec<OrderRow>> {
        orders::table
            .filter(orders::status.eq_any([OrderStatus::Cancelled.as_str(), OrderStatus::Expired.as_str()]))
            .filter(orders::release_sent_at.is_null())
            .filter(orders::updated_at.lt(Utc::now() - settle))
            .order(orders::updated_at)
            .limit(limit)
            .select(OrderRow::as_select())
            .load(conn)
            .await
    }

    pub async fn mark_release_sent(conn: &mut AsyncPgConnection, ids: &[i64]) -> QueryResult<usize> {
        diesel::update(orders::table.filter(orders::id.eq_any(ids)))
            .set(orders::release_sent_at.eq(diesel::dsl::now))
            .execute(conn)
            .await
    }

    /// Hands the releases of `ids` to the sweeper: their expiry message failed to send them
    /// and may not come back (out of tries, it goes to the dead letters).
    pub async fn owe_release(conn: &mut AsyncPgConnection, ids: &[i64]) -> QueryResult<usize> {
        diesel::update(orders::table.filter(orders::id.eq_any(ids)))
            .set(orders::release_sent_at.eq(None::<DateTime<Utc>>))
            .execute(conn)
            .await
    }
}
