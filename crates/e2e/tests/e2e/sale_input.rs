//! A property of every route that takes a sale's name and times: whatever is sent (arbitrary
//! Unicode with NUL, controls, bidirectional overrides and long strings; JSON with escaped
//! lone surrogates; years -9999 to 9999, impossible dates, offsets far past ±23:59), the answer
//! is never a 5xx: 201 when the sale is valid, else 400 `INVALID_INPUT`. Sent as raw JSON, to
//! `POST /api/admin/goods` through the gateway (checked at seckill-service, then at
//! stock-service) and to stock-service's own `POST /internal/stock/goods`, on one running
//! system for every case.

use std::time::Duration;

use gateway::configuration::{LimitSettings, RateLimitSettings};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use seckill_common::api::NewGoods;
use seckill_common::trust::Peer;
use seckill_testkit::keys;
use serde_json::Value;

use crate::helpers::{Options, System, spawn_system_with};

/// Cases a run: each is two requests, a sale written for a valid one; a few seconds.
const CASES: u32 = 256;

/// Characters that break names one way or another, and a few that must not.
const INTERESTING: &[char] = &[
    '\0',
    '\t',
    '\n',
    '\r',
    '\u{1B}',
    '\u{7F}',
    '\u{85}',
    '\u{9B}',
    '\u{AD}',
    '\u{61C}',
    '\u{200B}',
    '\u{200C}',
    '\u{200D}',
    '\u{200E}',
    '\u{202A}',
    '\u{202E}',
    '\u{2066}',
    '\u{2069}',
    '\u{2028}',
    '\u{FEFF}',
    '\u{FFFD}',
    '\u{FFFF}',
    '\u{E0067}',
    '\u{10FFFF}',
    ' ',
    '\u{A0}',
    '\u{3000}',
    'a',
    'é',
    '手',
    '😀',
    '"',
    '\\',
    '<',
    '&',
];

fn name_char() -> impl Strategy<Value = char> {
    prop_oneof![3 => prop::sample::select(INTERESTING), 1 => any::<char>()]
}

/// A name, as the JSON text of a string: mostly one serde writes (escaping what JSON must),
/// sometimes one with a surrogate escape in it, lone (which no Rust string holds) or paired.
fn name_json() -> impl Strategy<Value = String> {
    let text = prop_oneof![
        "[ a-zA-Z0-9éü手😀\u{200D}\u{FE0F}]{1,30}",
        prop::collection::vec(name_char(), 0..12).prop_map(String::from_iter),
        prop::collection::vec(name_char(), 195..206).prop_map(String::from_iter),
        any::<String>(),
    ];
    let surrogate = prop_oneof![
        (0xD800u32..=0xDFFF).prop_map(|s| format!("\\u{s:04x}")),
        Just("\\ud83d\\ude00".to_owned()),
        Just("\\udc00\\ud800".to_owned()),
    ];
    prop_oneof![
        4 => text.prop_map(|t| serde_json::to_string(&t).expect("a string serializes")),
        1 => ("[a-z ]{0,5}", surrogate).prop_map(|(before, s)| format!("\"{before}{s}\"")),
    ]
}

/// An RFC 3339-like time: mostly a real one of 1970 to 9999 with an offset RFC 3339 allows (so
/// about one case in six is a valid sale), else any year of -9999 to 9999 with fields out of
/// range and offsets far past ±23:59.
fn time() -> impl Strategy<Value = String> {
    let sign = |h: i64| if h < 0 { '-' } else { '+' };
    let offset = prop_oneof![
        Just("Z".to_owned()),
        (-23i64..=23, 0u32..60).prop_map(move |(h, m)| format!("{}{:02}:{m:02}", sign(h), h.abs())),
    ];
    let any_offset = prop_oneof![
        offset.clone(),
        (-999i64..=999, 0u32..=99).prop_map(move |(h, m)| format!("{}{:02}:{m:02}", sign(h), h.abs())),
        any::<u32>().prop_map(|h| format!("+{h}:00")),
    ];
    let real = (1970i32..=9999, 1u32..=12, 1u32..=28, 0u32..24, 0u32..60, 0u32..60, offset)
        .prop_map(|(y, mo, d, h, mi, s, off)| format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}{off}"));
    let wild = (-9999i32..=9999, 0u32..=13, 0u32..=32, 0u32..=25, 0u32..=61, 0u32..=61, any_offset).prop_map(
        |(y, mo, d, h, mi, s, off)| {
            let year = if y < 0 { format!("-{:04}", -y) } else { format!("{y:04}") };
            format!("{year}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}{off}")
        },
    );
    prop_oneof![5 => real, 1 => wild]
}

/// A case: the body as sent, and its name as JSON reads it (none for a lone surrogate).
fn case() -> impl Strategy<Value = (String, Option<String>)> {
    (name_json(), time(), time()).prop_map(|(name_json, start, end)| {
        let body = format!(
            r#"{{"name": {name_json}, "price_cents": 100, "seckill_price_cents": 50, "stock_total": 3, "start_at": "{start}", "end_at": "{end}"}}"#
        );
        (body, serde_json::from_str(&name_json).ok())
    })
}

/// A name no sale may have, judged apart from the rule the services apply: no string at all
/// (a lone surrogate), a control character, a bidirectional control, nothing but spaces.
fn plainly_bad(name: Option<&str>) -> bool {
    name.is_none_or(|name| {
        name.trim().is_empty()
            || name.chars().any(|c| {
                c.is_control()
                    || matches!(c, '\u{61C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
            })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_name_or_time_yields_a_5xx_on_any_route_that_takes_one() {
    // One admin publishing a hundred sales in seconds: the admin limit would answer most.
    let wide = LimitSettings { per_sec: Some(1_000_000), burst: Some(1_000_000) };
    let limits = RateLimitSettings { admin: wide, anonymous: wide, ..RateLimitSettings::default() };
    let sys = spawn_system_with(Options { rate_limits: Some(limits), ..Options::default() });
    let admin = sys.dev_token(1, "admin").await;
    let handle = tokio::runtime::Handle::current();

    let config = Config { cases: CASES, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new(config);
    // Each sale created: its id and name.
    let created = std::cell::RefCell::new(Vec::new());
    let outcome = runner.run(&case(), |(body, name)| {
        let sent = tokio::task::block_in_place(|| handle.block_on(send_everywhere(&sys, &admin, &body)));
        // The service's own reading of the body: a valid sale is created, anything else refused.
        let valid = serde_json::from_str::<NewGoods>(&body).ok().and_then(|g| g.validate().ok());
        prop_assert!(
            valid.is_none() || !plainly_bad(name.as_deref()),
            "a valid sale with a bad name: {body}"
        );
        for (route, status, answer) in sent {
            prop_assert!(status < 500, "{route}: {status} {answer} for {body}");
            match &valid {
                Some(sale) => {
                    prop_assert_eq!(status, 201, "{}: {} for {}", route, answer, body);
                    prop_assert_eq!(answer["name"].as_str(), Some(sale.name.as_str()), "{}", route);
                    let id = answer["id"].as_i64().unwrap_or_default();
                    created.borrow_mut().push((id, sale.name.clone()));
                }
                None => {
                    prop_assert_eq!(status, 400, "{}: {} for {}", route, answer, body);
                    prop_assert_eq!(answer["code"].as_str(), Some("INVALID_INPUT"), "{}", route);
                    let message = answer["message"].as_str().unwrap_or_default();
                    prop_assert!(!message.is_empty(), "{}: no message", route);
                }
            }
        }
        Ok(())
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
    let created = created.into_inner();
    eprintln!("{CASES} cases, {} sales created", created.len());
    assert!(!created.is_empty(), "some cases were valid sales");
    // Every sale written reads back as written, and its page shows.
    for (id, name) in created {
        let (status, goods) = sys.get(&format!("/api/goods/{id}"), None).await;
        assert_eq!((status, goods["name"].as_str()), (200, Some(name.as_str())), "{goods}");
        let page = sys.http.get(sys.url(&format!("/sales/{id}"))).send().await.unwrap();
        assert_eq!(page.status(), 200, "/sales/{id}");
    }
}

/// The body to both routes; each answer's route, status and JSON (null when not JSON).
async fn send_everywhere(sys: &System, admin: &str, body: &str) -> Vec<(&'static str, u16, Value)> {
    let through_gateway = sys
        .http
        .post(sys.url("/api/admin/goods"))
        .bearer_auth(admin)
        .header("content-type", "application/json")
        .body(body.to_owned());
    let path = "/internal/stock/goods";
    let (header, credential) = keys::as_service(Peer::Seckill, Peer::Stock, "POST", path);
    let at_stock = sys
        .http
        .post(format!("{}{path}", sys.stock.url()))
        .header(header, credential)
        .header("content-type", "application/json")
        .body(body.to_owned());
    let mut answers = Vec::new();
    for (route, request) in
        [("POST /api/admin/goods", through_gateway), ("stock-service POST /internal/stock/goods", at_stock)]
    {
        let res =
            request.timeout(Duration::from_secs(10)).send().await.unwrap_or_else(|e| panic!("{route}: {e}"));
        let status = res.status().as_u16();
        answers.push((route, status, res.json().await.unwrap_or(Value::Null)));
    }
    answers
}
