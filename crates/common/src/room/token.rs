//! Signed room tokens: the place a buyer holds, and the admission that lets them buy.
//!
//! A token reads `v1.<kind>.<field>. ... .<tag>`: the fields in decimal (a challenge's nonce
//! in base64), then an HMAC-SHA256 in unpadded URL-safe base64. The tag covers a domain
//! string, a kind byte and the text before it, so a ticket can pass for no admission or
//! challenge, even under the same key. Anything longer than [`MAX_TOKEN_LEN`] is refused
//! before it is split or decoded.

use std::fmt;

use aws_lc_rs::hmac;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::RoomError;
use crate::trust::MIN_KEY_BYTES;
use crate::{GoodsId, UserId};

/// The longest token accepted: every token this module makes is under 200 characters.
pub const MAX_TOKEN_LEN: usize = 256;
const VERSION: &str = "v1";
const DOMAIN: &[u8] = b"seckill/room/v1\n";

/// What a token is: its byte is in the MAC and, as a letter, in the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Kind {
    Ticket = b'p',
    Admission = b'a',
    Challenge = b'c',
    Stream = b's',
}

/// The key room tokens are sealed with: one per deployment, shared by the replicas that
/// issue and check them. The gateway seals its stream tickets ([`StreamTicket`]) the same way,
/// under a key of their own.
pub struct RoomKey(hmac::Key);

impl fmt::Debug for RoomKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RoomKey(..)")
    }
}

impl RoomKey {
    /// At least [`MIN_KEY_BYTES`] bytes of secret.
    pub fn new(secret: &[u8]) -> Result<Self, RoomError> {
        if secret.len() < MIN_KEY_BYTES {
            return Err(RoomError::KeyTooShort(secret.len()));
        }
        Ok(Self(hmac::Key::new(hmac::HMAC_SHA256, secret)))
    }

    /// The seed of `sale`'s draw: secret until the opening, the same on every replica, and
    /// never stored (a room's whole draw follows from the key and the sale).
    pub fn seed_of(&self, sale: GoodsId) -> [u8; 32] {
        let tag = hmac::sign(&self.0, format!("seckill/room/v1/seed\n{sale}").as_bytes());
        let mut seed = [0u8; 32];
        seed.copy_from_slice(&tag.as_ref()[..32]);
        seed
    }

    /// Checks a [`PlaceTicket`] presented by `user` for `sale`.
    pub fn open_ticket(&self, token: &str, sale: GoodsId, user: UserId) -> Result<PlaceTicket, RoomError> {
        let [s, u, join, issued] = self.open(Kind::Ticket, token)?;
        let ticket =
            PlaceTicket { sale: field(s)?, user: field(u)?, join: field(join)?, issued_ms: field(issued)? };
        bound_to((ticket.sale, ticket.user), sale, user)?;
        Ok(ticket)
    }

    /// Checks an [`Admission`] presented by `user` for `sale` at `now_ms`.
    pub fn open_admission(
        &self,
        token: &str,
        sale: GoodsId,
        user: UserId,
        now_ms: i64,
    ) -> Result<Admission, RoomError> {
        let [s, u, place, expires] = self.open(Kind::Admission, token)?;
        let admission =
            Admission { sale: field(s)?, user: field(u)?, place: field(place)?, expires_ms: field(expires)? };
        bound_to((admission.sale, admission.user), sale, user)?;
        if admission.expires_ms < now_ms {
            return Err(RoomError::Expired);
        }
        Ok(admission)
    }

    /// Checks a [`StreamTicket`] presented for `sale` at `now_ms` (whoever presents it: the
    /// ticket is the buyer's credential; its one use is the gateway's to enforce).
    pub fn open_stream_ticket(
        &self,
        token: &str,
        sale: GoodsId,
        now_ms: i64,
    ) -> Result<StreamTicket, RoomError> {
        let [s, u, expires, nonce, join, issued] = self.open(Kind::Stream, token)?;
        let user: UserId = field(u)?;
        let named: GoodsId = field(s)?;
        bound_to((named, user), sale, user)?;
        let expires_ms = field(expires)?;
        if expires_ms < now_ms {
            return Err(RoomError::Expired);
        }
        let nonce_ok = (16..=64).contains(&nonce.len()) && nonce.bytes().all(|b| b.is_ascii_alphanumeric());
        if !nonce_ok {
            return Err(RoomError::Malformed);
        }
        let place = match field::<u64>(join)? {
            0 => None,
            join => Some(PlaceTicket { sale, user, join, issued_ms: field(issued)? }),
        };
        Ok(StreamTicket { sale, user, expires_ms, nonce: nonce.to_owned(), place })
    }

    /// `v1.<kind>.<fields>.<tag>`. The fields must hold no `.`: numbers and base64url.
    pub(super) fn seal(&self, kind: Kind, fields: &[&dyn fmt::Display]) -> String {
        let fields: Vec<String> = fields.iter().map(ToString::to_string).collect();
        let text = format!("{VERSION}.{}.{}", char::from(kind as u8), fields.join("."));
        let tag = hmac::sign(&self.0, &signed(kind, &text));
        format!("{text}.{}", URL_SAFE_NO_PAD.encode(tag.as_ref()))
    }

    /// The `N` fields of a token of `kind` sealed with this key, unparsed.
    pub(super) fn open<'a, const N: usize>(
        &self,
        kind: Kind,
        token: &'a str,
    ) -> Result<[&'a str; N], RoomError> {
        if token.len() > MAX_TOKEN_LEN {
            return Err(RoomError::Malformed);
        }
        let (text, tag) = token.rsplit_once('.').ok_or(RoomError::Malformed)?;
        let tag = decode_tag(tag)?;
        let parts: Vec<&str> = text.split('.').collect();
        let (head, fields) = parts.split_at_checked(2).ok_or(RoomError::Malformed)?;
        if head[0] != VERSION || head[1].as_bytes() != [kind as u8] {
            return Err(RoomError::Malformed);
        }
        let fields: [&str; N] = fields.try_into().map_err(|_| RoomError::Malformed)?;
        // Constant time: a forger learns nothing from how long the refusal took.
        hmac::verify(&self.0, &signed(kind, text), &tag).map_err(|_| RoomError::BadSignature)?;
        Ok(fields)
    }
}

/// A buyer's place in a sale's room: the join number, from which [`super::Draw`] gives the
/// place. No expiry: it is a promise for the sale's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlaceTicket {
    pub sale: GoodsId,
    pub user: UserId,
    pub join: u64,
    pub issued_ms: i64,
}

impl PlaceTicket {
    pub fn seal(&self, key: &RoomKey) -> String {
        key.seal(Kind::Ticket, &[&self.sale, &self.user, &self.join, &self.issued_ms])
    }
}

/// Leave to buy, for a buyer whose place came up, until `expires_ms` (Unix ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    pub sale: GoodsId,
    pub user: UserId,
    pub place: u64,
    pub expires_ms: i64,
}

impl Admission {
    pub fn seal(&self, key: &RoomKey) -> String {
        key.seal(Kind::Admission, &[&self.sale, &self.user, &self.place, &self.expires_ms])
    }
}

/// A one-use pass to open `user`'s event stream of `sale` (`GET /api/seckill/{id}/events`)
/// without their bearer token in the URL (a browser's EventSource sends no header): valid
/// until `expires_ms`, spent at its first use (its `nonce`, letters and digits). It carries
/// the buyer's place ticket, when they hold one, so the stream can tell their place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamTicket {
    pub sale: GoodsId,
    pub user: UserId,
    pub expires_ms: i64,
    pub nonce: String,
    pub place: Option<PlaceTicket>,
}

impl StreamTicket {
    pub fn seal(&self, key: &RoomKey) -> String {
        let (join, issued) = self.place.map_or((0, 0), |p| (p.join, p.issued_ms));
        key.seal(Kind::Stream, &[&self.sale, &self.user, &self.expires_ms, &self.nonce, &join, &issued])
    }
}

/// What the MAC covers: the domain, the kind byte and the token's text before the tag.
fn signed(kind: Kind, text: &str) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(DOMAIN.len() + 1 + text.len());
    bytes.extend_from_slice(DOMAIN);
    bytes.push(kind as u8);
    bytes.extend_from_slice(text.as_bytes());
    bytes
}

pub(super) fn field<T: std::str::FromStr>(text: &str) -> Result<T, RoomError> {
    text.parse().map_err(|_| RoomError::Malformed)
}

/// The sale and user a token names are the ones it was presented for.
pub(super) fn bound_to(named: (GoodsId, UserId), sale: GoodsId, user: UserId) -> Result<(), RoomError> {
    match named {
        (s, _) if s != sale => Err(RoomError::WrongSale),
        (_, u) if u != user => Err(RoomError::WrongUser),
        _ => Ok(()),
    }
}

/// A tag as sent: 32 bytes in unpadded URL-safe base64 (43 characters).
fn decode_tag(text: &str) -> Result<[u8; 32], RoomError> {
    let mut tag = [0u8; 32];
    match (text.len(), URL_SAFE_NO_PAD.decode_slice(text, &mut tag)) {
        (43, Ok(32)) => Ok(tag),
        _ => Err(RoomError::Malformed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::room::fixtures::{K1, K2, ids, key};

    fn ticket() -> PlaceTicket {
        let (sale, user) = ids(7, 42);
        PlaceTicket { sale, user, join: 1234, issued_ms: 1_700_000_000_000 }
    }

    fn admission() -> Admission {
        let (sale, user) = ids(7, 42);
        Admission { sale, user, place: 99, expires_ms: 1_700_000_060_000 }
    }

    #[test]
    fn room_ticket_opens_for_its_sale_and_user_only() {
        let (k, t) = (key(K1), ticket());
        let token = t.seal(&k);
        assert!(token.len() < 200 && token.starts_with("v1.p.7.42.1234."), "{token}");
        assert_eq!(k.open_ticket(&token, t.sale, t.user), Ok(t));
        assert_eq!(k.open_ticket(&token, ids(8, 42).0, t.user), Err(RoomError::WrongSale));
        assert_eq!(k.open_ticket(&token, t.sale, ids(7, 43).1), Err(RoomError::WrongUser));
        assert_eq!(key(K2).open_ticket(&token, t.sale, t.user), Err(RoomError::BadSignature));
        // Another join number written in.
        let moved = token.replacen(".1234.", ".0.", 1);
        assert_eq!(k.open_ticket(&moved, t.sale, t.user), Err(RoomError::BadSignature));
    }

    #[test]
    fn room_admission_expires() {
        let (k, a) = (key(K1), admission());
        let token = a.seal(&k);
        assert_eq!(k.open_admission(&token, a.sale, a.user, a.expires_ms), Ok(a));
        assert_eq!(k.open_admission(&token, a.sale, a.user, a.expires_ms + 1), Err(RoomError::Expired));
        assert_eq!(k.open_admission(&token, ids(1, 42).0, a.user, 0), Err(RoomError::WrongSale));
        assert_eq!(k.open_admission(&token, a.sale, ids(7, 1).1, 0), Err(RoomError::WrongUser));
        let later = token.replacen(".1700000060000.", ".1800000060000.", 1);
        assert_eq!(k.open_admission(&later, a.sale, a.user, 0), Err(RoomError::BadSignature));
    }

    #[test]
    fn room_ticket_and_admission_are_not_interchangeable() {
        let k = key(K1);
        let (t, a) = (ticket(), admission());
        let (ticket, admission) = (t.seal(&k), a.seal(&k));
        assert_eq!(k.open_admission(&ticket, t.sale, t.user, 0), Err(RoomError::Malformed));
        assert_eq!(k.open_ticket(&admission, a.sale, a.user), Err(RoomError::Malformed));
        // Relabelled, the MAC's kind byte still tells them apart.
        let relabelled = ticket.replacen("v1.p.", "v1.a.", 1);
        assert_eq!(k.open_admission(&relabelled, t.sale, t.user, 0), Err(RoomError::BadSignature));
        let relabelled = admission.replacen("v1.a.", "v1.p.", 1);
        assert_eq!(k.open_ticket(&relabelled, a.sale, a.user), Err(RoomError::BadSignature));
    }

    #[test]
    fn a_stream_ticket_opens_for_its_sale_until_it_expires() {
        let k = key(K1);
        let (sale, user) = ids(7, 42);
        let nonce = "0123456789abcdef0123456789abcdef".to_owned();
        let plain = StreamTicket { sale, user, expires_ms: 1_000, nonce: nonce.clone(), place: None };
        let token = plain.seal(&k);
        assert_eq!(k.open_stream_ticket(&token, sale, 1_000), Ok(plain.clone()));
        assert_eq!(k.open_stream_ticket(&token, sale, 1_001), Err(RoomError::Expired));
        assert_eq!(k.open_stream_ticket(&token, ids(8, 42).0, 0), Err(RoomError::WrongSale));
        assert_eq!(key(K2).open_stream_ticket(&token, sale, 0), Err(RoomError::BadSignature));
        let other_user = token.replacen(".42.", ".43.", 1);
        assert_eq!(k.open_stream_ticket(&other_user, sale, 0), Err(RoomError::BadSignature));
        // With the buyer's place: the same place ticket comes back out.
        let place = ticket();
        let placed = StreamTicket { place: Some(place), ..plain };
        assert_eq!(k.open_stream_ticket(&placed.seal(&k), sale, 0).unwrap().place, Some(place));
        // Not a place ticket, nor one in disguise.
        assert_eq!(k.open_ticket(&token, sale, user), Err(RoomError::Malformed));
        assert_eq!(k.open_stream_ticket(&place.seal(&k), sale, 0), Err(RoomError::Malformed));
        let bad_nonce = StreamTicket { sale, user, expires_ms: 1_000, nonce: "short".into(), place: None };
        assert_eq!(k.open_stream_ticket(&bad_nonce.seal(&k), sale, 0), Err(RoomError::Malformed));
    }

    #[test]
    fn room_junk_is_malformed() {
        let (k, t) = (key(K1), ticket());
        let token = t.seal(&k);
        let huge = "a".repeat(1 << 20);
        let long = format!("{token}{}", "x".repeat(MAX_TOKEN_LEN));
        let extra = token.replacen("v1.p.", "v1.p.0.", 1);
        let short_tag = &token[..token.len() - 1];
        for junk in ["", ".", "v1", "v1.p.7.42.1.2", "v2.p.7.42.1.2.x", &huge, &long, &extra, short_tag] {
            assert_eq!(k.open_ticket(junk, t.sale, t.user), Err(RoomError::Malformed), "{junk:.40}");
        }
    }

    #[test]
    fn room_key_must_be_long_and_stays_secret() {
        assert_eq!(RoomKey::new(b"short").unwrap_err(), RoomError::KeyTooShort(5));
        assert!(RoomError::KeyTooShort(5).to_string().contains("32"));
        assert!(RoomKey::new(&[7; MIN_KEY_BYTES]).is_ok());
        assert!(!format!("{:?}", key(K1)).contains("room-one"));
    }
}
