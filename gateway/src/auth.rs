//! Bearer JWTs: checking the caller's token on every protected request, and minting dev tokens.
//!
//! HS256 only, `exp` required; `sub` is the user id (a positive integer, as a string or a
//! number) and `role: "admin"` marks an admin (any other role, or none, is a plain user). The
//! keys and the validation rules are built once at start: this runs on every request.

use std::fmt;
use std::time::Duration;

use actix_web::HttpRequest;
use actix_web::http::header::AUTHORIZATION;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use seckill_common::api::Role;
use seckill_common::{ErrorCode, UserId};
use seckill_web::{ApiError, AuthUser};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

/// Why a request's token was refused; each is a 401 `UNAUTHORIZED` with this message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("a bearer token is required")]
    Missing,
    #[error("the authorization header must be `Bearer <token>`")]
    NotBearer,
    #[error("the token has expired")]
    Expired,
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
    encoding: EncodingKey,
    validation: Validation,
    dev_token_ttl: Duration,
}

impl fmt::Debug for Authenticator {
    // The keys hold the secret: never print them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authenticator").field("dev_token_ttl", &self.dev_token_ttl).finish_non_exhaustive()
    }
}

impl Authenticator {
    pub fn new(secret: &str, dev_token_ttl: Duration) -> anyhow::Result<Self> {
        // `Validation::new` already requires and checks `exp` (with jsonwebtoken's default
        // leeway of 60 s for clock skew) and accepts only the algorithm named here, so a token
        // signed with HS512 or `none` is refused even if its signature would check out.
        let validation = Validation::new(Algorithm::HS256);
        Ok(Self {
            decoding: DecodingKey::from_secret(secret.as_bytes())?,
            encoding: EncodingKey::from_secret(secret.as_bytes())?,
            validation,
            dev_token_ttl,
        })
    }

    /// The caller named by the request's `Authorization: Bearer` token.
    pub fn authenticate(&self, req: &HttpRequest) -> Result<AuthUser, AuthError> {
        let header = req.headers().get(AUTHORIZATION).ok_or(AuthError::Missing)?;
        let token = bearer_token(header.as_bytes())?;
        self.verify(token)
    }

    /// Checks signature, algorithm, expiry and claims of a token.
    pub fn verify(&self, token: &str) -> Result<AuthUser, AuthError> {
        let data = jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation)
            .map_err(|e| refusal(e.kind()))?;
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
        ErrorKind::MissingRequiredClaim(_) => AuthError::Invalid("a required claim (exp) is missing"),
        ErrorKind::Json(_) | ErrorKind::InvalidClaimFormat(_) => {
            AuthError::Invalid("malformed header or claims (sub must be a positive integer user id)")
        }
        ErrorKind::ImmatureSignature => AuthError::Invalid("not valid yet"),
        ErrorKind::InvalidAudience | ErrorKind::InvalidIssuer | ErrorKind::InvalidSubject => {
            AuthError::Invalid("not meant for this service")
        }
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
struct IssuedClaims {
    sub: String,
    role: &'static str,
    iat: i64,
    exp: i64,
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

    const SECRET: &str = "unit-test-secret";

    fn auth() -> Authenticator {
        Authenticator::new(SECRET, Duration::from_secs(60)).unwrap()
    }

    fn sign(alg: Algorithm, secret: &str, claims: &serde_json::Value) -> String {
        let key = EncodingKey::from_secret(secret.as_bytes()).unwrap();
        jsonwebtoken::encode(&Header::new(alg), claims, &key).unwrap()
    }

    fn in_an_hour() -> i64 {
        chrono::Utc::now().timestamp() + 3600
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
    fn expired_unsigned_foreign_and_exp_less_tokens_are_refused() {
        let a = auth();
        let old = chrono::Utc::now().timestamp() - 3600;
        let t = sign(Algorithm::HS256, SECRET, &json!({"sub": "1", "exp": old}));
        assert_eq!(a.verify(&t), Err(AuthError::Expired));
        let t = sign(Algorithm::HS256, "another-secret", &json!({"sub": "1", "exp": in_an_hour()}));
        assert_eq!(a.verify(&t), Err(AuthError::Invalid("bad signature")));
        let t = sign(Algorithm::HS512, SECRET, &json!({"sub": "1", "exp": in_an_hour()}));
        assert_eq!(a.verify(&t), Err(AuthError::Invalid("only HS256 tokens are accepted")));
        let t = sign(Algorithm::HS256, SECRET, &json!({"sub": "1"}));
        assert!(matches!(a.verify(&t), Err(AuthError::Invalid(_))));
        assert!(a.verify("not.a.token").is_err());
        assert!(a.verify("").is_err());
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
