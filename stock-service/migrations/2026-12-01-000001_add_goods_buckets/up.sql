-- The Redis keys a sale's stock is split over (`NewGoods::buckets`, 1 to `MAX_BUCKETS`).
-- Sales made before this column had one key: they get 1.
ALTER TABLE goods
    ADD COLUMN buckets SMALLINT NOT NULL DEFAULT 1
    CONSTRAINT buckets_in_range CHECK (buckets BETWEEN 1 AND 8);
