//! HTTP bodies of the public API and of the internal calls between services.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::ids::{GoodsId, OrderId, UserId};

/// A sale's goods, as `GET /api/goods` shows them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Goods {
    pub id: GoodsId,
    pub name: String,
    pub price_cents: i64,
    pub seckill_price_cents: i64,
    pub stock_total: i64,
    pub stock_available: i64,
    pub start_at: DateTime<Utc>,
    pub end_at: DateTime<Utc>,
}

/// Where a sale stands at a given instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaleWindow {
    NotStarted,
    Open,
    Ended,
}

impl Goods {
    pub fn window_at(&self, now: DateTime<Utc>) -> SaleWindow {
        if now < self.start_at {
            SaleWindow::NotStarted
        } else if now >= self.end_at {
            SaleWindow::Ended
        } else {
            SaleWindow::Open
        }
    }
}

/// The body of `POST /api/admin/goods`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewGoods {
    pub name: String,
    pub price_cents: i64,
    pub seckill_price_cents: i64,
    pub stock_total: i64,
    pub start_at: DateTime<Utc>,
    pub end_at: DateTime<Utc>,
}

/// The most units one sale may hold: far above any flash sale, low enough that no sum overflows.
pub const MAX_STOCK: i64 = 100_000_000;

impl NewGoods {
    /// Checks the fields against each other; the message names the offending field.
    pub fn validate(&self) -> Result<(), String> {
        let name = self.name.trim();
        if name.is_empty() || name.chars().count() > 200 {
            return Err("name must have 1 to 200 characters".into());
        }
        if self.price_cents < 0 || self.seckill_price_cents < 0 {
            return Err("price_cents and seckill_price_cents must not be negative".into());
        }
        if self.seckill_price_cents > self.price_cents {
            return Err("seckill_price_cents must not exceed price_cents".into());
        }
        if !(0..=MAX_STOCK).contains(&self.stock_total) {
            return Err(format!("stock_total must be between 0 and {MAX_STOCK}"));
        }
        if self.end_at <= self.start_at {
            return Err("end_at must be after start_at".into());
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OrderStatus {
    Unpaid,
    Paid,
    Cancelled,
    Expired,
}

impl OrderStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Unpaid => "unpaid",
            Self::Paid => "paid",
            Self::Cancelled => "cancelled",
            Self::Expired => "expired",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "unpaid" => Self::Unpaid,
            "paid" => Self::Paid,
            "cancelled" => Self::Cancelled,
            "expired" => Self::Expired,
            _ => return None,
        })
    }
}

/// An order, as `GET /api/orders/{id}` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    pub id: OrderId,
    pub user_id: UserId,
    pub goods_id: GoodsId,
    pub price_cents: i64,
    pub status: OrderStatus,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// What a buyer's poll says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SeckillStatus {
    /// Accepted and waiting in the queue.
    Queued,
    /// An order exists: `order_id` names it.
    Success,
    /// The request ended without an order; its stock was given back.
    Failed,
    /// Nothing is known of this user in this sale.
    None,
}

/// The body of `GET /api/seckill/{goods_id}/result`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeckillResult {
    pub status: SeckillStatus,
    pub order_id: Option<OrderId>,
}

/// The 202 body of `POST /api/seckill/{goods_id}/orders`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderAccepted {
    pub status: SeckillStatus,
    pub request_id: Uuid,
}

/// The body of `POST /api/seckill/{goods_id}/token` and of the dev-token endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenResponse {
    pub token: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    #[default]
    User,
    Admin,
}

impl Role {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Admin => "admin",
        }
    }
}

/// The body of `POST /api/auth/dev-token`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DevTokenRequest {
    pub user_id: UserId,
    #[serde(default)]
    pub role: Role,
}

/// One key to deduct at stock-service (`POST /internal/stock/deduct`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeductRequest {
    pub order_key: Uuid,
    pub goods_id: GoodsId,
    #[serde(default = "one")]
    pub quantity: i32,
}

fn one() -> i32 {
    1
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeductResponse {
    pub deducted: bool,
}

/// Many keys at once (`POST /internal/stock/deduct-batch`): one transaction, one row lock per
/// sale, however many keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeductBatchRequest {
    pub items: Vec<DeductRequest>,
}

/// How one key of a batch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeductOutcome {
    /// Deducted now, or by an earlier call with the same key.
    Deducted,
    /// Not enough stock: nothing was taken for this key.
    OutOfStock,
    /// This key was deducted and then released: it is spent and deducts nothing again.
    Released,
    /// No such goods.
    UnknownGoods,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeductItemResult {
    pub order_key: Uuid,
    pub outcome: DeductOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeductBatchResponse {
    pub results: Vec<DeductItemResult>,
}

/// `POST /internal/stock/release`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseRequest {
    pub order_key: Uuid,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseResponse {
    /// False when the key was unknown or already released (a no-op).
    pub released: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn new_goods() -> NewGoods {
        NewGoods {
            name: "phone".into(),
            price_cents: 100,
            seckill_price_cents: 50,
            stock_total: 10,
            start_at: Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap(),
            end_at: Utc.with_ymd_and_hms(2026, 1, 2, 0, 0, 0).unwrap(),
        }
    }

    #[test]
    fn new_goods_validation_names_the_field() {
        assert!(new_goods().validate().is_ok());
        let mut g = new_goods();
        g.stock_total = -1;
        assert!(g.validate().unwrap_err().contains("stock_total"));
        let mut g = new_goods();
        g.end_at = g.start_at;
        assert!(g.validate().unwrap_err().contains("end_at"));
        let mut g = new_goods();
        g.seckill_price_cents = 101;
        assert!(g.validate().unwrap_err().contains("seckill_price_cents"));
        let mut g = new_goods();
        g.name = "  ".into();
        assert!(g.validate().unwrap_err().contains("name"));
    }

    #[test]
    fn deduct_quantity_defaults_to_one() {
        let r: DeductRequest =
            serde_json::from_str(r#"{"order_key":"67e55044-10b1-426f-9247-bb680e5fe0c8","goods_id":3}"#)
                .unwrap();
        assert_eq!(r.quantity, 1);
    }

    #[test]
    fn window_edges() {
        let g = Goods {
            id: GoodsId::new(1).unwrap(),
            name: "x".into(),
            price_cents: 1,
            seckill_price_cents: 1,
            stock_total: 1,
            stock_available: 1,
            start_at: Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap(),
            end_at: Utc.with_ymd_and_hms(2026, 1, 2, 0, 0, 0).unwrap(),
        };
        assert_eq!(g.window_at(g.start_at - chrono::Duration::seconds(1)), SaleWindow::NotStarted);
        assert_eq!(g.window_at(g.start_at), SaleWindow::Open);
        assert_eq!(g.window_at(g.end_at), SaleWindow::Ended);
    }
}
