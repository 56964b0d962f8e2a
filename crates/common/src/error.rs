//! The error body every service answers with, and the codes it may carry.

use serde::{Deserialize, Serialize};

/// `{"code": "UPPER_SNAKE", "message": "human text"}`: the body of every error response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What went wrong, for programs: one of the codes each response lists.
    pub code: String,
    /// What went wrong, for people; its wording may change.
    pub message: String,
}

impl ErrorBody {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code: code.as_str().to_owned(), message: message.into() }
    }
}

/// Every error code of the public and internal APIs, with the HTTP status it is answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    InvalidInput,
    PayloadTooLarge,
    HeadersTooLarge,
    UriTooLong,
    RequestTimeout,
    Unauthorized,
    Forbidden,
    NotFound,
    MethodNotAllowed,
    GoodsNotFound,
    OrderNotFound,
    NotStarted,
    Ended,
    SoldOut,
    Repeated,
    BadToken,
    RateLimited,
    OutOfStock,
    KeyReleased,
    OrderNotPayable,
    OrderNotCancellable,
    Busy,
    Unavailable,
    UpstreamUnavailable,
    UpstreamTimeout,
    Internal,
    NoWaitingRoom,
    NotAdmitted,
    ChallengeRequired,
}

impl ErrorCode {
    /// Every code, for whatever must say something of each (the storefront's sentences).
    pub const ALL: [ErrorCode; 29] = [
        Self::InvalidInput,
        Self::PayloadTooLarge,
        Self::HeadersTooLarge,
        Self::UriTooLong,
        Self::RequestTimeout,
        Self::Unauthorized,
        Self::Forbidden,
        Self::NotFound,
        Self::MethodNotAllowed,
        Self::GoodsNotFound,
        Self::OrderNotFound,
        Self::NotStarted,
        Self::Ended,
        Self::SoldOut,
        Self::Repeated,
        Self::BadToken,
        Self::RateLimited,
        Self::OutOfStock,
        Self::KeyReleased,
        Self::OrderNotPayable,
        Self::OrderNotCancellable,
        Self::Busy,
        Self::Unavailable,
        Self::UpstreamUnavailable,
        Self::UpstreamTimeout,
        Self::Internal,
        Self::NoWaitingRoom,
        Self::NotAdmitted,
        Self::ChallengeRequired,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::InvalidInput => "INVALID_INPUT",
            Self::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            Self::HeadersTooLarge => "HEADERS_TOO_LARGE",
            Self::UriTooLong => "URI_TOO_LONG",
            Self::RequestTimeout => "REQUEST_TIMEOUT",
            Self::Unauthorized => "UNAUTHORIZED",
            Self::Forbidden => "FORBIDDEN",
            Self::NotFound => "NOT_FOUND",
            Self::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            Self::GoodsNotFound => "GOODS_NOT_FOUND",
            Self::OrderNotFound => "ORDER_NOT_FOUND",
            Self::NotStarted => "NOT_STARTED",
            Self::Ended => "ENDED",
            Self::SoldOut => "SOLD_OUT",
            Self::Repeated => "REPEATED",
            Self::BadToken => "BAD_TOKEN",
            Self::RateLimited => "RATE_LIMITED",
            Self::OutOfStock => "OUT_OF_STOCK",
            Self::KeyReleased => "KEY_RELEASED",
            Self::OrderNotPayable => "ORDER_NOT_PAYABLE",
            Self::OrderNotCancellable => "ORDER_NOT_CANCELLABLE",
            Self::Busy => "BUSY",
            Self::Unavailable => "UNAVAILABLE",
            Self::UpstreamUnavailable => "UPSTREAM_UNAVAILABLE",
            Self::UpstreamTimeout => "UPSTREAM_TIMEOUT",
            Self::Internal => "INTERNAL",
            Self::NoWaitingRoom => "NO_WAITING_ROOM",
            Self::NotAdmitted => "NOT_ADMITTED",
            Self::ChallengeRequired => "CHALLENGE_REQUIRED",
        }
    }

    /// The HTTP status this code is answered with.
    pub const fn status(self) -> u16 {
        match self {
            Self::InvalidInput => 400,
            Self::Unauthorized => 401,
            Self::Forbidden | Self::BadToken | Self::NotAdmitted | Self::ChallengeRequired => 403,
            Self::NotFound | Self::GoodsNotFound | Self::OrderNotFound | Self::NoWaitingRoom => 404,
            Self::MethodNotAllowed => 405,
            Self::RequestTimeout => 408,
            Self::Repeated
            | Self::OutOfStock
            | Self::KeyReleased
            | Self::OrderNotPayable
            | Self::OrderNotCancellable => 409,
            Self::SoldOut | Self::Ended => 410,
            Self::PayloadTooLarge => 413,
            Self::UriTooLong => 414,
            Self::NotStarted => 425,
            Self::RateLimited => 429,
            Self::HeadersTooLarge => 431,
            Self::Internal => 500,
            Self::Busy | Self::Unavailable | Self::UpstreamUnavailable => 503,
            Self::UpstreamTimeout => 504,
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_serializes_code_as_upper_snake() {
        let body = ErrorBody::new(ErrorCode::SoldOut, "gone");
        assert_eq!(serde_json::to_string(&body).unwrap(), r#"{"code":"SOLD_OUT","message":"gone"}"#);
        assert_eq!(ErrorCode::SoldOut.status(), 410);
        assert_eq!(ErrorCode::NotStarted.status(), 425);
    }

    #[test]
    fn all_lists_every_code_once() {
        use ErrorCode::*;
        for (i, code) in ErrorCode::ALL.into_iter().enumerate() {
            assert_eq!(code as usize, i, "{code} in its place");
            // No wildcard: a new code does not compile here until it is added, then to ALL.
            match code {
                InvalidInput | PayloadTooLarge | HeadersTooLarge | UriTooLong | RequestTimeout
                | Unauthorized | Forbidden | NotFound | MethodNotAllowed | GoodsNotFound | OrderNotFound
                | NotStarted | Ended | SoldOut | Repeated | BadToken | RateLimited | OutOfStock
                | KeyReleased | OrderNotPayable | OrderNotCancellable | Busy | Unavailable
                | UpstreamUnavailable | UpstreamTimeout | Internal | NoWaitingRoom | NotAdmitted
                | ChallengeRequired => {}
            }
        }
        assert_eq!(ErrorCode::ALL.len(), ChallengeRequired as usize + 1, "the last code last");
    }
}
