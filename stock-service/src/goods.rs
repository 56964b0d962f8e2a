//! Goods rows: reading, listing and creating sales.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use seckill_common::GoodsId;
use seckill_common::api::{Goods, NewGoods};

use crate::schema::goods;

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = goods, check_for_backend(diesel::pg::Pg))]
pub struct GoodsRow {
    pub id: i64,
    pub name: String,
    pub price_cents: i64,
    pub seckill_price_cents: i64,
    pub stock_total: i64,
    pub stock_available: i64,
    pub start_at: DateTime<Utc>,
    pub end_at: DateTime<Utc>,
}

#[derive(Debug, Insertable)]
#[diesel(table_name = goods)]
pub struct NewGoodsRow<'a> {
    pub name: &'a str,
    pub price_cents: i64,
    pub seckill_price_cents: i64,
    pub stock_total: i64,
    pub stock_available: i64,
    pub start_at: DateTime<Utc>,
    pub end_at: DateTime<Utc>,
}

impl<'a> From<&'a NewGoods> for NewGoodsRow<'a> {
    fn from(g: &'a NewGoods) -> Self {
        Self {
            name: g.name.trim(),
            price_cents: g.price_cents,
            seckill_price_cents: g.seckill_price_cents,
            stock_total: g.stock_total,
            stock_available: g.stock_total,
            start_at: g.start_at,
            end_at: g.end_at,
        }
    }
}

impl TryFrom<GoodsRow> for Goods {
    type Error = diesel::result::Error;

    fn try_from(row: GoodsRow) -> Result<Self, Self::Error> {
        let id = GoodsId::new(row.id).ok_or_else(|| {
            diesel::result::Error::DeserializationError(format!("goods id {} is not positive", row.id).into())
        })?;
        Ok(Goods {
            id,
            name: row.name,
            price_cents: row.price_cents,
            seckill_price_cents: row.seckill_price_cents,
            stock_total: row.stock_total,
            stock_available: row.stock_available,
            start_at: row.start_at,
            end_at: row.end_at,
        })
    }
}

/// At most this many goods are listed; a flash-sale shop runs a handful at a time.
pub const LIST_LIMIT: i64 = 1_000;

pub async fn list(conn: &mut AsyncPgConnection) -> QueryResult<Vec<Goods>> {
    goods::table
        .select(GoodsRow::as_select())
        .order(goods::id.desc())
        .limit(LIST_LIMIT)
        .load(conn)
        .await?
        .into_iter()
        .map(Goods::try_from)
        .collect()
}

pub async fn find(conn: &mut AsyncPgConnection, id: GoodsId) -> QueryResult<Option<Goods>> {
    goods::table
        .find(id.get())
        .select(GoodsRow::as_select())
        .first(conn)
        .await
        .optional()?
        .map(Goods::try_from)
        .transpose()
}

pub async fn insert(conn: &mut AsyncPgConnection, new: &NewGoods) -> QueryResult<Goods> {
    diesel::insert_into(goods::table)
        .values(NewGoodsRow::from(new))
        .returning(GoodsRow::as_returning())
        .get_result(conn)
        .await
        .and_then(Goods::try_from)
}
