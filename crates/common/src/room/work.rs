//! Proof of work before joining, for the sales that ask for it.
//!
//! The server issues a sealed [`Challenge`] and keeps nothing. The client finds an `answer`
//! (a u64) such that SHA-256(the challenge string's bytes ‖ `answer` as 8 bytes little-endian)
//! starts with at least `difficulty` zero bits, the first byte's most significant bit first:
//! about `2^difficulty` hashes for the client, one for the server. The random nonce makes
//! every challenge new, so no work can be done ahead of it.
//!
//! Stateless means replayable: [`Challenge::verify`] returns the nonce, and the caller must
//! remember it until the challenge expires and refuse it a second time.

use std::time::Duration;

use aws_lc_rs::digest::{self, SHA256};
use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::RoomError;
use super::token::{Kind, RoomKey, bound_to, field};
use crate::{GoodsId, UserId};

/// The hardest challenge: 2^32 hashes, minutes to hours of a client's time.
pub const MAX_DIFFICULTY: u8 = 32;

/// A challenge as sealed: the client learns the difficulty from it, the server all of it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Challenge {
    pub sale: GoodsId,
    pub user: UserId,
    pub nonce: [u8; 16],
    /// Leading zero bits the answer's hash needs; 0 asks for no work.
    pub difficulty: u8,
    pub expires_ms: i64,
}

impl Challenge {
    /// A new challenge for `user` joining `sale`, sealed, good for `ttl` from `now_ms`.
    /// `difficulty` is capped at [`MAX_DIFFICULTY`]. Panics if the system's random generator
    /// fails: nothing safe can be issued without it.
    pub fn issue(
        key: &RoomKey,
        sale: GoodsId,
        user: UserId,
        difficulty: u8,
        now_ms: i64,
        ttl: Duration,
    ) -> String {
        let mut nonce = [0u8; 16];
        SystemRandom::new().fill(&mut nonce).expect("the system random generator failed");
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        let expires_ms = now_ms.saturating_add(ttl_ms);
        Self { sale, user, nonce, difficulty, expires_ms }.seal(key)
    }

    /// `difficulty` is capped at [`MAX_DIFFICULTY`].
    pub fn seal(&self, key: &RoomKey) -> String {
        let nonce = URL_SAFE_NO_PAD.encode(self.nonce);
        let difficulty = self.difficulty.min(MAX_DIFFICULTY);
        key.seal(Kind::Challenge, &[&self.sale, &self.user, &nonce, &difficulty, &self.expires_ms])
    }

    /// The client's side: the first answer from 0 up that does the work.
    pub fn solve(challenge: &str, difficulty: u8) -> u64 {
        let base = prefix(challenge);
        // Some answer among 2^64 has 32 leading zero bits but for a vanishing chance.
        (0..=u64::MAX).find(|&answer| done(base.clone(), answer, difficulty)).unwrap_or(u64::MAX)
    }

    /// The server's side: `answer` does the work of a challenge this key sealed for `user`
    /// and `sale`, still good at `now_ms`. Returns the nonce: the caller refuses it a second
    /// time until the challenge expires.
    pub fn verify(
        key: &RoomKey,
        challenge: &str,
        answer: u64,
        sale: GoodsId,
        user: UserId,
        now_ms: i64,
    ) -> Result<[u8; 16], RoomError> {
        let [s, u, nonce, difficulty, expires] = key.open(Kind::Challenge, challenge)?;
        let nonce: [u8; 16] =
            URL_SAFE_NO_PAD.decode(nonce).ok().and_then(|n| n.try_into().ok()).ok_or(RoomError::Malformed)?;
        let difficulty = field::<u8>(difficulty)?;
        if difficulty > MAX_DIFFICULTY {
            return Err(RoomError::Malformed);
        }
        bound_to((field(s)?, field(u)?), sale, user)?;
        if field::<i64>(expires)? < now_ms {
            return Err(RoomError::Expired);
        }
        if difficulty > 0 && !done(prefix(challenge), answer, difficulty) {
            return Err(RoomError::NotSolved);
        }
        Ok(nonce)
    }
}

fn prefix(challenge: &str) -> digest::Context {
    let mut ctx = digest::Context::new(&SHA256);
    ctx.update(challenge.as_bytes());
    ctx
}

fn done(mut ctx: digest::Context, answer: u64, difficulty: u8) -> bool {
    ctx.update(&answer.to_le_bytes());
    leading_zero_bits(ctx.finish().as_ref()) >= u32::from(difficulty.min(MAX_DIFFICULTY))
}

fn leading_zero_bits(bytes: &[u8]) -> u32 {
    let mut zeros = 0;
    for &b in bytes {
        zeros += b.leading_zeros();
        if b != 0 {
            break;
        }
    }
    zeros
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::room::fixtures::{K1, ids, key};

    const NOW: i64 = 1_700_000_000_000;
    const TTL: Duration = Duration::from_secs(60);

    #[test]
    fn room_challenge_solved_is_accepted_and_names_its_nonce() {
        let ((sale, user), k) = (ids(7, 42), key(K1));
        let challenge = Challenge::issue(&k, sale, user, 10, NOW, TTL);
        let answer = Challenge::solve(&challenge, 10);
        let nonce = Challenge::verify(&k, &challenge, answer, sale, user, NOW).unwrap();
        assert_eq!(Challenge::verify(&k, &challenge, answer, sale, user, NOW + 60_000), Ok(nonce));
        let other = Challenge::issue(&k, sale, user, 10, NOW, TTL);
        let again = Challenge::verify(&k, &other, Challenge::solve(&other, 10), sale, user, NOW);
        assert_ne!(again, Ok(nonce), "every challenge has a nonce of its own");
    }

    #[test]
    fn room_challenge_refuses_wrong_answers_and_strangers() {
        let ((sale, user), (other_sale, other_user), k) = (ids(7, 42), ids(8, 43), key(K1));
        let challenge = Challenge::issue(&k, sale, user, 12, NOW, TTL);
        let verify = |answer, sale, user, now| Challenge::verify(&k, &challenge, answer, sale, user, now);
        let answer = Challenge::solve(&challenge, 12);
        // The first answer that does the work: the one before it does not.
        if let Some(wrong) = answer.checked_sub(1) {
            assert_eq!(verify(wrong, sale, user, NOW), Err(RoomError::NotSolved));
        }
        let wrong = (answer + 1..).find(|&a| !done(prefix(&challenge), a, 12)).unwrap();
        assert_eq!(verify(wrong, sale, user, NOW), Err(RoomError::NotSolved));
        assert_eq!(verify(answer, other_sale, user, NOW), Err(RoomError::WrongSale));
        assert_eq!(verify(answer, sale, other_user, NOW), Err(RoomError::WrongUser));
        assert_eq!(verify(answer, sale, user, NOW + 60_001), Err(RoomError::Expired));
    }

    #[test]
    fn room_challenge_of_difficulty_zero_takes_any_answer() {
        let ((sale, user), k) = (ids(7, 42), key(K1));
        let challenge = Challenge::issue(&k, sale, user, 0, NOW, TTL);
        assert_eq!(Challenge::solve(&challenge, 0), 0);
        for answer in [0, 1, u64::MAX] {
            assert!(Challenge::verify(&k, &challenge, answer, sale, user, NOW).is_ok());
        }
    }

    #[test]
    fn room_challenge_tampered_fails_the_seal() {
        let ((sale, user), k) = (ids(7, 42), key(K1));
        let challenge = Challenge { sale, user, nonce: [9; 16], difficulty: 20, expires_ms: NOW + 1 };
        let sealed = challenge.seal(&k);
        let easy = sealed.replacen(".20.", ".0.", 1);
        assert_ne!(easy, sealed);
        assert_eq!(Challenge::verify(&k, &easy, 0, sale, user, NOW), Err(RoomError::BadSignature));
        // A ticket is no challenge, nor is junk.
        let ticket = crate::room::PlaceTicket { sale, user, join: 1, issued_ms: NOW }.seal(&k);
        assert_eq!(Challenge::verify(&k, &ticket, 0, sale, user, NOW), Err(RoomError::Malformed));
        let huge = "c".repeat(1 << 20);
        assert_eq!(Challenge::verify(&k, &huge, 0, sale, user, NOW), Err(RoomError::Malformed));
        // Capped at the maximum.
        let hard = Challenge { difficulty: 200, ..challenge }.seal(&k);
        assert!(hard.contains(".32."), "{hard}");
    }

    #[test]
    fn room_leading_zero_bits_count_from_the_first_byte() {
        assert_eq!([[0, 0, 0x10, 0xff], [0x80, 0, 0, 0], [0; 4]].map(|b| leading_zero_bits(&b)), [19, 0, 32]);
    }
}
