//! The buy-path Lua scripts against a real Redis: each test under its own key prefix.

use futures_util::future::join_all;
use redis::AsyncCommands;
use seckill_common::keys::RedisKeys;
use seckill_common::scripts::{RESERVE_BAD_TOKEN, RESERVE_NOT_LOADED, RESERVE_REPEATED, RESERVE_SOLD_OUT};
use seckill_common::{GoodsId, UserId};
use seckill_infra::redis::{Redis, Scripts, connect};
use seckill_testkit::{TestNames, redis_url};
use uuid::Uuid;

struct Fixture {
    redis: Redis,
    scripts: Scripts,
    keys: RedisKeys,
    g: GoodsId,
    _names: TestNames,
}

async fn fixture(stock: Option<i64>) -> Fixture {
    let names = TestNames::new();
    let settings = seckill_common::config::RedisSettings {
        url: redis_url(),
        key_prefix: names.redis_prefix.clone(),
        ..Default::default()
    };
    let redis = connect(&settings).unwrap();
    let scripts = Scripts::new();
    scripts.load(&redis).await.unwrap();
    let f = Fixture {
        redis,
        scripts,
        keys: RedisKeys::new(names.redis_prefix.clone()),
        g: GoodsId::new(1).unwrap(),
        _names: names,
    };
    if let Some(n) = stock {
        let mut c = f.redis.clone();
        let _: () = c.set(f.keys.stock(f.g), n).await.unwrap();
    }
    f
}

fn u(id: i64) -> UserId {
    UserId::new(id).unwrap()
}

impl Fixture {
    async fn reserve(&self, user: UserId, rid: Uuid, token: &str) -> i64 {
        let mut c = self.redis.clone();
        self.scripts
            .reserve
            .key(self.keys.stock(self.g))
            .key(self.keys.users(self.g))
            .key(self.keys.pending(self.g))
            .key(self.keys.result(self.g, user))
            .key(self.keys.token(self.g, user))
            .arg(user.get())
            .arg(rid.to_string())
            .arg(1_000)
            .arg(token)
            .invoke_async(&mut c)
            .await
            .unwrap()
    }

    async fn undo(&self, user: UserId, rid: Uuid) -> i64 {
        let mut c = self.redis.clone();
        self.scripts
            .undo
            .key(self.keys.stock(self.g))
            .key(self.keys.users(self.g))
            .key(self.keys.pending(self.g))
            .key(self.keys.result(self.g, user))
            .arg(user.get())
            .arg(rid.to_string())
            .arg("failed")
            .invoke_async(&mut c)
            .await
            .unwrap()
    }

    async fn claim(&self, user: UserId, rid: Uuid) -> i64 {
        let mut c = self.redis.clone();
        self.scripts
            .claim
            .key(self.keys.users(self.g))
            .key(self.keys.pending(self.g))
            .arg(user.get())
            .arg(rid.to_string())
            .invoke_async(&mut c)
            .await
            .unwrap()
    }

    async fn fail_claimed(&self, user: UserId, rid: Uuid, give_back: bool) {
        let mut c = self.redis.clone();
        let _: i64 = self
            .scripts
            .fail_claimed
            .key(self.keys.stock(self.g))
            .key(self.keys.users(self.g))
            .key(self.keys.result(self.g, user))
            .arg(user.get())
            .arg(rid.to_string())
            .arg(if give_back { "1" } else { "0" })
            .invoke_async(&mut c)
            .await
            .unwrap();
    }

    async fn stock(&self) -> Option<i64> {
        self.redis.clone().get(self.keys.stock(self.g)).await.unwrap()
    }

    async fn holders(&self) -> i64 {
        self.redis.clone().hlen(self.keys.users(self.g)).await.unwrap()
    }

    async fn result(&self, user: UserId) -> Option<String> {
        self.redis.clone().get(self.keys.result(self.g, user)).await.unwrap()
    }

    async fn pending(&self) -> i64 {
        self.redis.clone().zcard(self.keys.pending(self.g)).await.unwrap()
    }
}

#[tokio::test]
async fn reserve_takes_the_last_unit_then_says_sold_out() {
    let f = fixture(Some(2)).await;
    assert_eq!(f.reserve(u(1), Uuid::new_v4(), "").await, 1);
    assert_eq!(f.reserve(u(2), Uuid::new_v4(), "").await, 0, "the last unit");
    assert_eq!(f.reserve(u(3), Uuid::new_v4(), "").await, RESERVE_SOLD_OUT);
    assert_eq!(f.stock().await, Some(0), "never below zero");
    assert_eq!(f.holders().await, 2);
    assert_eq!(f.result(u(1)).await.as_deref(), Some("queued"));
    assert_eq!(f.result(u(3)).await, None);
}

#[tokio::test]
async fn a_repeat_click_never_touches_the_stock() {
    let f = fixture(Some(5)).await;
    assert_eq!(f.reserve(u(1), Uuid::new_v4(), "").await, 4);
    for _ in 0..3 {
        assert_eq!(f.reserve(u(1), Uuid::new_v4(), "").await, RESERVE_REPEATED);
    }
    assert_eq!(f.stock().await, Some(4));
}

#[tokio::test]
async fn an_unloaded_sale_is_reported_and_not_created() {
    let f = fixture(None).await;
    assert_eq!(f.reserve(u(1), Uuid::new_v4(), "").await, RESERVE_NOT_LOADED);
    assert_eq!(f.stock().await, None, "no counter conjured below zero");
    assert_eq!(f.holders().await, 0);
    // Nor is a path token spent: the caller loads the sale and calls again with it.
    let mut c = f.redis.clone();
    let _: () = c.set(f.keys.token(f.g, u(2)), "tok").await.unwrap();
    assert_eq!(f.reserve(u(2), Uuid::new_v4(), "tok").await, RESERVE_NOT_LOADED);
    let _: () = c.set(f.keys.stock(f.g), 1).await.unwrap();
    assert_eq!(f.reserve(u(2), Uuid::new_v4(), "tok").await, 0);
}

#[tokio::test]
async fn a_wrong_path_token_consumes_nothing_and_the_right_one_is_single_use() {
    let f = fixture(Some(5)).await;
    let mut c = f.redis.clone();
    let token: String = f
        .scripts
        .path_token
        .key(f.keys.token(f.g, u(1)))
        .arg("tok-1")
        .arg(60)
        .invoke_async(&mut c)
        .await
        .unwrap();
    assert_eq!(token, "tok-1");
    let again: String = f
        .scripts
        .path_token
        .key(f.keys.token(f.g, u(1)))
        .arg("tok-2")
        .arg(60)
        .invoke_async(&mut c)
        .await
        .unwrap();
    assert_eq!(again, "tok-1", "the unused token is handed out again");
    assert_eq!(f.reserve(u(1), Uuid::new_v4(), "wrong").await, RESERVE_BAD_TOKEN);
    assert_eq!(f.stock().await, Some(5));
    let rid = Uuid::new_v4();
    assert_eq!(f.reserve(u(1), rid, "tok-1").await, 4);
    // A holder is told so, whatever token the click carries.
    assert_eq!(f.reserve(u(1), Uuid::new_v4(), "tok-1").await, RESERVE_REPEATED);
    assert_eq!(f.reserve(u(1), Uuid::new_v4(), "wrong").await, RESERVE_REPEATED);
    // Given back, the buyer may try again, but not with the token the reservation used up.
    assert_eq!(f.undo(u(1), rid).await, 1);
    assert_eq!(f.reserve(u(1), Uuid::new_v4(), "tok-1").await, RESERVE_BAD_TOKEN, "used up");
    assert_eq!(f.stock().await, Some(5));
}

#[tokio::test]
async fn concurrent_reserves_sell_exactly_the_stock() {
    let f = fixture(Some(50)).await;
    let outcomes = join_all((1..=400).map(|i| f.reserve(u(i), Uuid::new_v4(), ""))).await;
    assert_eq!(outcomes.iter().filter(|c| **c >= 0).count(), 50);
    assert_eq!(outcomes.iter().filter(|c| **c == RESERVE_SOLD_OUT).count(), 350);
    assert_eq!(f.stock().await, Some(0));
    assert_eq!(f.holders().await, 50);
}

/// The trap of a confirm that times out although the broker stored the message: whichever of
/// the publisher's undo and the consumer's claim comes first wins, and only one does.
#[tokio::test]
async fn undo_and_claim_exclude_each_other() {
    let f = fixture(Some(3)).await;

    // Undo first: the reservation goes back; the late message's claim fails.
    let rid = Uuid::new_v4();
    f.reserve(u(1), rid, "").await;
    assert_eq!(f.undo(u(1), rid).await, 1);
    assert_eq!(f.claim(u(1), rid).await, 0);
    assert_eq!(f.stock().await, Some(3));
    assert_eq!(f.result(u(1)).await.as_deref(), Some("failed"));

    // Claim first: the undo leaves it alone; a re-delivered message still claims it.
    let rid = Uuid::new_v4();
    f.reserve(u(2), rid, "").await;
    assert_eq!(f.claim(u(2), rid).await, 1);
    assert_eq!(f.undo(u(2), rid).await, 0);
    assert_eq!(f.claim(u(2), rid).await, 1, "idempotent for the same request");
    assert_eq!(f.claim(u(2), Uuid::new_v4()).await, 0, "another request id never claims it");
    assert_eq!(f.stock().await, Some(2));
    assert_eq!(f.pending().await, 0, "claim and undo clear the pending entry");
}

#[tokio::test]
async fn a_failed_claimed_request_frees_the_user_and_gives_back_only_when_asked() {
    let f = fixture(Some(2)).await;
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    f.reserve(u(1), a, "").await;
    f.reserve(u(2), b, "").await;
    f.claim(u(1), a).await;
    f.claim(u(2), b).await;
    f.fail_claimed(u(1), a, false).await;
    f.fail_claimed(u(2), b, true).await;
    f.fail_claimed(u(2), b, true).await; // delivered twice: gives back once
    assert_eq!(f.stock().await, Some(1));
    assert_eq!(f.holders().await, 0);
    assert_eq!(f.result(u(1)).await.as_deref(), Some("failed"));
    // The user may try again.
    assert_eq!(f.reserve(u(1), Uuid::new_v4(), "").await, 0);
}

#[tokio::test]
async fn scripts_reload_after_a_script_flush() {
    let f = fixture(Some(1)).await;
    let mut c = f.redis.clone();
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query_async(&mut c).await.unwrap();
    // A single invocation reloads by itself on NOSCRIPT.
    assert_eq!(f.reserve(u(1), Uuid::new_v4(), "").await, 0);
}
