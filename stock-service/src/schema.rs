//! Diesel's view of the tables in `migrations/`. Written to match the migrations (what
//! `diesel print-schema` prints); change both together.

diesel::table! {
    goods (id) {
        id -> Int8,
        name -> Text,
        price_cents -> Int8,
        seckill_price_cents -> Int8,
        stock_total -> Int8,
        stock_available -> Int8,
        start_at -> Timestamptz,
        end_at -> Timestamptz,
        created_at -> Timestamptz,
        buckets -> Int2,
        room_rate -> Nullable<Int4>,
        room_opens_before_secs -> Nullable<Int4>,
        room_admission_secs -> Nullable<Int4>,
        room_pow_difficulty -> Nullable<Int2>,
    }
}

diesel::table! {
    room_came_up (goods_id, admitted) {
        goods_id -> Int8,
        admitted -> Int8,
        at_ms -> Int8,
    }
}

diesel::table! {
    room_marks (goods_id) {
        goods_id -> Int8,
        joins_before -> Int8,
        joins_after -> Int8,
        drawn -> Nullable<Int8>,
        admitted -> Int8,
        admitted_at_ms -> Int8,
    }
}

diesel::table! {
    stock_ledger (order_key) {
        order_key -> Uuid,
        goods_id -> Int8,
        quantity -> Int4,
        deducted_at -> Timestamptz,
        released_at -> Nullable<Timestamptz>,
    }
}

diesel::joinable!(room_came_up -> goods (goods_id));
diesel::joinable!(room_marks -> goods (goods_id));
diesel::joinable!(stock_ledger -> goods (goods_id));
diesel::allow_tables_to_appear_in_same_query!(goods, room_came_up, room_marks, stock_ledger);
