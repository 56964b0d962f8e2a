//! What the waiting room's routes take and answer, and what a sale's room is made of.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The fastest admission rate a room may be set to: far above what one sale's buy path takes.
pub const MAX_RATE: u32 = 1_000_000;
/// The earliest a room may open before its sale: a week.
pub const MAX_OPENS_BEFORE_SECS: u32 = 7 * 24 * 3600;
/// An admission lives 10 s to an hour.
pub const ADMISSION_SECS: std::ops::RangeInclusive<u32> = 10..=3600;
/// The hardest proof of work a room may ask for: about 16 million hashes on average, some
/// seconds of a phone's CPU.
pub const MAX_POW_DIFFICULTY: u8 = 24;

/// How fast a room admits: a fixed number of places a second, or `auto` (what the buy path
/// sustains, measured). Written as a number or the string `"auto"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum RoomRate {
    /// 1 to 1,000,000.
    PerSec(u32),
    Auto(AutoRate),
}

/// The word `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AutoRate {
    Auto,
}

impl RoomRate {
    pub const AUTO: Self = Self::Auto(AutoRate::Auto);

    /// As stored: places a second, 0 for `auto`.
    pub fn stored(self) -> i32 {
        match self {
            Self::PerSec(n) => i32::try_from(n).unwrap_or(i32::MAX),
            Self::Auto(_) => 0,
        }
    }

    /// From the stored form; `None` for a value no valid room has.
    pub fn from_stored(n: i32) -> Option<Self> {
        match n {
            0 => Some(Self::AUTO),
            n => u32::try_from(n).ok().filter(|n| *n <= MAX_RATE).map(Self::PerSec),
        }
    }
}

/// A sale's waiting room (`NewGoods::waiting_room`): set when the sale is created, never after.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitingRoom {
    /// Places admitted a second, cluster-wide: 1 to 1,000,000, or `"auto"`.
    pub rate: RoomRate,
    /// How long before the sale's start buyers may join (default 600). Everyone who joins
    /// before the start gets a place drawn at random when the sale opens.
    #[serde(default = "default_opens_before")]
    #[schema(minimum = 0, maximum = 604_800)]
    pub opens_before_secs: u32,
    /// How long an admission lets its holder buy (10 to 3600, default 120). A place admitted
    /// and not used within it is skipped.
    #[serde(default = "default_admission")]
    #[schema(minimum = 10, maximum = 3600)]
    pub admission_secs: u32,
    /// Leading zero bits of the proof of work a join must bring (0 = none, at most 24).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 24)]
    pub pow_difficulty: u8,
}

fn default_opens_before() -> u32 {
    600
}

fn default_admission() -> u32 {
    120
}

impl WaitingRoom {
    /// Why the room cannot be, naming the field; `None` when every field holds.
    pub fn invalid(&self) -> Option<String> {
        if let RoomRate::PerSec(n) = self.rate
            && !(1..=MAX_RATE).contains(&n)
        {
            return Some(format!("waiting_room.rate must be between 1 and {MAX_RATE}, or \"auto\""));
        }
        if self.opens_before_secs > MAX_OPENS_BEFORE_SECS {
            return Some(format!("waiting_room.opens_before_secs must be at most {MAX_OPENS_BEFORE_SECS}"));
        }
        if !ADMISSION_SECS.contains(&self.admission_secs) {
            return Some(format!(
                "waiting_room.admission_secs must be between {} and {}",
                ADMISSION_SECS.start(),
                ADMISSION_SECS.end()
            ));
        }
        if self.pow_difficulty > MAX_POW_DIFFICULTY {
            return Some(format!("waiting_room.pow_difficulty must be at most {MAX_POW_DIFFICULTY}"));
        }
        None
    }

    /// When buyers may start joining, for a sale that starts at `start_at`.
    pub fn opens_at(&self, start_at: DateTime<Utc>) -> DateTime<Utc> {
        start_at - chrono::Duration::seconds(i64::from(self.opens_before_secs))
    }
}

/// What stock-service keeps of a room so that neither a restart nor a loss of Redis changes a
/// place or admits anyone twice (`POST /internal/stock/rooms/{goods_id}`). Every field only
/// rises: a request raises each to at least the value sent (`drawn` is set once, by the first
/// request that names it) and is answered with the record as it now stands. Sending zeros
/// reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoomMarks {
    /// Join numbers handed out before the opening are below this (leased in blocks).
    pub joins_before: u64,
    /// Join numbers handed out after the opening are below this.
    pub joins_after: u64,
    /// How many joined before the opening: the size of the draw, fixed when the sale opens.
    pub drawn: Option<u64>,
    /// Places admitted are below this (leased ahead of the admissions)...
    pub admitted: u64,
    /// ...and the admissions reach it no sooner than this instant (Unix ms).
    pub admitted_at_ms: i64,
    /// Sent, never answered: the leader's mark of how many places had come up by an instant,
    /// kept for an admission's life (`GET /internal/stock/rooms/{goods_id}` reads them back) so
    /// a room loaded again after a loss of Redis ends every admission when it would have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub came_up: Option<CameUp>,
}

/// `admitted` places had come up by `at_ms` (Unix ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CameUp {
    pub at_ms: i64,
    pub admitted: u64,
}

/// A room as stock-service keeps it (`GET /internal/stock/rooms/{goods_id}`): its marks, and
/// the leader's marks of the last admission's life, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoomRecord {
    pub marks: RoomMarks,
    pub came_up: Vec<CameUp>,
}

/// The body of `POST /api/seckill/{goods_id}/queue` (all optional).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QueueJoin {
    /// A place ticket this buyer was given before: presented again, it keeps its place even
    /// if the servers lost track of it.
    #[serde(default)]
    pub ticket: Option<String>,
    /// On a room that asks for proof of work: a challenge from `POST .../queue/challenge`...
    #[serde(default)]
    pub challenge: Option<String>,
    /// ...and the answer found for it.
    #[serde(default)]
    pub answer: Option<u64>,
}

/// The answer of `POST /api/seckill/{goods_id}/queue/challenge`: work to do before joining a
/// room that asks for it. Find `answer` such that SHA-256(the challenge's UTF-8 bytes, then
/// `answer` as 8 bytes little-endian) starts with `difficulty` zero bits (most significant bit
/// of the first byte first); send both with the join. Bound to the user and the sale, good
/// until `expires_at`, used once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QueueChallenge {
    pub challenge: String,
    pub difficulty: u8,
    pub expires_at: DateTime<Utc>,
}

/// Where a buyer stands in a sale's waiting room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum QueueState {
    /// In the queue: `ahead` places go first.
    Waiting,
    /// The place came up: `admission` lets the buyer buy until `admission_expires_at`.
    Admitted,
    /// Nothing is left to buy.
    SoldOut,
    /// The sale has ended, or the admission's time ran out.
    Closed,
}

/// How the places of those who joined before the opening were drawn, so anyone can check:
/// `seed` hashes (SHA-256, hex) to `commitment`, published before the opening.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QueueDraw {
    pub commitment: String,
    /// Hex; shown once the sale has opened.
    pub seed: Option<String>,
    /// How many joined before the opening; shown once the sale has opened.
    pub joined_before: Option<u64>,
}

/// The answer of `POST` and `GET /api/seckill/{goods_id}/queue`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QueueStatus {
    pub state: QueueState,
    /// The buyer's place ticket: sent as `x-room-ticket` to ask where they stand.
    pub ticket: String,
    /// The buyer's place, from 1; null until the draw at the opening for who joined before it.
    pub place: Option<u64>,
    /// Places before this buyer's not admitted yet; null until the draw.
    pub ahead: Option<u64>,
    /// Seconds until the place comes up, estimated from the current rate; null until the draw.
    pub wait_secs: Option<u64>,
    /// When admitted: send it as `x-room-admission` with the sale's token and order requests.
    pub admission: Option<String>,
    pub admission_expires_at: Option<DateTime<Utc>>,
    pub draw: QueueDraw,
    /// While waiting: ask again in this many milliseconds (sooner as the place nears, spread
    /// over a few seconds after the opening for who joined before it). Null when there is
    /// nothing left to wait for.
    pub poll_after_ms: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_is_a_number_or_auto() {
        let room: WaitingRoom = serde_json::from_str(r#"{"rate": 50}"#).unwrap();
        assert_eq!(room.rate, RoomRate::PerSec(50));
        assert_eq!((room.opens_before_secs, room.admission_secs, room.pow_difficulty), (600, 120, 0));
        let room: WaitingRoom = serde_json::from_str(r#"{"rate": "auto"}"#).unwrap();
        assert_eq!(room.rate, RoomRate::AUTO);
        assert_eq!(serde_json::to_value(room.rate).unwrap(), serde_json::json!("auto"));
        for bad in
            [r#"{"rate": "fast"}"#, r#"{"rate": -1}"#, r#"{"rate": 1.5}"#, r#"{"rate": 1, "x": 0}"#, "{}"]
        {
            assert!(serde_json::from_str::<WaitingRoom>(bad).is_err(), "{bad}");
        }
        assert_eq!(RoomRate::from_stored(RoomRate::AUTO.stored()), Some(RoomRate::AUTO));
        assert_eq!(RoomRate::from_stored(RoomRate::PerSec(7).stored()), Some(RoomRate::PerSec(7)));
        assert_eq!(RoomRate::from_stored(-3), None);
    }

    #[test]
    fn every_field_is_bounded() {
        let ok = WaitingRoom {
            rate: RoomRate::PerSec(1),
            opens_before_secs: 0,
            admission_secs: 10,
            pow_difficulty: 0,
        };
        assert_eq!(ok.invalid(), None);
        for (bad, field) in [
            (WaitingRoom { rate: RoomRate::PerSec(0), ..ok }, "rate"),
            (WaitingRoom { rate: RoomRate::PerSec(MAX_RATE + 1), ..ok }, "rate"),
            (WaitingRoom { opens_before_secs: MAX_OPENS_BEFORE_SECS + 1, ..ok }, "opens_before_secs"),
            (WaitingRoom { admission_secs: 9, ..ok }, "admission_secs"),
            (WaitingRoom { admission_secs: 3601, ..ok }, "admission_secs"),
            (WaitingRoom { pow_difficulty: MAX_POW_DIFFICULTY + 1, ..ok }, "pow_difficulty"),
        ] {
            let message = bad.invalid().unwrap();
            assert!(message.starts_with(&format!("waiting_room.{field} ")), "{message}");
        }
    }
}
