//! The OpenAPI document and its reference page: served and cached, complete against the
//! router, saying who may call what as the gateway enforces it, and describing the bodies as
//! serde really writes them.

use std::collections::BTreeSet;

use chrono::TimeZone;
use gateway::routes::{Access, ROUTES};
use seckill_common::api::{
    AuthorityAudit, DevTokenRequest, Goods, NewGoods, Order, OrderAccepted, OrderStatus, QueueAudit,
    RedisAudit, Role, SaleAudit, SaleRepair, SeckillResult, SeckillStatus, TokenResponse,
};
use seckill_common::room::{RoomRate, WaitingRoom};
use seckill_common::{ErrorBody, ErrorCode, GoodsId, OrderId, UserId};
use serde::Serialize;
use serde_json::{Value, json};

use crate::helpers::{TestApp, admin_token, assert_error, spawn_app, spawn_app_with, user_token};

/// Every method a path item may hold.
const METHODS: [&str; 8] = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];

async fn document(app: &TestApp) -> Value {
    let res = app.get("/api/openapi.json").send().await.unwrap();
    assert_eq!(res.status(), 200);
    res.json().await.expect("the document is JSON")
}

/// `(METHOD, path)` of every operation in the document.
fn operations(doc: &Value) -> BTreeSet<(String, String)> {
    let mut ops = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in METHODS.iter().filter(|m| item.get(**m).is_some()) {
            ops.insert((method.to_uppercase(), path.clone()));
        }
    }
    ops
}

/// A path of the document with every `{parameter}` set to 1.
fn concrete(path: &str) -> String {
    path.split('/')
        .map(|seg| match seg {
            "{file}" => "store.js",
            seg if seg.starts_with('{') => "1",
            seg => seg,
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[tokio::test]
async fn the_document_is_served_as_openapi_3_1_from_memory_with_an_etag() {
    let app = spawn_app();

    let res = app.get("/api/openapi.json").send().await.unwrap();

    assert_eq!(res.status(), 200);
    let header = |name: &str| res.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    assert_eq!(header("content-type").as_deref(), Some("application/json"));
    assert_eq!(header("cache-control").as_deref(), Some("public, no-cache"));
    let etag = header("etag").expect("an ETag");
    assert!(etag.starts_with('"') && etag.ends_with('"') && etag.len() > 10, "{etag}");
    let doc: Value = res.json().await.unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1."), "{}", doc["openapi"]);
    assert_eq!(doc["info"]["title"], "seckill");
    assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");
    // The same bytes every time (built once).
    let again = app.get("/api/openapi.json").send().await.unwrap();
    assert_eq!(again.headers()["etag"].to_str().unwrap(), etag);
    assert_eq!(again.json::<Value>().await.unwrap(), doc);
}

#[tokio::test]
async fn every_route_the_gateway_registers_is_documented_with_its_method_and_nothing_else() {
    let app = spawn_app();

    let documented = operations(&document(&app).await);

    let mut registered: BTreeSet<(String, String)> =
        ROUTES.iter().map(|r| (r.method.as_str().to_owned(), r.path.to_owned())).collect();
    // Every service's own probe, registered by seckill_web on the same server.
    registered.insert(("GET".into(), "/healthz".into()));
    let undocumented: Vec<_> = registered.difference(&documented).collect();
    let unregistered: Vec<_> = documented.difference(&registered).collect();
    assert!(undocumented.is_empty(), "routes missing from the document: {undocumented:?}");
    assert!(unregistered.is_empty(), "documented but not registered: {unregistered:?}");
    assert_eq!(documented.len(), ROUTES.len() + 1);
}

#[tokio::test]
async fn each_documented_operation_exists_and_is_guarded_as_its_security_says() {
    let app = spawn_app();
    let doc = document(&app).await;
    let (user, admin) = (user_token(21), admin_token(22));

    for (method, path) in operations(&doc) {
        let op = &doc["paths"][&path][method.to_lowercase()];
        let security = op["security"].as_array().unwrap_or_else(|| panic!("{method} {path}: no security"));
        let roles: Vec<&str> = security
            .iter()
            .flat_map(|req| req.as_object().unwrap().values())
            .flat_map(|roles| roles.as_array().unwrap().iter().map(|r| r.as_str().unwrap()))
            .collect();
        let anyone = security.iter().any(|req| req.as_object().unwrap().is_empty());
        let expected = match ROUTES.iter().find(|r| r.path == path && r.method.as_str() == method) {
            Some(route) => route.access(),
            None => Access::Probe, // /healthz
        };
        match expected {
            Access::Probe | Access::Page | Access::Anonymous => {
                assert!(anyone, "{method} {path}: {security:?}")
            }
            Access::User => assert!(!anyone && roles.is_empty(), "{method} {path}: {security:?}"),
            Access::Admin => assert!(!anyone && roles == ["admin"], "{method} {path}: {security:?}"),
        }

        let url = format!("{}{}", app.address, concrete(&path));
        let send = |token: Option<&str>| {
            let mut req = app.client.request(method.parse().unwrap(), &url);
            if let Some(token) = token {
                req = req.bearer_auth(token);
            }
            req.send()
        };
        let bare = send(None).await.unwrap();
        if anyone {
            assert!(bare.status() != 401, "{method} {path} asked an anonymous caller for a token");
        } else {
            assert_error(bare, 401, "UNAUTHORIZED").await;
        }
        if roles.contains(&"admin") {
            assert_error(send(Some(&user)).await.unwrap(), 403, "FORBIDDEN").await;
        }
        // With the right token the route is there: neither "no such route" nor "not this method".
        let res = send(Some(&admin)).await.unwrap();
        assert!(![404, 405].contains(&res.status().as_u16()), "{method} {path}: {}", res.status());
    }
}

#[tokio::test]
async fn without_dev_tokens_the_dev_token_route_is_neither_served_nor_documented() {
    let app = spawn_app_with(|s| s.auth.dev_tokens = false);

    let documented = operations(&document(&app).await);

    assert!(!documented.iter().any(|(_, path)| path == "/api/auth/dev-token"), "{documented:?}");
    let res = app.post("/api/auth/dev-token").json(&json!({"user_id": 1})).send().await.unwrap();
    assert_error(res, 404, "NOT_FOUND").await;
    // The other routes are all still there.
    assert_eq!(documented.len(), ROUTES.len());
}

#[tokio::test]
async fn a_client_holding_the_current_etag_gets_a_304_without_a_body() {
    let app = spawn_app();
    for path in ["/api/openapi.json", "/api/docs"] {
        let first = app.get(path).send().await.unwrap();
        let etag = first.headers()["etag"].to_str().unwrap().to_owned();

        let res = app.get(path).header("if-none-match", &etag).send().await.unwrap();
        assert_eq!(res.status(), 304, "{path}");
        assert_eq!(res.headers()["etag"].to_str().unwrap(), etag);
        assert!(res.headers().contains_key("cache-control"));
        assert!(res.bytes().await.unwrap().is_empty());

        // Weakly compared, and found in a list.
        let res = app.get(path).header("if-none-match", format!("\"other\", W/{etag}")).send().await.unwrap();
        assert_eq!(res.status(), 304, "{path}");
        // Another tag: the whole answer.
        let res = app.get(path).header("if-none-match", "\"stale\"").send().await.unwrap();
        assert_eq!(res.status(), 200, "{path}");
        assert!(!res.bytes().await.unwrap().is_empty());
    }
}

#[tokio::test]
async fn the_docs_page_is_html_that_loads_nothing_from_elsewhere() {
    let app = spawn_app();

    let res = app.get("/api/docs").send().await.unwrap();

    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "text/html; charset=utf-8");
    let policy = res.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert!(policy.starts_with("default-src 'none';") && policy.contains("connect-src 'self'"), "{policy}");
    let html = res.text().await.unwrap();
    assert!(html.starts_with("<!doctype html>"));
    assert!(html.contains("fetch(\"openapi.json\""), "the page reads the document from its own origin");
    for scheme in ["http://", "https://"] {
        assert!(!html.contains(scheme), "the page names an external URL ({scheme})");
    }
    // Every src/href in the markup and the script stays on this origin: an anchor or a
    // relative path, never `//host`.
    for attribute in ["src=", "href=", ".src =", ".href ="] {
        for (i, _) in html.match_indices(attribute) {
            let value = html[i + attribute.len()..].trim_start().trim_start_matches(['"', '\'']);
            assert!(!value.starts_with("//"), "{attribute} {}", &value[..value.len().min(40)]);
        }
    }
    assert!(!html.contains("@import") && !html.contains("url("), "the style loads nothing");
}

#[tokio::test]
async fn the_reference_routes_share_the_anonymous_limit() {
    let app = spawn_app_with(|s| {
        s.rate_limit.anonymous.per_sec = Some(1);
        s.rate_limit.anonymous.burst = Some(2);
    });

    let mut statuses = Vec::new();
    for path in ["/api/openapi.json", "/api/docs", "/api/goods", "/api/openapi.json", "/api/docs"] {
        let res = app.get(path).send().await.unwrap();
        statuses.push(res.status().as_u16());
        if res.status() == 429 {
            assert_eq!(res.headers()["retry-after"], "1");
            assert_error(res, 429, "RATE_LIMITED").await;
        }
    }
    assert_eq!(&statuses[..2], &[200, 200], "{statuses:?}");
    assert!(statuses[2..].contains(&429), "{statuses:?}");
}

// ---------------------------------------------------------------------------------------------
// Bodies against the document's schemas

/// Checks `value` against `schema` as far as the document uses JSON Schema: `$ref`, `type` (one
/// or a list), `oneOf`, `enum`, `minimum`, `maximum`, the `date-time` and `uuid` formats,
/// arrays' `items`, and objects: every property written is in `properties`, every `required`
/// one is written. The error names the JSON path that disagrees.
fn check(doc: &Value, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    if let Some(reference) = schema["$ref"].as_str() {
        let name = reference.strip_prefix("#/components/schemas/").ok_or(format!("{at}: ref {reference}"))?;
        let target = &doc["components"]["schemas"][name];
        if target.is_null() {
            return Err(format!("{at}: no schema {name}"));
        }
        return check(doc, target, value, at);
    }
    if let Some(alternatives) = schema["oneOf"].as_array() {
        let matching = alternatives.iter().filter(|alt| check(doc, alt, value, at).is_ok()).count();
        return if matching == 1 {
            Ok(())
        } else {
            Err(format!("{at}: {value} matches {matching} of the oneOf alternatives"))
        };
    }
    if let Some(kinds) = match &schema["type"] {
        Value::String(kind) => Some(vec![kind.as_str()]),
        Value::Array(kinds) => Some(kinds.iter().filter_map(Value::as_str).collect()),
        _ => None,
    } && !kinds.iter().any(|kind| is_a(value, kind))
    {
        return Err(format!("{at}: {value} is not of type {kinds:?}"));
    }
    if let Some(values) = schema["enum"].as_array()
        && !values.contains(value)
    {
        return Err(format!("{at}: {value} is not one of {values:?}"));
    }
    if let (Some(min), Some(n)) = (schema["minimum"].as_f64(), value.as_f64())
        && n < min
    {
        return Err(format!("{at}: {n} is below the minimum {min}"));
    }
    if let (Some(max), Some(n)) = (schema["maximum"].as_f64(), value.as_f64())
        && n > max
    {
        return Err(format!("{at}: {n} is above the maximum {max}"));
    }
    if let Some(text) = value.as_str() {
        match schema["format"].as_str() {
            Some("date-time") if chrono::DateTime::parse_from_rfc3339(text).is_err() => {
                return Err(format!("{at}: {text} is not a date-time"));
            }
            Some("uuid") if uuid::Uuid::parse_str(text).is_err() => {
                return Err(format!("{at}: {text} is not a uuid"));
            }
            _ => {}
        }
    }
    if let Some(items) = value.as_array() {
        for (i, item) in items.iter().enumerate() {
            check(doc, &schema["items"], item, &format!("{at}[{i}]"))?;
        }
    }
    if let Some(fields) = value.as_object()
        && schema["properties"].is_object()
    {
        let properties = schema["properties"].as_object().unwrap();
        for (name, field) in fields {
            let property =
                properties.get(name).ok_or(format!("{at}.{name}: written but not in the schema"))?;
            check(doc, property, field, &format!("{at}.{name}"))?;
        }
        for required in schema["required"].as_array().into_iter().flatten() {
            let name = required.as_str().unwrap();
            if !fields.contains_key(name) {
                return Err(format!("{at}.{name}: required but not written"));
            }
        }
    }
    Ok(())
}

fn is_a(value: &Value, kind: &str) -> bool {
    match kind {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "string" => value.is_string(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        _ => false,
    }
}

/// `sample` as serde writes it, checked against the document's schema of `T`'s name.
fn check_sample<T: Serialize>(doc: &Value, name: &str, sample: &T) -> Result<(), String> {
    let value = serde_json::to_value(sample).unwrap();
    check(doc, &json!({"$ref": format!("#/components/schemas/{name}")}), &value, name)
}

fn the_document() -> Value {
    serde_json::to_value(gateway::openapi::api_document(true)).unwrap()
}

fn at(day: u32) -> chrono::DateTime<chrono::Utc> {
    chrono::Utc.with_ymd_and_hms(2026, 12, day, 10, 0, 0).unwrap()
}

fn audit() -> SaleAudit {
    SaleAudit {
        goods_id: GoodsId::new(3).unwrap(),
        redis: RedisAudit {
            loaded: true,
            epoch: None,
            stock: Some(7),
            in_transit: 0,
            holdback: None,
            reservations_ordered: 2,
            reservations_in_flight: 1,
            pending: 0,
            buckets: Vec::new(),
        },
        authority: AuthorityAudit {
            stock_total: 10,
            stock_available: 8,
            ledger_held: 2,
            active_orders: 2,
            in_flight_deducted: 0,
        },
        queue: QueueAudit { waiting: 1, consumers: 2 },
        expected_redis_stock: 7,
        agrees: false,
        differences: vec!["the queue is not empty".into()],
    }
}

#[test]
fn the_schemas_of_the_bodies_match_what_serde_writes() {
    let doc = the_document();
    let order = Order {
        id: OrderId::new(11).unwrap(),
        user_id: UserId::new(42).unwrap(),
        goods_id: GoodsId::new(3).unwrap(),
        price_cents: 49_900,
        status: OrderStatus::Unpaid,
        created_at: at(1),
        expires_at: at(2),
    };
    let goods = Goods {
        id: GoodsId::new(3).unwrap(),
        name: "phone".into(),
        price_cents: 99_900,
        seckill_price_cents: 49_900,
        stock_total: 100,
        stock_available: 99,
        start_at: at(1),
        end_at: at(2),
        buckets: 1,
        waiting_room: None,
    };
    let new_goods = NewGoods {
        name: "phone".into(),
        price_cents: 99_900,
        seckill_price_cents: 49_900,
        stock_total: 100,
        start_at: at(1),
        end_at: at(2),
        buckets: 1,
        waiting_room: None,
    };
    let accepted = OrderAccepted { status: SeckillStatus::Queued, request_id: uuid::Uuid::new_v4() };
    // A sale's waiting room: its rate a number or the word `auto`.
    let room = WaitingRoom {
        rate: RoomRate::PerSec(50),
        opens_before_secs: 600,
        admission_secs: 120,
        pow_difficulty: 8,
    };
    let auto = WaitingRoom { rate: RoomRate::AUTO, ..room };
    let goods_in_a_room = Goods { waiting_room: Some(room), ..goods.clone() };
    let new_goods_in_a_room = NewGoods { waiting_room: Some(auto), ..new_goods.clone() };

    let checks = [
        check_sample(&doc, "OrderAccepted", &accepted),
        check_sample(&doc, "SeckillResult", &SeckillResult { status: SeckillStatus::Queued, order_id: None }),
        check_sample(
            &doc,
            "SeckillResult",
            &SeckillResult { status: SeckillStatus::Success, order_id: OrderId::new(11) },
        ),
        check_sample(&doc, "Order", &order),
        check_sample(&doc, "Goods", &goods),
        check_sample(&doc, "NewGoods", &new_goods),
        check_sample(&doc, "Goods", &goods_in_a_room),
        check_sample(&doc, "NewGoods", &new_goods_in_a_room),
        check_sample(&doc, "WaitingRoom", &auto),
        check_sample(&doc, "TokenResponse", &TokenResponse { token: "abc".into() }),
        check_sample(
            &doc,
            "DevTokenRequest",
            &DevTokenRequest { user_id: UserId::new(1).unwrap(), role: Role::Admin },
        ),
        check_sample(&doc, "ErrorBody", &ErrorBody::new(ErrorCode::SoldOut, "sold out")),
        check_sample(&doc, "SaleAudit", &audit()),
        check_sample(
            &doc,
            "SaleRepair",
            &SaleRepair { stock_before: None, stock_after: Some(7), orders_restored: 2, audit: audit() },
        ),
    ];
    for result in checks {
        result.unwrap();
    }
    // Every order status and buy status serde can write is in its enum.
    for status in [OrderStatus::Unpaid, OrderStatus::Paid, OrderStatus::Cancelled, OrderStatus::Expired] {
        check_sample(&doc, "OrderStatus", &status).unwrap();
    }
    for status in [SeckillStatus::Queued, SeckillStatus::Success, SeckillStatus::Failed, SeckillStatus::None]
    {
        check_sample(&doc, "SeckillStatus", &status).unwrap();
    }
    // Lists as the list routes answer them.
    let list =
        &doc["paths"]["/api/orders"]["get"]["responses"]["200"]["content"]["application/json"]["schema"];
    check(&doc, list, &serde_json::to_value(vec![order]).unwrap(), "orders").unwrap();
    let list =
        &doc["paths"]["/api/goods"]["get"]["responses"]["200"]["content"]["application/json"]["schema"];
    check(&doc, list, &serde_json::to_value(vec![goods, goods_in_a_room]).unwrap(), "goods").unwrap();
}

#[test]
fn the_waiting_room_is_in_the_sales_schemas_and_its_rate_is_a_number_or_auto() {
    let doc = the_document();
    let schemas = &doc["components"]["schemas"];
    for name in ["Goods", "NewGoods"] {
        let room = &schemas[name]["properties"]["waiting_room"];
        assert!(room.is_object(), "{name} has no waiting_room: {}", schemas[name]);
        let required = schemas[name]["required"].as_array().unwrap();
        assert!(!required.contains(&json!("waiting_room")), "{name}: a sale may have no room");
        check(&doc, room, &Value::Null, name).unwrap();
    }
    let room = json!({"$ref": "#/components/schemas/WaitingRoom"});
    let fields = |rate: Value| json!({"rate": rate, "opens_before_secs": 0, "admission_secs": 10, "pow_difficulty": 0});
    for rate in [json!(1), json!(1_000_000), json!("auto")] {
        check(&doc, &room, &fields(rate.clone()), "room").unwrap_or_else(|e| panic!("{rate}: {e}"));
    }
    for refused in [
        fields(json!("fast")),
        fields(json!(-1)),
        fields(json!(null)),
        json!({"opens_before_secs": 0}),
        json!({"rate": 1, "admission_secs": 9}),
        json!({"rate": 1, "pow_difficulty": 25}),
        json!({"rate": 1, "opens_before_secs": 604_801}),
    ] {
        assert!(check(&doc, &room, &refused, "room").is_err(), "{refused}");
    }
}

#[test]
fn the_check_refuses_bodies_the_schemas_do_not_describe() {
    let doc = the_document();
    let schema = json!({"$ref": "#/components/schemas/SeckillResult"});
    let refused = [
        json!({"order_id": 1}),                                    // `status` missing
        json!({"status": "queued", "order_id": null, "extra": 1}), // a field the schema lacks
        json!({"status": "done", "order_id": null}),               // not a status
        json!({"status": "success", "order_id": 0}),               // ids are positive
        json!({"status": "success", "order_id": "1"}),             // ids are numbers
    ];
    for body in refused {
        assert!(check(&doc, &schema, &body, "body").is_err(), "{body}");
    }
    let order = json!({"id": 1, "user_id": 1, "goods_id": 1, "price_cents": 1, "status": "unpaid",
        "created_at": "yesterday", "expires_at": "2026-12-01T10:00:00Z"});
    assert!(check(&doc, &json!({"$ref": "#/components/schemas/Order"}), &order, "order").is_err());
}

#[tokio::test]
async fn the_gateways_own_answers_match_the_document() {
    let app = spawn_app();
    let doc = document(&app).await;
    let schema = |path: &str, method: &str, status: &str| {
        doc["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"].clone()
    };

    let token = app.post("/api/auth/dev-token").json(&json!({"user_id": 5})).send().await.unwrap();
    assert_eq!(token.status(), 200);
    let body: Value = token.json().await.unwrap();
    check(&doc, &schema("/api/auth/dev-token", "post", "200"), &body, "dev-token").unwrap();

    let refused = app.post("/api/auth/dev-token").json(&json!({"user_id": -1})).send().await.unwrap();
    assert_eq!(refused.status(), 400);
    let body: Value = refused.json().await.unwrap();
    check(&doc, &schema("/api/auth/dev-token", "post", "400"), &body, "dev-token 400").unwrap();

    let unauthorized = app.get("/api/orders").send().await.unwrap();
    assert_eq!(unauthorized.status(), 401);
    let body: Value = unauthorized.json().await.unwrap();
    check(&doc, &schema("/api/orders", "get", "401"), &body, "orders 401").unwrap();

    for probe in ["/healthz", "/readyz"] {
        let res = app.get(probe).send().await.unwrap();
        assert_eq!(res.status(), 200);
        let body: Value = res.json().await.unwrap();
        check(&doc, &schema(probe, "get", "200"), &body, probe).unwrap();
    }
}
