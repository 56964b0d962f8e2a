//! The checks a replicated case adds ([`Extra`](super::cases::Extra)): what holds only when
//! every service runs more than once.
//!
//! - Every seckill-service replica answers SOLD_OUT once the sale is sold out: each is asked
//!   directly, as a fresh user, with a request signed as the gateway (the fleet made the link
//!   keys, so the driver holds them).
//! - Every order-service replica consumed buy requests: its counters on its own `/metrics`,
//!   read when the case starts, right before the replica is stopped (a restarted process
//!   counts from zero) and at the end.
//! - One user clicking on every gateway in turn gets through no more than one limit allows:
//!   the gateways share each user's bucket.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::header::{HeaderName, HeaderValue};
use seckill_common::api::Role;
use seckill_common::trust::{AUTH_HEADER, Peer, RequestFacts, Trust, TrustSettings};
use seckill_common::{ErrorCode, UserId};

use seckill_harness::api::{SaleRoute, dev_token};
use seckill_harness::client::{Answer, Conn, Endpoint, Req, STATUS_ERROR, STATUS_TIMEOUT};
use seckill_harness::fleet::{BUY_BURST, BUY_PER_SEC, Fleet};
use seckill_harness::fleet::{Svc, Unit};
use seckill_harness::invariants::Check;

pub const SOLD_OUT_EVERYWHERE: &str = "every seckill-service replica answers SOLD_OUT";
pub const CONSUMERS_SHARE: &str = "every order-service replica consumed buy requests";
pub const ONE_LIMIT: &str = "one user's buy limit holds across gateways";

/// order-service's counters of the buy requests its consumer settled, one per outcome
/// (order-service/src/consumer.rs): their sum is the requests a replica took from the queue.
pub const CONSUMED: [&str; 5] = [
    "order_requests_ordered_total",
    "order_requests_failed_total",
    "order_requests_stale_total",
    "order_requests_recovered_total",
    "order_requests_superseded_total",
];
/// Each gateway's count of the times it limited alone (the shared bucket out of reach).
const FALLBACK: &str = "gateway_rate_limit_fallback_total";
/// How long the hot user clicks.
pub const HOT_FOR: Duration = Duration::from_secs(4);
/// Answers beyond the limit the check forgives: a click in flight at each end of the window.
pub const LIMIT_SLACK: f64 = 2.0;
/// How long a replica asked directly may keep answering 503/504 or refusing connections.
const ASK_FOR: Duration = Duration::from_secs(10);

fn check(name: &str, ok: bool, detail: String) -> Check {
    Check { name: name.into(), ok, detail }
}

/// The sum of every series of the named metrics in a Prometheus text exposition (a metric
/// never incremented is absent: 0).
pub fn metric_sum(text: &str, names: &[&str]) -> u64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let name = series.split('{').next()?;
            names.contains(&name).then(|| value.trim().parse::<f64>().ok()).flatten()
        })
        .map(|v| v.max(0.0) as u64)
        .sum()
}

/// The most clicks of one user the buy limit lets through in `elapsed`, plus the slack.
pub fn limit_allows(per_sec: u32, burst: u32, elapsed: Duration) -> f64 {
    f64::from(burst) + f64::from(per_sec) * elapsed.as_secs_f64() + LIMIT_SLACK
}

// ---------------------------------------------------------------------------------------------
// (a) SOLD_OUT everywhere.

/// A request signed as the gateway vouching for `user`, straight to a seckill-service replica.
fn signed(trust: &Trust, path: &str, user: UserId) -> anyhow::Result<(HeaderName, HeaderValue)> {
    let facts = RequestFacts { method: "POST", path, request_id: "" };
    let value = trust.sign_request(Peer::Seckill, &facts, Some((user, Role::User)));
    Ok((HeaderName::from_static(AUTH_HEADER), HeaderValue::from_str(&value)?))
}

fn shown(a: &Answer) -> String {
    let body: String = String::from_utf8_lossy(&a.body).chars().take(120).collect();
    format!("HTTP {} {body}", a.status)
}

/// Asks one replica as `user`: a path token, then the order with it (or without, when the
/// token was already refused SOLD_OUT: the replica's flag is up). The order's answer.
async fn ask(conn: &mut Conn, trust: &Trust, g: i64, user: UserId) -> anyhow::Result<Answer> {
    let (token_path, orders_path) = (SaleRoute::Token.path(g), SaleRoute::Orders.path(g));
    let (name, value) = signed(trust, &token_path, user)?;
    let t = conn.send(Req::post(&token_path).header(name, value)).await;
    let token = match t.path_token() {
        Some(token) => Some(token),
        None if t.is_error(410, ErrorCode::SoldOut) => None,
        None => return Ok(t),
    };
    let (name, value) = signed(trust, &orders_path, user)?;
    let mut req = Req::post(&orders_path).header(name, value);
    if let Some(token) = token {
        req = req.path_token(token);
    }
    Ok(conn.send(req).await)
}

/// (a): each seckill-service replica asked directly, as a fresh user (`first_user`, the next
/// ones), once the sale is sold out in the database (`sold_out`: whether it is, and what the
/// database holds).
pub async fn sold_out_everywhere(fleet: &Fleet, g: i64, first_user: i64, sold_out: (bool, String)) -> Check {
    let (is_sold_out, db) = sold_out;
    if !is_sold_out {
        return check(
            SOLD_OUT_EVERYWHERE,
            false,
            format!("not asked: the sale is not sold out in the database ({db}); the case must sell out"),
        );
    }
    let mut settings = TrustSettings::default();
    settings.send.insert(Peer::Seckill.as_str().into(), fleet.link_key(Peer::Gateway, Peer::Seckill));
    let trust = match Trust::new(Peer::Gateway, &settings, &[Peer::Seckill], &[]) {
        Ok(t) => t,
        Err(e) => return check(SOLD_OUT_EVERYWHERE, false, format!("cannot sign as the gateway: {e}")),
    };
    let mut seen = Vec::new();
    let mut wrong = Vec::new();
    for (i, unit) in fleet.units(Svc::Seckill).into_iter().enumerate() {
        let Some(user) = UserId::new(first_user + i as i64) else {
            wrong.push(format!("{unit}: user id {} is not valid", first_user + i as i64));
            continue;
        };
        let answer = match Endpoint::parse(&fleet.url(unit)) {
            Ok(endpoint) => {
                ask_until_answered(&mut Conn::new(endpoint, Duration::from_secs(5)), &trust, g, user).await
            }
            Err(e) => Err(e),
        };
        match answer {
            Ok(a) if a.is_error(410, ErrorCode::SoldOut) => {
                seen.push(format!("{unit} (port {}): 410 SOLD_OUT", fleet.port(unit)))
            }
            Ok(a) => wrong.push(format!("{unit} (port {}): {}", fleet.port(unit), shown(&a))),
            Err(e) => wrong.push(format!("{unit}: {e:#}")),
        }
    }
    let ok = wrong.is_empty() && seen.len() == fleet.replicas();
    check(
        SOLD_OUT_EVERYWHERE,
        ok,
        if ok {
            format!("sold out in the database ({db}); asked directly as a fresh user: {}", seen.join(", "))
        } else {
            format!("sold out in the database ({db}), but: {}", wrong.join("; "))
        },
    )
}

/// [`ask`], again while the replica answers 503, 504 or not at all, or the order came a moment
/// after the replica's sold-out flag went down (403 BAD_TOKEN without a token), for up to
/// [`ASK_FOR`].
async fn ask_until_answered(conn: &mut Conn, trust: &Trust, g: i64, user: UserId) -> anyhow::Result<Answer> {
    let deadline = Instant::now() + ASK_FOR;
    loop {
        let a = ask(conn, trust, g, user).await?;
        let again = matches!(a.status, 503 | 504 | STATUS_ERROR | STATUS_TIMEOUT)
            || a.is_error(403, ErrorCode::BadToken);
        if !again || Instant::now() >= deadline {
            return Ok(a);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// (b) Every order consumer took a share.

/// The buy requests each order-service replica consumed during a case.
#[derive(Debug, Default)]
pub struct Consumed {
    /// Per replica: the counter when the case started, or 0 after a restart (it counts from 0).
    baseline: BTreeMap<usize, u64>,
    /// Per replica: what its earlier processes consumed during the case.
    earlier: BTreeMap<usize, u64>,
    errors: Vec<String>,
}

async fn consumed_now(fleet: &Fleet, unit: Unit) -> Result<u64, String> {
    let a = fleet.get(unit, "/metrics").await;
    if a.status == 200 {
        Ok(metric_sum(&String::from_utf8_lossy(&a.body), &CONSUMED))
    } else {
        Err(format!("{unit}'s /metrics answered {}", a.status))
    }
}

impl Consumed {
    /// Reads every order-service replica's counter before the sale.
    pub async fn start(fleet: &Fleet) -> Self {
        let mut c = Self::default();
        for unit in fleet.units(Svc::Order) {
            match consumed_now(fleet, unit).await {
                Ok(n) => {
                    c.baseline.insert(unit.replica, n);
                }
                Err(e) => c.errors.push(e),
            }
        }
        c
    }

    /// Right before `unit` is stopped or killed: what it consumed so far is kept, and its next
    /// process counts from zero.
    pub async fn before_stop(&mut self, fleet: &Fleet, unit: Unit) {
        if unit.svc != Svc::Order {
            return;
        }
        match consumed_now(fleet, unit).await {
            Ok(n) => {
                let since = n.saturating_sub(self.baseline.get(&unit.replica).copied().unwrap_or(0));
                *self.earlier.entry(unit.replica).or_default() += since;
            }
            Err(e) => self.errors.push(format!("before it was stopped: {e}")),
        }
        self.baseline.insert(unit.replica, 0);
    }

    /// Per replica, what it consumed during the case, from the counters now.
    pub async fn finish(mut self, fleet: &Fleet) -> (BTreeMap<usize, u64>, Vec<String>) {
        let mut taken = BTreeMap::new();
        for unit in fleet.units(Svc::Order) {
            match consumed_now(fleet, unit).await {
                Ok(n) => {
                    let now = n.saturating_sub(self.baseline.get(&unit.replica).copied().unwrap_or(0));
                    taken.insert(unit.replica, self.earlier.get(&unit.replica).copied().unwrap_or(0) + now);
                }
                Err(e) => self.errors.push(e),
            }
        }
        (taken, self.errors)
    }
}

/// (b) from what [`Consumed::finish`] found, for `replicas` replicas.
pub fn consumers_share(replicas: usize, taken: &BTreeMap<usize, u64>, errors: &[String]) -> Check {
    let shares: Vec<String> = (0..replicas)
        .map(|k| {
            let unit = Unit::new(Svc::Order, k);
            taken.get(&k).map_or(format!("{unit} not readable"), |n| format!("{unit} {n}"))
        })
        .collect();
    let ok = errors.is_empty() && (0..replicas).all(|k| taken.get(&k).is_some_and(|n| *n > 0));
    let mut detail = format!(
        "buy requests consumed during the case (sum of {}, the killed replica's read right before the kill): {}",
        CONSUMED.join(", "),
        shares.join(", ")
    );
    if !errors.is_empty() {
        detail.push_str(&format!("; not read: {}", errors.join("; ")));
    }
    check(CONSUMERS_SHARE, ok, detail)
}

// ---------------------------------------------------------------------------------------------
// (c) One limit across gateways.

/// What the hot user's clicks got.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HotLog {
    pub user_id: i64,
    /// Answers other than 429, per gateway.
    pub passed: Vec<u64>,
    pub limited: u64,
    /// Connection errors and timeouts: not answers.
    pub no_answer: u64,
    /// From the first click sent to the last answer.
    pub elapsed: Duration,
    /// Requests the gateways decided alone (the shared bucket out of reach) while the user
    /// clicked (`None`: not read).
    pub fallbacks: Option<u64>,
    pub error: Option<String>,
}

/// The sum of every gateway's fallback counter, read on their admin listeners (`admins`).
async fn fallbacks(admins: &[Arc<Endpoint>]) -> Option<u64> {
    let mut sum = 0;
    for endpoint in admins {
        let a = Conn::new(endpoint.clone(), Duration::from_secs(2)).send(Req::get("/metrics")).await;
        if a.status != 200 {
            return None;
        }
        sum += metric_sum(&String::from_utf8_lossy(&a.body), &[FALLBACK]);
    }
    Some(sum)
}

/// One user clicking `POST /api/seckill/{g}/orders` (no path token: each click that passes
/// the limit is answered by seckill-service, 403 or 410) on each gateway in turn, the next
/// click as soon as the last is answered, for [`HOT_FOR`]; `admins` are the gateways' admin
/// listeners, where their fallback counters are read before and after.
pub async fn hot_user(
    gateways: Vec<Arc<Endpoint>>,
    admins: Vec<Arc<Endpoint>>,
    g: i64,
    user_id: i64,
) -> HotLog {
    let mut log = HotLog { user_id, passed: vec![0; gateways.len()], ..HotLog::default() };
    let mut conns: Vec<Conn> =
        gateways.iter().map(|e| Conn::new(e.clone(), Duration::from_secs(5))).collect();
    let Some(first) = conns.first_mut() else { return log };
    let bearer = match dev_token(first, user_id, Role::User).await {
        Ok(b) => b,
        Err(e) => {
            log.error = Some(format!("no dev token for the hot user: {e:#}"));
            return log;
        }
    };
    let path = SaleRoute::Orders.path(g);
    let before = fallbacks(&admins).await;
    let started = Instant::now();
    let mut i = 0;
    while started.elapsed() < HOT_FOR {
        let k = i % conns.len();
        let a = conns[k].send(Req::post(&path).bearer(&bearer)).await;
        match a.status {
            429 => log.limited += 1,
            STATUS_ERROR | STATUS_TIMEOUT => log.no_answer += 1,
            _ => log.passed[k] += 1,
        }
        i += 1;
    }
    log.elapsed = started.elapsed();
    log.fallbacks = before.zip(fallbacks(&admins).await).map(|(b, a)| a.saturating_sub(b));
    log
}

/// (c): the clicks that got through stay within one limit (`BUY_BURST` + `BUY_PER_SEC` per
/// second + [`LIMIT_SLACK`]); a user never limited proves nothing and fails too.
pub fn one_limit(log: &HotLog) -> Check {
    if let Some(e) = &log.error {
        return check(ONE_LIMIT, false, e.clone());
    }
    let passed: u64 = log.passed.iter().sum();
    let allowed = limit_allows(BUY_PER_SEC, BUY_BURST, log.elapsed);
    let ok = (passed as f64) <= allowed && log.limited > 0;
    let per_gateway: Vec<String> =
        log.passed.iter().enumerate().map(|(k, n)| format!("gateway-{k} {n}")).collect();
    let mut detail = format!(
        "user {} clicked on {} gateways in turn for {:.1} s: {passed} answers other than 429 ({}), {} x 429, {} without \
         an answer; one limit allows {BUY_BURST} + {BUY_PER_SEC}/s x {:.1} s + {LIMIT_SLACK} = {allowed:.1}",
        log.user_id,
        log.passed.len(),
        log.elapsed.as_secs_f64(),
        per_gateway.join(", "),
        log.limited,
        log.no_answer,
        log.elapsed.as_secs_f64(),
    );
    match log.fallbacks {
        Some(0) => detail.push_str("; the shared bucket answered throughout (no request decided without Redis)"),
        Some(f) => detail.push_str(&format!(
            "; the gateways decided {f} requests alone meanwhile (a Redis call slower than rate_limit.shared_timeout_ms: \
             each limits alone for a second)"
        )),
        None => detail.push_str("; the gateways' fallback counters could not be read"),
    }
    if log.limited == 0 {
        detail.push_str("; never limited: the check proves nothing");
    }
    check(ONE_LIMIT, ok, detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_summed_over_their_series() {
        let text = "# HELP order_requests_ordered_total x\n# TYPE order_requests_ordered_total counter\n\
                    order_requests_ordered_total 40\norder_requests_failed_total{reason=\"x\"} 2\n\
                    order_requests_failed_total{reason=\"y\"} 3\norder_requests_ordered_total_other 99\n\
                    http_requests_total{route=\"/readyz\"} 7\n";
        assert_eq!(metric_sum(text, &CONSUMED), 45);
        assert_eq!(metric_sum(text, &[FALLBACK]), 0);
        assert_eq!(metric_sum("", &CONSUMED), 0);
    }

    #[test]
    fn the_limit_is_the_burst_plus_the_rate_over_the_window() {
        assert!((limit_allows(5, 10, Duration::from_secs(4)) - 32.0).abs() < 1e-9);
        assert!((limit_allows(5, 10, Duration::from_millis(2_500)) - 24.5).abs() < 1e-9);
        let log = |passed: Vec<u64>, limited| HotLog {
            user_id: 9,
            passed,
            limited,
            elapsed: Duration::from_secs(4),
            ..HotLog::default()
        };
        // 32 allowed in 4 s: 16 + 16 passes; 17 + 16 is one too many.
        assert!(one_limit(&log(vec![16, 16], 500)).ok);
        let over = one_limit(&log(vec![17, 16], 500));
        assert!(
            !over.ok && over.detail.contains("33 answers other than 429 (gateway-0 17, gateway-1 16)"),
            "{}",
            over.detail
        );
        // Two gateways each applying the whole limit alone would let about twice through.
        assert!(!one_limit(&log(vec![30, 30], 500)).ok);
        let never = one_limit(&log(vec![3, 3], 0));
        assert!(!never.ok && never.detail.contains("proves nothing"), "{}", never.detail);
    }

    #[test]
    fn each_order_replica_must_have_consumed() {
        let taken = BTreeMap::from([(0, 70), (1, 12)]);
        let c = consumers_share(2, &taken, &[]);
        assert!(c.ok, "{}", c.detail);
        assert!(c.detail.contains("order-service 70, order-service-1 12"), "{}", c.detail);
        assert!(!consumers_share(2, &BTreeMap::from([(0, 82), (1, 0)]), &[]).ok);
        assert!(!consumers_share(2, &BTreeMap::from([(0, 82)]), &[]).ok);
        assert!(!consumers_share(2, &taken, &["order-service-1's /metrics answered 0".into()]).ok);
    }
}
