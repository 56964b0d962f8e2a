//! One error type for every handler: a code, a message for the client, and, for failures that
//! are not the client's, the cause, which is logged once and never shown.

use actix_web::http::StatusCode;
use actix_web::http::header::{ALLOW, HeaderValue, RETRY_AFTER};
use actix_web::{HttpResponse, ResponseError};
use seckill_common::{ErrorBody, ErrorCode};

#[derive(Debug)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    cause: Option<anyhow::Error>,
    /// Seconds the client should wait before trying again (`Retry-After`).
    pub retry_after_secs: Option<u64>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), cause: None, retry_after_secs: None }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidInput, message)
    }

    /// A dependency (`what`: "database", "redis", "broker", an upstream name) did not answer:
    /// 503 for the client, the cause in the log.
    pub fn unavailable(what: &str, cause: impl Into<anyhow::Error>) -> Self {
        Self::new(ErrorCode::Unavailable, format!("{what} is unavailable, try again shortly"))
            .with_cause(cause)
    }

    /// Something that should not happen: 500 for the client, the cause in the log.
    pub fn internal(cause: impl Into<anyhow::Error>) -> Self {
        Self::new(ErrorCode::Internal, "internal error").with_cause(cause)
    }

    pub fn with_cause(mut self, cause: impl Into<anyhow::Error>) -> Self {
        self.cause = Some(cause.into());
        self
    }

    /// Answers with `Retry-After: <secs>` (at least 1: a client reads 0 as "at once").
    pub fn with_retry_after(mut self, wait: std::time::Duration) -> Self {
        self.retry_after_secs = Some(wait.as_secs_f64().ceil().max(1.0) as u64);
        self
    }

    pub fn body(&self) -> ErrorBody {
        ErrorBody::new(self.code, self.message.clone())
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> HttpResponse {
        if let Some(cause) = &self.cause {
            // `{:#}` prints the whole cause chain on one line; Debug would add a backtrace.
            tracing::error!(code = %self.code, error.cause_chain = %format_args!("{cause:#}"), "request failed");
        }
        let mut response = HttpResponse::build(self.status_code());
        if let Some(secs) = self.retry_after_secs {
            response.insert_header((RETRY_AFTER, secs));
        }
        response.json(self.body())
    }
}

/// 405 `METHOD_NOT_ALLOWED` for a method a route does not take, with the `Allow` header
/// (`allow`: the methods it takes) that RFC 9110 requires of a 405.
pub fn method_not_allowed(allow: HeaderValue) -> HttpResponse {
    let mut response =
        ApiError::new(ErrorCode::MethodNotAllowed, "method not allowed on this route").error_response();
    response.headers_mut().insert(ALLOW, allow);
    response
}

/// The one place database errors become API answers: an outage (the one rule,
/// [`seckill_db::DbError::is_outage`]) is 503 naming the database, a missing row 404, anything
/// else 500; the cause is logged, never shown.
#[cfg(feature = "db")]
impl From<seckill_db::DbError> for ApiError {
    fn from(e: seckill_db::DbError) -> Self {
        if e.is_outage() {
            Self::unavailable("database", e)
        } else if e.is_not_found() {
            Self::new(ErrorCode::NotFound, "not found")
        } else {
            Self::internal(e)
        }
    }
}

/// A query's error, as [`seckill_db::DbError`]'s.
#[cfg(feature = "db")]
impl From<seckill_db::QueryError> for ApiError {
    fn from(e: seckill_db::QueryError) -> Self {
        seckill_db::DbError::from(e).into()
    }
}

#[cfg(all(test, feature = "db"))]
mod tests {
    use seckill_db::{DbError, PoolError, QueryError};

    use super::*;

    #[test]
    fn database_errors_answer_by_what_failed() {
        // The outage rule itself is seckill-db's, tested there against a real server.
        let down = ApiError::from(DbError::Pool(PoolError::Closed));
        assert_eq!(down.code, ErrorCode::Unavailable);
        assert_eq!(down.message, "database is unavailable, try again shortly");
        assert_eq!(ApiError::from(QueryError::NotFound).code, ErrorCode::NotFound);
        assert_eq!(ApiError::from(QueryError::AlreadyInTransaction).code, ErrorCode::Internal);
    }
}
