//! Tokens: dev tokens, the secret that must exist, and every way a token is refused.

use jsonwebtoken::Algorithm;
use serde_json::json;

use crate::helpers::{
    SECRET, assert_error, echoed, in_an_hour, settings, sign, spawn_app, spawn_app_with, user_token,
};

#[tokio::test]
async fn a_dev_token_is_issued_and_accepted() {
    let app = spawn_app();
    let token = app.dev_token(42, "user").await;

    let res = app.get("/api/orders").bearer_auth(&token).send().await.unwrap();

    let seen = echoed(res).await;
    assert_eq!(seen["upstream"], "order");
    assert_eq!(seen["user"], json!({"id": 42, "role": "user"}));
}

#[tokio::test]
async fn an_admin_dev_token_reaches_the_admin_route_as_admin() {
    let app = spawn_app();
    let token = app.dev_token(1, "admin").await;

    let res = app
        .post("/api/admin/goods")
        .bearer_auth(&token)
        .json(&json!({"name": "phone"}))
        .send()
        .await
        .unwrap();

    let seen = echoed(res).await;
    assert_eq!(seen["upstream"], "seckill");
    assert_eq!(seen["user"]["role"], "admin");
    assert_eq!(seen["body"], r#"{"name":"phone"}"#);
}

#[tokio::test]
async fn the_dev_token_route_is_404_when_dev_tokens_are_off() {
    let app = spawn_app_with(|s| s.auth.dev_tokens = false);

    let res =
        app.post("/api/auth/dev-token").json(&json!({"user_id": 42, "role": "admin"})).send().await.unwrap();

    assert_error(res, 404, "NOT_FOUND").await;
}

#[tokio::test]
async fn a_dev_token_request_for_a_bad_user_id_is_400() {
    let app = spawn_app();

    let res = app.post("/api/auth/dev-token").json(&json!({"user_id": 0})).send().await.unwrap();

    assert_error(res, 400, "INVALID_INPUT").await;
}

#[tokio::test]
async fn the_gateway_refuses_to_start_without_a_strong_jwt_secret() {
    for secret in [None, Some(String::new()), Some("short-but-not-empty-secret".to_owned())] {
        let mut s = settings("http://127.0.0.1:1", "http://127.0.0.1:1", "http://127.0.0.1:1");
        s.auth.jwt_secret = secret;

        let err = gateway::startup::build(s).await.err().expect("the build must fail");

        let message = format!("{err:#}");
        assert!(message.contains("auth.jwt_secret"), "{message}");
        assert!(message.contains("SECKILL__AUTH__JWT_SECRET"), "{message}");
    }
}

#[tokio::test]
async fn the_gateway_refuses_to_start_with_an_empty_upstream_list() {
    let s = settings("http://127.0.0.1:1", " , ", "http://127.0.0.1:1");

    let err = gateway::startup::build(s).await.err().expect("the build must fail");

    assert!(format!("{err:#}").contains("upstreams.order"), "{err:#}");
}

#[tokio::test]
async fn a_request_without_a_token_is_401() {
    let app = spawn_app();

    let res = app.post("/api/seckill/1/token").send().await.unwrap();

    let message = assert_error(res, 401, "UNAUTHORIZED").await;
    assert!(message.contains("bearer token"), "{message}");
}

#[tokio::test]
async fn a_non_bearer_authorization_is_401() {
    let app = spawn_app();

    let res = app.get("/api/orders").basic_auth("42", Some("pw")).send().await.unwrap();

    assert_error(res, 401, "UNAUTHORIZED").await;
}

#[tokio::test]
async fn a_token_with_a_bad_signature_is_401() {
    let app = spawn_app();
    let forged = sign(Algorithm::HS256, "not-the-secret", &json!({"sub": "42", "exp": in_an_hour()}));

    let res = app.get("/api/orders").bearer_auth(forged).send().await.unwrap();

    let message = assert_error(res, 401, "UNAUTHORIZED").await;
    assert!(message.contains("signature"), "{message}");
}

#[tokio::test]
async fn an_expired_token_is_401() {
    let app = spawn_app();
    let an_hour_ago = chrono::Utc::now().timestamp() - 3600;
    let expired = sign(Algorithm::HS256, SECRET, &json!({"sub": "42", "exp": an_hour_ago}));

    let res = app.get("/api/orders").bearer_auth(expired).send().await.unwrap();

    let message = assert_error(res, 401, "UNAUTHORIZED").await;
    assert!(message.contains("expired"), "{message}");
}

#[tokio::test]
async fn a_token_without_exp_is_401() {
    let app = spawn_app();
    let forever = sign(Algorithm::HS256, SECRET, &json!({"sub": "42"}));

    let res = app.get("/api/orders").bearer_auth(forever).send().await.unwrap();

    assert_error(res, 401, "UNAUTHORIZED").await;
}

#[tokio::test]
async fn a_token_with_another_algorithm_is_401() {
    let app = spawn_app();
    let claims = json!({"sub": "42", "exp": in_an_hour()});
    // The same secret, but HS512: only HS256 is accepted.
    let hs512 = sign(Algorithm::HS512, SECRET, &claims);
    // An unsigned token (`alg: none`), hand-made since no library signer writes one.
    let none = format!("{}.{}.", b64(r#"{"alg":"none","typ":"JWT"}"#), b64(&claims.to_string()));
    // RS256 named in the header, the HMAC signature kept (algorithm confusion).
    let hs256 = sign(Algorithm::HS256, SECRET, &claims);
    let (_, rest) = hs256.split_once('.').unwrap();
    let rs256 = format!("{}.{rest}", b64(r#"{"alg":"RS256","typ":"JWT"}"#));

    for token in [hs512, none, rs256] {
        let res = app.get("/api/orders").bearer_auth(token).send().await.unwrap();
        assert_error(res, 401, "UNAUTHORIZED").await;
    }
}

#[tokio::test]
async fn a_token_whose_nbf_is_ahead_is_401() {
    let app = spawn_app();
    let later = chrono::Utc::now().timestamp() + 600;
    let token = sign(Algorithm::HS256, SECRET, &json!({"sub": "42", "nbf": later, "exp": in_an_hour()}));

    let res = app.get("/api/orders").bearer_auth(token).send().await.unwrap();

    let message = assert_error(res, 401, "UNAUTHORIZED").await;
    assert!(message.contains("not valid yet"), "{message}");
}

#[tokio::test]
async fn a_huge_token_is_401() {
    let app = spawn_app();
    let padding = "x".repeat(9 * 1024);
    let token = sign(Algorithm::HS256, SECRET, &json!({"sub": "42", "pad": padding, "exp": in_an_hour()}));

    let res = app.get("/api/orders").bearer_auth(token).send().await.unwrap();

    let message = assert_error(res, 401, "UNAUTHORIZED").await;
    assert!(message.contains("too large"), "{message}");
}

#[tokio::test]
async fn with_an_issuer_and_audience_set_tokens_must_name_them() {
    let app = spawn_app_with(|s| {
        s.auth.issuer = Some("seckill-gateway".into());
        s.auth.audience = Some("seckill".into());
    });
    // Minted dev tokens carry both.
    let token = app.dev_token(42, "user").await;
    let res = app.get("/api/orders").bearer_auth(&token).send().await.unwrap();
    assert_eq!(echoed(res).await["upstream"], "order");

    let exp = in_an_hour();
    for claims in [
        json!({"sub": "42", "exp": exp}),
        json!({"sub": "42", "exp": exp, "iss": "seckill-gateway"}),
        json!({"sub": "42", "exp": exp, "iss": "someone-else", "aud": "seckill"}),
        json!({"sub": "42", "exp": exp, "iss": "seckill-gateway", "aud": "billing"}),
    ] {
        let token = sign(Algorithm::HS256, SECRET, &claims);
        let res = app.get("/api/orders").bearer_auth(token).send().await.unwrap();
        assert_error(res, 401, "UNAUTHORIZED").await;
    }
}

#[tokio::test]
async fn a_token_whose_subject_is_not_a_positive_id_is_401() {
    let app = spawn_app();
    for sub in [json!("0"), json!("-5"), json!("alice"), json!(null)] {
        let token = sign(Algorithm::HS256, SECRET, &json!({"sub": sub, "exp": in_an_hour()}));
        let res = app.get("/api/orders").bearer_auth(token).send().await.unwrap();
        assert_error(res, 401, "UNAUTHORIZED").await;
    }
}

#[tokio::test]
async fn a_numeric_subject_is_accepted() {
    let app = spawn_app();
    let token = sign(Algorithm::HS256, SECRET, &json!({"sub": 77, "exp": in_an_hour()}));

    let res = app.get("/api/orders/3").bearer_auth(token).send().await.unwrap();

    assert_eq!(echoed(res).await["user"]["id"], 77);
}

#[tokio::test]
async fn the_admin_route_with_a_user_token_is_403() {
    let app = spawn_app();

    let res = app
        .post("/api/admin/goods")
        .bearer_auth(user_token(42))
        .json(&json!({"name": "phone"}))
        .send()
        .await
        .unwrap();

    assert_error(res, 403, "FORBIDDEN").await;
}

fn b64(s: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = s.as_bytes();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}
