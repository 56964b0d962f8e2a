DROP INDEX orders_unpaid_by_expiry;
DROP INDEX orders_release_owed;
ALTER TABLE orders DROP COLUMN release_sent_at;
