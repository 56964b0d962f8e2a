-- A sale's active orders, by id: what seckill-service reads to rebuild Redis after it lost its
-- data, and what the audit counts. Partial, like the one-active-per-user index.
CREATE INDEX orders_active_by_sale ON orders (goods_id, id) WHERE status IN ('unpaid', 'paid');
