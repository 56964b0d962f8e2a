-- `GET /api/goods` lists by state a page at a time (crates/common/src/listing.rs): the live
-- and upcoming sales by (start_at, id), the ended ones by (end_at, id) from the latest. Each
-- page is one range scan of one of these, however many sales ended before.
CREATE INDEX goods_by_start ON goods (start_at, id);
CREATE INDEX goods_by_end ON goods (end_at, id);
