DROP TABLE room_marks;
ALTER TABLE goods
    DROP CONSTRAINT room_all_or_none,
    DROP COLUMN room_pow_difficulty,
    DROP COLUMN room_admission_secs,
    DROP COLUMN room_opens_before_secs,
    DROP COLUMN room_rate;
