//! Trust between services: who may call whom, and who may send which message.
//!
//! Being on the network earns nothing. Every HTTP request to a service carries
//! [`AUTH_HEADER`], and every message carries [`SIGNATURE_HEADER`]: an HMAC-SHA256 made with the
//! key of one *link* (a sender and a receiver, say order -> stock). Each link has a key of its
//! own, so a service holds only the keys of the links it takes part in: a compromised
//! stock-service can forge nothing towards seckill-service or order-service but what
//! stock-service may send them anyway, and only the gateway can vouch for a user.
//!
//! - A request's credential covers the sender, the receiver, the user and role the gateway
//!   vouches for (if any), the request id, the method, the path and an expiry a few seconds
//!   ahead: a copy is good for nothing else and for no longer.
//! - A message's signature covers the sender, the receiver and the body. Messages wait in
//!   queues for minutes (an order's expiry for half an hour), so they carry no expiry; every
//!   consumer is idempotent, so a replayed copy changes nothing.
//!
//! HMAC rather than public-key signatures: a verification costs about a microsecond, where
//! Ed25519 would add tens of microseconds to every buy request. The price is that a receiver
//! holds the key it checks with; the per-link keys keep that harmless.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use aws_lc_rs::constant_time::verify_slices_are_equal;
use aws_lc_rs::hmac;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;

use crate::UserId;
use crate::api::Role;
use crate::config::{ConfigError, env_name};

/// The request header holding a caller's credential (and, from the gateway, the user).
pub const AUTH_HEADER: &str = "x-seckill-auth";
/// The message header holding the sender's signature.
pub const SIGNATURE_HEADER: &str = "x-seckill-sig";
/// Shortest key accepted for a link: 256 bits, the HMAC-SHA256 block's worth of strength.
pub const MIN_KEY_BYTES: usize = 32;
/// How far ahead of the receiver's clock a credential's expiry may lie: its lifetime plus
/// this much skew between two machines' clocks.
const CLOCK_SKEW_MS: i64 = 5_000;
const VERSION: &str = "v1";

/// The parties of the system that hold keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Peer {
    Gateway,
    Seckill,
    Order,
    Stock,
}

impl Peer {
    pub const ALL: [Self; 4] = [Self::Gateway, Self::Seckill, Self::Order, Self::Stock];

    /// The name in configuration keys (`trust.send.<name>`) and on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Gateway => "gateway",
            Self::Seckill => "seckill",
            Self::Order => "order",
            Self::Stock => "stock",
        }
    }

    /// The peers this one calls or sends messages to: the links it holds a signing key of.
    pub const fn sends_to(self) -> &'static [Self] {
        match self {
            Self::Gateway => &[Self::Seckill, Self::Order, Self::Stock],
            // Sales and counts at stock-service; orders (HTTP and buy requests) at
            // order-service; the sold-out and restocked broadcast to its own replicas.
            Self::Seckill => &[Self::Stock, Self::Order, Self::Seckill],
            // Deductions and releases at stock-service; expiries to itself, through the delay queue.
            Self::Order => &[Self::Stock, Self::Order],
            // Restocks to seckill-service.
            Self::Stock => &[Self::Seckill],
        }
    }

    /// The peers this one takes calls or messages from.
    pub const fn accepts_from(self) -> &'static [Self] {
        match self {
            Self::Gateway => &[],
            Self::Seckill => &[Self::Gateway, Self::Seckill, Self::Stock],
            Self::Order => &[Self::Gateway, Self::Seckill, Self::Order],
            Self::Stock => &[Self::Gateway, Self::Seckill, Self::Order],
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == name)
    }

    const fn index(self) -> usize {
        self as usize
    }

    /// `trust.send.<name>`: the setting of the key this service signs with towards `self`.
    const fn send_key(self) -> &'static str {
        match self {
            Self::Gateway => "trust.send.gateway",
            Self::Seckill => "trust.send.seckill",
            Self::Order => "trust.send.order",
            Self::Stock => "trust.send.stock",
        }
    }

    /// `trust.accept.<name>`: the setting of the keys this service accepts from `self`.
    const fn accept_key(self) -> &'static str {
        match self {
            Self::Gateway => "trust.accept.gateway",
            Self::Seckill => "trust.accept.seckill",
            Self::Order => "trust.accept.order",
            Self::Stock => "trust.accept.stock",
        }
    }
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `trust.*`: the keys of this service's links. No key is built in.
#[derive(Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrustSettings {
    /// Keys this service signs with, by the peer it calls or sends to.
    pub send: BTreeMap<String, String>,
    /// Keys this service accepts, by the peer that calls it or sends to it: one key, or a
    /// comma-separated list while a key is being replaced.
    pub accept: BTreeMap<String, String>,
    /// How long a request's credential stays good after it was made, in seconds.
    pub lifetime_secs: u64,
}

impl Default for TrustSettings {
    fn default() -> Self {
        Self { send: BTreeMap::new(), accept: BTreeMap::new(), lifetime_secs: 30 }
    }
}

impl fmt::Debug for TrustSettings {
    // The values are secrets: only their names are printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrustSettings")
            .field("send", &self.send.keys().collect::<Vec<_>>())
            .field("accept", &self.accept.keys().collect::<Vec<_>>())
            .field("lifetime_secs", &self.lifetime_secs)
            .finish()
    }
}

/// Why a request's credential or a message's signature was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TrustError {
    #[error("no credential")]
    Missing,
    #[error("malformed credential")]
    Malformed,
    #[error("the sender is not one this service accepts")]
    Stranger,
    #[error("the credential has expired")]
    Expired,
    #[error("bad signature")]
    Forged,
}

impl TrustError {
    /// A short label for metrics (a fixed set).
    pub const fn label(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Malformed => "malformed",
            Self::Stranger => "stranger",
            Self::Expired => "expired",
            Self::Forged => "forged",
        }
    }
}

/// Who made a request that passed, and the user the gateway vouched for, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub peer: Peer,
    pub user: Option<(UserId, Role)>,
}

/// What a request's credential is bound to, besides its sender and receiver.
#[derive(Debug, Clone, Copy)]
pub struct RequestFacts<'a> {
    pub method: &'a str,
    /// The path without the query.
    pub path: &'a str,
    /// `x-request-id` as sent, or "".
    pub request_id: &'a str,
}

/// One service's keys, built once at start.
pub struct Trust {
    me: Peer,
    send: [Option<hmac::Key>; 4],
    accept: [Vec<hmac::Key>; 4],
    lifetime_ms: i64,
}

impl fmt::Debug for Trust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let send: Vec<_> = Peer::ALL.into_iter().filter(|p| self.send[p.index()].is_some()).collect();
        let accept: Vec<_> = Peer::ALL.into_iter().filter(|p| !self.accept[p.index()].is_empty()).collect();
        f.debug_struct("Trust").field("me", &self.me).field("send", &send).field("accept", &accept).finish()
    }
}

impl Trust {
    /// The keys of `me`'s links: it signs towards each of `sends_to` and accepts each of
    /// `accepts_from`. Each of those needs a key of at least [`MIN_KEY_BYTES`]; a missing or short
    /// one fails, naming the key and its environment variable. Names of unknown peers fail
    /// too (a typo would otherwise leave a link without its key).
    pub fn new(
        me: Peer,
        settings: &TrustSettings,
        sends_to: &[Peer],
        accepts_from: &[Peer],
    ) -> Result<Self, ConfigError> {
        for (section, names) in [("trust.send", &settings.send), ("trust.accept", &settings.accept)] {
            if let Some(name) = names.keys().find(|n| Peer::parse(n).is_none()) {
                return Err(ConfigError::invalid(
                    "trust",
                    format!("{}__{}", env_name(section), name.to_uppercase()),
                    format!("{section}.{name}: unknown peer (gateway, seckill, order or stock)"),
                ));
            }
        }
        if settings.lifetime_secs == 0 {
            return Err(ConfigError::at("trust.lifetime_secs", "must be at least 1"));
        }
        let mut send: [Option<hmac::Key>; 4] = Default::default();
        for &peer in sends_to {
            let value = settings.send.get(peer.as_str()).map(String::as_str).unwrap_or_default();
            send[peer.index()] = Some(link_key(value, peer.send_key())?);
        }
        let mut accept: [Vec<hmac::Key>; 4] = Default::default();
        for &peer in accepts_from {
            let key = peer.accept_key();
            let list = settings.accept.get(peer.as_str()).map(String::as_str).unwrap_or_default();
            let keys = list
                .split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(|k| link_key(k, key))
                .collect::<Result<Vec<_>, _>>()?;
            if keys.is_empty() {
                return Err(ConfigError::at(key, "is required: no key is built in"));
            }
            accept[peer.index()] = keys;
        }
        let lifetime_ms = i64::try_from(settings.lifetime_secs.saturating_mul(1000)).unwrap_or(i64::MAX);
        Ok(Self { me, send, accept, lifetime_ms })
    }

    /// The keys of every link `me` takes part in ([`Peer::sends_to`], [`Peer::accepts_from`]).
    pub fn for_service(me: Peer, settings: &TrustSettings) -> Result<Self, ConfigError> {
        Self::new(me, settings, me.sends_to(), me.accepts_from())
    }

    pub fn me(&self) -> Peer {
        self.me
    }

    /// How long a request's credential stays good.
    pub fn lifetime(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.lifetime_ms).unwrap_or_default())
    }

    /// The [`AUTH_HEADER`] value for a request to `to`, good for the configured lifetime;
    /// `user` is the user the gateway vouches for. Panics if `to` is not one of the peers
    /// this service was built to send to: that is a wiring mistake, not an input.
    pub fn sign_request(&self, to: Peer, facts: &RequestFacts<'_>, user: Option<(UserId, Role)>) -> String {
        self.sign_request_expiring(to, facts, user, now_ms().saturating_add(self.lifetime_ms))
    }

    /// As [`Self::sign_request`], with the expiry given (Unix ms): for tests of stale credentials.
    pub fn sign_request_expiring(
        &self,
        to: Peer,
        facts: &RequestFacts<'_>,
        user: Option<(UserId, Role)>,
        expires_ms: i64,
    ) -> String {
        let key = self.send_key(to);
        let (uid, role) = user_fields(user);
        let tag = request_tag(key, self.me, to, uid, role, expires_ms, facts);
        format!("{VERSION}.{}.{uid}.{role}.{expires_ms}.{}", self.me, URL_SAFE_NO_PAD.encode(tag.as_ref()))
    }

    /// Checks a request's [`AUTH_HEADER`] value (None if absent) and names its caller.
    pub fn verify_request(
        &self,
        value: Option<&[u8]>,
        facts: &RequestFacts<'_>,
    ) -> Result<Caller, TrustError> {
        let value = value.ok_or(TrustError::Missing)?;
        let value = std::str::from_utf8(value).map_err(|_| TrustError::Malformed)?;
        let mut parts = value.split('.');
        let mut next = || parts.next().ok_or(TrustError::Malformed);
        let (version, from, uid, role, expires, tag) = (next()?, next()?, next()?, next()?, next()?, next()?);
        if version != VERSION || parts.next().is_some() {
            return Err(TrustError::Malformed);
        }
        let from = Peer::parse(from).ok_or(TrustError::Malformed)?;
        let keys = &self.accept[from.index()];
        if keys.is_empty() {
            return Err(TrustError::Stranger);
        }
        let user = match (uid, role) {
            ("0", "-") => None,
            (uid, role) => {
                let id = uid.parse::<UserId>().map_err(|_| TrustError::Malformed)?;
                let role = match role {
                    "user" => Role::User,
                    "admin" => Role::Admin,
                    _ => return Err(TrustError::Malformed),
                };
                Some((id, role))
            }
        };
        let expires_ms: i64 = expires.parse().map_err(|_| TrustError::Malformed)?;
        let presented = decode_tag(tag)?;
        let now = now_ms();
        if expires_ms < now {
            return Err(TrustError::Expired);
        }
        if expires_ms > now.saturating_add(self.lifetime_ms).saturating_add(CLOCK_SKEW_MS) {
            // Longer-lived than any sender makes them: not ours.
            return Err(TrustError::Malformed);
        }
        let (uid, role) = user_fields(user);
        let good = keys.iter().any(|key| {
            let tag = request_tag(key, from, self.me, uid, role, expires_ms, facts);
            verify_slices_are_equal(tag.as_ref(), &presented).is_ok()
        });
        if good { Ok(Caller { peer: from, user }) } else { Err(TrustError::Forged) }
    }

    /// The [`SIGNATURE_HEADER`] value for a message body sent to `to`.
    pub fn sign_message(&self, to: Peer, body: &[u8]) -> String {
        let tag = message_tag(self.send_key(to), self.me, to, body);
        format!("{VERSION}.{}.{}", self.me, URL_SAFE_NO_PAD.encode(tag.as_ref()))
    }

    /// Checks that a message came from `from` (the one peer allowed to send to the queue it
    /// was read from) and was not altered.
    pub fn verify_message(&self, from: Peer, value: Option<&[u8]>, body: &[u8]) -> Result<(), TrustError> {
        let value = value.ok_or(TrustError::Missing)?;
        let value = std::str::from_utf8(value).map_err(|_| TrustError::Malformed)?;
        let mut parts = value.split('.');
        let (Some(version), Some(sender), Some(tag), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TrustError::Malformed);
        };
        if version != VERSION {
            return Err(TrustError::Malformed);
        }
        if Peer::parse(sender) != Some(from) {
            return Err(TrustError::Stranger);
        }
        let keys = &self.accept[from.index()];
        if keys.is_empty() {
            return Err(TrustError::Stranger);
        }
        let presented = decode_tag(tag)?;
        let good = keys.iter().any(|key| {
            let tag = message_tag(key, from, self.me, body);
            verify_slices_are_equal(tag.as_ref(), &presented).is_ok()
        });
        if good { Ok(()) } else { Err(TrustError::Forged) }
    }

    fn send_key(&self, to: Peer) -> &hmac::Key {
        self.send[to.index()]
            .as_ref()
            .unwrap_or_else(|| panic!("{} was not built with a key for sending to {to}", self.me))
    }
}

fn link_key(value: &str, key: &'static str) -> Result<hmac::Key, ConfigError> {
    let value = value.trim();
    if value.is_empty() {
        return Err(ConfigError::at(key, "is required: no key is built in"));
    }
    if value.len() < MIN_KEY_BYTES {
        return Err(ConfigError::at(
            key,
            format!("is {} bytes long; a key needs at least {MIN_KEY_BYTES}", value.len()),
        ));
    }
    Ok(hmac::Key::new(hmac::HMAC_SHA256, value.as_bytes()))
}

fn user_fields(user: Option<(UserId, Role)>) -> (i64, &'static str) {
    match user {
        Some((id, role)) => (id.get(), role.as_str()),
        None => (0, "-"),
    }
}

fn request_tag(
    key: &hmac::Key,
    from: Peer,
    to: Peer,
    uid: i64,
    role: &str,
    expires_ms: i64,
    facts: &RequestFacts<'_>,
) -> hmac::Tag {
    let mut ctx = hmac::Context::with_key(key);
    // Every field ends with a newline, which none of them can contain (header values and
    // request paths cannot), so no two different requests give the same input.
    for part in [b"seckill/v1/http".as_slice(), from.as_str().as_bytes(), to.as_str().as_bytes()] {
        ctx.update(part);
        ctx.update(b"\n");
    }
    ctx.update(uid.to_string().as_bytes());
    ctx.update(b"\n");
    ctx.update(role.as_bytes());
    ctx.update(b"\n");
    ctx.update(expires_ms.to_string().as_bytes());
    ctx.update(b"\n");
    for part in [facts.method, facts.path, facts.request_id] {
        ctx.update(part.as_bytes());
        ctx.update(b"\n");
    }
    ctx.sign()
}

fn message_tag(key: &hmac::Key, from: Peer, to: Peer, body: &[u8]) -> hmac::Tag {
    let mut ctx = hmac::Context::with_key(key);
    for part in [b"seckill/v1/amqp".as_slice(), from.as_str().as_bytes(), to.as_str().as_bytes()] {
        ctx.update(part);
        ctx.update(b"\n");
    }
    ctx.update(body);
    ctx.sign()
}

/// A tag as sent: 32 bytes in unpadded URL-safe base64 (43 characters).
fn decode_tag(text: &str) -> Result<[u8; 32], TrustError> {
    if text.len() != 43 {
        return Err(TrustError::Malformed);
    }
    let mut tag = [0u8; 32];
    match URL_SAFE_NO_PAD.decode_slice(text, &mut tag) {
        Ok(32) => Ok(tag),
        _ => Err(TrustError::Malformed),
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "0123456789abcdef0123456789abcdef-link-one";
    const K2: &str = "0123456789abcdef0123456789abcdef-link-two";

    fn settings(send: &[(&str, &str)], accept: &[(&str, &str)]) -> TrustSettings {
        TrustSettings {
            send: send.iter().map(|(p, k)| ((*p).to_owned(), (*k).to_owned())).collect(),
            accept: accept.iter().map(|(p, k)| ((*p).to_owned(), (*k).to_owned())).collect(),
            ..TrustSettings::default()
        }
    }

    fn gateway(key: &str) -> Trust {
        Trust::new(Peer::Gateway, &settings(&[("order", key)], &[]), &[Peer::Order], &[]).unwrap()
    }

    fn order(accepted: &str) -> Trust {
        Trust::new(Peer::Order, &settings(&[], &[("gateway", accepted)]), &[], &[Peer::Gateway]).unwrap()
    }

    const FACTS: RequestFacts<'static> =
        RequestFacts { method: "POST", path: "/api/orders/7/pay", request_id: "rid-1" };

    fn alice() -> Option<(UserId, Role)> {
        Some((UserId::new(42).unwrap(), Role::User))
    }

    #[test]
    fn a_signed_request_names_its_caller_and_user() {
        let value = gateway(K1).sign_request(Peer::Order, &FACTS, alice());
        let caller = order(K1).verify_request(Some(value.as_bytes()), &FACTS).unwrap();
        assert_eq!(caller, Caller { peer: Peer::Gateway, user: alice() });
        let value = gateway(K1).sign_request(Peer::Order, &FACTS, None);
        assert_eq!(order(K1).verify_request(Some(value.as_bytes()), &FACTS).unwrap().user, None);
    }

    #[test]
    fn a_credential_is_good_for_its_own_request_only() {
        let value = gateway(K1).sign_request(Peer::Order, &FACTS, alice());
        let order = order(K1);
        for other in [
            RequestFacts { method: "GET", ..FACTS },
            RequestFacts { path: "/api/orders/8/pay", ..FACTS },
            RequestFacts { request_id: "rid-2", ..FACTS },
        ] {
            assert_eq!(order.verify_request(Some(value.as_bytes()), &other), Err(TrustError::Forged));
        }
    }

    #[test]
    fn altered_forged_stale_and_foreign_credentials_are_refused() {
        let order = order(K1);
        let value = gateway(K1).sign_request(Peer::Order, &FACTS, alice());
        // The user or role changed on the way.
        let admin = value.replacen(".42.user.", ".42.admin.", 1);
        assert_eq!(order.verify_request(Some(admin.as_bytes()), &FACTS), Err(TrustError::Forged));
        let other = value.replacen(".42.user.", ".1.user.", 1);
        assert_eq!(order.verify_request(Some(other.as_bytes()), &FACTS), Err(TrustError::Forged));
        // Another key.
        let foreign = gateway(K2).sign_request(Peer::Order, &FACTS, alice());
        assert_eq!(order.verify_request(Some(foreign.as_bytes()), &FACTS), Err(TrustError::Forged));
        // Expired.
        let stale = gateway(K1).sign_request_expiring(Peer::Order, &FACTS, alice(), now_ms() - 1);
        assert_eq!(order.verify_request(Some(stale.as_bytes()), &FACTS), Err(TrustError::Expired));
        // Made to live longer than any sender makes them.
        let forever = gateway(K1).sign_request_expiring(Peer::Order, &FACTS, alice(), i64::MAX);
        assert_eq!(order.verify_request(Some(forever.as_bytes()), &FACTS), Err(TrustError::Malformed));
        // Missing and malformed.
        assert_eq!(order.verify_request(None, &FACTS), Err(TrustError::Missing));
        for junk in ["", "v1", "v1.gateway.42.user.1.x", "v2.gateway.42.user.1.aaaa", "v1.nobody.0.-.1.a"] {
            assert_eq!(
                order.verify_request(Some(junk.as_bytes()), &FACTS),
                Err(TrustError::Malformed),
                "{junk}"
            );
        }
        assert_eq!(order.verify_request(Some(&[0xff, 0xfe]), &FACTS), Err(TrustError::Malformed));
    }

    #[test]
    fn only_accepted_peers_may_call() {
        let stock = Trust::new(Peer::Stock, &settings(&[("order", K1)], &[]), &[Peer::Order], &[]).unwrap();
        let value = stock.sign_request(Peer::Order, &FACTS, None);
        assert_eq!(order(K1).verify_request(Some(value.as_bytes()), &FACTS), Err(TrustError::Stranger));
    }

    #[test]
    fn during_a_rotation_both_keys_are_accepted() {
        let order = order(&format!("{K2}, {K1}"));
        for key in [K1, K2] {
            let value = gateway(key).sign_request(Peer::Order, &FACTS, alice());
            assert!(order.verify_request(Some(value.as_bytes()), &FACTS).is_ok());
        }
    }

    #[test]
    fn messages_are_signed_by_their_one_sender() {
        let seckill =
            Trust::new(Peer::Seckill, &settings(&[("order", K1)], &[]), &[Peer::Order], &[]).unwrap();
        let order =
            Trust::new(Peer::Order, &settings(&[], &[("seckill", K1)]), &[], &[Peer::Seckill]).unwrap();
        let body = br#"{"v":1,"request_id":"x"}"#;
        let sig = seckill.sign_message(Peer::Order, body);
        assert_eq!(order.verify_message(Peer::Seckill, Some(sig.as_bytes()), body), Ok(()));
        assert_eq!(order.verify_message(Peer::Seckill, Some(sig.as_bytes()), b"{}"), Err(TrustError::Forged));
        assert_eq!(order.verify_message(Peer::Order, Some(sig.as_bytes()), body), Err(TrustError::Stranger));
        assert_eq!(order.verify_message(Peer::Seckill, None, body), Err(TrustError::Missing));
        let forged = sig.replacen("seckill", "stock", 1);
        assert_eq!(
            order.verify_message(Peer::Seckill, Some(forged.as_bytes()), body),
            Err(TrustError::Stranger)
        );
    }

    #[test]
    fn keys_are_required_strong_and_named() {
        let err = Trust::new(Peer::Order, &settings(&[], &[]), &[], &[Peer::Gateway]).unwrap_err();
        assert!(err.to_string().contains("SECKILL__TRUST__ACCEPT__GATEWAY"), "{err}");
        let err = Trust::new(Peer::Gateway, &settings(&[("order", "short")], &[]), &[Peer::Order], &[])
            .unwrap_err();
        assert!(err.to_string().contains("trust.send.order") && err.to_string().contains("32"), "{err}");
        let err = Trust::new(Peer::Order, &settings(&[], &[("gatway", K1)]), &[], &[]).unwrap_err();
        assert!(err.to_string().contains("gatway"), "{err}");
    }

    #[test]
    fn every_link_has_both_ends() {
        for from in Peer::ALL {
            for &to in from.sends_to() {
                assert!(to.accepts_from().contains(&from), "{from} sends to {to}, which does not accept it");
            }
            for &sender in from.accepts_from() {
                assert!(
                    sender.sends_to().contains(&from),
                    "{from} accepts {sender}, which never sends to it"
                );
            }
        }
    }

    #[test]
    fn settings_never_print_their_keys() {
        let s = settings(&[("order", K1)], &[("gateway", K2)]);
        let printed = format!("{s:?} {:?}", gateway(K1));
        assert!(!printed.contains(K1) && !printed.contains(K2), "{printed}");
    }
}
