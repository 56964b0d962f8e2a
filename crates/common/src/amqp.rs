//! AMQP names and message types, in one place.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::ids::{GoodsId, UserId};

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
}

impl OrderRequest {
    pub fn new(request_id: Uuid, user_id: UserId, goods_id: GoodsId, ts: i64) -> Self {
        Self {
            v: MESSAGE_VERSION,
            request_id,
            user_id,
            goods_id,
            ts,
        }
    }
}

/// Queue and exchange names under an optional prefix (tests give each run its own).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AmqpNames {
    prefix: String,
}

impl AmqpNames {
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Accepted buy requests (published through the default exchange).
    pub fn orders_queue(&self) -> String {
        format!("{}seckill.orders", self.prefix)
    }

    /// Where `seckill.orders` dead-letters what cannot be processed.
    pub fn orders_dead_queue(&self) -> String {
        format!("{}seckill.orders.dead", self.prefix)
    }

    /// Every name declared under this prefix, for clean-up in tests and tools.
    pub fn all_queues(&self) -> Vec<String> {
        vec![self.orders_queue(), self.orders_dead_queue()]
    }
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
    }
}
