-- The waiting room leader's marks (`RoomMarks::came_up`): `admitted` places of the sale had
-- come up by `at_ms` (Unix ms). Kept for an admission's life (older rows are deleted as new
-- ones come), so a room loaded again after a loss of Redis ends each admission when it would
-- have, even on a seckill-service replica started after the loss.
CREATE TABLE room_came_up (
    goods_id BIGINT NOT NULL REFERENCES goods (id),
    admitted BIGINT NOT NULL CHECK (admitted >= 0),
    at_ms BIGINT NOT NULL,
    PRIMARY KEY (goods_id, admitted)
);
