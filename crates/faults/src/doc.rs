//! docs/RELIABILITY.md from a full run (its prose in templates/reliability.md.j2), and the plain
//! summary printed at the end of any run.

use std::fmt::Write as _;

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use minijinja::value::Serde;
use minijinja::{Value, context};

use super::replicas::{CONSUMED, CONSUMERS_SHARE, HOT_FOR, LIMIT_SLACK, ONE_LIMIT, SOLD_OUT_EVERYWHERE};
use super::room::{ADMITTED_ONCE, MAX_GAP_S, PLACE_KEPT, RATE_HELD, ROOM_ANSWERS, ROOM_MOVES};
use super::verdict::{BACK_AFTER_SERVER, BACK_AFTER_SERVER_S};
use super::{CaseResult, Config};
use seckill_harness::fleet::{BUY_BURST, BUY_PER_SEC, PORT_STEP, SHUTDOWN_TIMEOUT_SECS, tuned_settings};

/// Seconds as both the summary and the document show them.
fn secs(v: Option<f64>) -> String {
    v.map_or("never".into(), |s| format!("{s:.1} s"))
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

/// The document's template: its prose; [`render`] hands it the figures.
const TEMPLATE: &str = include_str!("../templates/reliability.md.j2");

/// The whole document.
pub fn render(
    results: &[CaseResult],
    cfg: &Config,
    commit: &str,
    started: DateTime<Utc>,
    ended: DateTime<Utc>,
) -> anyhow::Result<String> {
    let mut env = seckill_harness::markdown::environment()?;
    env.add_filter("secs", secs);
    // As Rust writes a number: 10 for 10.0.
    env.add_filter("num", |v: f64| v.to_string());
    env.add_template("reliability.md", TEMPLATE).context("parsing templates/reliability.md.j2")?;
    // One entry per setting, naming every service that gets it.
    let mut tuned: Vec<(String, Vec<&str>)> = Vec::new();
    for (svc, k, v) in tuned_settings() {
        let setting = format!("{k}={v}");
        match tuned.iter_mut().find(|(s, _)| *s == setting) {
            Some((_, svcs)) => svcs.push(svc.name()),
            None => tuned.push((setting, vec![svc.name()])),
        }
    }
    let page = context! {
        commit, started => started.format("%Y-%m-%d %H:%M").to_string(),
        minutes => (ended - started).num_seconds() as f64 / 60.0,
        passed => results.iter().filter(|r| r.passed()).count(), total => results.len(),
        pg_port => cfg.pg_port, redis_port => cfg.redis_port, amqp_port => cfg.amqp_port,
        http_port => cfg.http_port, port_step => PORT_STEP,
        // scripts/faults.sh builds release ones; FAULTS_BIN_DIR may name a debug build (cargo's
        // `debug` directory, or a copy of it under a directory of that name).
        build => if cfg.bin_dir.components().any(|c| c.as_os_str() == "debug") { "debug" } else { "release" },
        units => cfg.units(),
        arrive_over => results.first().map_or(10.0, |r| r.arrive_over.as_secs_f64()),
        check => context! {
            back_after_server => BACK_AFTER_SERVER, sold_out_everywhere => SOLD_OUT_EVERYWHERE,
            consumers_share => CONSUMERS_SHARE, one_limit => ONE_LIMIT, place_kept => PLACE_KEPT,
            admitted_once => ADMITTED_ONCE, rate_held => RATE_HELD, room_moves => ROOM_MOVES,
            room_answers => ROOM_ANSWERS,
        },
        back_after_server_s => BACK_AFTER_SERVER_S, consumed => CONSUMED, hot_for_s => HOT_FOR.as_secs(),
        buy_burst => BUY_BURST, buy_per_sec => BUY_PER_SEC, limit_slack => LIMIT_SLACK, max_gap_s => MAX_GAP_S,
        tuned, shutdown_timeout_secs => SHUTDOWN_TIMEOUT_SECS,
        cases => results.iter().map(case_view).collect::<Vec<_>>(),
    };
    env.get_template("reliability.md")?.render(page).context("rendering templates/reliability.md.j2")
}

/// What the template shows of one case.
fn case_view(r: &CaseResult) -> Value {
    let figures = r.figures.as_ref().map(|f| {
        let t = &f.tally;
        context! {
            accepted => f.accepted, orders => f.orders, lost => f.lost, failed_after_202 => f.failed_after_202,
            buy_path_back_s => f.buy_path_back_s, drained_s => f.drained_s, buyers => f.buyers,
            late_buyers => f.late_buyers, repeated => f.repeated, won_unseen => f.won_unseen,
            sold_out => f.sold_out, gave_up => f.gave_up, lost_no_result => f.lost_no_result,
            success_without_order => f.success_without_order, order_without_success => f.order_without_success,
            s503 => t.s503, s504 => t.s504, s429 => t.s429, conn_errors => t.conn_errors,
            timeouts => t.timeouts, other_5xx => t.other_5xx, unexpected => t.unexpected,
        }
    });
    context! {
        name => &r.name, fault => &r.fault, goods_id => r.goods_id, units => r.units,
        buyers_planned => r.buyers_planned, arrive_over => r.arrive_over.as_secs_f64(),
        took => r.took.as_secs_f64(), passed => r.passed(), events => &r.timeline.events, figures,
        checks => Serde(&r.checks), checks_passed => r.checks.iter().filter(|c| c.ok).count(),
        checks_total => r.checks.len(),
        errors => [&r.timeline.error, &r.error].into_iter().flatten().cloned().collect::<Vec<_>>(),
    }
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
        let cfg = Config { bin_dir: "target/debug".into(), ..crate::tests::config() };
        let mut failed = case("redis-flush-kill", false);
        failed.figures.as_mut().unwrap().tally.conn_errors = 1_001;
        let mut gone = case("kill9-gateway", true);
        (gone.goods_id, gone.figures, gone.error) = (None, None, Some("no sale: 500".into()));
        let results = [case("kill9-order", true), failed, gone];
        let at = Utc::now();
        let doc = render(&results, &cfg, "x", at, at + chrono::Duration::minutes(8)).unwrap();
        assert!(doc.starts_with("# Reliability under faults\n\nWritten by"), "{doc}");
        assert!(doc.contains("from commit `x`") && doc.contains("in 8 minutes"));
        assert!(doc.contains("**1 of 3 cases passed.**"));
        assert!(doc.contains("port 25432") && doc.contains("four debug binaries on ports 28080-28083"));
        assert!(doc.contains("| [kill9-order](#kill9-order) | the fault of kill9-order | 1,234 | 400 | 0 |"));
        assert!(doc.contains("| 0 / 0 (+1,001 conn. errors, 0 timeouts) | never | never | **FAIL** |\n"));
        assert!(doc.contains("| [kill9-gateway](#kill9-gateway) | the fault of kill9-gateway | - | - | - | - | - | - | - | **FAIL** |\n"));
        assert!(
            doc.ends_with("</details>\n\n**The case did not run to its end**: no sale: 500\n\n"),
            "{doc}"
        );
        assert!(doc.contains("## redis-flush-kill"));
        assert!(doc.contains("- **FAIL** second: the evidence"));
        assert!(doc.contains("<details><summary>1 of 2 checks passed</summary>"));
        assert!(doc.contains("- 1.50 s: kill -9 order-service"));
        // The replicated case's checks are described, with the limit they hold to.
        for name in [SOLD_OUT_EVERYWHERE, CONSUMERS_SHARE, ONE_LIMIT] {
            assert!(doc.contains(&format!("- **{name}**")), "{name}");
        }
        assert!(doc.contains("10 + 5/s x the time + 2") && doc.contains("port + 10k"), "{doc}");
        // The tuned settings, one entry per setting naming every service that gets it.
        assert!(doc.contains("`SECKILL__AMQP__RETRY_DELAY_MS=500` (seckill-service, order-service, stock-service), `SECKILL__HTTP__SHUTDOWN_TIMEOUT_SECS=10` (all).\n"));
        let text = summary_text(&results);
        assert!(text.contains("FAIL: second") && text.ends_with("1 of 3 cases passed"), "{text}");
    }
}
