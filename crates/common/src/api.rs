//! HTTP bodies of the public API and of the internal calls between services.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::ids::{GoodsId, OrderId, UserId};
use crate::room::WaitingRoom;
use crate::sale::{NameError, SaleName, SaleTime};

/// A sale's goods, as `GET /api/goods` shows them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Goods {
    pub id: GoodsId,
    /// What is on sale.
    pub name: String,
    /// The usual price, in cents.
    pub price_cents: i64,
    /// The sale price, in cents.
    pub seckill_price_cents: i64,
    /// Units put on sale.
    pub stock_total: i64,
    /// Units the stock ledger has not given to an order: a buy accepted a moment ago counts
    /// once its order is written.
    pub stock_available: i64,
    /// When buying opens.
    pub start_at: DateTime<Utc>,
    /// When buying closes: the sale is open from `start_at` up to, not including, `end_at`.
    pub end_at: DateTime<Utc>,
    /// Redis keys the sale's stock is split over (1 to [`MAX_BUCKETS`]; see [`NewGoods::buckets`]).
    #[serde(default = "one_bucket")]
    #[schema(minimum = 1, maximum = 8)]
    pub buckets: u8,
    /// The sale's waiting room, or null when buyers go straight to the buy routes.
    #[serde(default)]
    pub waiting_room: Option<WaitingRoom>,
}

/// The most stock buckets a sale may have.
pub const MAX_BUCKETS: u8 = 8;

fn one_bucket() -> u8 {
    1
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

/// The body of `POST /api/admin/goods` (and of stock-service's `POST /internal/stock/goods`).
/// Read as sent; [`NewGoods::validate`] makes it a [`ValidGoods`], the only form anything is
/// written from. The rules are [`crate::sale`]'s, and the schema below states them.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewGoods {
    /// What is on sale: printable text of one line, at most 200 characters, not only spaces
    /// (leading and trailing spaces are dropped). No control characters (C0, DEL, C1: tab and
    /// line feed among them), no bidirectional marks, embeddings, overrides or isolates, no line
    /// or paragraph separators, no invisible formatting characters (zero width space, word
    /// joiner, byte order mark); zero width joiners, variation selectors and tags are allowed
    /// (emoji need them).
    // The pattern is `seckill_common::sale::NAME_PATTERN` (an attribute takes a literal only;
    // a test holds the two equal).
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = r"^[^\u0000-\u001F\u007F-\u009F\u061C\u200B\u200E\u200F\u2028-\u202E\u2060-\u206F\uFEFF\uFFF9-\uFFFB]*[^\s\u0000-\u001F\u007F-\u009F\u061C\u200B\u200E\u200F\u2028-\u202E\u2060-\u206F\uFEFF\uFFF9-\uFFFB][^\u0000-\u001F\u007F-\u009F\u061C\u200B\u200E\u200F\u2028-\u202E\u2060-\u206F\uFEFF\uFFF9-\uFFFB]*$"
    )]
    pub name: String,
    /// The usual price, in cents.
    #[schema(minimum = 0)]
    pub price_cents: i64,
    /// The sale price, in cents: at most `price_cents`.
    #[schema(minimum = 0)]
    pub seckill_price_cents: i64,
    /// Units to sell.
    #[schema(minimum = 0, maximum = 100_000_000)]
    pub stock_total: i64,
    /// When buying opens: an RFC 3339 time from 1970-01-01T00:00:00Z to
    /// 9999-12-31T23:59:59.999999Z (the instant, in UTC; an offset is at most ±23:59).
    #[serde(deserialize_with = "start_at")]
    pub start_at: DateTime<Utc>,
    /// When buying closes: after `start_at`, and no later than 9999-12-31T23:59:59.999999Z.
    #[serde(deserialize_with = "end_at")]
    pub end_at: DateTime<Utc>,
    /// Redis keys to split the stock over, 1 to 8 (default 1). Each buyer is served by one of
    /// them, chosen from the user id; on a Redis Cluster they sit in different slots, so a sale
    /// too hot for one shard spreads over several. A bucket that runs dry is given units by
    /// the others before any buyer is told `SOLD_OUT`.
    #[serde(default = "one_bucket")]
    #[schema(minimum = 1, maximum = 8)]
    pub buckets: u8,
    /// A waiting room in front of the sale (default none): buyers join it, get a place (drawn
    /// at random at the opening for all who joined before), and are admitted to buy in order at
    /// the room's rate. Only for a sale that has not started.
    #[serde(default)]
    pub waiting_room: Option<WaitingRoom>,
}

/// The most units one sale may hold: far above any flash sale, low enough that no sum overflows.
pub const MAX_STOCK: i64 = 100_000_000;

/// `start_at` and `end_at` read as RFC 3339, each error naming its field (serde's own say only
/// where in the body it failed).
fn start_at<'de, D: serde::Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
    rfc3339_field("start_at", d)
}

fn end_at<'de, D: serde::Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
    rfc3339_field("end_at", d)
}

fn rfc3339_field<'de, D: serde::Deserializer<'de>>(
    field: &'static str,
    d: D,
) -> Result<DateTime<Utc>, D::Error> {
    d.deserialize_str(Rfc3339Field(field))
}

/// Reads a string as an RFC 3339 time; anything else is refused naming the field too
/// ("invalid type: integer `5`, expected start_at as an RFC 3339 time").
struct Rfc3339Field(&'static str);

impl serde::de::Visitor<'_> for Rfc3339Field {
    type Value = DateTime<Utc>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{} as an RFC 3339 time", self.0)
    }

    fn visit_str<E: serde::de::Error>(self, raw: &str) -> Result<Self::Value, E> {
        crate::sale::parse_rfc3339(self.0, raw).map_err(E::custom)
    }
}

/// Why a [`NewGoods`] was refused: the message starts with the field it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidGoods(String);

impl From<NameError> for InvalidGoods {
    fn from(e: NameError) -> Self {
        Self(e.to_string())
    }
}

/// A [`NewGoods`] every rule holds for, its name trimmed: what stock-service writes.
#[derive(Debug, Clone)]
pub struct ValidGoods(NewGoods);

impl std::ops::Deref for ValidGoods {
    type Target = NewGoods;
    fn deref(&self) -> &NewGoods {
        &self.0
    }
}

impl NewGoods {
    /// Checks each field, then the fields against each other, before anything is written: a
    /// value the database could not store is refused here as the client's mistake.
    pub fn validate(&self) -> Result<ValidGoods, InvalidGoods> {
        self.validate_at(Utc::now())
    }

    /// [`NewGoods::validate`] as of `now` (a waiting room needs a sale not started).
    pub fn validate_at(&self, now: DateTime<Utc>) -> Result<ValidGoods, InvalidGoods> {
        let name = SaleName::parse(&self.name)?;
        if self.price_cents < 0 || self.seckill_price_cents < 0 {
            return Err(InvalidGoods("price_cents and seckill_price_cents must not be negative".into()));
        }
        if self.seckill_price_cents > self.price_cents {
            return Err(InvalidGoods("seckill_price_cents must not exceed price_cents".into()));
        }
        if !(0..=MAX_STOCK).contains(&self.stock_total) {
            return Err(InvalidGoods(format!("stock_total must be between 0 and {MAX_STOCK}")));
        }
        let start_at = SaleTime::new(self.start_at).map_err(|e| InvalidGoods(format!("start_at {e}")))?;
        let end_at = SaleTime::new(self.end_at).map_err(|e| InvalidGoods(format!("end_at {e}")))?;
        if end_at <= start_at {
            return Err(InvalidGoods("end_at must be after start_at".into()));
        }
        if !(1..=MAX_BUCKETS).contains(&self.buckets) {
            return Err(InvalidGoods(format!("buckets must be between 1 and {MAX_BUCKETS}")));
        }
        if let Some(room) = &self.waiting_room {
            if let Some(why) = room.invalid() {
                return Err(InvalidGoods(why));
            }
            if self.start_at <= now {
                return Err(InvalidGoods(
                    "waiting_room needs a sale that has not started: start_at is past".into(),
                ));
            }
        }
        Ok(ValidGoods(NewGoods { name: name.to_string(), ..self.clone() }))
    }
}

/// Where an order stands: `unpaid` (its owner may pay or cancel it until `expires_at`),
/// `paid`, `cancelled` by its owner, or `expired` (unpaid past its deadline). Only an unpaid
/// order changes, and only once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Order {
    pub id: OrderId,
    /// The buyer.
    pub user_id: UserId,
    pub goods_id: GoodsId,
    /// What the buyer pays, in cents: the sale price when the order was written.
    pub price_cents: i64,
    pub status: OrderStatus,
    pub created_at: DateTime<Utc>,
    /// An order still unpaid at this instant expires, and its unit goes back on sale.
    pub expires_at: DateTime<Utc>,
}

/// What a buyer's poll says: `queued` (accepted, waiting in the queue), `success` (an order
/// exists), `failed` (ended without an order, the unit given back: the buyer may try again),
/// `none` (nothing is known of this buyer in this sale).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SeckillResult {
    pub status: SeckillStatus,
    /// The order, when `status` is `success`; otherwise null.
    pub order_id: Option<OrderId>,
}

/// The 202 body of `POST /api/seckill/{goods_id}/orders`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct OrderAccepted {
    /// Always `queued`: the end comes from polling the result.
    pub status: SeckillStatus,
    /// Names this request in the logs and in the order it becomes.
    pub request_id: Uuid,
}

/// The body of `POST /api/seckill/{goods_id}/token` and of the dev-token endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TokenResponse {
    /// A path token to send as `x-seckill-token`, or a JWT to send as `Bearer` (dev-token).
    pub token: String,
}

/// A token's role: an `admin` may also publish, audit and repair sales.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
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
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DevTokenRequest {
    /// Whom the token names (its `sub`).
    pub user_id: UserId,
    /// `user` when left out.
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

/// An active (unpaid or paid) order, as order-service tells seckill-service about it when Redis
/// must be rebuilt or a buyer's result is missing: `GET /internal/orders/active?goods_id=G`
/// with `&user_id=U` (that buyer's), or `&after_id=A&limit=L` (a page, by order id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActiveOrder {
    pub order_id: OrderId,
    pub user_id: UserId,
    pub request_id: Uuid,
}

/// `GET /internal/orders/count?goods_id=G`: a sale's active orders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderCount {
    pub active: i64,
}

/// `POST /internal/stock/{goods_id}/held`: which of these requests hold a unit at the
/// authority (deducted, not released).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeldRequest {
    pub order_keys: Vec<Uuid>,
}

/// The authority's counts of one sale, read in one transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldResponse {
    pub stock_total: i64,
    pub stock_available: i64,
    /// Units held by deductions not released (the ledger).
    pub held_units: i64,
    /// How many of the asked keys hold a unit.
    pub keys_held: i64,
}

/// A sale's Redis data, as the audit saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RedisAudit {
    /// The stock key exists (the sale can sell).
    pub loaded: bool,
    /// Which load of the sale into Redis this is: a new one after Redis lost its data.
    #[schema(value_type = Option<u64>)]
    pub epoch: Option<crate::scripts::Epoch>,
    /// Units Redis will still sell.
    pub stock: Option<i64>,
    /// Units moving from one of the sale's stock buckets to another (in neither stock yet).
    #[serde(default)]
    pub in_transit: i64,
    /// Units held back while the sale recovers from a loss of its Redis data.
    pub holdback: Option<i64>,
    /// Reservations that are orders.
    pub reservations_ordered: i64,
    /// Reservations not yet orders (reserved, or claimed by the order consumer).
    pub reservations_in_flight: i64,
    /// Reservations whose message the broker has not confirmed yet (the reconciler's list).
    pub pending: i64,
    /// A sale of several stock buckets: each bucket's own figures, bucket 0 first (left out
    /// for a sale of one, whose figures are the ones above).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub buckets: Vec<BucketAudit>,
}

/// One stock bucket of a sale, as the audit saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BucketAudit {
    pub bucket: u8,
    /// Units the bucket will still sell; absent when it is not loaded.
    pub stock: Option<i64>,
    /// Units it gave to another bucket that have not been seen to arrive.
    pub in_transit: i64,
    /// Buyers holding a reservation in it (orders and requests in flight).
    pub reservations: i64,
}

/// The authorities' side of the audit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AuthorityAudit {
    pub stock_total: i64,
    pub stock_available: i64,
    /// Units held by deductions not released (the stock ledger).
    pub ledger_held: i64,
    /// Unpaid and paid orders of the sale.
    pub active_orders: i64,
    /// Of the reservations in flight, those already deducted at the authority.
    pub in_flight_deducted: i64,
}

/// The buy queue, as the broker counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QueueAudit {
    /// Buy requests waiting in `seckill.orders` and its retry queue.
    pub waiting: u32,
    /// Order consumers attached to the queue.
    pub consumers: u32,
}

/// `GET /api/admin/goods/{id}/audit`: how Redis, the stock ledger and the orders compare.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SaleAudit {
    pub goods_id: GoodsId,
    pub redis: RedisAudit,
    pub authority: AuthorityAudit,
    pub queue: QueueAudit,
    /// What the Redis stock should be: available at the authority, less the reservations in
    /// flight not yet deducted there, less the units held back.
    pub expected_redis_stock: i64,
    /// True when every comparison holds. Requests in flight make some differ for a moment:
    /// judge a sale when its queue is empty.
    pub agrees: bool,
    /// Each comparison that does not hold, in words.
    pub differences: Vec<String>,
}

/// `POST /api/admin/goods/{id}/repair`: what the repair changed, and the audit after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SaleRepair {
    /// The Redis stock before (null: the sale was not loaded, and was rebuilt).
    pub stock_before: Option<i64>,
    /// The Redis stock after.
    pub stock_after: Option<i64>,
    /// Active orders written back into Redis (reservations and results).
    pub orders_restored: usize,
    pub audit: SaleAudit,
}

/// `GET /api/seckill/{goods_id}/state`: what a sale's page needs to move (its window, whether
/// it is sold out, the server's clock), answered from memory so a spike of page views never
/// reaches a database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SaleState {
    pub goods_id: GoodsId,
    /// When buying opens.
    pub start_at: DateTime<Utc>,
    /// When buying closes.
    pub end_at: DateTime<Utc>,
    /// The sale was found sold out a moment ago (the sold-out flag); false does not promise a
    /// unit: the buy says for sure.
    pub sold_out: bool,
    /// The server's clock when it answered (Unix milliseconds): a page counts down on it, not
    /// on the buyer's own clock.
    pub now_ms: i64,
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
            buckets: 1,
            waiting_room: None,
        }
    }

    #[test]
    fn new_goods_validation_names_the_field() {
        assert!(new_goods().validate().is_ok());
        let mut g = new_goods();
        g.stock_total = -1;
        assert!(g.validate().unwrap_err().to_string().contains("stock_total"));
        let mut g = new_goods();
        g.end_at = g.start_at;
        assert!(g.validate().unwrap_err().to_string().contains("end_at"));
        let mut g = new_goods();
        g.seckill_price_cents = 101;
        assert!(g.validate().unwrap_err().to_string().contains("seckill_price_cents"));
        let mut g = new_goods();
        g.name = "  ".into();
        assert!(g.validate().unwrap_err().to_string().contains("name"));
        for wrong in [0, MAX_BUCKETS + 1] {
            let mut g = new_goods();
            g.buckets = wrong;
            assert!(g.validate().unwrap_err().to_string().contains("buckets"));
        }
        let parsed: NewGoods = serde_json::from_value(serde_json::json!({"name": "x", "price_cents": 1,
            "seckill_price_cents": 1, "stock_total": 1, "start_at": "2026-01-01T00:00:00Z",
            "end_at": "2026-01-02T00:00:00Z"}))
        .unwrap();
        assert_eq!(parsed.buckets, 1, "one bucket unless asked");
        assert_eq!(parsed.waiting_room, None, "no waiting room unless asked");
    }

    #[test]
    fn the_new_goods_schema_states_the_limits_validate_applies() {
        let schema = serde_json::to_value(<NewGoods as utoipa::PartialSchema>::schema()).unwrap();
        let field = |name: &str| schema["properties"][name].clone();
        assert_eq!(field("stock_total")["maximum"], MAX_STOCK);
        assert_eq!(field("stock_total")["minimum"], 0);
        assert_eq!(field("name")["maxLength"], 200);
        assert_eq!(
            (field("buckets")["minimum"].clone(), field("buckets")["maximum"].clone()),
            (1.into(), MAX_BUCKETS.into())
        );
        assert_eq!(schema["additionalProperties"], false, "deny_unknown_fields");
        let mut g = new_goods();
        g.stock_total = MAX_STOCK;
        assert!(g.validate().is_ok());
        g.stock_total = MAX_STOCK + 1;
        assert!(g.validate().is_err());
        g = new_goods();
        g.name = "x".repeat(201);
        assert!(g.validate().is_err());
    }

    #[test]
    fn the_documented_name_pattern_is_the_one_the_rule_is_checked_against() {
        let schema = serde_json::to_value(<NewGoods as utoipa::PartialSchema>::schema()).unwrap();
        assert_eq!(schema["properties"]["name"]["pattern"], crate::sale::NAME_PATTERN);
        assert_eq!(schema["properties"]["name"]["maxLength"], crate::sale::NAME_MAX_CHARS);
    }

    /// What the database cannot store, or a page should not show, is refused before any write,
    /// each refusal naming its field.
    #[test]
    fn names_and_times_the_database_cannot_store_are_refused_naming_the_field() {
        let refused = |g: NewGoods| g.validate().unwrap_err().to_string();
        let mut g = new_goods();
        g.name = "pho\0ne".into();
        assert!(refused(g).starts_with("name must be printable text"));
        let mut g = new_goods();
        g.name = "\u{202E}enohp".into();
        assert!(refused(g).contains("U+202E"));
        let mut g = new_goods();
        g.start_at = Utc.with_ymd_and_hms(1969, 12, 31, 0, 0, 0).unwrap();
        assert!(refused(g).starts_with("start_at must be between 1970-01-01T00:00:00Z"));
        let mut g = new_goods();
        g.end_at = Utc.with_ymd_and_hms(10_000, 1, 1, 0, 0, 0).unwrap();
        assert!(refused(g).starts_with("end_at must be between"));

        let mut g = new_goods();
        g.name = "  phone  ".into();
        assert_eq!(g.validate().unwrap().name, "phone", "stored trimmed");
    }

    /// As sent on the wire: a time serde would read but PostgreSQL cannot store, an offset past
    /// ±23:59, a lone surrogate; each a deserialization error naming its field where serde
    /// lets it.
    #[test]
    fn bodies_with_unstorable_values_do_not_parse() {
        let body = |name: &str, start: &str| {
            format!(
                r#"{{"name": "{name}", "price_cents": 1, "seckill_price_cents": 1, "stock_total": 1,
                "start_at": "{start}", "end_at": "2030-01-02T00:00:00Z"}}"#
            )
        };
        let error = |json: String| serde_json::from_str::<NewGoods>(&json).unwrap_err().to_string();
        for start in ["-5000-01-01T00:00:00Z", "2030-01-01T00:00:00+99:00", "+10000-01-01T00:00:00Z"] {
            let e = error(body("x", start));
            assert!(e.starts_with("start_at must be an RFC 3339 time"), "{start}: {e}");
        }
        // serde_json: "unexpected end of hex escape", "lone leading surrogate in hex escape".
        for lone in [r"\ud800", r"\udc00x", r"x\ud83dy"] {
            let e = error(body(lone, "2030-01-01T00:00:00Z"));
            assert!(e.contains("escape"), "{lone}: {e}");
        }
        // An escaped NUL parses (JSON allows it); validation refuses it.
        let parsed: NewGoods = serde_json::from_str(&body(r"a\u0000b", "2030-01-01T00:00:00Z")).unwrap();
        assert!(parsed.validate().unwrap_err().to_string().starts_with("name "));
    }

    #[test]
    fn a_waiting_room_is_checked_and_only_for_a_sale_not_started() {
        use crate::room::RoomRate;
        let mut g = new_goods();
        g.waiting_room = Some(WaitingRoom {
            rate: RoomRate::PerSec(100),
            opens_before_secs: 600,
            admission_secs: 120,
            pow_difficulty: 0,
        });
        let before = g.start_at - chrono::Duration::seconds(1);
        assert!(g.validate_at(before).is_ok());
        let message = g.validate_at(g.start_at).unwrap_err().to_string();
        assert!(message.starts_with("waiting_room "), "{message}");
        g.waiting_room = g.waiting_room.map(|r| WaitingRoom { admission_secs: 5, ..r });
        let message = g.validate_at(before).unwrap_err().to_string();
        assert!(message.starts_with("waiting_room.admission_secs"), "{message}");
    }

    #[test]
    fn the_audit_lists_buckets_only_for_a_sale_of_several() {
        let mut redis = RedisAudit {
            loaded: true,
            epoch: None,
            stock: Some(3),
            in_transit: 0,
            holdback: None,
            reservations_ordered: 0,
            reservations_in_flight: 0,
            pending: 0,
            buckets: Vec::new(),
        };
        let one = serde_json::to_value(&redis).unwrap();
        assert!(one.get("buckets").is_none(), "a sale of one bucket reads as before: {one}");
        redis.buckets = vec![BucketAudit { bucket: 1, stock: None, in_transit: 2, reservations: 5 }];
        let several = serde_json::to_value(&redis).unwrap();
        assert_eq!(several["buckets"][0]["stock"], serde_json::Value::Null);
        assert_eq!(serde_json::from_value::<RedisAudit>(several).unwrap(), redis);
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
            buckets: 1,
            waiting_room: None,
        };
        assert_eq!(g.window_at(g.start_at - chrono::Duration::seconds(1)), SaleWindow::NotStarted);
        assert_eq!(g.window_at(g.start_at), SaleWindow::Open);
        assert_eq!(g.window_at(g.end_at), SaleWindow::Ended);
    }
}
