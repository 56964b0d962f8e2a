//! Header names the services agree on.

/// The authenticated user, set by the gateway (any client-sent copy is stripped).
pub const USER_ID: &str = "x-user-id";
/// `admin` or `user`, set by the gateway next to [`USER_ID`].
pub const USER_ROLE: &str = "x-user-role";
/// Carried from the gateway through every service and into message headers.
pub const REQUEST_ID: &str = "x-request-id";
/// The path token ("hidden seckill address") presented with an order request.
pub const SECKILL_TOKEN: &str = "x-seckill-token";
