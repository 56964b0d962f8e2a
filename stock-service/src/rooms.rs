//! A sale's waiting room as stock-service keeps it: the room's settings, four columns of the
//! sale's `goods` row, and the room's marks (`room_marks`), which only rise.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable};
use diesel::upsert::excluded;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use seckill_common::GoodsId;
use seckill_common::room::{ADMISSION_SECS, CameUp, RoomMarks, RoomRate, RoomRecord, WaitingRoom};

use crate::schema::{goods, room_came_up, room_marks};

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

/// [`RoomMarks`] as `room_marks` holds them: BIGINTs, so every count is at most `i64::MAX`;
/// and the leader's mark sent with them, `(admitted, at_ms)` for `room_came_up`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredMarks {
    pub joins_before: i64,
    pub joins_after: i64,
    pub drawn: Option<i64>,
    pub admitted: i64,
    pub admitted_at_ms: i64,
    pub came_up: Option<(i64, i64)>,
}

/// A row of `room_marks` (without its sale): the columns [`MARKS`] reads.
type MarksRow = (i64, i64, Option<i64>, i64, i64);

const MARKS: (
    room_marks::joins_before,
    room_marks::joins_after,
    room_marks::drawn,
    room_marks::admitted,
    room_marks::admitted_at_ms,
) = (
    room_marks::joins_before,
    room_marks::joins_after,
    room_marks::drawn,
    room_marks::admitted,
    room_marks::admitted_at_ms,
);

/// The marks a row of sale `g` holds. The table's CHECKs keep every count from being
/// negative: one that is, is a corrupt row.
fn marks_of(g: GoodsId, row: MarksRow) -> Result<RoomMarks, diesel::result::Error> {
    RoomMarks::try_from(StoredMarks::from(row)).map_err(|why| corrupt(g, &why))
}

fn corrupt(g: GoodsId, why: &str) -> diesel::result::Error {
    diesel::result::Error::DeserializationError(format!("goods {g}: {why}").into())
}

impl From<MarksRow> for StoredMarks {
    fn from((joins_before, joins_after, drawn, admitted, admitted_at_ms): MarksRow) -> Self {
        Self { joins_before, joins_after, drawn, admitted, admitted_at_ms, came_up: None }
    }
}

/// The leader's marks are kept this long after the newest (the longest admission's life and
/// a little more); older ones can no longer say when an admission ends.
const CAME_UP_KEPT_MS: i64 = (*ADMISSION_SECS.end() as i64 + 10) * 1_000;

impl TryFrom<&RoomMarks> for StoredMarks {
    /// Names the field that does not fit.
    type Error = String;

    fn try_from(m: &RoomMarks) -> Result<Self, String> {
        let fit =
            |name: &str, n: u64| i64::try_from(n).map_err(|_| format!("{name} must be at most {}", i64::MAX));
        Ok(Self {
            joins_before: fit("joins_before", m.joins_before)?,
            joins_after: fit("joins_after", m.joins_after)?,
            drawn: m.drawn.map(|d| fit("drawn", d)).transpose()?,
            admitted: fit("admitted", m.admitted)?,
            admitted_at_ms: m.admitted_at_ms,
            came_up: m
                .came_up
                .map(|c| Ok::<_, String>((fit("came_up.admitted", c.admitted)?, c.at_ms)))
                .transpose()?,
        })
    }
}

impl TryFrom<StoredMarks> for RoomMarks {
    /// Names the count that is negative, which the table's CHECKs forbid: a corrupt row.
    type Error = String;

    fn try_from(m: StoredMarks) -> Result<Self, String> {
        let count = |name: &str, n: i64| u64::try_from(n).map_err(|_| format!("room mark {name} is {n}"));
        Ok(Self {
            joins_before: count("joins_before", m.joins_before)?,
            joins_after: count("joins_after", m.joins_after)?,
            drawn: m.drawn.map(|d| count("drawn", d)).transpose()?,
            admitted: count("admitted", m.admitted)?,
            admitted_at_ms: m.admitted_at_ms,
            came_up: None,
        })
    }
}

/// Why a sale's marks were not raised.
#[derive(Debug, thiserror::Error)]
pub enum RaiseError {
    #[error("no such goods")]
    UnknownGoods,
    #[error("the sale has no waiting room")]
    NoRoom,
    #[error(transparent)]
    Query(#[from] diesel::result::Error),
}

diesel::define_sql_function! {
    /// The larger of two marks.
    fn greatest(a: BigInt, b: BigInt) -> BigInt;
}

diesel::define_sql_function! {
    /// The first of two that is not null: the draw's size, once fixed, stays.
    fn coalesce(a: Nullable<BigInt>, b: Nullable<BigInt>) -> Nullable<BigInt>;
}

/// Raises the marks of sale `g` to at least `to` (sets `drawn` if it is not set yet) and
/// returns them as they now stand. One statement, so concurrent raises end at the largest of
/// each, whatever their order; its first call for a sale makes the sale's row.
pub async fn raise(
    conn: &mut AsyncPgConnection,
    g: GoodsId,
    to: StoredMarks,
) -> Result<RoomMarks, RaiseError> {
    // The row to insert, only when the sale exists and has a room.
    let for_a_room =
        goods::table.filter(goods::id.eq(g.get())).filter(goods::room_rate.is_not_null()).select((
            goods::id,
            to.joins_before.into_sql::<BigInt>(),
            to.joins_after.into_sql::<BigInt>(),
            to.drawn.into_sql::<Nullable<BigInt>>(),
            to.admitted.into_sql::<BigInt>(),
            to.admitted_at_ms.into_sql::<BigInt>(),
        ));
    let raised = diesel::insert_into(room_marks::table)
        .values(for_a_room)
        .into_columns((
            room_marks::goods_id,
            room_marks::joins_before,
            room_marks::joins_after,
            room_marks::drawn,
            room_marks::admitted,
            room_marks::admitted_at_ms,
        ))
        .on_conflict(room_marks::goods_id)
        .do_update()
        .set((
            room_marks::joins_before
                .eq(greatest(room_marks::joins_before, excluded(room_marks::joins_before))),
            room_marks::joins_after.eq(greatest(room_marks::joins_after, excluded(room_marks::joins_after))),
            room_marks::drawn.eq(coalesce(room_marks::drawn, excluded(room_marks::drawn))),
            room_marks::admitted.eq(greatest(room_marks::admitted, excluded(room_marks::admitted))),
            room_marks::admitted_at_ms
                .eq(greatest(room_marks::admitted_at_ms, excluded(room_marks::admitted_at_ms))),
        ))
        .returning(MARKS)
        .get_result::<MarksRow>(conn)
        .await
        .optional()?;
    if let Some(marks) = raised {
        if let Some((admitted, at_ms)) = to.came_up {
            keep_came_up(conn, g, admitted, at_ms).await?;
        }
        return Ok(marks_of(g, marks)?);
    }
    // Nothing inserted: tell a missing sale from a sale without a room (a room is set when
    // the sale is created and never after, so the answer cannot have changed since).
    let sale = goods::table.find(g.get()).select(goods::id).first::<i64>(conn).await.optional()?;
    Err(if sale.is_some() { RaiseError::NoRoom } else { RaiseError::UnknownGoods })
}

/// Keeps the leader's mark that `admitted` places had come up by `at_ms` (the first one sent
/// for a count stands), and drops the marks too old to matter.
async fn keep_came_up(
    conn: &mut AsyncPgConnection,
    g: GoodsId,
    admitted: i64,
    at_ms: i64,
) -> Result<(), diesel::result::Error> {
    diesel::insert_into(room_came_up::table)
        .values((
            room_came_up::goods_id.eq(g.get()),
            room_came_up::admitted.eq(admitted),
            room_came_up::at_ms.eq(at_ms),
        ))
        .on_conflict_do_nothing()
        .execute(conn)
        .await?;
    diesel::delete(
        room_came_up::table
            .filter(room_came_up::goods_id.eq(g.get()))
            .filter(room_came_up::at_ms.lt(at_ms - CAME_UP_KEPT_MS)),
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Sale `g`'s room as kept here: its marks (zeros before the first raise) and the leader's
/// marks, oldest first.
pub async fn record(conn: &mut AsyncPgConnection, g: GoodsId) -> Result<RoomRecord, RaiseError> {
    let room = goods::table
        .find(g.get())
        .select(goods::room_rate)
        .first::<Option<i32>>(conn)
        .await
        .optional()?
        .ok_or(RaiseError::UnknownGoods)?;
    if room.is_none() {
        return Err(RaiseError::NoRoom);
    }
    let marks = room_marks::table
        .find(g.get())
        .select(MARKS)
        .first::<MarksRow>(conn)
        .await
        .optional()?
        .map(|row| marks_of(g, row))
        .transpose()?
        .unwrap_or_default();
    let came_up = room_came_up::table
        .filter(room_came_up::goods_id.eq(g.get()))
        .order(room_came_up::admitted.asc())
        .select((room_came_up::at_ms, room_came_up::admitted))
        .load::<(i64, i64)>(conn)
        .await?
        .into_iter()
        .map(|(at_ms, admitted)| {
            let admitted = u64::try_from(admitted).map_err(|_| corrupt(g, &format!("came_up {admitted}")))?;
            Ok(CameUp { at_ms, admitted })
        })
        .collect::<Result<_, diesel::result::Error>>()?;
    Ok(RoomRecord { marks, came_up })
}
