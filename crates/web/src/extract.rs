//! Extractor settings that turn bad input into a 4xx with a code, and the caller's identity.

use std::future::{Ready, ready};

use actix_web::dev::Payload;
use actix_web::error::{JsonPayloadError, PathError, QueryPayloadError};
use actix_web::{FromRequest, HttpRequest, web};
use seckill_common::api::Role;
use seckill_common::trust::{Caller, Peer};
use seckill_common::{ErrorCode, UserId};

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

/// The user the gateway vouched for, in the request's signed credential (see [`crate::trust`]).
/// Only the gateway can vouch for a user: a service's own credential carries none.
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
    match crate::trust::caller(req) {
        Some(Caller { peer: Peer::Gateway, user: Some((id, role)) }) => Ok(AuthUser { id, role }),
        _ => Err(ApiError::new(ErrorCode::Unauthorized, "a bearer token is required")),
    }
}
