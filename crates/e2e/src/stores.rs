//! Direct looks into what the services keep, for checking invariants behind the gateway's back:
//! Redis (a sale's stock and reservations, per bucket too), the order and stock databases
//! (active orders, order keys, held units) and the queues (their depth), and messages published
//! straight to a queue, signed as a peer or raw.

use diesel_async::RunQueryDsl;
use redis::AsyncCommands;
use seckill_common::GoodsId;
use seckill_common::keys::SaleBucket;
use seckill_common::trust::Peer;
use seckill_testkit::{amqp_url, keys};

use crate::System;

impl System {
    /// A connection to the services' Redis (on a cluster, commands go to their keys' nodes).
    pub async fn redis(&self) -> seckill_infra::redis::Redis {
        seckill_infra::redis::connect(&self.redis_settings).unwrap()
    }

    pub async fn redis_stock(&self, g: GoodsId) -> Option<i64> {
        self.redis().await.get(self.redis_keys.stock(g)).await.unwrap()
    }

    pub async fn redis_users(&self, g: GoodsId) -> i64 {
        self.redis().await.hlen(self.redis_keys.users(g)).await.unwrap()
    }

    /// Each bucket's stock in Redis (None: not loaded), bucket 0 first.
    pub async fn redis_bucket_stocks(&self, g: GoodsId, buckets: u8) -> Vec<Option<i64>> {
        let mut redis = self.redis().await;
        let mut out = Vec::new();
        for at in SaleBucket::all(g, buckets) {
            out.push(redis.get(self.redis_keys.bucket_stock(at)).await.unwrap());
        }
        out
    }

    /// Each bucket's reservations in Redis, bucket 0 first.
    pub async fn redis_bucket_users(&self, g: GoodsId, buckets: u8) -> Vec<i64> {
        let mut redis = self.redis().await;
        let mut out = Vec::new();
        for at in SaleBucket::all(g, buckets) {
            out.push(redis.hlen(self.redis_keys.bucket_users(at)).await.unwrap());
        }
        out
    }

    /// Active (unpaid or paid) orders of a sale, straight from the order database, and the
    /// most any one user holds.
    pub async fn active_orders(&self, g: GoodsId) -> (i64, i64) {
        #[derive(diesel::QueryableByName)]
        struct Row {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            orders: i64,
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            most_per_user: i64,
        }
        let mut conn = self.order_db.connect().await;
        let row: Row = diesel::sql_query(
            "WITH active AS (SELECT user_id FROM orders WHERE goods_id = $1 AND status IN ('unpaid', 'paid')) \
             SELECT (SELECT COUNT(*) FROM active)::BIGINT AS orders, \
                    (SELECT COALESCE(MAX(n), 0) FROM (SELECT COUNT(*) AS n FROM active GROUP BY user_id) u)::BIGINT \
                    AS most_per_user",
        )
        .bind::<diesel::sql_types::BigInt, _>(g.get())
        .get_result(&mut conn)
        .await
        .unwrap();
        (row.orders, row.most_per_user)
    }

    /// The request id (the order key at stock-service) of an order, from the order database.
    pub async fn order_key_of(&self, order_id: i64) -> String {
        #[derive(diesel::QueryableByName)]
        struct Row {
            #[diesel(sql_type = diesel::sql_types::Text)]
            key: String,
        }
        let mut conn = self.order_db.connect().await;
        let row: Row = diesel::sql_query("SELECT request_id::TEXT AS key FROM orders WHERE id = $1")
            .bind::<diesel::sql_types::BigInt, _>(order_id)
            .get_result(&mut conn)
            .await
            .unwrap();
        row.key
    }

    /// Units held by unreleased deductions at stock-service, straight from its database.
    pub async fn held_at_stock(&self, g: GoodsId) -> i64 {
        let mut conn = self.stock_db.connect().await;
        stock_service::ledger::held(&mut conn, g.get()).await.unwrap()
    }

    /// Messages waiting in a queue of this test.
    pub async fn queue_depth(&self, queue: &str) -> u32 {
        let conn =
            lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default()).await.unwrap();
        let channel = conn.create_channel().await.unwrap();
        let q = channel
            .queue_declare(
                queue.into(),
                lapin::options::QueueDeclareOptions { passive: true, ..Default::default() },
                Default::default(),
            )
            .await
            .unwrap();
        let _ = conn.close(200, "checked".into()).await;
        q.message_count()
    }

    /// Publishes `body` as `from` would, signed for `to` (the queue's consumer).
    pub async fn publish_as(&self, from: Peer, to: Peer, queue: &str, body: &[u8]) {
        let signature = keys::trust(from).sign_message(to, body);
        let mut headers = lapin::types::FieldTable::default();
        headers.insert(
            seckill_common::trust::SIGNATURE_HEADER.into(),
            lapin::types::AMQPValue::LongString(signature.into()),
        );
        self.publish_with(queue, body, lapin::BasicProperties::default().with_headers(headers)).await;
    }

    /// Publishes `body` unsigned, as an intruder on the broker would.
    pub async fn publish_raw(&self, queue: &str, body: &[u8]) {
        self.publish_with(queue, body, lapin::BasicProperties::default()).await;
    }

    async fn publish_with(&self, queue: &str, body: &[u8], properties: lapin::BasicProperties) {
        let conn =
            lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default()).await.unwrap();
        let channel = conn.create_channel().await.unwrap();
        channel.confirm_select(Default::default()).await.unwrap();
        channel
            .basic_publish(
                "".into(),
                queue.into(),
                Default::default(),
                body,
                properties.with_delivery_mode(2),
            )
            .await
            .unwrap()
            .await
            .unwrap();
        let _ = conn.close(200, "published".into()).await;
    }
}
