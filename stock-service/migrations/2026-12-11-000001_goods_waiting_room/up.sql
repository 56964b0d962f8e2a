-- A sale's waiting room (`NewGoods::waiting_room`, crates/common/src/room/bodies.rs), set when
-- the sale is created and never after. A sale without a room has all four NULL, a sale with
-- one all four set; each within the bounds `WaitingRoom::invalid` checks, so a row the API
-- could not show is refused here even if a bug asks.
ALTER TABLE goods
    -- Places admitted a second, 0 for `auto` (`RoomRate::stored`).
    ADD COLUMN room_rate INTEGER NULL
        CONSTRAINT room_rate_in_range CHECK (room_rate BETWEEN 0 AND 1000000),
    ADD COLUMN room_opens_before_secs INTEGER NULL
        CONSTRAINT room_opens_before_in_range CHECK (room_opens_before_secs BETWEEN 0 AND 604800),
    ADD COLUMN room_admission_secs INTEGER NULL
        CONSTRAINT room_admission_in_range CHECK (room_admission_secs BETWEEN 10 AND 3600),
    ADD COLUMN room_pow_difficulty SMALLINT NULL
        CONSTRAINT room_pow_difficulty_in_range CHECK (room_pow_difficulty BETWEEN 0 AND 24),
    ADD CONSTRAINT room_all_or_none CHECK (
        num_nulls(room_rate, room_opens_before_secs, room_admission_secs, room_pow_difficulty) IN (0, 4)
    );

-- What stock-service keeps of a room (`RoomMarks`) so that neither a restart of
-- seckill-service nor a loss of Redis hands a join number or a place out twice: every count
-- only rises, `drawn` is set once. A sale's row is made by the first call that names it
-- (`POST /internal/stock/rooms/{goods_id}`), and only for a sale that has a room.
CREATE TABLE room_marks (
    goods_id BIGINT PRIMARY KEY REFERENCES goods (id),
    joins_before BIGINT NOT NULL DEFAULT 0 CHECK (joins_before >= 0),
    joins_after BIGINT NOT NULL DEFAULT 0 CHECK (joins_after >= 0),
    -- NULL until the sale opens and the size of the draw is fixed.
    drawn BIGINT NULL CHECK (drawn >= 0),
    admitted BIGINT NOT NULL DEFAULT 0 CHECK (admitted >= 0),
    -- Unix milliseconds.
    admitted_at_ms BIGINT NOT NULL DEFAULT 0
);
