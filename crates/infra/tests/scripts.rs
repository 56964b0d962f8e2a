//! The buy-path Lua scripts against a real Redis: each test under its own key prefix.

use futures_util::StreamExt;
use futures_util::future::join_all;
use redis::AsyncCommands;
use seckill_common::api::{SeckillResult, SeckillStatus};
use seckill_common::keys::RedisKeys;
use seckill_common::push::Notice;
use seckill_common::scripts::{
    CLAIMED, Epoch, GIVEN_BACK, LOST, RESERVE_BAD_TOKEN, RESERVE_NOT_LOADED, RESERVE_REPEATED,
    RESERVE_SOLD_OUT,
};
use seckill_common::{GoodsId, OrderId, UserId};
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
        assert_eq!(f.load(n, Epoch::new(1_000), None).await, 1);
    }
    f
}

fn u(id: i64) -> UserId {
    UserId::new(id).unwrap()
}

impl Fixture {
    async fn reserve(&self, user: UserId, rid: Uuid, token: &str) -> i64 {
        self.reserve_in_epoch(user, rid, token).await.0
    }

    /// The reserve's code and the epoch its message would carry.
    async fn reserve_in_epoch(&self, user: UserId, rid: Uuid, token: &str) -> (i64, Option<String>) {
        let mut c = self.redis.clone();
        self.scripts
            .reserve
            .key(self.keys.stock(self.g))
            .key(self.keys.users(self.g))
            .key(self.keys.pending(self.g))
            .key(self.keys.result(self.g, user))
            .key(self.keys.token(self.g, user))
            .key(self.keys.epoch(self.g))
            .arg(user.get())
            .arg(rid.to_string())
            .arg(1_000)
            .arg(token)
            .invoke_async(&mut c)
            .await
            .unwrap()
    }

    async fn load(&self, stock: i64, epoch: Epoch, holdback: Option<i64>) -> i64 {
        let mut c = self.redis.clone();
        self.scripts
            .load
            .key(self.keys.stock(self.g))
            .key(self.keys.epoch(self.g))
            .key(self.keys.holdback(self.g))
            .arg(stock)
            .arg(epoch.to_string())
            .arg(holdback.map(|h| h.to_string()).unwrap_or_default())
            .invoke_async(&mut c)
            .await
            .unwrap()
    }

    /// What Redis loses in a flush: every key of the sale.
    async fn lose_everything(&self) {
        let mut c = self.redis.clone();
        let keys: Vec<String> = c.keys(format!("{}*", self.keys.prefix())).await.unwrap();
        let _: () = c.del(keys).await.unwrap();
    }

    async fn epoch(&self) -> String {
        self.redis.clone().get(self.keys.epoch(self.g)).await.unwrap()
    }

    async fn holding(&self, user: UserId) -> Option<String> {
        self.redis.clone().hget(self.keys.users(self.g), user.get()).await.unwrap()
    }

    async fn holdback(&self) -> Option<i64> {
        self.redis.clone().get(self.keys.holdback(self.g)).await.unwrap()
    }

    async fn succeed(&self, user: UserId, rid: Uuid, order_id: i64) {
        let mut c = self.redis.clone();
        let _: i64 = self
            .scripts
            .succeed
            .key(self.keys.users(self.g))
            .key(self.keys.result(self.g, user))
            .arg(user.get())
            .arg(rid.to_string())
            .arg(order_id)
            .arg(self.keys.sale_events(self.g))
            .invoke_async(&mut c)
            .await
            .unwrap();
    }

    /// Runs a script whose keys are the stock, users and the user's result.
    async fn run_simple(&self, script: &redis::Script, user: UserId, args: &[String]) {
        let mut c = self.redis.clone();
        let mut inv = script.prepare_invoke();
        inv.key(self.keys.stock(self.g)).key(self.keys.users(self.g)).key(self.keys.result(self.g, user));
        for a in args {
            inv.arg(a);
        }
        let _: i64 = inv.invoke_async(&mut c).await.unwrap();
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

    /// A claim by a message of the current epoch.
    async fn claim(&self, user: UserId, rid: Uuid) -> i64 {
        let epoch = self.epoch().await;
        self.claim_from(user, rid, &epoch).await
    }

    async fn claim_from(&self, user: UserId, rid: Uuid, epoch: &str) -> i64 {
        let mut c = self.redis.clone();
        self.scripts
            .claim
            .key(self.keys.users(self.g))
            .key(self.keys.pending(self.g))
            .key(self.keys.epoch(self.g))
            .key(self.keys.stock(self.g))
            .key(self.keys.holdback(self.g))
            .arg(user.get())
            .arg(rid.to_string())
            .arg(epoch)
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
            .arg(self.keys.sale_events(self.g))
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
    assert_eq!(f.load(1, Epoch::new(2_000), None).await, 1);
    assert_eq!(f.reserve(u(2), Uuid::new_v4(), "tok").await, 0);
    assert_eq!(f.load(7, Epoch::new(3_000), None).await, 0, "a loaded sale keeps its count");
    assert_eq!(f.stock().await, Some(0));
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

/// Redis loses every key mid-sale: a message of the old epoch is told LOST (served against the
/// authorities), never dropped as given back; a reservation given back in its own epoch still
/// is dropped.
#[tokio::test]
async fn a_lost_reservation_is_told_apart_from_one_given_back() {
    let f = fixture(Some(10)).await;
    let (kept, given_back, lost, lost_other) =
        (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let (code, old_epoch) = f.reserve_in_epoch(u(1), kept, "").await;
    assert_eq!(code, 9);
    let old_epoch = old_epoch.expect("the reserve names the epoch");
    f.reserve(u(2), given_back, "").await;
    assert_eq!(f.undo(u(2), given_back).await, 1);
    assert_eq!(f.claim_from(u(2), given_back, &old_epoch).await, GIVEN_BACK, "given back in its own epoch");
    f.reserve(u(3), lost, "").await;
    f.reserve(u(4), lost_other, "").await;
    assert_eq!(f.claim_from(u(1), kept, &old_epoch).await, CLAIMED);

    f.lose_everything().await;
    // Not loaded yet: lost, and registered in flight (a rebuild counts it), no stock conjured.
    let early = Uuid::new_v4();
    assert_eq!(f.claim_from(u(8), early, &old_epoch).await, LOST);
    assert_eq!(f.holding(u(8)).await, Some(format!("c:{early}")));
    assert_eq!(f.stock().await, None, "no stock conjured");

    // Rebuilt with 2 units held back: a lost request takes its unit from those, then from the
    // stock; its buyer is registered, so a repeat click is told REPEATED.
    assert_eq!(f.load(3, Epoch::new(9_000), Some(2)).await, 1);
    assert_ne!(f.epoch().await, old_epoch);
    assert_eq!(f.claim_from(u(8), early, &old_epoch).await, CLAIMED, "registered before the rebuild");
    assert_eq!(f.holdback().await, Some(2), "already counted by the rebuild");
    assert_eq!(f.claim_from(u(3), lost, &old_epoch).await, LOST);
    assert_eq!(f.holding(u(3)).await, Some(format!("c:{lost}")));
    assert_eq!(f.claim_from(u(3), lost, &old_epoch).await, CLAIMED, "the re-delivery finds it claimed");
    assert_eq!(f.holdback().await, Some(1));
    assert_eq!(f.reserve(u(3), Uuid::new_v4(), "").await, RESERVE_REPEATED);
    // A buyer who holds a new reservation keeps it; the lost request takes nothing.
    let fresh = Uuid::new_v4();
    assert_eq!(f.reserve(u(4), fresh, "").await, 2);
    assert_eq!(f.claim_from(u(4), lost_other, &old_epoch).await, LOST);
    assert_eq!(f.holding(u(4)).await, Some(fresh.to_string()));
    assert_eq!((f.holdback().await, f.stock().await), (Some(1), Some(2)));
    // Past the held-back units, lost requests come out of the stock.
    for (user, rid) in [(5, Uuid::new_v4()), (6, Uuid::new_v4())] {
        assert_eq!(f.claim_from(u(user), rid, &old_epoch).await, LOST);
    }
    assert_eq!((f.holdback().await, f.stock().await), (Some(0), Some(1)));
    // A message from before epochs existed keeps the old rule: no reservation, dropped.
    assert_eq!(f.claim_from(u(7), Uuid::new_v4(), "").await, GIVEN_BACK);
}

/// A reservation's life as the consumer writes it: an order marks it `o:`, the order's release
/// gives the unit back once; a request superseded by its buyer's other order gives its unit
/// back and names that order.
#[tokio::test]
async fn orders_mark_their_reservation_and_releases_undo_it_once() {
    let f = fixture(Some(3)).await;
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    f.reserve(u(1), a, "").await;
    f.claim(u(1), a).await;
    f.succeed(u(1), a, 41).await;
    assert_eq!(f.stock().await, Some(2));
    assert_eq!(f.holding(u(1)).await, Some(format!("o:{a}")));
    assert_eq!(f.result(u(1)).await.as_deref(), Some("success:41"));
    assert_eq!(f.claim(u(1), a).await, CLAIMED, "a re-delivered message of an order");
    for _ in 0..2 {
        f.run_simple(&f.scripts.restore, u(1), &[u(1).get().to_string(), a.to_string()]).await;
    }
    assert_eq!(f.stock().await, Some(3), "restored once");
    assert_eq!(f.holding(u(1)).await, None);

    // User 2 holds order 77 (request b); a second request c of theirs was reserved and claimed.
    let c = Uuid::new_v4();
    let mut conn = f.redis.clone();
    let _: () = conn.hset(f.keys.users(f.g), 2, format!("o:{b}")).await.unwrap();
    let _: () = conn.hset(f.keys.users(f.g), 2, c.to_string()).await.unwrap();
    f.run_simple(
        &f.scripts.supersede,
        u(2),
        &[u(2).get().to_string(), c.to_string(), b.to_string(), "77".into(), f.keys.sale_events(f.g)],
    )
    .await;
    assert_eq!(f.stock().await, Some(4), "c's unit is back");
    assert_eq!(f.holding(u(2)).await, Some(format!("o:{b}")));
    assert_eq!(f.result(u(2)).await.as_deref(), Some("success:77"));
    f.run_simple(
        &f.scripts.supersede,
        u(2),
        &[u(2).get().to_string(), c.to_string(), b.to_string(), "77".into(), f.keys.sale_events(f.g)],
    )
    .await;
    assert_eq!(f.stock().await, Some(4), "once");
}

/// Each result script tells the sale's channel what it wrote, in the same step: a gateway
/// subscribed to it hears every buyer's end, as `Notice`s, in the order they were written.
#[tokio::test]
async fn result_scripts_publish_their_result_on_the_sales_channel() {
    let f = fixture(Some(5)).await;
    let client = redis::Client::open(redis_url()).unwrap();
    let (mut sink, mut heard) = client.get_async_pubsub().await.unwrap().split();
    sink.subscribe(f.keys.sale_events(f.g)).await.unwrap();
    let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    for (user, rid) in [(u(1), a), (u(2), b), (u(3), c)] {
        f.reserve(user, rid, "").await;
        assert_eq!(f.claim(user, rid).await, CLAIMED);
    }
    f.succeed(u(1), a, 41).await;
    f.fail_claimed(u(2), b, true).await;
    let args = [u(3).get().to_string(), c.to_string(), a.to_string(), "41".into(), f.keys.sale_events(f.g)];
    f.run_simple(&f.scripts.supersede, u(3), &args).await;
    let mut notices = Vec::new();
    for _ in 0..3 {
        let msg =
            tokio::time::timeout(std::time::Duration::from_secs(5), heard.next()).await.unwrap().unwrap();
        assert_eq!(msg.get_channel_name(), f.keys.sale_events(f.g));
        notices.push(Notice::parse(msg.get_payload_bytes()).expect("a notice"));
    }
    let success = |order| SeckillResult { status: SeckillStatus::Success, order_id: OrderId::new(order) };
    let failed = SeckillResult { status: SeckillStatus::Failed, order_id: None };
    assert_eq!(
        notices,
        [
            Notice::Result { user: u(1), result: success(41) },
            Notice::Result { user: u(2), result: failed },
            Notice::Result { user: u(3), result: success(41) },
        ]
    );
}

/// The snapshot sees what is in flight; the adjustment applies a delta only in the epoch it was
/// computed for, never below zero, and can end a recovery.
#[tokio::test]
async fn snapshot_and_adjust() {
    let f = fixture(Some(5)).await;
    let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    f.reserve(u(1), a, "").await;
    f.reserve(u(2), b, "").await;
    f.claim(u(2), b).await;
    f.reserve(u(3), c, "").await;
    f.claim(u(3), c).await;
    f.succeed(u(3), c, 43).await;
    let mut conn = f.redis.clone();
    // Two transfers of units to other buckets (`buckets`) not yet settled: 3 + 4 in transit.
    let out = f.keys.transfers_out(seckill_common::keys::SaleBucket::new(f.g, 0));
    let _: () =
        redis::AsyncCommands::hset_multiple(&mut conn, &out, &[("t1", "2|3|1000"), ("t2", "5|4|1001")])
            .await
            .unwrap();
    let snapshot: Vec<Option<String>> = f
        .scripts
        .snapshot
        .key(f.keys.stock(f.g))
        .key(f.keys.users(f.g))
        .key(f.keys.pending(f.g))
        .key(f.keys.epoch(f.g))
        .key(f.keys.holdback(f.g))
        .key(out)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(snapshot[0].as_deref(), Some("2"));
    assert_eq!(snapshot[1].as_deref(), Some(f.epoch().await.as_str()));
    assert_eq!(snapshot[2], None, "not recovering");
    assert_eq!(snapshot[3].as_deref(), Some("1"), "one order");
    assert_eq!(snapshot[4].as_deref(), Some("1"), "a's entry is pending");
    assert_eq!(snapshot[5].as_deref(), Some("7"), "units in transit");
    let mut in_flight: Vec<String> = snapshot[6..].iter().flatten().cloned().collect();
    in_flight.sort();
    let mut expected = vec![a.to_string(), b.to_string()];
    expected.sort();
    assert_eq!(in_flight, expected);

    let adjust = |epoch: String, delta: i64, end: bool| {
        let mut conn = f.redis.clone();
        let mut inv = f.scripts.adjust.prepare_invoke();
        inv.key(f.keys.stock(f.g))
            .key(f.keys.epoch(f.g))
            .key(f.keys.holdback(f.g))
            .arg(epoch)
            .arg(delta)
            .arg(if end { "1" } else { "0" });
        async move { inv.invoke_async::<Option<i64>>(&mut conn).await.unwrap() }
    };
    assert_eq!(adjust("1".into(), 3, false).await, None, "another epoch: nothing changes");
    assert_eq!(adjust(f.epoch().await, 3, false).await, Some(5));
    assert_eq!(adjust(f.epoch().await, -9, false).await, Some(0), "never below zero");
    let _: () = conn.set(f.keys.holdback(f.g), 4).await.unwrap();
    assert_eq!(adjust(f.epoch().await, 1, true).await, Some(1));
    assert_eq!(f.holdback().await, None, "the recovery ended");
}
