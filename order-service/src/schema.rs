//! Diesel's view of the tables in `migrations/`. Written to match the migrations (what
//! `diesel print-schema` prints); change both together.

diesel::table! {
    orders (id) {
        id -> Int8,
        request_id -> Uuid,
        user_id -> Int8,
        goods_id -> Int8,
        price_cents -> Int8,
        status -> Text,
        created_at -> Timestamptz,
        expires_at -> Timestamptz,
        updated_at -> Timestamptz,
        release_sent_at -> Nullable<Timestamptz>,
    }
}
