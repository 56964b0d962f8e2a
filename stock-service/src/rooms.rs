//! A sale's waiting room as stock-service keeps it: the room's settings, four columns of the
//! sale's `goods` row.

use seckill_common::room::{RoomRate, WaitingRoom};

/// A room's columns of `goods`: rate (0 for `auto`), opens before, admission, proof of work.
/// All `None` for a sale without a room.
pub type RoomColumns = (Option<i32>, Option<i32>, Option<i32>, Option<i16>);

/// The columns that store `room`.
pub fn to_columns(room: Option<&WaitingRoom>) -> RoomColumns {
    match room {
        None => (None, None, None, None),
        // `NewGoods::validate` kept each field far inside an i32; one that is not cannot be
        // stored as it is, so it becomes a value the column's CHECK refuses, never a room
        // other than the one asked for.
        Some(r) => (
            Some(r.rate.stored()),
            Some(i32::try_from(r.opens_before_secs).unwrap_or(i32::MAX)),
            Some(i32::try_from(r.admission_secs).unwrap_or(i32::MAX)),
            Some(i16::from(r.pow_difficulty)),
        ),
    }
}

/// The room `columns` store; `Err` saying what they hold when no valid room has them (some
/// set and some not, or a value out of bounds), which is a corrupt row.
pub fn from_columns(columns: RoomColumns) -> Result<Option<WaitingRoom>, String> {
    let room = match columns {
        (None, None, None, None) => return Ok(None),
        (Some(rate), Some(opens), Some(admission), Some(pow)) => (|| {
            Some(WaitingRoom {
                rate: RoomRate::from_stored(rate)?,
                opens_before_secs: u32::try_from(opens).ok()?,
                admission_secs: u32::try_from(admission).ok()?,
                pow_difficulty: u8::try_from(pow).ok()?,
            })
        })(),
        _ => None,
    };
    room.filter(|r| r.invalid().is_none())
        .map(Some)
        .ok_or_else(|| format!("no valid waiting room has the columns {columns:?}"))
}
