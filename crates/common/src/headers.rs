//! Header names the services agree on.

/// Identity headers of older versions, which services trusted unsigned: the gateway still
/// strips client-sent copies, and no service reads them (the identity travels signed, in
/// [`crate::trust::AUTH_HEADER`]).
pub const USER_ID: &str = "x-user-id";
pub const USER_ROLE: &str = "x-user-role";
/// Carried from the gateway through every service and into message headers.
pub const REQUEST_ID: &str = "x-request-id";
/// The path token ("hidden seckill address") presented with an order request.
pub const SECKILL_TOKEN: &str = "x-seckill-token";
/// A buyer's place ticket in a sale's waiting room, presented to ask where they stand.
pub const ROOM_TICKET: &str = "x-room-ticket";
/// A buyer's admission from a sale's waiting room, presented with the sale's token and order
/// requests.
pub const ROOM_ADMISSION: &str = "x-room-admission";
