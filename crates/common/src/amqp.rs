//! AMQP names and message types, in one place.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::ids::{GoodsId, OrderId, UserId};
use crate::keys::SaleBucket;
use crate::scripts::Epoch;

/// The version every message of this build writes; readers reject others to the dead letters.
pub const MESSAGE_VERSION: u32 = 1;

/// An accepted buy request, published to `seckill.orders`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderRequest {
    pub v: u32,
    pub request_id: Uuid,
    pub user_id: UserId,
    pub goods_id: GoodsId,
    /// When the reservation was taken, Unix milliseconds.
    pub ts: i64,
    /// The sale's epoch in Redis when the reservation was taken: lets the order consumer tell a
    /// reservation given back from one that Redis lost. Absent from older producers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<Epoch>,
    /// The sale's stock bucket the reservation was taken in (`keys::SaleBucket`): its keys are
    /// the ones the order consumer's scripts touch. 0 for a sale of one bucket, and from older
    /// producers.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub bucket: u8,
}

fn is_zero(b: &u8) -> bool {
    *b == 0
}

impl OrderRequest {
    pub fn new(request_id: Uuid, user_id: UserId, goods_id: GoodsId, ts: i64) -> Self {
        Self { v: MESSAGE_VERSION, request_id, user_id, goods_id, ts, epoch: None, bucket: 0 }
    }

    /// The request of a reservation held in `at` (of this request's sale).
    pub fn in_bucket(self, at: SaleBucket) -> Self {
        debug_assert_eq!(at.goods, self.goods_id);
        Self { bucket: at.bucket, ..self }
    }

    pub fn with_epoch(self, epoch: Option<Epoch>) -> Self {
        Self { epoch, ..self }
    }

    /// Where the reservation is held.
    pub fn sale_bucket(&self) -> SaleBucket {
        SaleBucket::new(self.goods_id, self.bucket)
    }
}

/// The version of the batch forms (`seckill.orders`, releases and restocks).
pub const BATCH_VERSION: u32 = 2;

/// Most requests one message may carry: a producer never gathers more, and a consumer refuses
/// a larger batch. It also bounds how many buy requests a number of waiting messages can hold,
/// which a rebuild after a loss of Redis data holds units back for.
pub const MAX_BATCH_REQUESTS: usize = 100;

/// Several accepted buy requests in one message, confirmed as one: `{"v": 2, "requests":
/// [...]}`, each request exactly as in the single form (its own `"v": 1`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderBatch {
    pub v: u32,
    pub requests: Vec<OrderRequest>,
}

impl OrderBatch {
    pub fn new(requests: Vec<OrderRequest>) -> Self {
        Self { v: BATCH_VERSION, requests }
    }
}

/// The body of a `seckill.orders` message for `requests`: the single form for one request (what
/// every consumer reads), the batch form for more.
pub fn order_body(requests: &[OrderRequest]) -> serde_json::Result<Vec<u8>> {
    /// [`OrderBatch`] without copying the requests.
    #[derive(Serialize)]
    struct Borrowed<'a> {
        v: u32,
        requests: &'a [OrderRequest],
    }
    match requests {
        [one] => serde_json::to_vec(one),
        many => serde_json::to_vec(&Borrowed { v: BATCH_VERSION, requests: many }),
    }
}

/// The buy requests of a `seckill.orders` message, in either form. Refused (so dead-lettered):
/// unknown versions, a batch that is empty or larger than [`MAX_BATCH_REQUESTS`], a batched
/// request that is not itself of the single form's version.
pub fn decode_order_requests(body: &[u8]) -> Result<Vec<OrderRequest>, String> {
    let requests = decode_one_or_batch::<OrderBatch>(body)?;
    match requests.iter().find(|r| r.bucket >= crate::api::MAX_BUCKETS) {
        Some(r) => Err(format!(
            "request {} names bucket {}, past the last one a sale may have",
            r.request_id, r.bucket
        )),
        None => Ok(requests),
    }
}

/// A message type with a single form (`"v": 1`) and a batch form (`"v": 2`) that carries up to
/// `MAX` of them.
trait Batch: serde::de::DeserializeOwned {
    type Item: serde::de::DeserializeOwned;
    const MAX: usize;
    fn into_items(self) -> Vec<Self::Item>;
    /// The item's own version and a name for it in a refusal.
    fn describe(item: &Self::Item) -> (u32, String);
}

impl Batch for OrderBatch {
    type Item = OrderRequest;
    const MAX: usize = MAX_BATCH_REQUESTS;
    fn into_items(self) -> Vec<OrderRequest> {
        self.requests
    }
    fn describe(item: &OrderRequest) -> (u32, String) {
        (item.v, format!("request {}", item.request_id))
    }
}

impl Batch for ReleaseBatch {
    type Item = Release;
    const MAX: usize = MAX_BATCH_RELEASES;
    fn into_items(self) -> Vec<Release> {
        self.releases
    }
    fn describe(item: &Release) -> (u32, String) {
        (item.v, format!("release {}", item.order_key))
    }
}

/// The items of a message in either form of `B`.
fn decode_one_or_batch<B: Batch>(body: &[u8]) -> Result<Vec<B::Item>, String> {
    /// Only the version: serde skips the rest without building it.
    #[derive(Deserialize)]
    struct Version {
        v: Option<u64>,
    }
    let version = serde_json::from_slice::<Version>(body).map_err(|e| format!("not JSON: {e}"))?.v;
    let unexpected = |e: serde_json::Error| format!("unexpected fields: {e}");
    match version {
        Some(v) if v == u64::from(MESSAGE_VERSION) => {
            Ok(vec![serde_json::from_slice::<B::Item>(body).map_err(unexpected)?])
        }
        Some(v) if v == u64::from(BATCH_VERSION) => {
            let items = serde_json::from_slice::<B>(body).map_err(unexpected)?.into_items();
            if items.is_empty() || items.len() > B::MAX {
                return Err(format!("a batch of {} (1 to {} allowed)", items.len(), B::MAX));
            }
            for item in &items {
                let (v, name) = B::describe(item);
                if v != MESSAGE_VERSION {
                    return Err(format!("batched {name} of version {v}"));
                }
            }
            Ok(items)
        }
        other => Err(format!("unknown message version {other:?}")),
    }
}

/// Orders to expire if still unpaid when their delay runs out: one message per batch of new
/// orders (published to the delay queue), so a spike costs one publish per batch, not per order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderExpiry {
    pub v: u32,
    pub order_ids: Vec<OrderId>,
}

impl OrderExpiry {
    pub fn new(order_ids: Vec<OrderId>) -> Self {
        Self { v: MESSAGE_VERSION, order_ids }
    }
}

/// Why an order's unit goes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReleaseReason {
    Cancelled,
    Expired,
}

/// An order's unit goes back: order-service publishes it to `seckill.stock.release`;
/// stock-service releases the deduction, then forwards it to `seckill.restock`, where
/// seckill-service gives the unit back to the Redis stock and the buyer their right to try
/// again. Every step is idempotent on `order_key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Release {
    pub v: u32,
    /// The deduction's key: the buy request's id.
    pub order_key: Uuid,
    pub order_id: OrderId,
    pub user_id: UserId,
    pub goods_id: GoodsId,
    pub reason: ReleaseReason,
}

/// Most releases one message may carry (a `seckill.stock.release` or `seckill.restock` batch):
/// about 90 KB of JSON.
pub const MAX_BATCH_RELEASES: usize = 500;

/// Several releases in one message, the form an expiry storm travels in: `{"v": 2,
/// "releases": [...]}`, each release exactly as in the single form (its own `"v": 1`). Each is
/// still handled, and idempotent, on its own `order_key`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseBatch {
    pub v: u32,
    pub releases: Vec<Release>,
}

impl ReleaseBatch {
    pub fn new(releases: Vec<Release>) -> Self {
        Self { v: BATCH_VERSION, releases }
    }
}

/// The bodies of the messages carrying `releases`: one message per [`MAX_BATCH_RELEASES`],
/// each in the single form when it holds one release (what every consumer reads).
pub fn release_bodies(releases: &[Release]) -> serde_json::Result<Vec<Vec<u8>>> {
    /// [`ReleaseBatch`] without copying the releases.
    #[derive(Serialize)]
    struct Borrowed<'a> {
        v: u32,
        releases: &'a [Release],
    }
    releases
        .chunks(MAX_BATCH_RELEASES)
        .map(|chunk| match chunk {
            [one] => serde_json::to_vec(one),
            many => serde_json::to_vec(&Borrowed { v: BATCH_VERSION, releases: many }),
        })
        .collect()
}

/// The releases of a `seckill.stock.release` or `seckill.restock` message, in either form;
/// refused as [`decode_order_requests`] refuses (so dead-lettered).
pub fn decode_releases(body: &[u8]) -> Result<Vec<Release>, String> {
    decode_one_or_batch::<ReleaseBatch>(body)
}

/// Each release of `messages` once (the first copy of each order key), in order: the messages a
/// consumer has in hand may carry the same release twice.
pub fn distinct_releases<'a>(messages: impl IntoIterator<Item = &'a Vec<Release>>) -> Vec<Release> {
    let mut seen = std::collections::HashSet::new();
    messages.into_iter().flatten().filter(|r| seen.insert(r.order_key)).copied().collect()
}

/// What one seckill-service replica tells the others through the fanout exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BroadcastKind {
    SoldOut,
    Restocked,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Broadcast {
    pub v: u32,
    pub kind: BroadcastKind,
    pub goods_id: GoodsId,
}

impl Broadcast {
    pub fn new(kind: BroadcastKind, goods_id: GoodsId) -> Self {
        Self { v: MESSAGE_VERSION, kind, goods_id }
    }
}

/// Decodes a message body, refusing other versions: such a message goes to the dead letters.
pub fn decode<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    match value.get("v").and_then(serde_json::Value::as_u64) {
        Some(v) if v == u64::from(MESSAGE_VERSION) => {}
        other => return Err(format!("unknown message version {other:?}")),
    }
    serde_json::from_value(value).map_err(|e| format!("unexpected fields: {e}"))
}

/// Queue and exchange names under an optional prefix (tests give each run its own).
///
/// Every queue a service consumes (a "work queue") comes with two more: `<queue>.dead`, where
/// what cannot be processed ends (undecodable, or out of tries), and `<queue>.retry.<ms>ms`,
/// where a message waits out a failed try before it flows back (a per-queue TTL, so one long
/// wait never holds up a shorter one).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AmqpNames {
    prefix: String,
}

impl AmqpNames {
    pub fn new(prefix: impl Into<String>) -> Self {
        Self { prefix: prefix.into() }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Accepted buy requests: seckill-service publishes, order-service consumes.
    pub fn orders_queue(&self) -> String {
        format!("{}seckill.orders", self.prefix)
    }

    /// Where `seckill.orders` dead-letters what cannot be processed.
    pub fn orders_dead_queue(&self) -> String {
        dead_queue(&self.orders_queue())
    }

    /// New orders wait here for `ttl_secs` (the queue's TTL, in its name so a changed TTL is a
    /// new queue, not a clash), then dead-letter into the expire queue.
    pub fn order_delay_queue(&self, ttl_secs: u64) -> String {
        format!("{}seckill.order.delay.{ttl_secs}s", self.prefix)
    }

    /// Orders whose delay ran out: order-service expires those still unpaid.
    pub fn order_expire_queue(&self) -> String {
        format!("{}seckill.order.expire", self.prefix)
    }

    /// Units to give back: order-service publishes, stock-service consumes.
    pub fn stock_release_queue(&self) -> String {
        format!("{}seckill.stock.release", self.prefix)
    }

    /// Units given back at the authority: stock-service publishes, seckill-service consumes.
    pub fn restock_queue(&self) -> String {
        format!("{}seckill.restock", self.prefix)
    }

    /// Fanout to every seckill-service replica ("sold out", "restocked").
    pub fn broadcast_exchange(&self) -> String {
        format!("{}seckill.broadcast", self.prefix)
    }

    /// Every queue named here for the given settings, for clean-up in tests and tools.
    pub fn all_queues(&self, order_ttl_secs: u64, retry_delay_ms: u64) -> Vec<String> {
        let work = [
            self.orders_queue(),
            self.order_expire_queue(),
            self.stock_release_queue(),
            self.restock_queue(),
        ];
        let mut all: Vec<String> =
            work.iter().flat_map(|q| [q.clone(), dead_queue(q), retry_queue(q, retry_delay_ms)]).collect();
        all.push(self.order_delay_queue(order_ttl_secs));
        all
    }
}

/// The dead-letter queue of a work queue.
pub fn dead_queue(queue: &str) -> String {
    format!("{queue}.dead")
}

/// The retry queue of a work queue for a given delay.
pub fn retry_queue(queue: &str, delay_ms: u64) -> String {
    format!("{queue}.retry.{delay_ms}ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_request_round_trips_with_its_version() {
        let m = OrderRequest::new(
            Uuid::nil(),
            UserId::new(1).unwrap(),
            GoodsId::new(2).unwrap(),
            1_700_000_000_000,
        );
        let json = serde_json::to_string(&m).unwrap();
        assert!(json.starts_with(r#"{"v":1,"#));
        assert_eq!(serde_json::from_str::<OrderRequest>(&json).unwrap(), m);
        assert_eq!(AmqpNames::new("t.").orders_queue(), "t.seckill.orders");
        assert!(!json.contains("bucket"), "bucket 0 is left out, as older producers wrote it");

        let in_bucket = m.in_bucket(SaleBucket::new(m.goods_id, 3));
        let json = serde_json::to_string(&in_bucket).unwrap();
        assert!(json.contains(r#""bucket":3"#), "{json}");
        assert_eq!(decode_order_requests(json.as_bytes()).unwrap(), vec![in_bucket]);
        assert_eq!(in_bucket.sale_bucket(), SaleBucket::new(m.goods_id, 3));
        let past = json.replace(r#""bucket":3"#, r#""bucket":8"#);
        assert!(decode_order_requests(past.as_bytes()).unwrap_err().contains("bucket 8"));
    }

    fn request(n: i64) -> OrderRequest {
        OrderRequest::new(Uuid::from_u128(n as u128), UserId::new(n).unwrap(), GoodsId::new(7).unwrap(), 1)
    }

    #[test]
    fn order_messages_are_read_in_both_forms() {
        let one = order_body(&[request(1)]).unwrap();
        assert!(one.starts_with(br#"{"v":1,"#), "one request keeps the single form");
        assert_eq!(decode_order_requests(&one).unwrap(), vec![request(1)]);

        let three = [request(1), request(2), request(3)];
        let body = order_body(&three).unwrap();
        assert!(body.starts_with(br#"{"v":2,"requests":[{"v":1,"#), "{}", String::from_utf8_lossy(&body));
        assert_eq!(decode_order_requests(&body).unwrap(), three.to_vec());
    }

    #[test]
    fn odd_batches_are_refused() {
        let refuse = |body: &str| decode_order_requests(body.as_bytes()).unwrap_err();
        assert!(refuse(r#"{"v":2,"requests":[]}"#).contains("batch of 0"));
        assert!(refuse(r#"{"v":3,"requests":[]}"#).contains("version"));
        assert!(refuse(r#"{"requests":[]}"#).contains("version"));
        assert!(refuse(r#"{"v":2}"#).contains("unexpected fields"));
        assert!(refuse("nope").contains("not JSON"));
        let mut nested = serde_json::to_value(OrderBatch::new(vec![request(1), request(2)])).unwrap();
        nested["requests"][1]["v"] = 2.into();
        assert!(refuse(&nested.to_string()).contains("of version 2"));
        let too_many: Vec<_> = (1..=MAX_BATCH_REQUESTS as i64 + 1).map(request).collect();
        let body = serde_json::to_string(&OrderBatch::new(too_many)).unwrap();
        assert!(refuse(&body).contains(&format!("batch of {}", MAX_BATCH_REQUESTS + 1)));
    }

    fn release(n: u128) -> Release {
        Release {
            v: MESSAGE_VERSION,
            order_key: Uuid::from_u128(n),
            order_id: OrderId::new(n as i64).unwrap(),
            user_id: UserId::new(n as i64).unwrap(),
            goods_id: GoodsId::new(7).unwrap(),
            reason: ReleaseReason::Expired,
        }
    }

    #[test]
    fn releases_travel_in_both_forms_and_in_bounded_batches() {
        let one = release_bodies(&[release(1)]).unwrap();
        assert_eq!(one.len(), 1);
        assert!(one[0].starts_with(br#"{"v":1,"#), "one release keeps the single form");
        assert_eq!(decode_releases(&one[0]).unwrap(), vec![release(1)]);

        let many: Vec<Release> = (1..=MAX_BATCH_RELEASES as u128 + 1).map(release).collect();
        let bodies = release_bodies(&many).unwrap();
        assert_eq!(bodies.len(), 2, "{} releases: a full batch and one more", many.len());
        assert!(bodies[0].starts_with(br#"{"v":2,"releases":[{"v":1,"#));
        assert!(bodies[1].starts_with(br#"{"v":1,"#), "the last one alone is in the single form");
        let back: Vec<Release> = bodies.iter().flat_map(|b| decode_releases(b).unwrap()).collect();
        assert_eq!(back, many);
        assert!(release_bodies(&[]).unwrap().is_empty());
        let copies = [vec![release(1), release(2), release(1)], vec![release(2), release(3)]];
        assert_eq!(distinct_releases(&copies), vec![release(1), release(2), release(3)]);

        let refuse = |body: &str| decode_releases(body.as_bytes()).unwrap_err();
        assert!(refuse(r#"{"v":2,"releases":[]}"#).contains("batch of 0"));
        assert!(refuse(r#"{"v":2,"requests":[]}"#).contains("unexpected fields"));
        let mut nested = serde_json::to_value(ReleaseBatch::new(vec![release(1), release(2)])).unwrap();
        nested["releases"][0]["v"] = 3.into();
        assert!(refuse(&nested.to_string()).contains("of version 3"));
        let too_many = serde_json::to_string(&ReleaseBatch::new(many)).unwrap();
        assert!(refuse(&too_many).contains(&format!("batch of {}", MAX_BATCH_RELEASES + 1)));
    }

    #[test]
    fn decode_refuses_other_versions() {
        let ok = r#"{"v":1,"kind":"sold_out","goods_id":3}"#;
        assert_eq!(decode::<Broadcast>(ok.as_bytes()).unwrap().kind, BroadcastKind::SoldOut);
        assert!(
            decode::<Broadcast>(br#"{"v":2,"kind":"sold_out","goods_id":3}"#)
                .unwrap_err()
                .contains("version")
        );
        assert!(decode::<Broadcast>(b"nope").unwrap_err().contains("JSON"));
        assert!(decode::<Broadcast>(br#"{"v":1,"kind":"x","goods_id":3}"#).is_err());
    }
}
