//! A sale's input at stock-service's own route, `POST /internal/stock/goods`: what the
//! database cannot store, or a page should not show, is a 400 naming the field, decided before
//! any write; and should the database refuse a value all the same, still a 400, never a 5xx.

use diesel_async::SimpleAsyncConnection;
use reqwest::Method;
use seckill_common::trust::Peer;
use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_app};

fn sale(name: &str) -> Value {
    json!({"name": name, "price_cents": 10, "seckill_price_cents": 5, "stock_total": 1,
        "start_at": "2030-01-01T00:00:00Z", "end_at": "2030-01-02T00:00:00Z"})
}

/// Posts `body` as it is (seckill-service's credential), returning the status and the body.
async fn create_raw(app: &TestApp, body: String) -> (u16, Value) {
    let res = app
        .signed(Peer::Seckill, Method::POST, "/internal/stock/goods")
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    (res.status().as_u16(), res.json().await.unwrap_or(Value::Null))
}

async fn goods_rows(app: &TestApp) -> i64 {
    #[derive(diesel::QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let mut conn = app.db.connect().await;
    let count: Count = diesel_async::RunQueryDsl::get_result(
        diesel::sql_query("SELECT count(*) AS n FROM goods"),
        &mut conn,
    )
    .await
    .unwrap();
    count.n
}

#[tokio::test]
async fn names_and_times_the_database_cannot_store_are_400_naming_the_field() {
    let app = spawn_app();
    let with = |field: &str, value: Value| {
        let mut body = sale("phone");
        body[field] = value;
        body.to_string()
    };
    for (what, body, field) in [
        ("a NUL", sale("pho\0ne").to_string(), "name"),
        ("a right-to-left override", sale("\u{202E}enohp").to_string(), "name"),
        ("a line feed", sale("two\nlines").to_string(), "name"),
        ("a C1 control", sale("x\u{9B}y").to_string(), "name"),
        ("201 characters", sale(&"é".repeat(201)).to_string(), "name"),
        ("only spaces", sale(" \u{3000} ").to_string(), "name"),
        ("a year before PostgreSQL's", with("start_at", json!("-5000-01-01T00:00:00Z")), "start_at"),
        ("a year before 1970", with("start_at", json!("1500-01-01T00:00:00Z")), "start_at"),
        ("a year after 9999", with("end_at", json!("+10000-01-01T00:00:00Z")), "end_at"),
        ("10000 in UTC", with("end_at", json!("9999-12-31T23:00:00-05:00")), "end_at"),
        ("a huge offset", with("end_at", json!("2030-01-02T00:00:00+99:00")), "end_at"),
        ("no offset", with("start_at", json!("2030-01-01T00:00:00")), "start_at"),
        ("a number", with("start_at", json!(1_900_000_000)), "start_at"),
        ("a lone surrogate", r#"{"name": "a\ud800b"}"#.to_owned(), "escape"),
        ("a price past i64", with("price_cents", json!(u64::MAX)), "i64"),
        ("buckets past u8", with("buckets", json!(300)), "u8"),
    ] {
        let (status, err) = create_raw(&app, body).await;
        assert_eq!((status, err["code"].as_str()), (400, Some("INVALID_INPUT")), "{what}: {err}");
        let message = err["message"].as_str().unwrap();
        assert!(message.contains(field), "{what}: the message names {field}: {message}");
    }
    assert_eq!(goods_rows(&app).await, 0, "nothing was written");

    // The bounds themselves are accepted, and a name is stored trimmed.
    let mut edge = sale(&format!("  {}  ", "😀".repeat(196)));
    edge["start_at"] = json!("1970-01-01T00:00:00Z");
    edge["end_at"] = json!("9999-12-31T23:59:59.999999Z");
    let (status, created) = create_raw(&app, edge.to_string()).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["name"], "😀".repeat(196));
    assert_eq!(created["end_at"], "9999-12-31T23:59:59.999999Z");
}

/// Defence in depth: a rule the database has and validation lacks (made here by tightening the
/// table) refuses a sale as the client's mistake, a 400, not a 500 that seckill-service passes
/// on as stock-service being unavailable. (Without stock-service's mapping, both are 500.)
#[tokio::test]
async fn a_value_the_database_refuses_anyway_is_a_400_not_a_5xx() {
    let app = spawn_app();
    let mut conn = app.db.connect().await;
    // 22001 string_data_right_truncation.
    conn.batch_execute("ALTER TABLE goods ALTER COLUMN name TYPE VARCHAR(8)").await.unwrap();
    let (status, err) = create_raw(&app, sale("a long phone name").to_string()).await;
    assert_eq!((status, err["code"].as_str()), (400, Some("INVALID_INPUT")), "{err}");
    // 23514 check_violation.
    conn.batch_execute("ALTER TABLE goods ADD CONSTRAINT no_x CHECK (name NOT LIKE '%x%')").await.unwrap();
    let (status, err) = create_raw(&app, sale("xphone").to_string()).await;
    assert_eq!((status, err["code"].as_str()), (400, Some("INVALID_INPUT")), "{err}");
    assert_eq!(goods_rows(&app).await, 0);
    let (status, _) = create_raw(&app, sale("phone").to_string()).await;
    assert_eq!(status, 201, "the table still takes what it can store");
}
