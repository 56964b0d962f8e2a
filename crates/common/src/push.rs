//! Pushed answers: the notices a sale's Redis channel carries to the gateway replicas holding
//! buyers' event streams, and the events of a stream (`GET /api/seckill/{id}/events`).
//!
//! A notice is written by the Lua script that writes the fact (order-service's result
//! scripts, `crate::scripts`), in the same atomic step, so a notice never tells of a result
//! Redis does not hold. A notice can still be lost (pub/sub keeps nothing for a subscriber
//! that is away): a stream re-reads the result when it opens, when its gateway's channel
//! reconnects, and after a silence, so a final answer never rests on a notice alone.

use std::fmt;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::{SeckillResult, SeckillStatus};
use crate::{GoodsId, OrderId, UserId};

/// The payload seckill-service publishes when a sale sells out.
pub const SOLD_OUT_NOTICE: &str = "sold_out";

/// One notice on a sale's channel (`RedisKeys::sale_events`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// A buyer's request ended: `<user>:s:<order id>` or `<user>:f` (written by the scripts).
    Result { user: UserId, result: SeckillResult },
    /// The sale has no unit left: [`SOLD_OUT_NOTICE`].
    SoldOut,
}

impl Notice {
    /// Reads a notice; anything else (another producer's, a newer form) is `None`.
    pub fn parse(payload: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(payload).ok()?;
        if text == SOLD_OUT_NOTICE {
            return Some(Self::SoldOut);
        }
        let mut parts = text.split(':');
        let user = UserId::new(parts.next()?.parse().ok()?)?;
        let result = match (parts.next()?, parts.next()) {
            ("s", Some(order)) => SeckillResult {
                status: SeckillStatus::Success,
                order_id: Some(OrderId::new(order.parse().ok()?)?),
            },
            ("f", None) => SeckillResult { status: SeckillStatus::Failed, order_id: None },
            _ => return None,
        };
        parts.next().is_none().then_some(Self::Result { user, result })
    }
}

impl fmt::Display for Notice {
    /// The payload, as the scripts write it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SoldOut => f.write_str(SOLD_OUT_NOTICE),
            Self::Result { user, result } => match result.order_id {
                Some(order) if result.status == SeckillStatus::Success => write!(f, "{user}:s:{order}"),
                _ => write!(f, "{user}:f"),
            },
        }
    }
}

/// The name of each event a stream sends (its SSE `event:` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// Data: the body of `GET /api/seckill/{id}/result`. `success` and `failed` end the stream.
    Result,
    /// Data: the body of `GET /api/seckill/{id}/queue` (a sale with a waiting room, a stream
    /// opened with the buyer's place ticket): the place as it moves, then the admission.
    Queue,
    /// Data: [`SoldOutEvent`]. Ends the stream of a buyer who holds no request.
    SoldOut,
    /// The same buyer opened another stream of this sale: this one ends (data: empty object).
    Replaced,
}

impl EventKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Result => "result",
            Self::Queue => "queue",
            Self::SoldOut => "sold_out",
            Self::Replaced => "replaced",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        [Self::Result, Self::Queue, Self::SoldOut, Self::Replaced].into_iter().find(|k| k.as_str() == name)
    }
}

/// The data of a `sold_out` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SoldOutEvent {
    pub goods_id: GoodsId,
}

/// The 200 body of `POST /api/seckill/{id}/events/ticket`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct StreamTicketResponse {
    /// Open the stream with it within `expires_in_secs`: `GET .../events?ticket=<ticket>`.
    /// It opens one stream, once, for this buyer and sale.
    pub ticket: String,
    pub expires_in_secs: u32,
}

/// One event as a client reads it off the stream.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

impl SseEvent {
    pub fn kind(&self) -> Option<EventKind> {
        EventKind::parse(self.event.as_deref()?)
    }
}

/// Reads server-sent events from a stream's text as it arrives: [`SseReader::push`] takes
/// any piece of it and gives back the events it completed (comments, heartbeats and `retry`
/// fields are skipped).
#[derive(Debug, Default)]
pub struct SseReader {
    partial: String,
    event: SseEvent,
    has_data: bool,
}

impl SseReader {
    pub fn push(&mut self, chunk: &str) -> Vec<SseEvent> {
        self.partial.push_str(chunk);
        let mut done = Vec::new();
        while let Some(end) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=end).collect();
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if self.has_data {
                    done.push(std::mem::take(&mut self.event));
                }
                self.event = SseEvent::default();
                self.has_data = false;
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "id" => self.event.id = Some(value.to_owned()),
                "event" => self.event.event = Some(value.to_owned()),
                "data" => {
                    if self.has_data {
                        self.event.data.push('\n');
                    }
                    self.event.data.push_str(value);
                    self.has_data = true;
                }
                _ => {}
            }
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(u: i64) -> UserId {
        UserId::new(u).unwrap()
    }

    #[test]
    fn a_notice_reads_back_as_written() {
        let won = Notice::Result {
            user: user(42),
            result: SeckillResult { status: SeckillStatus::Success, order_id: OrderId::new(7) },
        };
        let lost = Notice::Result {
            user: user(9),
            result: SeckillResult { status: SeckillStatus::Failed, order_id: None },
        };
        for notice in [won, lost, Notice::SoldOut] {
            assert_eq!(Notice::parse(notice.to_string().as_bytes()), Some(notice));
        }
        assert_eq!(won.to_string(), "42:s:7");
        assert_eq!(lost.to_string(), "9:f");
    }

    #[test]
    fn anything_else_on_the_channel_is_no_notice() {
        for junk in
            ["", "42", "42:s", "42:s:x", "0:f", "-1:f", "42:f:1", "42:s:7:8", "x:f", "42:q", "sold_out "]
        {
            assert_eq!(Notice::parse(junk.as_bytes()), None, "{junk:?}");
        }
        assert_eq!(Notice::parse(&[0xff, b':', b'f']), None);
    }

    #[test]
    fn events_are_read_across_chunks_and_heartbeats_are_skipped() {
        let mut reader = SseReader::default();
        assert!(reader.push("retry: 1000\n\n: hb\n\nid: r.queued\nevent: res").is_empty());
        let events = reader.push("ult\ndata: {\"a\":1}\n\nevent: sold_out\r\ndata: x\r\ndata: y\r\n\r\n");
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].id.as_deref(), Some("r.queued"));
        assert_eq!(events[0].kind(), Some(EventKind::Result));
        assert_eq!(events[0].data, "{\"a\":1}");
        assert_eq!(events[1].kind(), Some(EventKind::SoldOut));
        assert_eq!(events[1].data, "x\ny");
    }
}
