//! `503 BUSY` handled like a client: the services shed load past a bound of requests in flight
//! and say when to come back (`Retry-After`, seconds); a browser or an app waits that long,
//! plus a little jitter so the clicks shed together do not come back together, and tries
//! again a few times before it shows the buyer an error.

use std::time::Duration;

use seckill_common::ErrorCode;

use crate::client::Answer;

/// Retries of a shed call per click, unless told otherwise.
pub const DEFAULT_RETRIES: u32 = 3;
/// The wait when a BUSY answer says nothing readable (the services always say 1 s).
pub const DEFAULT_WAIT: Duration = Duration::from_secs(1);
/// The longest wait honoured: a click is not held for minutes by a misconfigured header.
pub const MAX_WAIT: Duration = Duration::from_secs(5);
/// Jitter of at least this much, even on a `Retry-After: 0`.
const MIN_JITTER: Duration = Duration::from_millis(100);

/// The answer is the shed answer: `503` with the `BUSY` code. Other 503s (a sale being
/// restored, an upstream down) are not about load, and are left as they are.
pub fn is_busy(answer: &Answer) -> bool {
    answer.is_error(503, ErrorCode::Busy)
}

/// How a click retries BUSY answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct BusyRetry {
    /// Retries of a click's call answered `503 BUSY`, each after its `Retry-After` (capped at
    /// 5 s) plus a little jitter, as a browser or an app would (0: a BUSY answer ends the click).
    #[arg(long = "busy-retries", value_name = "BUSY_RETRIES", default_value_t = DEFAULT_RETRIES)]
    pub retries: u32,
    /// The longest wait honoured.
    #[arg(skip = MAX_WAIT)]
    pub max_wait: Duration,
}

impl BusyRetry {
    pub fn new(retries: u32) -> Self {
        Self { retries, max_wait: MAX_WAIT }
    }

    /// After `answer`, on a click that already retried `retried` times: how long to wait
    /// before trying the same call again, or `None` when the answer is the click's last.
    pub fn decide(&self, answer: &Answer, retried: u32) -> Option<Duration> {
        (retried < self.retries && is_busy(answer)).then(|| self.wait(answer.retry_after, fastrand::f64()))
    }

    /// The server's wait (capped), plus `unit` (in 0..1) of a jitter of a quarter of it, at
    /// least [`MIN_JITTER`].
    fn wait(&self, retry_after: Option<Duration>, unit: f64) -> Duration {
        let base = retry_after.unwrap_or(DEFAULT_WAIT).min(self.max_wait);
        base + (base / 4).max(MIN_JITTER).mul_f64(unit.clamp(0.0, 1.0))
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn answer(status: u16, code: &str, retry_after: Option<u64>) -> Answer {
        let body = format!(r#"{{"code":"{code}","message":"m"}}"#);
        Answer { status, body: Bytes::from(body), retry_after: retry_after.map(Duration::from_secs) }
    }

    #[test]
    fn only_a_503_busy_is_retried() {
        let policy = BusyRetry::new(3);
        assert!(policy.decide(&answer(503, "BUSY", Some(1)), 0).is_some());
        assert!(policy.decide(&answer(503, "UNAVAILABLE", Some(1)), 0).is_none());
        assert!(policy.decide(&answer(429, "BUSY", Some(1)), 0).is_none());
        assert!(policy.decide(&answer(410, "SOLD_OUT", None), 0).is_none());
        let no_json = Answer { status: 503, body: Bytes::from_static(b"busy"), retry_after: None };
        assert!(!is_busy(&no_json));
    }

    #[test]
    fn a_click_retries_a_bounded_number_of_times() {
        let busy = answer(503, "BUSY", Some(1));
        let policy = BusyRetry::new(3);
        let tries: Vec<bool> = (0..5).map(|retried| policy.decide(&busy, retried).is_some()).collect();
        assert_eq!(tries, [true, true, true, false, false]);
        assert!(BusyRetry::new(0).decide(&busy, 0).is_none(), "0 turns retrying off");
    }

    #[test]
    fn the_wait_is_the_servers_capped_plus_jitter() {
        let policy = BusyRetry::new(DEFAULT_RETRIES);
        let s = Duration::from_secs;
        assert_eq!(policy.wait(Some(s(1)), 0.0), s(1));
        assert_eq!(policy.wait(Some(s(1)), 1.0), Duration::from_millis(1_250));
        assert_eq!(policy.wait(Some(s(600)), 0.0), MAX_WAIT, "capped");
        assert_eq!(policy.wait(Some(Duration::MAX), 1.0), MAX_WAIT + MAX_WAIT / 4);
        assert_eq!(policy.wait(None, 0.0), DEFAULT_WAIT);
        assert_eq!(policy.wait(Some(Duration::ZERO), 1.0), MIN_JITTER);
        // Drawn at random: within the bounds, and not all alike.
        let busy = answer(503, "BUSY", Some(1));
        let waits: Vec<Duration> = (0..50).filter_map(|_| policy.decide(&busy, 0)).collect();
        assert_eq!(waits.len(), 50);
        assert!(waits.iter().all(|w| (s(1)..=Duration::from_millis(1_250)).contains(w)), "{waits:?}");
        assert!(waits.iter().any(|w| *w != waits[0]), "no jitter: {waits:?}");
    }
}
