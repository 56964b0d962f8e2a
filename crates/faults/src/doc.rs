//! docs/RELIABILITY.md from a full run, and the plain summary printed at the end of any run.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use super::replicas::{CONSUMED, CONSUMERS_SHARE, HOT_FOR, LIMIT_SLACK, ONE_LIMIT, SOLD_OUT_EVERYWHERE};
use super::room::{ADMITTED_ONCE, MAX_GAP_S, PLACE_KEPT, RATE_HELD, ROOM_ANSWERS, ROOM_MOVES};
use super::verdict::{BACK_AFTER_SERVER, BACK_AFTER_SERVER_S};
use super::{CaseResult, Config};
use seckill_harness::fleet::{BUY_BURST, BUY_PER_SEC, PORT_STEP, SHUTDOWN_TIMEOUT_SECS, tuned_settings};
use seckill_harness::n0;

fn secs(v: Option<f64>) -> String {
    v.map_or("never".into(), |s| format!("{s:.1} s"))
}

fn verdict(r: &CaseResult) -> &'static str {
    if r.passed() { "pass" } else { "FAIL" }
}

/// `503 x a, 504 x b` plus connection errors and timeouts when there were any.
fn retried(r: &CaseResult) -> String {
    let Some(f) = &r.figures else { return "-".into() };
    let t = &f.tally;
    let mut s = format!("{} / {}", n0(t.s503 as f64), n0(t.s504 as f64));
    if t.conn_errors + t.timeouts > 0 {
        let _ =
            write!(s, " (+{} conn. errors, {} timeouts)", n0(t.conn_errors as f64), n0(t.timeouts as f64));
    }
    s
}

/// The one-line-per-case table printed at the end of a run.
pub fn summary_text(results: &[CaseResult]) -> String {
    let mut out = format!(
        "{:<18} {:>8} {:>6} {:>4} {:>6} {:>9} {:>9} {:>8} {:>7}  verdict\n",
        "case", "accepted", "orders", "lost", "failed", "503/504", "buy path", "drained", "took"
    );
    for r in results {
        let (acc, ord, lost, failed, back, drained) = match &r.figures {
            Some(f) => (
                f.accepted.to_string(),
                f.orders.to_string(),
                f.lost.to_string(),
                f.failed_after_202.to_string(),
                secs(f.buy_path_back_s),
                secs(f.drained_s),
            ),
            None => Default::default(),
        };
        let sx = r.figures.as_ref().map_or(String::new(), |f| format!("{}/{}", f.tally.s503, f.tally.s504));
        let _ = writeln!(
            out,
            "{:<18} {:>8} {:>6} {:>4} {:>6} {:>9} {:>9} {:>8} {:>6.0}s  {}",
            r.name,
            acc,
            ord,
            lost,
            failed,
            sx,
            back,
            drained,
            r.took.as_secs_f64(),
            if r.passed() {
                "pass".to_owned()
            } else {
                let failed: Vec<String> = r.checks.iter().filter(|c| !c.ok).map(|c| c.name.clone()).collect();
                let mut why = failed.join("; ");
                if r.error.is_some() || r.timeline.error.is_some() {
                    why = if why.is_empty() {
                        "did not run to its end".into()
                    } else {
                        format!("{why}; did not run to its end")
                    };
                }
                format!("FAIL: {why}")
            }
        );
    }
    let failed = results.iter().filter(|r| !r.passed()).count();
    let _ = write!(out, "{} of {} cases passed", results.len() - failed, results.len());
    out
}

/// The whole document.
pub fn render(
    results: &[CaseResult],
    cfg: &Config,
    commit: &str,
    started: DateTime<Utc>,
    ended: DateTime<Utc>,
) -> String {
    let mut out = String::from("# Reliability under faults\n\n");
    let passed = results.iter().filter(|r| r.passed()).count();
    let _ = writeln!(
        out,
        "Written by `scripts/faults.sh` (the driver is `seckill-faults`, crates/faults) from commit \
         `{}`, run on {} UTC in {:.0} minutes; do not edit by hand, run it again. **{passed} of {} cases passed.**\n",
        commit,
        started.format("%Y-%m-%d %H:%M"),
        (ended - started).num_seconds() as f64 / 60.0,
        results.len()
    );
    let _ = writeln!(
        out,
        "The suite kills, stops and restarts each part of the system in the middle of a sale and checks from \
         outside that nothing was lost. It runs against **private servers of its own, never yours**: a PostgreSQL \
         cluster made with `initdb` (port {}, trust on loopback), a Redis without persistence ({}) and a second \
         RabbitMQ node `seckill-faults@localhost` ({}, its own Erlang cookie), all in `run/faults/`, stopped and \
         removed at the end (logs kept in `run/faults-logs/`), and the four {} binaries on ports {}-{} \
         (the gateway's admin listener on {}; in a case with replicas, replica k of each on its port + {PORT_STEP}k, \
         every caller given the list of all its callee's replicas), because it restarts those servers, flushes \
         Redis and kills connections.\n",
        cfg.pg_port,
        cfg.redis_port,
        cfg.amqp_port,
        // scripts/faults.sh builds release ones; FAULTS_BIN_DIR may name a debug build (cargo's
        // `debug` directory, or a copy of it under a directory of that name).
        if cfg.bin_dir.components().any(|c| c.as_os_str() == "debug") { "debug" } else { "release" },
        cfg.http_port,
        cfg.http_port + 3,
        cfg.http_port + 4
    );
    out.push_str(
        "```sh\nscripts/faults.sh            # every case, writes this file\nscripts/faults.sh --quick    # CI: kill -9 of order-service (also started again while RabbitMQ is down), Redis FLUSHALL with requests queued and with 2,000 in a waiting room, two replicas of everything; small sales\nscripts/faults.sh CASE...    # the named cases (seckill-faults --list)\n```\n\n",
    );
    let units = cfg.units();
    let _ = writeln!(
        out,
        "**Each case**: a fresh sale of {units} units created by an admin through the gateway, open at once; {} buyers \
         (distinct users per case) arriving evenly over {} s, each on its own connection: dev token, path token \
         (`POST /api/seckill/{{id}}/token`), order (`POST /api/seckill/{{id}}/orders` with `x-seckill-token`). A buyer \
         does what real clients do: it retries 503, 504, 429 and connection errors (0.1 s doubling to 1 s, with \
         jitter), asks for a fresh path token on 403 BAD_TOKEN, reads a 409 REPEATED as an earlier click of its own \
         that was accepted although the answer was lost, polls its result after a 202 until `success` or `failed` \
         (150 s at most; `none` for 15 s means the system forgot it), and after `failed` (its unit given back) tries \
         again, twice at most. The fault is injected while buyers keep arriving, and the service or server is \
         brought back. If fewer orders than units exist once every result is final, late buyers keep arriving (up \
         to 20 s) so that units given back get sold. The end state is read once the system has settled (at least 8 \
         s after everything was back and 2 s after the last buyer; a result still `queued` is read again for up to \
         30 s). Then, from outside (the gateway's answers and SQL on the \
         private databases: `goods`, `stock_ledger`, `orders`):\n",
        units * 3,
        results.first().map_or(10.0, |r| r.arrive_over.as_secs_f64()),
    );
    out.push_str(
        "- **no 5xx but 503/504** reached any client, and no unexpected answer;\n\
         - **active orders <= stock**, and **at most one active order per user**;\n\
         - **every 202 ends success or failed** (none left `queued` or `none`);\n\
         - **results agree with the orders**: each buyer's result read again at the end says `success` with an order \
         id exactly when that buyer holds that one active order of the sale, in the database and in `GET /api/orders`;\n\
         - **stock_available = stock_total - active orders**, one held `stock_ledger` deduction per active order (same \
         key as the order's request id), and `GET /api/goods/{id}` agrees;\n\
         - **every unit sold** when buyers outnumber units;\n\
         - and the load tool's sale invariants on the buyers' final results (`buyers' view: ...`: distinct order ids, no \
         oversell, winners = min(stock, buyers), nothing queued or lost, the gateway's stock agreeing).\n\n",
    );
    let _ = writeln!(
        out,
        "A case that starts a service again **while a server is down** (`kill9-<service>-<server>-down`) stops the \
         server (PostgreSQL and Redis stopped, RabbitMQ's application stopped: connections refused), kills the \
         service with -9, starts it again while the server is still down (it must stay up and serve `/healthz`; what \
         its `/readyz` says it waits for is shown in the timeline), brings the server back, waits for the service to \
         become ready without a restart, and checks besides:\n\n\
         - **{BACK_AFTER_SERVER}**: the first 202 or 410 SOLD_OUT answered to a request sent after the fault comes \
         within {BACK_AFTER_SERVER_S} s of the server's return (or before it, where the buy path did not need that \
         server).\n"
    );
    let _ = writeln!(
        out,
        "A case with **replicas** runs that many replicas of every service, spreads its buyers over every gateway \
         (buyer i on gateway i mod n), and checks besides:\n\n\
         - **{SOLD_OUT_EVERYWHERE}**: once the sale is sold out in the database (if it is not, the check fails: the \
         case sells out by design), each seckill-service replica is asked directly, as a fresh user, with a request \
         signed as the gateway (path token, then `POST /api/seckill/{{id}}/orders`): each must answer 410 SOLD_OUT;\n\
         - **{CONSUMERS_SHARE}**: each order-service replica's counters on its own `/metrics` ({}), read before the \
         sale, right before a replica is killed (a restarted process counts from zero) and at the end: each replica \
         consumed some;\n\
         - **{ONE_LIMIT}**: one user clicks `POST /api/seckill/{{id}}/orders` on every gateway in turn, the next click \
         as soon as the last is answered, for {} s; the answers other than 429 must stay within one limit, \
         {BUY_BURST} + {BUY_PER_SEC}/s x the time + {LIMIT_SLACK} (the buy class's limit, `rate_limit.buy.*`, the \
         gateways' buckets shared in Redis).\n",
        CONSUMED.map(|m| format!("`{m}`")).join(", "),
        HOT_FOR.as_secs()
    );
    let _ = writeln!(
        out,
        "A case with a **waiting room** (`room-*`) creates its sale with one (a fixed rate, no proof of work). \
         Its users (not three per unit) join (`POST /api/seckill/{{id}}/queue`), half before the opening, half \
         after, and poll `GET /api/seckill/{{id}}/queue` with their ticket as a page would (when \
         `poll_after_ms` says; while admitted, and once after; twice more once `closed`), over 128 shared \
         connections, a failed request made again a second later. One in every (2 x users / units) buys once \
         admitted, as the buyers above with `x-room-admission`, so the room runs to its end. The checks above \
         hold for those buyers; and from the queue's answers alone:\n\n\
         - **{PLACE_KEPT}**, from the draw on;\n\
         - **{ADMITTED_ONCE}**: `admission_expires_at` never later than the first shown, nobody `closed` admitted \
         again;\n\
         - **{RATE_HELD}**: when each admission began (its end less `admission_secs`): in any window (a, b] at \
         most the rate x (b - a) + a second's worth (what the leader's lease of admissions lets out at once after \
         a loss);\n\
         - **{ROOM_MOVES}**: every place came up, some after the return, no pause over {MAX_GAP_S} s from the \
         fault on;\n\
         - **{ROOM_ANSWERS}** reached the users.\n"
    );
    out.push_str(
        "\
         **Lost** counts buyers with an accepted request that never got a final result, a `success` without its \
         order, or an order without its `success`: it must be 0. **Buy path back**: from the fault to the first 202 \
         or clean 410 SOLD_OUT answered to a request sent after it. **Drained**: from the fault until every \
         request accepted before everything was back (the backlog the fault built, and the requests it caught in \
         flight) had its final result.\n\n",
    );
    // One entry per setting, naming every service that gets it.
    let mut grouped: Vec<(String, Vec<&str>)> = Vec::new();
    for (svc, k, v) in tuned_settings() {
        let setting = format!("`{k}={v}`");
        match grouped.iter_mut().find(|(s, _)| *s == setting) {
            Some((_, svcs)) => svcs.push(svc.name()),
            None => grouped.push((setting, vec![svc.name()])),
        }
    }
    let mut tuned: Vec<String> =
        grouped.into_iter().map(|(setting, svcs)| format!("{setting} ({})", svcs.join(", "))).collect();
    tuned.push(format!("`SECKILL__HTTP__SHUTDOWN_TIMEOUT_SECS={SHUTDOWN_TIMEOUT_SECS}` (all)"));
    let _ = writeln!(
        out,
        "The services run with their defaults except shorter timings, so that recoveries show within a case, and a \
         longer wait for the gateways' shared rate-limit bucket (the load shares the machine's cores with the system: a \
         Redis answer slower than the default 100 ms there is the machine's, not an outage): {}.\n",
        tuned.join(", ")
    );

    out.push_str("## Summary\n\n| case | fault | accepted (202) | orders | lost | failed after 202 | 503 / 504 seen | buy path back | drained | verdict |\n|---|---|---:|---:|---:|---:|---|---:|---:|---|\n");
    for r in results {
        let f = r.figures.as_ref();
        let _ = writeln!(
            out,
            "| [{}](#{}) | {} | {} | {} | {} | {} | {} | {} | {} | **{}** |",
            r.name,
            r.name,
            r.fault,
            f.map_or("-".into(), |f| n0(f.accepted as f64)),
            f.map_or("-".into(), |f| n0(f.orders as f64)),
            f.map_or("-".into(), |f| n0(f.lost as f64)),
            f.map_or("-".into(), |f| n0(f.failed_after_202 as f64)),
            retried(r),
            f.map_or("-".into(), |f| secs(f.buy_path_back_s)),
            f.map_or("-".into(), |f| secs(f.drained_s)),
            verdict(r)
        );
    }
    out.push('\n');

    for r in results {
        let _ = writeln!(out, "## {}\n\n{}.\n", r.name, r.fault);
        if let Some(g) = r.goods_id {
            let _ = writeln!(
                out,
                "Sale {g}: {} units, {} buyers arriving over {:.0} s; the case took {:.0} s.\n",
                r.units,
                r.buyers_planned,
                r.arrive_over.as_secs_f64(),
                r.took.as_secs_f64()
            );
        }
        if !r.timeline.events.is_empty() {
            out.push_str("What the driver did (seconds since the sale opened):\n\n");
            for (at, what) in &r.timeline.events {
                let _ = writeln!(out, "- {at:.2} s: {what}");
            }
            out.push('\n');
        }
        if let Some(f) = &r.figures {
            let t = &f.tally;
            out.push_str("| fault | accepted (202) | orders | lost | failed after 202 | 503 / 504 seen | buy path back | drained | verdict |\n|---|---:|---:|---:|---:|---|---:|---:|---|\n");
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | **{}** |\n",
                r.name,
                n0(f.accepted as f64),
                n0(f.orders as f64),
                n0(f.lost as f64),
                n0(f.failed_after_202 as f64),
                retried(r),
                secs(f.buy_path_back_s),
                secs(f.drained_s),
                verdict(r)
            );
            let _ = writeln!(
                out,
                "Buyers who took part: {} ({} late); accepted after a lost answer (409 REPEATED): {}; holding their \
                 order without ever seeing it accepted (the 202 lost, the retry refused): {}; sold out: {}; gave \
                 up: {}. Lost: {} with no final result, {} success without order, {} order without success. Clients \
                 also saw 429 x{}, connection errors x{}, timeouts x{}, other 5xx x{}, unexpected answers x{}.\n",
                f.buyers,
                f.late_buyers,
                f.repeated,
                f.won_unseen,
                f.sold_out,
                f.gave_up,
                f.lost_no_result,
                f.success_without_order,
                f.order_without_success,
                t.s429,
                t.conn_errors,
                t.timeouts,
                t.other_5xx,
                t.unexpected
            );
        }
        // Failed checks in full; the passed ones folded, their details still there as evidence.
        for c in r.checks.iter().filter(|c| !c.ok) {
            let _ = writeln!(out, "- **FAIL** {}: {}", c.name, c.detail);
        }
        let passed: Vec<_> = r.checks.iter().filter(|c| c.ok).collect();
        if !passed.is_empty() {
            let _ = writeln!(
                out,
                "{}<details><summary>{} of {} checks passed</summary>\n",
                if passed.len() < r.checks.len() { "\n" } else { "" },
                passed.len(),
                r.checks.len()
            );
            for c in passed {
                let _ = writeln!(out, "- ok {}: {}", c.name, c.detail);
            }
            out.push_str("\n</details>\n");
        }
        out.push('\n');
        for e in [&r.timeline.error, &r.error].into_iter().flatten() {
            let _ = writeln!(out, "**The case did not run to its end**: {e}\n");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Timeline;
    use crate::verdict::Figures;
    use seckill_harness::invariants::Check;

    fn case(name: &str, ok: bool) -> CaseResult {
        CaseResult {
            name: name.into(),
            fault: format!("the fault of {name}"),
            goods_id: Some(7),
            units: 400,
            buyers_planned: 1_200,
            arrive_over: Duration::from_secs(10),
            timeline: Timeline {
                fault_s: Some(1.5),
                back_s: Some(3.5),
                server_back_s: None,
                events: vec![(1.5, "kill -9 order-service".into())],
                error: None,
            },
            figures: Some(Figures {
                accepted: 1_234,
                orders: 400,
                lost: u64::from(!ok),
                ..Figures::default()
            }),
            checks: vec![
                Check { name: "first".into(), ok: true, detail: "fine".into() },
                Check { name: "second".into(), ok, detail: "the evidence".into() },
            ],
            error: None,
            took: Duration::from_secs(13),
        }
    }

    #[test]
    fn the_document_has_a_summary_and_a_section_per_case_naming_violations() {
        let cfg = crate::tests::config();
        let results = [case("kill9-order", true), case("redis-flush-kill", false)];
        let at = Utc::now();
        let doc = render(&results, &cfg, "x", at, at + chrono::Duration::minutes(8));
        assert!(doc.contains("**1 of 2 cases passed.**"), "{doc}");
        assert!(doc.contains("from commit `x`"));
        assert!(doc.contains("port 25432") && doc.contains("ports 28080-28083"));
        assert!(doc.contains("| [kill9-order](#kill9-order) | the fault of kill9-order | 1,234 | 400 | 0 |"));
        assert!(doc.contains("## redis-flush-kill"));
        assert!(doc.contains("- **FAIL** second: the evidence"));
        assert!(doc.contains("<details><summary>1 of 2 checks passed</summary>"));
        assert!(doc.contains("- 1.50 s: kill -9 order-service"));
        // The replicated case's checks are described, with the limit they hold to.
        for name in [SOLD_OUT_EVERYWHERE, CONSUMERS_SHARE, ONE_LIMIT] {
            assert!(doc.contains(&format!("- **{name}**")), "{name}");
        }
        assert!(doc.contains("10 + 5/s x the time + 2") && doc.contains("port + 10k"), "{doc}");
        let text = summary_text(&results);
        assert!(text.contains("FAIL: second") && text.ends_with("1 of 2 cases passed"), "{text}");
    }
}
