//! Link keys for tests: random ones, made once per test process, so the services a test starts
//! trust each other and nothing else, and a test can act as any of them.

use std::sync::{Arc, OnceLock};

use seckill_common::UserId;
use seckill_common::api::Role;
use seckill_common::room::{RoomKey, RoomSettings};
use seckill_common::trust::{AUTH_HEADER, Peer, RequestFacts, SIGNATURE_HEADER, Trust, TrustSettings};

/// The key of the link `from` -> `to` in this process.
pub fn link_key(from: Peer, to: Peer) -> String {
    static KEYS: OnceLock<Vec<String>> = OnceLock::new();
    let keys = KEYS.get_or_init(|| {
        (0..Peer::ALL.len() * Peer::ALL.len())
            .map(|_| format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple()))
            .collect()
    });
    keys[index(from) * Peer::ALL.len() + index(to)].clone()
}

fn index(p: Peer) -> usize {
    Peer::ALL.iter().position(|q| *q == p).unwrap_or_default()
}

/// `me`'s `trust.*` settings: a key for every link to and from every peer.
pub fn trust_settings(me: Peer) -> TrustSettings {
    TrustSettings {
        send: Peer::ALL.iter().map(|&to| (to.as_str().to_owned(), link_key(me, to))).collect(),
        accept: Peer::ALL.iter().map(|&from| (from.as_str().to_owned(), link_key(from, me))).collect(),
        ..TrustSettings::default()
    }
}

/// The `room.*` settings of the gateway and seckill-service in this process: one random key.
pub fn room_settings() -> RoomSettings {
    static KEY: OnceLock<String> = OnceLock::new();
    let key =
        KEY.get_or_init(|| format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple()));
    RoomSettings { key: Some(key.clone()) }
}

/// The key room tokens are sealed with in this process.
pub fn room_key() -> RoomKey {
    room_settings().required_key().expect("the test room key is valid")
}

/// Keys to act as `me` towards (and to check what is sent to `me` by) every peer.
pub fn trust(me: Peer) -> Arc<Trust> {
    Arc::new(Trust::new(me, &trust_settings(me), &Peer::ALL, &Peer::ALL).expect("test keys are valid"))
}

/// The `x-seckill-auth` header the gateway would add to a request for `user` to `to`.
pub fn as_user(to: Peer, method: &str, path: &str, user: i64, role: Role) -> (&'static str, String) {
    let user = UserId::new(user).expect("a positive user id");
    let facts = RequestFacts { method, path, request_id: "" };
    (AUTH_HEADER, trust(Peer::Gateway).sign_request(to, &facts, Some((user, role))))
}

/// The `x-seckill-auth` header `from` would add to a call of its own to `to`.
pub fn as_service(from: Peer, to: Peer, method: &str, path: &str) -> (&'static str, String) {
    let facts = RequestFacts { method, path, request_id: "" };
    (AUTH_HEADER, trust(from).sign_request(to, &facts, None))
}

/// The `x-seckill-auth` header the gateway adds to an anonymous request (`GET /api/goods`).
pub fn as_gateway(to: Peer, method: &str, path: &str) -> (&'static str, String) {
    as_service(Peer::Gateway, to, method, path)
}

/// Takes every message waiting in `queue`, asserting each is signed by `from` for `to`, and
/// decodes it as `T`.
pub async fn take_signed<T: serde::de::DeserializeOwned>(queue: &str, from: Peer, to: Peer) -> Vec<T> {
    let bodies = take_signed_bodies(queue, from, to).await;
    bodies.iter().map(|b| seckill_common::amqp::decode(b).expect("a message of this version")).collect()
}

/// As [`take_signed`], the bodies as they are (for a queue whose messages come in more than
/// one form).
pub async fn take_signed_bodies(queue: &str, from: Peer, to: Peer) -> Vec<Vec<u8>> {
    use lapin::options::{BasicGetOptions, QueueDeclareOptions};
    use lapin::types::AMQPValue;
    let conn = lapin::Connection::connect(&crate::amqp_url(), lapin::ConnectionProperties::default())
        .await
        .expect("the broker answers");
    let channel = conn.create_channel().await.expect("a channel");
    // The service declares the queue at start; passive: only look.
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    channel.queue_declare(queue.into(), passive, Default::default()).await.expect("the queue exists");
    let receiver = trust(to);
    let mut taken = Vec::new();
    while let Some(m) =
        channel.basic_get(queue.into(), BasicGetOptions { no_ack: true }).await.expect("a get")
    {
        let d = m.delivery;
        let signature = d.properties.headers().as_ref().and_then(|h| match h.inner().get(SIGNATURE_HEADER) {
            Some(AMQPValue::LongString(s)) => Some(s.as_bytes().to_vec()),
            _ => None,
        });
        receiver
            .verify_message(from, signature.as_deref(), &d.data)
            .unwrap_or_else(|e| panic!("a message in {queue} not signed by {from}: {e:?}"));
        taken.push(d.data);
    }
    let _ = conn.close(200, "taken".into()).await;
    taken
}
