//! The calls through the gateway that every tool makes before its load: a dev token, a sale.

use anyhow::bail;
use chrono::Utc;
use seckill_common::api::{Goods, NewGoods, TokenResponse};
use seckill_common::room::WaitingRoom;
use serde_json::json;

use crate::client::{Conn, Req, bearer_header};

/// A dev token for `user` with `role`, from `POST /api/auth/dev-token`.
pub async fn dev_token(conn: &mut Conn, user: i64, role: &str) -> anyhow::Result<String> {
    let a = conn.send(Req::post("/api/auth/dev-token").json(&json!({"user_id": user, "role": role}))).await;
    if a.status != 200 {
        bail!(
            "POST /api/auth/dev-token answered HTTP {} ({}); the gateway needs auth.dev_tokens = true",
            a.status,
            String::from_utf8_lossy(&a.body)
        );
    }
    Ok(serde_json::from_slice::<TokenResponse>(&a.body)?.token)
}

/// Creates a sale of `units` over `buckets` stock buckets, named "<label> <time>", that opened
/// `opened_ago` before now (`POST /api/admin/goods` as `admin`); the fault suite creates its
/// sales the same way.
pub async fn create_sale(
    conn: &mut Conn,
    admin: &str,
    label: &str,
    units: i64,
    buckets: u8,
    opened_ago: chrono::Duration,
    waiting_room: Option<WaitingRoom>,
) -> anyhow::Result<Goods> {
    let now = Utc::now();
    let body = NewGoods {
        name: format!("{label} {}", now.format("%H:%M:%S")),
        price_cents: 99_900,
        seckill_price_cents: 49_900,
        stock_total: units,
        start_at: now - opened_ago,
        end_at: now + chrono::Duration::hours(2),
        buckets,
        waiting_room,
    };
    let bearer = bearer_header(admin)?;
    let a = conn.send(Req::post("/api/admin/goods").bearer(&bearer).json(&body)).await;
    if a.status != 201 {
        bail!("POST /api/admin/goods answered HTTP {}: {}", a.status, String::from_utf8_lossy(&a.body));
    }
    Ok(serde_json::from_slice(&a.body)?)
}
