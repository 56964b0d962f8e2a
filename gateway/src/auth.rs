//! Bearer JWTs: checking the caller's token on every protected request, and minting dev tokens.
//!
//! HS256 only, `exp` required, `nbf` honoured when present, a few seconds of clock leeway
//! (`auth.leeway_secs`); `iss` and `aud` required and checked when `auth.issuer` /
//! `auth.audience` are set. `sub` is the user id (a positive integer, as a string or a number)
//! and `role: "admin"` marks an admin (any other role, or none, is a plain user). The keys and
//! the validation rules are built once at start: this runs on every request.

use std::fmt;
use std::time::Duration;

use actix_web::HttpRequest;
use actix_web::http::header::AUTHORIZATION;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use seckill_common::api::Role;
use seckill_common::config::AuthSettings;
use seckill_common::{ErrorCode, UserId};
use seckill_web::{ApiError, AuthUser};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

/// Longest token read, in bytes. Ours are a few hundred; a bigger one is refused before any
/// base64 or JSON work is spent on it.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;

/// Largest `auth.leeway_secs` accepted: more would quietly stretch every token's lifetime.
pub const MAX_LEEWAY_SECS: u64 = 300;

/// Why a request's token was refused; each is a 401 `UNAUTHORIZED` with this message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("a bearer token is required")]
    Missing,
    #[error("the authorization header must be `Bearer <token>`")]
    NotBearer,
    #[error("the token has expired")]
    Expired,
    #[error("the token is not valid yet (its nbf is in the future)")]
    NotYetValid,
    #[error("the token is too large (over {MAX_TOKEN_BYTES} bytes)")]
    TooLarge,
    #[error("the token is invalid: {0}")]
    Invalid(&'static str),
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        ApiError::new(ErrorCode::Unauthorized, e.to_string())
    }
}

/// Checks and mints tokens with one shared secret.
pub struct Authenticator {
    decoding: DecodingKey,
    /// `auth.jwt_previous_secret`: tried when the current secret's signature does not match.
    previous: Option<DecodingKey>,
    encoding: EncodingKey,
    validation: Validation,
    dev_token_ttl: Duration,
    /// Put into minted tokens, as the validation requires them.
    issuer: Option<String>,
    audience: Option<String>,
}

impl fmt::Debug for Authenticator {
    // The keys hold the secret: never print them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authenticator").field("dev_token_ttl", &self.dev_token_ttl).finish_non_exhaustive()
    }
}

impl Authenticator {
    /// With the default rules of `auth.*` (see `with_rules`).
    pub fn new(secret: &str, dev_token_ttl: Duration) -> anyhow::Result<Self> {
        // `Validation::new` requires and checks `exp` and accepts only the algorithm named here,
        // so a token signed with HS512, RS256 or `none` is refused even if its signature would
        // check out.
        let mut validation = Validation::new(Algorithm::HS256);
        // Off by default in jsonwebtoken: a token whose `nbf` is ahead must wait for it.
        validation.validate_nbf = true;
        let auth = Self {
            decoding: DecodingKey::from_secret(secret.as_bytes())?,
            previous: None,
            encoding: EncodingKey::from_secret(secret.as_bytes())?,
            validation,
            dev_token_ttl,
            issuer: None,
            audience: None,
        };
        Ok(auth.with_rules(&AuthSettings::default()))
    }

    /// Applies `auth.leeway_secs` (clock skew allowed on `exp` and `nbf`) and, when set,
    /// `auth.issuer` / `auth.audience`: tokens must then carry the matching `iss` / `aud`, and
    /// minted ones do. Without an audience, a token that names one is refused (it is meant for
    /// some other service).
    pub fn with_rules(mut self, auth: &AuthSettings) -> Self {
        // Clamped as well as validated at start: a huge leeway would overflow jsonwebtoken's
        // arithmetic on timestamps.
        self.validation.leeway = auth.leeway_secs.min(MAX_LEEWAY_SECS);
        let mut required = vec!["exp"];
        self.validation.iss = None;
        if let Some(issuer) = &auth.issuer {
            self.validation.set_issuer(&[issuer]);
            required.push("iss");
        }
        self.validation.aud = None;
        if let Some(audience) = &auth.audience {
            self.validation.set_audience(&[audience]);
            required.push("aud");
        }
        self.validation.set_required_spec_claims(&required);
        self.issuer = auth.issuer.clone();
        self.audience = auth.audience.clone();
        self.previous =
            auth.jwt_previous_secret.as_deref().and_then(|s| DecodingKey::from_secret(s.as_bytes()).ok());
        self
    }

    /// The caller named by the request's `Authorization: Bearer` token.
    pub fn authenticate(&self, req: &HttpRequest) -> Result<AuthUser, AuthError> {
        let header = req.headers().get(AUTHORIZATION).ok_or(AuthError::Missing)?;
        let token = bearer_token(header.as_bytes())?;
        self.verify(token)
    }

    /// Checks signature, algorithm, expiry and claims of a token.
    pub fn verify(&self, token: &str) -> Result<AuthUser, AuthError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(AuthError::TooLarge);
        }
        let decoded = match jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation) {
            // Signed with the secret being replaced: every other check is the same.
            Err(e) if *e.kind() == ErrorKind::InvalidSignature && self.previous.is_some() => {
                let previous = self.previous.as_ref().unwrap_or(&self.decoding);
                jsonwebtoken::decode::<Claims>(token, previous, &self.validation)
            }
            other => other,
        };
        let data = decoded.map_err(|e| refusal(e.kind()))?;
        let role = match data.claims.role {
            Some(serde_json::Value::String(role)) if role == Role::Admin.as_str() => Role::Admin,
            _ => Role::User,
        };
        Ok(AuthUser { id: data.claims.sub, role })
    }

    /// A token for `user` valid for the configured dev-token lifetime.
    pub fn issue(&self, user: UserId, role: Role) -> Result<String, ApiError> {
        let now = chrono::Utc::now().timestamp();
        let ttl = i64::try_from(self.dev_token_ttl.as_secs()).unwrap_or(i64::MAX);
        let claims = IssuedClaims {
            sub: user.to_string(),
            role: role.as_str(),
            iat: now,
            exp: now.saturating_add(ttl),
            iss: self.issuer.as_deref(),
            aud: self.audience.as_deref(),
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(ApiError::internal)
    }
}

/// `Bearer <token>`; the scheme is case-insensitive (RFC 9110).
fn bearer_token(value: &[u8]) -> Result<&str, AuthError> {
    let value = std::str::from_utf8(value).map_err(|_| AuthError::NotBearer)?.trim();
    let (scheme, token) = value.split_once(' ').ok_or(AuthError::NotBearer)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(AuthError::NotBearer);
    }
    Ok(token)
}

/// A short reason for the client; the token itself is never echoed.
fn refusal(kind: &ErrorKind) -> AuthError {
    match kind {
        ErrorKind::ExpiredSignature => AuthError::Expired,
        ErrorKind::InvalidSignature => AuthError::Invalid("bad signature"),
        ErrorKind::InvalidAlgorithm | ErrorKind::MissingAlgorithm | ErrorKind::InvalidAlgorithmName => {
            AuthError::Invalid("only HS256 tokens are accepted")
        }
        ErrorKind::MissingRequiredClaim(claim) => match claim.as_str() {
            "iss" => AuthError::Invalid("the iss claim (issuer, a string) is missing"),
            "aud" => AuthError::Invalid("the aud claim (audience, a string or strings) is missing"),
            _ => AuthError::Invalid("a required claim (exp) is missing"),
        },
        ErrorKind::InvalidClaimFormat(claim) => match claim.as_str() {
            "exp" | "nbf" => AuthError::Invalid("exp and nbf must be numeric timestamps"),
            "iss" => AuthError::Invalid("iss must be a string"),
            "aud" => AuthError::Invalid("aud must be a string or a list of strings"),
            _ => AuthError::Invalid("a claim has the wrong type"),
        },
        ErrorKind::Json(_) => {
            AuthError::Invalid("malformed header or claims (sub must be a positive integer user id)")
        }
        ErrorKind::ImmatureSignature => AuthError::NotYetValid,
        ErrorKind::InvalidIssuer => AuthError::Invalid("issued by another issuer (iss)"),
        ErrorKind::InvalidAudience => AuthError::Invalid("meant for another audience (aud)"),
        ErrorKind::InvalidSubject => AuthError::Invalid("not meant for this service"),
        _ => AuthError::Invalid("malformed token"),
    }
}

/// What the gateway reads from a token; `exp` is checked by `Validation`.
#[derive(Deserialize)]
struct Claims {
    #[serde(deserialize_with = "user_id")]
    sub: UserId,
    /// Kept loose on purpose: a role that is not the string "admin" just means a plain user.
    #[serde(default)]
    role: Option<serde_json::Value>,
}

#[derive(Serialize)]
struct IssuedClaims<'a> {
    sub: String,
    role: &'static str,
    iat: i64,
    exp: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    iss: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    aud: Option<&'a str>,
}

/// `sub` as `"42"` or `42`; zero, negatives, fractions and other text are refused.
fn user_id<'de, D: Deserializer<'de>>(deserializer: D) -> Result<UserId, D::Error> {
    struct SubVisitor;

    impl Visitor<'_> for SubVisitor {
        type Value = UserId;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a positive integer user id, as a string or a number")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<UserId, E> {
            v.parse().map_err(E::custom)
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<UserId, E> {
            UserId::try_from(v).map_err(E::custom)
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<UserId, E> {
            let v = i64::try_from(v).map_err(E::custom)?;
            self.visit_i64(v)
        }
    }

    deserializer.deserialize_any(SubVisitor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SECRET: &str = "unit-test-secret-at-least-32-bytes-long";

    fn auth() -> Authenticator {
        Authenticator::new(SECRET, Duration::from_secs(60)).unwrap()
    }

    fn sign(alg: Algorithm, secret: &str, claims: &serde_json::Value) -> String {
        let key = EncodingKey::from_secret(secret.as_bytes()).unwrap();
        jsonwebtoken::encode(&Header::new(alg), claims, &key).unwrap()
    }

    fn in_an_hour() -> i64 {
        now() + 3600
    }

    fn now() -> i64 {
        chrono::Utc::now().timestamp()
    }

    /// `token` with its header replaced by `header` (base64url JSON), signature kept.
    fn with_header(token: &str, header: &str) -> String {
        let (_, rest) = token.split_once('.').unwrap();
        format!("{header}.{rest}")
    }

    fn with_rules(issuer: Option<&str>, audience: Option<&str>) -> Authenticator {
        let rules = AuthSettings {
            issuer: issuer.map(Into::into),
            audience: audience.map(Into::into),
            ..AuthSettings::default()
        };
        auth().with_rules(&rules)
    }

    #[test]
    fn issued_tokens_verify_with_their_role() {
        let a = auth();
        let user = UserId::new(42).unwrap();
        let token = a.issue(user, Role::Admin).unwrap();
        assert_eq!(a.verify(&token).unwrap(), AuthUser { id: user, role: Role::Admin });
        let token = a.issue(user, Role::User).unwrap();
        assert_eq!(a.verify(&token).unwrap().role, Role::User);
    }

    #[test]
    fn sub_may_be_a_string_or_a_number_but_must_be_positive() {
        let a = auth();
        for sub in [json!("7"), json!(7)] {
            let t = sign(Algorithm::HS256, SECRET, &json!({"sub": sub, "exp": in_an_hour()}));
            assert_eq!(a.verify(&t).unwrap().id.get(), 7);
        }
        for sub in [json!("0"), json!(-1), json!("abc"), json!(1.5), json!(null), json!(u64::MAX)] {
            let t = sign(Algorithm::HS256, SECRET, &json!({"sub": sub, "exp": in_an_hour()}));
            assert!(matches!(a.verify(&t), Err(AuthError::Invalid(_))), "sub {sub} accepted");
        }
    }

    #[test]
    fn any_role_but_admin_is_a_user() {
        let a = auth();
        for role in [json!("Admin"), json!("root"), json!(1), json!(null)] {
            let t = sign(Algorithm::HS256, SECRET, &json!({"sub": "1", "role": role, "exp": in_an_hour()}));
            assert_eq!(a.verify(&t).unwrap().role, Role::User);
        }
    }

    #[test]
    fn during_a_rotation_tokens_of_the_previous_secret_still_verify() {
        let old = "the-secret-being-replaced-0123456789abcdef";
        let rules = AuthSettings { jwt_previous_secret: Some(old.into()), ..AuthSettings::default() };
        let a = Authenticator::new(SECRET, Duration::from_secs(60)).unwrap().with_rules(&rules);
        let t = sign(Algorithm::HS256, old, &json!({"sub": "3", "exp": in_an_hour()}));
        assert_eq!(a.verify(&t).unwrap().id.get(), 3);
        let t = sign(Algorithm::HS256, SECRET, &json!({"sub": "4", "exp": in_an_hour()}));
        assert_eq!(a.verify(&t).unwrap().id.get(), 4);
        // Only the two: a third secret, or the old one's expired token, is still refused.
        let t = sign(
            Algorithm::HS256,
            "a-third-secret-nobody-configured-0123456789",
            &json!({"sub": "5", "exp": in_an_hour()}),
        );
        assert_eq!(a.verify(&t), Err(AuthError::Invalid("bad signature")));
        let t =
            sign(Algorithm::HS256, old, &json!({"sub": "6", "exp": chrono::Utc::now().timestamp() - 3600}));
        assert_eq!(a.verify(&t), Err(AuthError::Expired));
        // Minted tokens use the current secret.
        let minted = a.issue(UserId::new(9).unwrap(), Role::User).unwrap();
        assert!(Authenticator::new(SECRET, Duration::from_secs(60)).unwrap().verify(&minted).is_ok());
    }

    #[test]
    fn expired_unsigned_foreign_and_exp_less_tokens_are_refused() {
        let a = auth();
        let old = chrono::Utc::now().timestamp() - 3600;
        let t = sign(Algorithm::HS256, SECRET, &json!({"sub": "1", "exp": old}));
        assert_eq!(a.verify(&t), Err(AuthError::Expired));
        let t = sign(
            Algorithm::HS256,
            "another-secret-at-least-32-bytes-long",
            &json!({"sub": "1", "exp": in_an_hour()}),
        );
        assert_eq!(a.verify(&t), Err(AuthError::Invalid("bad signature")));
        let t = sign(Algorithm::HS512, SECRET, &json!({"sub": "1", "exp": in_an_hour()}));
        assert_eq!(a.verify(&t), Err(AuthError::Invalid("only HS256 tokens are accepted")));
        let t = sign(Algorithm::HS256, SECRET, &json!({"sub": "1"}));
        assert!(matches!(a.verify(&t), Err(AuthError::Invalid(_))));
        assert!(a.verify("not.a.token").is_err());
        assert!(a.verify("").is_err());
    }

    #[test]
    fn a_token_whose_nbf_is_ahead_waits_for_it() {
        let a = auth();
        let t = sign(Algorithm::HS256, SECRET, &json!({"sub": "1", "nbf": now() + 600, "exp": in_an_hour()}));
        assert_eq!(a.verify(&t), Err(AuthError::NotYetValid));
        assert!(AuthError::NotYetValid.to_string().contains("nbf"));
        let t = sign(Algorithm::HS256, SECRET, &json!({"sub": "1", "nbf": now() - 600, "exp": in_an_hour()}));
        assert_eq!(a.verify(&t).unwrap().id.get(), 1);
        let t = sign(Algorithm::HS256, SECRET, &json!({"sub": "1", "nbf": "soon", "exp": in_an_hour()}));
        assert!(matches!(a.verify(&t), Err(AuthError::Invalid(_))));
    }

    #[test]
    fn the_leeway_is_seconds_not_a_minute() {
        let a = auth();
        // Within the default 5 s: accepted both ways.
        let t = sign(Algorithm::HS256, SECRET, &json!({"sub": "1", "exp": now() - 2}));
        assert!(a.verify(&t).is_ok());
        let t = sign(Algorithm::HS256, SECRET, &json!({"sub": "1", "nbf": now() + 2, "exp": in_an_hour()}));
        assert!(a.verify(&t).is_ok());
        // jsonwebtoken's default of 60 s would have let these through.
        let t = sign(Algorithm::HS256, SECRET, &json!({"sub": "1", "exp": now() - 30}));
        assert_eq!(a.verify(&t), Err(AuthError::Expired));
        let t = sign(Algorithm::HS256, SECRET, &json!({"sub": "1", "nbf": now() + 30, "exp": in_an_hour()}));
        assert_eq!(a.verify(&t), Err(AuthError::NotYetValid));
        // The setting is read, and clamped.
        let strict = auth().with_rules(&AuthSettings { leeway_secs: 0, ..AuthSettings::default() });
        let t = sign(Algorithm::HS256, SECRET, &json!({"sub": "1", "exp": now() - 2}));
        assert_eq!(strict.verify(&t), Err(AuthError::Expired));
        let lax = auth().with_rules(&AuthSettings { leeway_secs: u64::MAX, ..AuthSettings::default() });
        let t = sign(Algorithm::HS256, SECRET, &json!({"sub": "1", "exp": now() - 30}));
        assert!(lax.verify(&t).is_ok());
        let t = sign(Algorithm::HS256, SECRET, &json!({"sub": "1", "exp": now() - 3600}));
        assert_eq!(lax.verify(&t), Err(AuthError::Expired));
    }

    #[test]
    fn issuer_and_audience_when_set_must_match() {
        let a = with_rules(Some("seckill-gateway"), Some("seckill"));
        let claims = |extra: serde_json::Value| {
            let mut c = json!({"sub": "1", "exp": in_an_hour()});
            c.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            sign(Algorithm::HS256, SECRET, &c)
        };
        assert!(a.verify(&claims(json!({"iss": "seckill-gateway", "aud": "seckill"}))).is_ok());
        assert!(a.verify(&claims(json!({"iss": "seckill-gateway", "aud": ["other", "seckill"]}))).is_ok());
        for (extra, reason) in [
            (json!({"aud": "seckill"}), "the iss claim (issuer, a string) is missing"),
            (json!({"iss": "seckill-gateway"}), "the aud claim (audience, a string or strings) is missing"),
            (json!({"iss": "someone-else", "aud": "seckill"}), "issued by another issuer (iss)"),
            (json!({"iss": "seckill-gateway", "aud": "billing"}), "meant for another audience (aud)"),
            (json!({"iss": "seckill-gateway", "aud": ["billing"]}), "meant for another audience (aud)"),
            (json!({"iss": 7, "aud": "seckill"}), "the iss claim (issuer, a string) is missing"),
        ] {
            assert_eq!(a.verify(&claims(extra.clone())), Err(AuthError::Invalid(reason)), "{extra}");
        }
        assert!(a.verify(&claims(json!({}))).unwrap_err().to_string().contains("missing"));
    }

    #[test]
    fn only_the_configured_claims_are_required() {
        let iss_only = with_rules(Some("seckill-gateway"), None);
        let t = sign(
            Algorithm::HS256,
            SECRET,
            &json!({"sub": "1", "iss": "seckill-gateway", "exp": in_an_hour()}),
        );
        assert!(iss_only.verify(&t).is_ok());
        // No audience configured: a token meant for some audience is not meant for us.
        let t = sign(Algorithm::HS256, SECRET, &json!({"sub": "1", "aud": "billing", "exp": in_an_hour()}));
        assert_eq!(auth().verify(&t), Err(AuthError::Invalid("meant for another audience (aud)")));
        let t = sign(Algorithm::HS256, SECRET, &json!({"sub": "1", "aud": 7, "exp": in_an_hour()}));
        assert_eq!(auth().verify(&t), Err(AuthError::Invalid("aud must be a string or a list of strings")));
        let t = sign(Algorithm::HS256, SECRET, &json!({"sub": "1", "iss": "anyone", "exp": in_an_hour()}));
        assert!(auth().verify(&t).is_ok(), "iss is not checked unless configured");
    }

    #[test]
    fn minted_tokens_carry_the_configured_issuer_and_audience() {
        let a = with_rules(Some("seckill-gateway"), Some("seckill"));
        let token = a.issue(UserId::new(9).unwrap(), Role::User).unwrap();
        assert_eq!(a.verify(&token).unwrap().id.get(), 9);
        // Another audience's gateway, same secret, refuses it.
        let other = with_rules(Some("seckill-gateway"), Some("billing"));
        assert_eq!(other.verify(&token), Err(AuthError::Invalid("meant for another audience (aud)")));
        // Without rules, no iss/aud claim is minted.
        let token = auth().issue(UserId::new(9).unwrap(), Role::User).unwrap();
        assert!(auth().verify(&token).is_ok());
    }

    #[test]
    fn a_huge_token_is_refused_before_decoding() {
        let a = auth();
        let padding = "x".repeat(MAX_TOKEN_BYTES);
        let t = sign(Algorithm::HS256, SECRET, &json!({"sub": "1", "pad": padding, "exp": in_an_hour()}));
        assert_eq!(a.verify(&t), Err(AuthError::TooLarge));
        assert_eq!(a.verify(&"a".repeat(MAX_TOKEN_BYTES + 1)), Err(AuthError::TooLarge));
        // Just under the bound is read as usual.
        let t = sign(
            Algorithm::HS256,
            SECRET,
            &json!({"sub": "1", "pad": "x".repeat(4096), "exp": in_an_hour()}),
        );
        assert!(t.len() <= MAX_TOKEN_BYTES);
        assert!(a.verify(&t).is_ok());
    }

    #[test]
    fn rs256_and_none_headers_are_refused() {
        let a = auth();
        let good = sign(Algorithm::HS256, SECRET, &json!({"sub": "1", "exp": in_an_hour()}));
        // {"alg":"RS256","typ":"JWT"}: algorithm confusion, the HMAC signature kept.
        let rs256 = with_header(&good, "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9");
        assert_eq!(a.verify(&rs256), Err(AuthError::Invalid("only HS256 tokens are accepted")));
        // {"alg":"none","typ":"JWT"}, with and without a signature.
        let none = with_header(&good, "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0");
        assert!(matches!(a.verify(&none), Err(AuthError::Invalid(_))));
        let (unsigned, _) = none.rsplit_once('.').unwrap();
        assert!(matches!(a.verify(&format!("{unsigned}.")), Err(AuthError::Invalid(_))));
        let t = sign(Algorithm::HS512, SECRET, &json!({"sub": "1", "exp": in_an_hour()}));
        assert_eq!(a.verify(&t), Err(AuthError::Invalid("only HS256 tokens are accepted")));
    }

    #[test]
    fn only_the_bearer_scheme_is_read() {
        assert_eq!(bearer_token(b"Bearer abc"), Ok("abc"));
        assert_eq!(bearer_token(b"bearer   abc "), Ok("abc"));
        assert_eq!(bearer_token(b"Basic abc"), Err(AuthError::NotBearer));
        assert_eq!(bearer_token(b"Bearer "), Err(AuthError::NotBearer));
        assert_eq!(bearer_token(b"abc"), Err(AuthError::NotBearer));
    }
}
