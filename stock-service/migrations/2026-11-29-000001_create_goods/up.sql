-- Goods on sale and their authoritative stock.
CREATE TABLE goods (
    id BIGSERIAL PRIMARY KEY,
    name TEXT NOT NULL,
    price_cents BIGINT NOT NULL CHECK (price_cents >= 0),
    seckill_price_cents BIGINT NOT NULL CHECK (seckill_price_cents >= 0),
    stock_total BIGINT NOT NULL CHECK (stock_total >= 0),
    -- Never below 0, never above the total: the database refuses an oversell even if a bug asks.
    stock_available BIGINT NOT NULL,
    start_at TIMESTAMPTZ NOT NULL,
    end_at TIMESTAMPTZ NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT stock_available_in_range CHECK (stock_available >= 0 AND stock_available <= stock_total),
    CONSTRAINT window_ordered CHECK (end_at > start_at)
);

-- One row per deduction, keyed by the caller's order key: what makes deduct and release
-- idempotent. total = available + sum(quantity) of the rows not released, always.
CREATE TABLE stock_ledger (
    order_key UUID PRIMARY KEY,
    goods_id BIGINT NOT NULL REFERENCES goods (id),
    quantity INT NOT NULL CHECK (quantity > 0),
    deducted_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    released_at TIMESTAMPTZ
);

CREATE INDEX stock_ledger_held ON stock_ledger (goods_id) WHERE released_at IS NULL;
