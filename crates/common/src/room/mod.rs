//! A sale's waiting room: the pure building blocks (no I/O) the services put together.
//!
//! Buyers join a sale's room and get a join number (0, 1, 2, ... in arrival order, from a
//! shared counter elsewhere). The `n` who joined before the opening are given places by a
//! [`Draw`]: a permutation of `0..n` keyed by a seed whose [`Draw::commitment`] is published
//! before the opening and the seed after, so anyone can check every place. Whoever joins after
//! the opening is placed at the back, in arrival order. Arriving early buys a seat in the draw,
//! not a better place: a bot that joins first gains nothing over a person who joins a minute late.
//!
//! State is held by the buyer, not only by the servers: a [`PlaceTicket`] is a signed
//! promise of a join number, good for the sale's life, so a place survives a restart or a lost
//! Redis key. A buyer whose place comes up gets a short-lived [`Admission`]. A sale may also ask
//! for proof of work before joining ([`Challenge`]), to make a million joins cost a million
//! hashes' worth of CPU to whoever sends them.
//!
//! What a service answers with each [`RoomError`]: 400 `INVALID_INPUT` for `Malformed`;
//! 403 `BAD_TOKEN` for `BadSignature`, `WrongSale`, `WrongUser`, `Expired` and `NotSolved` (the
//! client fetches a new admission or challenge); `KeyTooShort` stops the service at start.

mod bodies;
mod draw;
pub mod scripts;
mod token;
mod view;
mod work;

pub use bodies::{
    ADMISSION_SECS, AutoRate, CameUp, MAX_OPENS_BEFORE_SECS, MAX_POW_DIFFICULTY, MAX_RATE, QueueChallenge,
    QueueDraw, QueueJoin, QueueState, QueueStatus, RoomMarks, RoomRate, RoomRecord, WaitingRoom,
};
pub use draw::{Draw, ROUNDS};
pub use token::{Admission, MAX_TOKEN_LEN, PlaceTicket, RoomKey, StreamTicket};
pub use view::{CameUpMarks, POLL_MAX_MS, POLL_MIN_MS, POLL_SPREAD_MS, RoomSnapshot, RoomState, Standing};
pub use work::{Challenge, MAX_DIFFICULTY};

use std::fmt;

use serde::Deserialize;

use crate::config::ConfigError;
use crate::trust::MIN_KEY_BYTES;

/// `room.*`: the key room tokens are sealed with (`SECKILL__ROOM__KEY`), the same on every
/// seckill-service replica, which issues and checks them, and on every gateway replica, which
/// answers status polls from memory with it. A key of its own, not a link's: replacing a link
/// key during a sale must not redraw its room (the draw's seed follows from this key).
#[derive(Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RoomSettings {
    pub key: Option<String>,
}

impl fmt::Debug for RoomSettings {
    // A secret: only whether it is set is printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RoomSettings").field("key", &self.key.as_ref().map(|_| "..")).finish()
    }
}

impl RoomSettings {
    /// The key, when set; refused when shorter than [`MIN_KEY_BYTES`].
    pub fn key(&self) -> Result<Option<RoomKey>, ConfigError> {
        let Some(secret) = self.key.as_deref() else { return Ok(None) };
        RoomKey::new(secret.as_bytes()).map(Some).map_err(|e| ConfigError::at("room.key", e.to_string()))
    }

    /// The key a service that issues room tokens cannot run without.
    pub fn required_key(&self) -> Result<RoomKey, ConfigError> {
        self.key()?.ok_or_else(|| {
            ConfigError::at(
                "room.key",
                "is not set; there is no built-in key (e.g. `openssl rand -base64 48`)",
            )
        })
    }
}

/// Why a room token, a challenge or a key was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RoomError {
    #[error("malformed room token")]
    Malformed,
    #[error("the room token's signature is not ours")]
    BadSignature,
    #[error("the room token is for another sale")]
    WrongSale,
    #[error("the room token is for another user")]
    WrongUser,
    #[error("the room token has expired")]
    Expired,
    #[error("the answer does not solve the challenge")]
    NotSolved,
    #[error("the room key is {0} bytes long; it needs at least {MIN_KEY_BYTES}")]
    KeyTooShort(usize),
}

#[cfg(test)]
mod fixtures {
    use super::RoomKey;
    use crate::{GoodsId, UserId};

    pub const K1: &str = "0123456789abcdef0123456789abcdef-room-one";
    pub const K2: &str = "0123456789abcdef0123456789abcdef-room-two";

    pub fn key(secret: &str) -> RoomKey {
        RoomKey::new(secret.as_bytes()).unwrap()
    }

    pub fn ids(sale: i64, user: i64) -> (GoodsId, UserId) {
        (GoodsId::new(sale).unwrap(), UserId::new(user).unwrap())
    }
}
