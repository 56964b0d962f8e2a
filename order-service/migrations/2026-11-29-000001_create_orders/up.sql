CREATE TABLE orders (
    id BIGSERIAL PRIMARY KEY,
    -- The buy request this order fulfils: re-delivered messages find it and do nothing twice.
    -- Also the order key of its stock deduction at stock-service.
    request_id UUID NOT NULL UNIQUE,
    user_id BIGINT NOT NULL,
    goods_id BIGINT NOT NULL,
    price_cents BIGINT NOT NULL CHECK (price_cents >= 0),
    status TEXT NOT NULL DEFAULT 'unpaid' CHECK (status IN ('unpaid', 'paid', 'cancelled', 'expired')),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- One active (unpaid or paid) order per user and sale; after a cancel or expiry, another.
CREATE UNIQUE INDEX orders_one_active_per_user ON orders (user_id, goods_id)
    WHERE status IN ('unpaid', 'paid');

CREATE INDEX orders_by_user ON orders (user_id, id DESC);
