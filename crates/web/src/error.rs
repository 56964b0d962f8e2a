//! One error type for every handler: a code, a message for the client, and, for failures that
//! are not the client's, the cause, which is logged once and never shown.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use seckill_common::{ErrorBody, ErrorCode};

#[derive(Debug)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    cause: Option<anyhow::Error>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), cause: None }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidInput, message)
    }

    /// A dependency (`what`: "database", "redis", "broker", an upstream name) did not answer:
    /// 503 for the client, the cause in the log.
    pub fn unavailable(what: &str, cause: impl Into<anyhow::Error>) -> Self {
        Self {
            code: ErrorCode::Unavailable,
            message: format!("{what} is unavailable, try again shortly"),
            cause: Some(cause.into()),
        }
    }

    /// Something that should not happen: 500 for the client, the cause in the log.
    pub fn internal(cause: impl Into<anyhow::Error>) -> Self {
        Self { code: ErrorCode::Internal, message: "internal error".into(), cause: Some(cause.into()) }
    }

    pub fn with_cause(mut self, cause: impl Into<anyhow::Error>) -> Self {
        self.cause = Some(cause.into());
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
        HttpResponse::build(self.status_code()).json(self.body())
    }
}
