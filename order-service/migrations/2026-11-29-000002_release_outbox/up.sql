-- When the release of a cancelled or expired order's unit was confirmed by the broker. NULL on
-- such an order means the release is still owed: the sweeper publishes it (the row is its own
-- outbox, so a crash between the status update and the publish loses nothing).
ALTER TABLE orders ADD COLUMN release_sent_at TIMESTAMPTZ;

CREATE INDEX orders_release_owed ON orders (updated_at)
    WHERE status IN ('cancelled', 'expired') AND release_sent_at IS NULL;
CREATE INDEX orders_unpaid_by_expiry ON orders (expires_at) WHERE status = 'unpaid';
