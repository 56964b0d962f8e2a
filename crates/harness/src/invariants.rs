//! The sale's invariants, checked from outside on what the buyers saw: nobody accepted twice,
//! distinct order ids, no oversell, winners = min(stock, users) (users whose every click was
//! shed `503 BUSY` never asked, so are not counted; users who clicked several times: every
//! accepted user wins while units last), nothing left `queued`, every accepted
//! request ending in `success` or `failed`, and the authority's stock agreeing. After an expiry
//! storm ([`storm`]): every unit back, the audit agreeing, the expired buyers buying again.

use std::collections::HashMap;

use seckill_common::api::{SaleAudit, SeckillStatus};
use serde::{Deserialize, Serialize};

/// A buyer's last known result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FinalState {
    Queued,
    Success,
    Failed,
    /// The service knows nothing of this user in this sale.
    None,
}

impl From<SeckillStatus> for FinalState {
    fn from(status: SeckillStatus) -> Self {
        match status {
            SeckillStatus::Queued => Self::Queued,
            SeckillStatus::Success => Self::Success,
            SeckillStatus::Failed => Self::Failed,
            SeckillStatus::None => Self::None,
        }
    }
}

/// What one user saw during the run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Buyer {
    pub user_id: i64,
    /// Clicks made (path token, then order).
    pub clicks: u32,
    /// Orders answered 202.
    pub accepted: u32,
    /// Clicks that ended without a definitive answer (connection error, timeout, 5xx, 429).
    pub undecided_clicks: u32,
    /// Clicks still answered `503 BUSY` after their retries: shed before anything was
    /// touched, so certainly not accepted (not counted in `undecided_clicks`).
    pub busy_clicks: u32,
    /// The polled result of an accepted user (`None`: never accepted, so never polled).
    pub result: Option<FinalState>,
    pub order_id: Option<i64>,
    /// When the user had a final answer (µs since the first request): the refusal of their
    /// last click, or the poll that saw their result final. `None` while still queued.
    pub answered_us: Option<u32>,
}

/// One check and what it found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

impl Check {
    fn new(name: &str, ok: bool, detail: String) -> Self {
        Self { name: name.into(), ok, detail }
    }

    /// Holds when no user is in `users`; otherwise says how many `broken` and the first few.
    fn none_of(name: &str, users: &[i64], ok: String, broken: &str) -> Self {
        let detail =
            if users.is_empty() { ok } else { format!("{} {broken}, e.g. {:?}", users.len(), first(users)) };
        Self::new(name, users.is_empty(), detail)
    }
}

pub const NOBODY_TWICE: &str = "nobody accepted twice";
pub const DISTINCT_ORDERS: &str = "distinct order ids, one per winner";
pub const NO_OVERSELL: &str = "no oversell";
pub const WINNERS: &str = "winners = min(stock, users)";
pub const NOTHING_QUEUED: &str = "nothing left queued";
pub const NOTHING_LOST: &str = "every 202 ends success or failed";
pub const STOCK_AGREES: &str = "stock_available = stock - winners";

/// Runs every check. `stock_available` is `GET /api/goods/{id}` after the run (`None`: the
/// call failed, and that check fails saying so).
pub fn check(buyers: &[Buyer], stock: i64, stock_available: Option<i64>) -> Vec<Check> {
    let users = buyers.iter().filter(|b| b.clicks > 0).count() as i64;
    // Users every click of whom was shed (BUSY): they never asked the sale, so no unit is theirs.
    let shed = buyers.iter().filter(|b| b.clicks > 0 && b.busy_clicks == b.clicks).count() as i64;
    let accepted_users = buyers.iter().filter(|b| b.accepted > 0).count() as i64;
    let winners: Vec<&Buyer> = buyers.iter().filter(|b| b.result == Some(FinalState::Success)).collect();
    let n_winners = winners.len() as i64;
    let undecided: u32 = buyers.iter().map(|b| b.undecided_clicks).sum();
    let mut checks = Vec::new();

    let twice: Vec<i64> = buyers.iter().filter(|b| b.accepted > 1).map(|b| b.user_id).collect();
    checks.push(Check::none_of(
        NOBODY_TWICE,
        &twice,
        "no user had two orders accepted".into(),
        "users accepted more than once",
    ));

    let mut holders: HashMap<i64, Vec<i64>> = HashMap::new();
    let mut missing = Vec::new();
    for w in &winners {
        match w.order_id {
            Some(id) => holders.entry(id).or_default().push(w.user_id),
            None => missing.push(w.user_id),
        }
    }
    let shared: Vec<(i64, Vec<i64>)> = holders.into_iter().filter(|(_, u)| u.len() > 1).collect();
    checks.push(Check::new(
        DISTINCT_ORDERS,
        shared.is_empty() && missing.is_empty(),
        match (shared.first(), missing.first()) {
            (None, None) => format!("{n_winners} winners, {n_winners} distinct order ids"),
            (Some((id, users)), _) => format!(
                "{} order ids held by several users, e.g. order {id} by users {users:?}",
                shared.len()
            ),
            (None, Some(u)) => format!("{} winners without an order id, e.g. user {u}", missing.len()),
        },
    ));

    checks.push(Check::new(
        NO_OVERSELL,
        n_winners <= stock,
        format!("{n_winners} winners for {stock} units"),
    ));

    let expected = stock.min(users);
    let once = buyers.iter().all(|b| b.clicks <= 1);
    checks.push(if once {
        let asked = users - shed;
        let want = stock.min(asked);
        let of_users = if shed > 0 {
            format!("min({stock}, {users} users - {shed} shed BUSY) = {want}")
        } else {
            format!("min({stock}, {users}) = {want}")
        };
        Check::new(
            WINNERS,
            n_winners == want,
            if undecided > 0 && n_winners != want {
                format!(
                    "{n_winners} winners, expected {of_users}; {undecided} clicks had no definitive answer (errors, timeouts, 5xx, 429)"
                )
            } else {
                format!("{n_winners} winners, expected {of_users}")
            },
        )
    } else {
        // Users clicked several times (hot-user, sold-out): a click refused by the rate limit
        // or the sold-out flag is a fair answer, so not every user need win; but each user who
        // had a click accepted wins while units last (hot-user: the one accepted request ends
        // in success), and never more than min(stock, users).
        let want = stock.min(accepted_users);
        Check::new(
            WINNERS,
            n_winners == want && n_winners <= expected,
            format!(
                "users clicked several times: {n_winners} winners; {accepted_users} users had a click accepted, \
                 so min({stock}, {accepted_users}) = {want} expected (at most min({stock}, {users}) = {expected})"
            ),
        )
    });

    let queued: Vec<i64> =
        buyers.iter().filter(|b| b.result == Some(FinalState::Queued)).map(|b| b.user_id).collect();
    checks.push(Check::none_of(
        NOTHING_QUEUED,
        &queued,
        "every accepted request reached a final result".into(),
        "users still queued at the end",
    ));

    let accepted = buyers.iter().filter(|b| b.accepted > 0).count();
    let failed = buyers.iter().filter(|b| b.result == Some(FinalState::Failed)).count();
    let lost: Vec<i64> = buyers
        .iter()
        .filter(|b| b.accepted > 0 && matches!(b.result, None | Some(FinalState::None)))
        .map(|b| b.user_id)
        .collect();
    checks.push(Check::none_of(
        NOTHING_LOST,
        &lost,
        format!("{accepted} accepted: {n_winners} success, {failed} failed, {} queued", queued.len()),
        "accepted users have no result at all (lost)",
    ));

    let want = stock - n_winners;
    checks.push(match stock_available {
        Some(have) => Check::new(
            STOCK_AGREES,
            have == want,
            format!("GET /api/goods: stock_available {have}, expected {stock} - {n_winners} = {want}"),
        ),
        None => Check::new(STOCK_AGREES, false, "GET /api/goods/{id} failed after the run".into()),
    });
    checks
}

pub const STORM_STOCK_BACK: &str = "every expired unit back: stock_available = stock";
pub const STORM_AUDIT: &str = "the audit agrees: Redis stock = stock, no differences";
pub const STORM_REBUY: &str = "expired buyers buy again: all accepted (202), all success";

/// What the expired buyers got when they bought again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rebuy {
    pub sample: u64,
    pub accepted: u64,
    pub success: u64,
}

/// The expiry storm's checks on its sale of `units`, every order of which expired:
/// `stock_available` from `GET /api/goods/{id}` and `audit` from the admin audit once the storm
/// is over (`None`: the call failed), `rebuy` what a sample of the buyers got buying again.
pub fn storm(
    units: i64,
    stock_available: Option<i64>,
    audit: Option<&SaleAudit>,
    rebuy: Rebuy,
) -> Vec<Check> {
    let mut checks = Vec::new();
    checks.push(match stock_available {
        Some(have) => Check::new(
            STORM_STOCK_BACK,
            have == units,
            format!("GET /api/goods: stock_available {have}, expected {units} (no active order left)"),
        ),
        None => Check::new(STORM_STOCK_BACK, false, "GET /api/goods/{id} failed after the storm".into()),
    });
    checks.push(match audit {
        Some(a) => {
            let ok = a.agrees && a.differences.is_empty() && a.redis.stock == Some(units);
            let stock = a.redis.stock.map_or("not loaded".into(), |s| s.to_string());
            let mut detail = format!(
                "Redis stock {stock}, available {}, active orders {}",
                a.authority.stock_available, a.authority.active_orders
            );
            if !a.differences.is_empty() {
                detail.push_str(&format!("; differences: {}", a.differences.join("; ")));
            }
            Check::new(STORM_AUDIT, ok, detail)
        }
        None => Check::new(STORM_AUDIT, false, "the audit failed after the storm".into()),
    });
    checks.push(Check::new(
        STORM_REBUY,
        rebuy.sample > 0 && rebuy.accepted == rebuy.sample && rebuy.success == rebuy.sample,
        format!("{} buyers: {} accepted (202), {} success", rebuy.sample, rebuy.accepted, rebuy.success),
    ));
    checks
}

/// A run's checks with what they were about in front of their names (`spike during the
/// storm: no oversell`).
pub fn prefixed(prefix: &str, checks: &[Check]) -> Vec<Check> {
    checks.iter().map(|c| Check { name: format!("{prefix}: {}", c.name), ..c.clone() }).collect()
}

fn first(ids: &[i64]) -> &[i64] {
    &ids[..ids.len().min(5)]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `users` one-click buyers for `stock` units, the first `stock` of them winners.
    fn clean_sale(users: i64, stock: i64) -> Vec<Buyer> {
        (1..=users)
            .map(|u| {
                let won = u <= stock;
                Buyer {
                    user_id: u,
                    clicks: 1,
                    accepted: u32::from(won),
                    result: won.then_some(FinalState::Success),
                    order_id: won.then_some(1_000 + u),
                    answered_us: Some(1_000),
                    ..Buyer::default()
                }
            })
            .collect()
    }

    fn failing(checks: &[Check]) -> Vec<&str> {
        checks.iter().filter(|c| !c.ok).map(|c| c.name.as_str()).collect()
    }

    #[test]
    fn a_clean_sale_passes_every_check() {
        let checks = check(&clean_sale(100, 20), 20, Some(0));
        assert!(failing(&checks).is_empty(), "{checks:#?}");
        assert_eq!(checks.len(), 7);
        // Fewer users than units: every user wins and the rest stays.
        let checks = check(&clean_sale(10, 50), 50, Some(40));
        assert!(failing(&checks).is_empty(), "{checks:#?}");
    }

    #[test]
    fn a_double_winner_is_reported() {
        // Two users hold the same order id.
        let mut buyers = clean_sale(100, 20);
        buyers[1].order_id = buyers[0].order_id;
        assert_eq!(failing(&check(&buyers, 20, Some(0))), [DISTINCT_ORDERS]);

        // One user accepted twice: the sale has one more winner than units.
        let mut buyers = clean_sale(100, 20);
        buyers[20].accepted = 1;
        buyers[20].result = Some(FinalState::Success);
        buyers[20].order_id = Some(5_000);
        buyers[0].accepted = 2;
        let checks = check(&buyers, 20, Some(0));
        let failed = failing(&checks);
        assert!(failed.contains(&NOBODY_TWICE), "{failed:?}");
        assert!(failed.contains(&NO_OVERSELL), "{failed:?}");
        assert!(failed.contains(&WINNERS), "{failed:?}");
        assert!(failed.contains(&STOCK_AGREES), "{failed:?}");
    }

    #[test]
    fn a_stuck_queued_result_is_reported() {
        let mut buyers = clean_sale(100, 20);
        buyers[3].result = Some(FinalState::Queued);
        buyers[3].order_id = None;
        buyers[3].answered_us = None;
        let checks = check(&buyers, 20, Some(0));
        let failed = failing(&checks);
        assert!(failed.contains(&NOTHING_QUEUED), "{failed:?}");
        assert!(failed.contains(&WINNERS), "{failed:?}");
        let detail = &checks.iter().find(|c| c.name == NOTHING_QUEUED).unwrap().detail;
        assert!(detail.contains("1 users still queued"), "{detail}");
    }

    #[test]
    fn a_hot_user_refused_by_the_rate_limit_is_no_violation() {
        let buyer = Buyer {
            user_id: 7,
            clicks: 1_000,
            undecided_clicks: 1_000,
            answered_us: Some(20_000),
            ..Buyer::default()
        };
        let checks = check(std::slice::from_ref(&buyer), 10, Some(10));
        assert!(failing(&checks).is_empty(), "{checks:#?}");
        // Two winners among users who clicked several times is still a violation.
        let mut two = vec![buyer.clone(), Buyer { user_id: 8, ..buyer }];
        for (i, b) in two.iter_mut().enumerate() {
            b.accepted = 1;
            b.result = Some(FinalState::Success);
            b.order_id = Some(i as i64 + 1);
        }
        let checks = check(&two, 1, Some(0));
        let failed = failing(&checks);
        assert!(failed.contains(&WINNERS) && failed.contains(&NO_OVERSELL), "{failed:?}");
    }

    #[test]
    fn a_hot_users_one_accepted_click_must_end_in_success() {
        // One user, 1,000 clicks: one 202 (polled to success), the rest refused.
        let won = Buyer {
            user_id: 7,
            clicks: 1_000,
            accepted: 1,
            undecided_clicks: 900,
            busy_clicks: 0,
            result: Some(FinalState::Success),
            order_id: Some(42),
            answered_us: Some(20_000),
        };
        let checks = check(std::slice::from_ref(&won), 10, Some(9));
        assert!(failing(&checks).is_empty(), "{checks:#?}");

        // The one accepted request failed although units were left: not a winner.
        let failed = Buyer { result: Some(FinalState::Failed), order_id: None, ..won.clone() };
        assert_eq!(failing(&check(std::slice::from_ref(&failed), 10, Some(10))), [WINNERS]);

        // Two clicks accepted for the one user.
        let twice = Buyer { accepted: 2, ..won };
        assert_eq!(failing(&check(&[twice], 10, Some(9))), [NOBODY_TWICE]);
    }

    #[test]
    fn a_lost_request_is_reported() {
        let mut buyers = clean_sale(100, 20);
        buyers[5].result = Some(FinalState::None);
        buyers[5].order_id = None;
        let checks = check(&buyers, 20, Some(1));
        let failed = failing(&checks);
        assert!(failed.contains(&NOTHING_LOST), "{failed:?}");
    }

    #[test]
    fn a_click_shed_busy_is_not_expected_to_win() {
        // 100 users for 20 units, every click of users 11..=100 shed: 10 winners are all of it.
        let mut buyers = clean_sale(100, 10);
        for b in &mut buyers[10..] {
            b.busy_clicks = 1;
        }
        let checks = check(&buyers, 20, Some(10));
        assert!(failing(&checks).is_empty(), "{checks:#?}");
        let detail = &checks.iter().find(|c| c.name == WINNERS).unwrap().detail;
        assert!(detail.contains("100 users - 90 shed BUSY) = 10"), "{detail}");

        // Enough users left to sell out: every unit must still be sold.
        let mut buyers = clean_sale(100, 10);
        for b in &mut buyers[50..] {
            b.busy_clicks = 1;
        }
        assert_eq!(failing(&check(&buyers, 20, Some(10))), [WINNERS]);
    }

    #[test]
    fn a_stock_mismatch_is_reported() {
        let buyers = clean_sale(100, 20);
        assert_eq!(failing(&check(&buyers, 20, Some(1))), [STOCK_AGREES]);
        assert_eq!(failing(&check(&buyers, 20, None)), [STOCK_AGREES]);
    }

    fn audit(stock: Option<i64>, available: i64, differences: &[&str]) -> SaleAudit {
        serde_json::from_value(serde_json::json!({
            "goods_id": 7,
            "redis": {"loaded": stock.is_some(), "epoch": null, "stock": stock, "holdback": null,
                      "reservations_ordered": 0, "reservations_in_flight": 0, "pending": 0},
            "authority": {"stock_total": 100, "stock_available": available, "ledger_held": 0,
                          "active_orders": 0, "in_flight_deducted": 0},
            "queue": {"waiting": 0, "consumers": 1},
            "expected_redis_stock": available,
            "agrees": differences.is_empty(),
            "differences": differences,
        }))
        .unwrap()
    }

    #[test]
    fn after_a_storm_every_unit_is_back_and_the_buyers_buy_again() {
        let all = Rebuy { sample: 10, accepted: 10, success: 10 };
        let checks = storm(100, Some(100), Some(&audit(Some(100), 100, &[])), all);
        assert!(failing(&checks).is_empty(), "{checks:#?}");
        assert_eq!(checks.len(), 3);

        // A unit not back at the authority, and Redis short of one.
        let checks = storm(100, Some(99), Some(&audit(Some(99), 99, &[])), all);
        assert_eq!(failing(&checks), [STORM_STOCK_BACK, STORM_AUDIT]);
        // The audit found a difference although the figures look right.
        let checks = storm(100, Some(100), Some(&audit(Some(100), 100, &["the ledger holds 1 unit"])), all);
        assert_eq!(failing(&checks), [STORM_AUDIT]);
        assert!(checks[1].detail.contains("the ledger holds 1 unit"), "{checks:#?}");
        // Calls that failed are failed checks.
        assert_eq!(failing(&storm(100, None, None, all)), [STORM_STOCK_BACK, STORM_AUDIT]);

        // One buyer refused, or one accepted buy that did not end in success; nobody tried.
        for rebuy in [
            Rebuy { sample: 10, accepted: 9, success: 9 },
            Rebuy { sample: 10, accepted: 10, success: 9 },
            Rebuy::default(),
        ] {
            let checks = storm(100, Some(100), Some(&audit(Some(100), 100, &[])), rebuy);
            assert_eq!(failing(&checks), [STORM_REBUY], "{rebuy:?}");
        }
    }

    #[test]
    fn prefixed_checks_say_what_they_were_about() {
        let checks = prefixed("spike during the storm", &check(&clean_sale(10, 5), 5, Some(0)));
        assert_eq!(checks[0].name, format!("spike during the storm: {NOBODY_TWICE}"));
        assert!(checks.iter().all(|c| c.ok));
    }

    #[test]
    fn a_failed_request_is_final_but_not_a_winner() {
        // 20 units; user 1's request failed and gave its unit back, user 21 took it.
        let mut buyers = clean_sale(100, 21);
        buyers[0].result = Some(FinalState::Failed);
        buyers[0].order_id = None;
        let checks = check(&buyers, 20, Some(0));
        assert!(failing(&checks).is_empty(), "{checks:#?}");
    }
}
