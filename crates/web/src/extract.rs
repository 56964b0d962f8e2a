//! Extractor settings that turn bad input into a 4xx with a code, and the caller's identity.

use std::future::{Ready, ready};

use actix_web::dev::Payload;
use actix_web::error::{JsonPayloadError, PathError, QueryPayloadError};
use actix_web::{FromRequest, HttpRequest, web};
use seckill_common::api::Role;
use seckill_common::{ErrorCode, UserId, headers};

use crate::ApiError;

/// JSON bodies: size limit from config; malformed or oversized bodies answered with a code.
pub fn json_config(limit: usize) -> web::JsonConfig {
    web::JsonConfig::default().limit(limit).error_handler(|err, _req| {
        let api = match &err {
            JsonPayloadError::Overflow { .. } | JsonPayloadError::OverflowKnownLength { .. } => {
                ApiError::new(ErrorCode::PayloadTooLarge, "request body is too large")
            }
            JsonPayloadError::ContentType => {
                ApiError::invalid("expected a JSON body with content-type application/json")
            }
            other => ApiError::invalid(format!("invalid JSON body: {other}")),
        };
        api.into()
    })
}

/// Path segments that do not parse (a negative or non-numeric id) are 400, not 404 or 500.
pub fn path_config() -> web::PathConfig {
    web::PathConfig::default()
        .error_handler(|err: PathError, _req| ApiError::invalid(format!("invalid path: {err}")).into())
}

pub fn query_config() -> web::QueryConfig {
    web::QueryConfig::default().error_handler(|err: QueryPayloadError, _req| {
        ApiError::invalid(format!("invalid query: {err}")).into()
    })
}

/// The caller as the gateway vouched for it (`x-user-id`, `x-user-role`). Only the gateway is
/// reachable from outside, and it strips client-sent copies of these headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthUser {
    pub id: UserId,
    pub role: Role,
}

impl AuthUser {
    pub fn require_admin(&self) -> Result<(), ApiError> {
        match self.role {
            Role::Admin => Ok(()),
            Role::User => Err(ApiError::new(ErrorCode::Forbidden, "an admin token is required")),
        }
    }
}

impl FromRequest for AuthUser {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(auth_user(req))
    }
}

fn auth_user(req: &HttpRequest) -> Result<AuthUser, ApiError> {
    let id = req
        .headers()
        .get(headers::USER_ID)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<UserId>().ok())
        .ok_or_else(|| ApiError::new(ErrorCode::Unauthorized, "a bearer token is required"))?;
    let role = match req.headers().get(headers::USER_ROLE).map(|v| v.as_bytes()) {
        Some(b"admin") => Role::Admin,
        _ => Role::User,
    };
    Ok(AuthUser { id, role })
}
