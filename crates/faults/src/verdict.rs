//! A case's verdict, from outside: what the buyers saw (their logs, and every result read once
//! more at the end), what the gateway says (`GET /api/goods/{id}`, each buyer's
//! `GET /api/orders`) and what the databases hold (goods, stock_ledger, orders). The checks
//! are the fault suite's own, plus the load tool's sale invariants ([`invariants::check`]) on
//! the buyers' final results.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use uuid::Uuid;

use super::buyers::{BuyerLog, Tally};
use seckill_harness::invariants::{self, Buyer, Check, FinalState};

pub const ONLY_503_504: &str = "no 5xx but 503/504, no unexpected answer";
pub const NO_OVERSELL: &str = "active orders <= stock";
pub const ONE_PER_USER: &str = "at most one active order per user";
pub const EVERY_202_FINAL: &str = "every 202 ends success or failed";
pub const RESULTS_AGREE: &str = "results agree with the orders";
pub const STOCK_AGREES: &str = "stock_available = stock_total - active orders";
pub const ALL_SOLD: &str = "every unit sold";
pub const BACK_AFTER_SERVER: &str = "buy path back soon after the server";
/// How soon after a stopped server's return the buy path must answer again: the services'
/// back-off tops out at 5 s (`seckill_common::ready`), plus a request's own retry.
pub const BACK_AFTER_SERVER_S: f64 = 10.0;

/// How many examples a detail names.
const EXAMPLES: usize = 5;

/// An order row of the sale (seckill_order.orders).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderRow {
    pub id: i64,
    pub request_id: Uuid,
    pub user_id: i64,
    pub status: String,
}

impl OrderRow {
    pub fn active(&self) -> bool {
        self.status == "unpaid" || self.status == "paid"
    }
}

/// What the gateway and the databases say once the case is over.
#[derive(Debug, Clone, Default)]
pub struct Outside {
    /// `(stock_total, stock_available)` of the goods row; `None`: not readable.
    pub stock: Option<(i64, i64)>,
    /// `GET /api/goods/{id}`'s stock_available.
    pub api_available: Option<i64>,
    /// The sale's ledger rows: `(order_key, held)` (held: not released).
    pub ledger: Vec<(Uuid, bool)>,
    pub orders: Vec<OrderRow>,
    /// Each buyer's result read at the end; `None`: not readable.
    pub end: HashMap<i64, Option<(FinalState, Option<i64>)>>,
    /// `GET /api/orders` of the users asked: the sale's orders `(id, status)`; `None`: not
    /// readable.
    pub listed: HashMap<i64, Option<Vec<(i64, String)>>>,
}

impl Outside {
    /// The users whose end result and orders are compared: any who was accepted, holds an
    /// order, or whose result says success.
    pub fn users_to_compare(
        logs: &[BuyerLog],
        orders: &[OrderRow],
        end: &HashMap<i64, Option<(FinalState, Option<i64>)>>,
    ) -> BTreeSet<i64> {
        let mut users: BTreeSet<i64> =
            logs.iter().filter(|l| !l.accepted.is_empty()).map(|l| l.user_id).collect();
        users.extend(orders.iter().map(|o| o.user_id));
        users
            .extend(end.iter().filter(|(_, r)| matches!(r, Some((FinalState::Success, _)))).map(|(u, _)| *u));
        users
    }
}

/// A case's figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    pub units: i64,
    /// Buyers who took part (got an answer about the sale), late ones included.
    pub buyers: u64,
    pub late_buyers: u64,
    /// 202 answers.
    pub accepted: u64,
    /// 409 REPEATED read as an earlier click accepted (its answer lost).
    pub repeated: u64,
    /// Active orders in the database.
    pub orders: u64,
    /// Users who lost something: an accepted request without a final result, a success
    /// without its order, or an order without its success.
    pub lost: u64,
    pub lost_no_result: u64,
    pub success_without_order: u64,
    pub order_without_success: u64,
    /// Accepted requests that ended `failed` (their unit given back).
    pub failed_after_202: u64,
    /// Buyers who hold their order although they never saw it accepted: the 202 was lost (a
    /// connection cut) and the retry was refused (e.g. 410 SOLD_OUT); their result says success.
    pub won_unseen: u64,
    pub sold_out: u64,
    pub gave_up: u64,
    pub tally: Tally,
    pub fault_s: Option<f64>,
    pub back_s: Option<f64>,
    /// From the fault to the first 202 or clean 410 SOLD_OUT answered to a request sent after it.
    pub buy_path_back_s: Option<f64>,
    /// From the fault until every request accepted before everything was back had its final
    /// result (see [`drained`]).
    pub drained_s: Option<f64>,
}

pub(super) fn first<T: std::fmt::Debug>(items: &[T]) -> String {
    let shown: Vec<String> = items.iter().take(EXAMPLES).map(|i| format!("{i:?}")).collect();
    shown.join(", ")
}

/// Adds "<what>: <count> (e.g. <shape> <the first few>)" when there are `items`.
fn problem<T: std::fmt::Debug>(problems: &mut Vec<String>, what: &str, shape: &str, items: &[T]) {
    if !items.is_empty() {
        problems.push(format!("{what}: {} (e.g. {shape} {})", items.len(), first(items)));
    }
}

pub(super) fn check(name: &str, ok: bool, detail: String) -> Check {
    Check { name: name.into(), ok, detail }
}

/// From the fault to the first 202 or clean SOLD_OUT answered to a request sent after it.
pub fn buy_path_back(logs: &[BuyerLog], fault_s: f64) -> Option<f64> {
    logs.iter()
        .flat_map(|l| l.good.iter())
        .filter(|(sent, _)| *sent >= fault_s)
        .map(|(_, answered)| answered - fault_s)
        .min_by(f64::total_cmp)
}

/// The buy path answered again within [`BACK_AFTER_SERVER_S`] of the server's return at
/// `server_back_s`: the first good answer (a 202 or a clean SOLD_OUT) to a request sent after
/// the fault came at most that long after the return (before it counts as at once: the buy
/// path did not need that server, or not for long).
pub fn back_after_server(logs: &[BuyerLog], fault_s: Option<f64>, server_back_s: f64) -> Check {
    let first = fault_s.and_then(|f| buy_path_back(logs, f).map(|back| f + back));
    match first {
        Some(at) if at - server_back_s <= BACK_AFTER_SERVER_S => check(
            BACK_AFTER_SERVER,
            true,
            format!(
                "the buy path answered again {:.1} s after the server's return",
                (at - server_back_s).max(0.0)
            ),
        ),
        Some(at) => check(
            BACK_AFTER_SERVER,
            false,
            format!(
                "the buy path answered again {:.1} s after the server's return (more than {BACK_AFTER_SERVER_S} s)",
                at - server_back_s
            ),
        ),
        None => check(BACK_AFTER_SERVER, false, "the buy path never answered again after the fault".into()),
    }
}

/// From the fault until every request accepted before everything was back (the backlog the
/// fault built, and the requests it caught in flight) had its final result; `None` if one never
/// got it. Requests accepted later are the normal flow, not the fault's backlog.
pub fn drained(logs: &[BuyerLog], fault_s: f64, back_s: f64) -> Option<f64> {
    let mut last = back_s;
    for a in logs.iter().flat_map(|l| l.accepted.iter()).filter(|a| a.at_s <= back_s) {
        last = last.max(a.final_s?);
    }
    Some(last - fault_s)
}

/// `name`: no 5xx but 503/504 and no unexpected answer among those `tally` counted.
pub fn answers(name: &str, tally: &Tally) -> Check {
    check(
        name,
        tally.other_5xx == 0 && tally.unexpected == 0,
        if tally.other_5xx == 0 && tally.unexpected == 0 {
            format!(
                "clients saw 503 x{}, 504 x{}, 429 x{}, connection errors x{}, timeouts x{}, and nothing else amiss",
                tally.s503, tally.s504, tally.s429, tally.conn_errors, tally.timeouts
            )
        } else {
            format!(
                "{} 5xx other than 503/504 and {} unexpected answers, e.g. {}",
                tally.other_5xx,
                tally.unexpected,
                tally.examples.iter().take(3).cloned().collect::<Vec<_>>().join(" | ")
            )
        },
    )
}

/// The figures and the checks of a case.
pub fn judge(
    units: i64,
    logs: &[BuyerLog],
    outside: &Outside,
    fault_s: Option<f64>,
    back_s: Option<f64>,
) -> (Figures, Vec<Check>) {
    let mut checks = Vec::new();
    let mut tally = Tally::default();
    for l in logs {
        tally.merge(&l.tally);
    }
    let accepted: Vec<(i64, &super::buyers::Accepted)> =
        logs.iter().flat_map(|l| l.accepted.iter().map(move |a| (l.user_id, a))).collect();
    let active: Vec<&OrderRow> = outside.orders.iter().filter(|o| o.active()).collect();
    let mut active_by_user: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for o in &active {
        active_by_user.entry(o.user_id).or_default().push(o.id);
    }
    let buyers = logs.iter().filter(|l| l.took_part()).count() as u64;

    checks.push(answers(ONLY_503_504, &tally));

    // The database: no oversell, one active order per user.
    match outside.stock {
        Some((total, _)) => checks.push(check(
            NO_OVERSELL,
            active.len() as i64 <= total,
            format!("{} active orders for {total} units", active.len()),
        )),
        None => checks.push(check(NO_OVERSELL, false, "the goods row could not be read".into())),
    }
    let doubles: Vec<(i64, Vec<i64>)> =
        active_by_user.iter().filter(|(_, ids)| ids.len() > 1).map(|(u, ids)| (*u, ids.clone())).collect();
    checks.push(check(
        ONE_PER_USER,
        doubles.is_empty(),
        if doubles.is_empty() {
            format!("{} users hold {} active orders", active_by_user.len(), active.len())
        } else {
            format!(
                "{} users hold several active orders, e.g. (user, orders) {}",
                doubles.len(),
                first(&doubles)
            )
        },
    ));

    // Every accepted request reached a final result while it was polled.
    let not_final: Vec<(i64, FinalState)> =
        accepted.iter().filter(|(_, a)| !a.is_final()).map(|(u, a)| (*u, a.state)).collect();
    let repeated = accepted.iter().filter(|(_, a)| a.request_id.is_none()).count() as u64;
    let count = |s: FinalState| accepted.iter().filter(|(_, a)| a.state == s).count();
    checks.push(check(
        EVERY_202_FINAL,
        not_final.is_empty(),
        if not_final.is_empty() {
            format!(
                "{} accepted ({repeated} of them a 409 REPEATED after a lost answer): {} success, {} failed",
                accepted.len(),
                count(FinalState::Success),
                count(FinalState::Failed)
            )
        } else {
            format!(
                "{} of {} accepted requests never reached success or failed: {} still queued when polling gave up, \
                 {} `none` (the system forgot them); e.g. (user, last result) {}",
                not_final.len(),
                accepted.len(),
                count(FinalState::Queued),
                count(FinalState::None),
                first(&not_final)
            )
        },
    ));

    // Each user's final result against their orders, in the database and at the gateway.
    let users = Outside::users_to_compare(logs, &outside.orders, &outside.end);
    let mut success_without_order = Vec::new();
    let mut order_without_success = Vec::new();
    let mut wrong_order = Vec::new();
    let mut listing_disagrees = Vec::new();
    let mut unreadable = Vec::new();
    for &u in &users {
        let sql: Vec<i64> = active_by_user.get(&u).cloned().unwrap_or_default();
        match outside.end.get(&u).copied().flatten() {
            None => unreadable.push(u),
            Some((FinalState::Success, id)) => {
                if sql.is_empty() {
                    success_without_order.push((u, id.unwrap_or(0)));
                } else if id.is_none_or(|id| !sql.contains(&id)) {
                    wrong_order.push((u, id.unwrap_or(0), sql.clone()));
                }
            }
            Some((state, _)) => {
                if !sql.is_empty() {
                    order_without_success.push((u, sql.clone(), state));
                }
            }
        }
        match outside.listed.get(&u) {
            Some(Some(list)) => {
                let mut listed: Vec<i64> =
                    list.iter().filter(|(_, s)| s == "unpaid" || s == "paid").map(|(id, _)| *id).collect();
                listed.sort_unstable();
                let mut want = sql.clone();
                want.sort_unstable();
                if listed != want {
                    listing_disagrees.push((u, listed, want));
                }
            }
            _ => unreadable.push(u),
        }
    }
    let changed: Vec<(i64, i64)> = logs
        .iter()
        .flat_map(|l| l.accepted.iter().map(move |a| (l, a)))
        .filter(|(l, a)| {
            a.state == FinalState::Success
                && l.accepted.last() == Some(a)
                && outside.end.get(&l.user_id).copied().flatten() != Some((FinalState::Success, a.order_id))
        })
        .map(|(l, a)| (l.user_id, a.order_id.unwrap_or(0)))
        .collect();
    unreadable.sort_unstable();
    unreadable.dedup();
    let agree = success_without_order.is_empty()
        && order_without_success.is_empty()
        && wrong_order.is_empty()
        && listing_disagrees.is_empty()
        && unreadable.is_empty();
    let mut problems = Vec::new();
    problem(&mut problems, "success without an active order", "(user, order)", &success_without_order);
    problem(
        &mut problems,
        "an active order but no success",
        "(user, orders, result)",
        &order_without_success,
    );
    problem(
        &mut problems,
        "success naming another order than the user's",
        "(user, result's order, active orders)",
        &wrong_order,
    );
    problem(
        &mut problems,
        "GET /api/orders disagrees with the database",
        "(user, listed, in the database)",
        &listing_disagrees,
    );
    problem(&mut problems, "result or orders not readable", "users", &unreadable);
    problem(
        &mut problems,
        "a success seen while polling no longer there at the end",
        "(user, order)",
        &changed,
    );
    checks.push(check(
        RESULTS_AGREE,
        agree,
        if agree {
            format!(
                "{} users compared: success <=> one active order with that id, in the database and at GET /api/orders",
                users.len()
            )
        } else {
            problems.join("; ")
        },
    ));

    // The authority's stock.
    let held: BTreeSet<Uuid> = outside.ledger.iter().filter(|(_, h)| *h).map(|(k, _)| *k).collect();
    let active_keys: BTreeSet<Uuid> = active.iter().map(|o| o.request_id).collect();
    match outside.stock {
        Some((total, available)) => {
            let want = total - active.len() as i64;
            let held_no_order: Vec<Uuid> = held.difference(&active_keys).copied().collect();
            let order_no_held: Vec<Uuid> = active_keys.difference(&held).copied().collect();
            let mut issues = Vec::new();
            if available != want {
                issues.push(format!(
                    "stock_available {available}, expected {total} - {} active orders = {want}",
                    active.len()
                ));
            }
            if !held_no_order.is_empty() {
                issues.push(format!(
                    "deductions held without an active order: {} (e.g. order keys {})",
                    held_no_order.len(),
                    first(&held_no_order)
                ));
            }
            if !order_no_held.is_empty() {
                issues.push(format!(
                    "active orders without a held deduction: {} (e.g. request ids {})",
                    order_no_held.len(),
                    first(&order_no_held)
                ));
            }
            if outside.api_available != Some(available) {
                issues.push(format!(
                    "GET /api/goods says stock_available {}",
                    outside.api_available.map_or("(not readable)".into(), |a| a.to_string())
                ));
            }
            checks.push(check(
                STOCK_AGREES,
                issues.is_empty(),
                if issues.is_empty() {
                    format!(
                        "stock_available {available} = {total} - {} active orders; {} deductions held, one per active order; GET /api/goods agrees",
                        active.len(),
                        held.len()
                    )
                } else {
                    issues.join("; ")
                },
            ));
            checks.push(if buyers as i64 > total {
                check(
                    ALL_SOLD,
                    active.len() as i64 == total,
                    format!(
                        "{} of {total} units sold to {buyers} buyers; stock_available {available}",
                        active.len()
                    ),
                )
            } else {
                check(ALL_SOLD, true, format!("{buyers} buyers for {total} units: not all need be sold"))
            });
        }
        None => {
            checks.push(check(STOCK_AGREES, false, "the goods row could not be read".into()));
            checks.push(check(ALL_SOLD, false, "the goods row could not be read".into()));
        }
    }

    // The load tool's sale invariants, on the buyers' final results.
    let view: Vec<Buyer> = logs
        .iter()
        .map(|l| {
            let end = outside.end.get(&l.user_id).copied().flatten();
            let was_accepted = !l.accepted.is_empty();
            let result = match end {
                Some((s, _)) if was_accepted || s != FinalState::None => Some(s),
                _ if was_accepted => Some(FinalState::None),
                _ => None,
            };
            Buyer {
                user_id: l.user_id,
                clicks: u32::from(l.took_part() || result.is_some()),
                accepted: u32::from(was_accepted),
                result,
                order_id: end.and_then(|e| e.1),
                ..Buyer::default()
            }
        })
        .collect();
    let total = outside.stock.map_or(units, |s| s.0);
    for mut c in invariants::check(&view, total, outside.api_available) {
        // One purchase per buyer by construction here: retries after `failed` are the same intent.
        if c.name == invariants::NOBODY_TWICE {
            continue;
        }
        c.name = format!("buyers' view: {}", c.name);
        checks.push(c);
    }

    let mut lost_users: BTreeSet<i64> = not_final.iter().map(|(u, _)| *u).collect();
    lost_users.extend(success_without_order.iter().map(|(u, _)| *u));
    lost_users.extend(order_without_success.iter().map(|(u, _, _)| *u));
    let figures = Figures {
        units,
        buyers,
        late_buyers: logs.iter().filter(|l| l.late && l.took_part()).count() as u64,
        accepted: accepted.len() as u64 - repeated,
        repeated,
        orders: active.len() as u64,
        lost: lost_users.len() as u64,
        lost_no_result: not_final.len() as u64,
        success_without_order: success_without_order.len() as u64,
        order_without_success: order_without_success.len() as u64,
        failed_after_202: count(FinalState::Failed) as u64,
        won_unseen: logs
            .iter()
            .filter(|l| {
                l.accepted.is_empty()
                    && matches!(outside.end.get(&l.user_id), Some(Some((FinalState::Success, _))))
            })
            .count() as u64,
        sold_out: logs.iter().filter(|l| l.sold_out).count() as u64,
        gave_up: logs.iter().filter(|l| l.gave_up).count() as u64,
        tally,
        fault_s,
        back_s,
        buy_path_back_s: fault_s.and_then(|f| buy_path_back(logs, f)),
        drained_s: fault_s.and_then(|f| drained(logs, f, back_s.unwrap_or(f))),
    };
    (figures, checks)
}

#[cfg(test)]
mod tests {
    use super::super::buyers::Accepted;
    use super::*;

    fn log(user: i64) -> BuyerLog {
        BuyerLog {
            user_id: user,
            late: false,
            bearer: None,
            order_calls: 1,
            accepted: Vec::new(),
            sold_out: false,
            gave_up: false,
            good: Vec::new(),
            tally: Tally::default(),
        }
    }

    fn won(user: i64, order: i64, at: f64) -> BuyerLog {
        let mut l = log(user);
        l.accepted.push(Accepted {
            request_id: Some(Uuid::from_u128(user as u128)),
            sent_s: at,
            at_s: at,
            state: FinalState::Success,
            order_id: Some(order),
            final_s: Some(at + 0.5),
        });
        l.good.push((at, at));
        l
    }

    fn sold_out(user: i64, at: f64) -> BuyerLog {
        let mut l = log(user);
        l.sold_out = true;
        l.good.push((at, at));
        l
    }

    /// 3 units, 3 winners (users 1-3, orders 11-13), 2 buyers sold out: everything agrees.
    fn clean() -> (Vec<BuyerLog>, Outside) {
        let logs =
            vec![won(1, 11, 1.0), won(2, 12, 2.0), won(3, 13, 3.0), sold_out(4, 3.5), sold_out(5, 4.0)];
        let orders: Vec<OrderRow> = (1..=3)
            .map(|u| OrderRow {
                id: 10 + u,
                request_id: Uuid::from_u128(u as u128),
                user_id: u,
                status: "unpaid".into(),
            })
            .collect();
        let mut outside = Outside {
            stock: Some((3, 0)),
            api_available: Some(0),
            ledger: orders.iter().map(|o| (o.request_id, true)).collect(),
            orders,
            ..Outside::default()
        };
        for u in 1..=5 {
            let r = if u <= 3 { (FinalState::Success, Some(10 + u)) } else { (FinalState::None, None) };
            outside.end.insert(u, Some(r));
        }
        for u in 1..=3 {
            outside.listed.insert(u, Some(vec![(10 + u, "unpaid".into())]));
        }
        (logs, outside)
    }

    fn failing(checks: &[Check]) -> Vec<String> {
        checks.iter().filter(|c| !c.ok).map(|c| c.name.clone()).collect()
    }

    #[test]
    fn a_clean_case_passes_every_check() {
        let (logs, outside) = clean();
        let (f, checks) = judge(3, &logs, &outside, Some(2.5), Some(3.2));
        assert!(failing(&checks).is_empty(), "{checks:#?}");
        assert_eq!((f.accepted, f.orders, f.lost, f.failed_after_202, f.buyers), (3, 3, 0, 0, 5));
        // The first good answer to a request sent after 2.5 s came at 3.0 s.
        assert_eq!(f.buy_path_back_s, Some(0.5));
        // Back at 3.2 s, user 3's result (accepted at 3.0) came at 3.5: drained 1.0 s after the fault.
        assert_eq!(f.drained_s, Some(1.0));
    }

    #[test]
    fn a_forgotten_result_is_a_loss_named_by_every_check_it_breaks() {
        let (logs, mut outside) = clean();
        // Redis lost user 2's result: the order stands, the poll says `none`.
        outside.end.insert(2, Some((FinalState::None, None)));
        let (f, checks) = judge(3, &logs, &outside, Some(2.5), Some(3.2));
        let failed = failing(&checks);
        assert!(failed.contains(&RESULTS_AGREE.to_owned()), "{failed:?}");
        assert!(failed.contains(&format!("buyers' view: {}", invariants::NOTHING_LOST)), "{failed:?}");
        assert_eq!((f.lost, f.order_without_success), (1, 1));
        let detail = &checks.iter().find(|c| c.name == RESULTS_AGREE).unwrap().detail;
        assert!(detail.contains("an active order but no success: 1"), "{detail}");
        assert!(detail.contains("no longer there at the end: 1"), "{detail}");
    }

    #[test]
    fn oversell_doubles_and_stock_drift_are_reported() {
        let (mut logs, mut outside) = clean();
        // User 1 got a second active order, user 6 one more: 5 active orders for 3 units.
        outside.orders.push(OrderRow {
            id: 20,
            request_id: Uuid::from_u128(20),
            user_id: 1,
            status: "unpaid".into(),
        });
        outside.orders.push(OrderRow {
            id: 21,
            request_id: Uuid::from_u128(21),
            user_id: 6,
            status: "paid".into(),
        });
        logs.push(won(6, 21, 4.0));
        outside.end.insert(6, Some((FinalState::Success, Some(21))));
        outside.listed.insert(6, Some(vec![(21, "paid".into())]));
        let failed = failing(&judge(3, &logs, &outside, None, None).1);
        for name in [NO_OVERSELL, ONE_PER_USER, STOCK_AGREES, RESULTS_AGREE, ALL_SOLD] {
            assert!(failed.contains(&name.to_owned()), "{name} in {failed:?}");
        }
    }

    #[test]
    fn a_stuck_request_and_a_bad_answer_fail_the_case() {
        let (mut logs, outside) = clean();
        logs[0].accepted[0].state = FinalState::Queued;
        logs[0].accepted[0].final_s = None;
        logs[4].tally.bad(
            2.0,
            5,
            "POST .../orders",
            &seckill_harness::client::Answer::new(500, Default::default()),
        );
        let (f, checks) = judge(3, &logs, &outside, Some(0.5), Some(1.0));
        let failed = failing(&checks);
        assert!(
            failed.contains(&EVERY_202_FINAL.to_owned()) && failed.contains(&ONLY_503_504.to_owned()),
            "{failed:?}"
        );
        assert_eq!(f.lost_no_result, 1);
        assert_eq!(f.drained_s, None, "user 1 never got a final result");
    }

    #[test]
    fn units_left_with_more_buyers_than_units_are_unsold() {
        let (logs, mut outside) = clean();
        outside.orders.pop();
        outside.ledger.pop();
        outside.stock = Some((3, 1));
        outside.api_available = Some(1);
        outside.end.insert(3, Some((FinalState::Failed, None)));
        outside.listed.insert(3, Some(Vec::new()));
        let mut logs = logs;
        logs[2].accepted[0].state = FinalState::Failed;
        logs[2].accepted[0].order_id = None;
        let failed = failing(&judge(3, &logs, &outside, None, None).1);
        assert_eq!(failed, [ALL_SOLD.to_owned(), format!("buyers' view: {}", invariants::WINNERS)]);
    }

    /// One buyer whose good answers (asked, answered, in seconds) are `good`.
    fn answered(good: Vec<(f64, f64)>) -> Vec<BuyerLog> {
        vec![BuyerLog { good, ..log(1) }]
    }

    #[test]
    fn the_buy_path_must_answer_within_seconds_of_the_servers_return() {
        // Down from the fault at 2 s, the server back at 8 s, a 202 at 9 s: 1 s after.
        let c = back_after_server(&answered(vec![(1.0, 1.1), (8.5, 9.0)]), Some(2.0), 8.0);
        assert!(c.ok, "{}", c.detail);
        // Never down: at once.
        assert!(back_after_server(&answered(vec![(2.5, 2.6)]), Some(2.0), 8.0).ok);
        // Back 12 s after the server.
        let c = back_after_server(&answered(vec![(19.0, 20.0)]), Some(2.0), 8.0);
        assert!(!c.ok, "{}", c.detail);
        // Never back.
        assert!(!back_after_server(&answered(vec![(1.0, 1.1)]), Some(2.0), 8.0).ok);
    }
}
