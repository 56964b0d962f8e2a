//! Load shedding: a bound on the requests a replica works on at once, which follows what the
//! replica sustains right now. Past it, a request is answered 503 `BUSY` with `Retry-After` at
//! once, before it touches anything: under overload a buyer learns in microseconds that they
//! should come back, instead of queueing for seconds behind work the replica cannot finish
//! sooner, and nothing already accepted is put at risk.
//!
//! The bound adapts to the latency of the requests it lets through (see [`Limits`]): every
//! `WINDOW` the mean latency of the requests that ended in it is set against a target. Above
//! it, the bound shrinks in proportion (by Little's law, at a steady rate the time in flight
//! grows with the number in flight, so `bound x target / latency` is the bound that would have
//! met the target); below it, and only if the bound was what held the requests back, it grows.
//! One fixed number would be wrong on every machine but one: too high and the excess queues
//! inside the replica for seconds, too low and a bigger machine refuses buyers it could serve.
//! Two refinements (docs/DECISIONS.md, "Adaptive admission"): the target rises to twice the
//! replica's own latency when nothing is held back, so a slow machine at its normal load
//! refuses nobody; and a bound under which throughput falls is grown, not shrunk, since a storm
//! of refusals keeps latency high at any bound. `Retry-After` follows the refusals per request
//! served, so the refused come back spread over the time the replica needs for them.
//!
//! Everything is atomics: a request costs a few atomic adds, and once a window the one request
//! that closes it recomputes the bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use seckill_common::ErrorCode;
use seckill_common::config::ConfigError;

use crate::ApiError;

/// The shortest and the longest wait a shed request is told (`Retry-After`, whole seconds).
pub const MIN_RETRY_AFTER_SECS: u64 = 1;
pub const MAX_RETRY_AFTER_SECS: u64 = 10;

/// How much of the refusals-per-completion ratio a window adds to its running average: about
/// the last half second of windows counts.
const RATIO_WEIGHT: f64 = 0.1;

/// How far above its latency when nothing is held back a replica's latency may go before the
/// bound comes down (see `Inner::target`).
const TOLERANCE: f64 = 2.0;

/// The share of its best recent throughput below which a bound is starving the replica.
const THROUGHPUT_KEPT: f64 = 0.85;

/// How much of the best recent throughput is kept from one window to the next.
const BEST_RATE_DECAY: f64 = 0.99;

/// Fewest requests a window needs to teach the baseline latency.
const MIN_BASELINE_SAMPLES: u64 = 20;

/// How often the bound is reconsidered: long enough to average some hundred requests at a
/// flash sale's rates, short enough that a burst is cut within a few of them.
const WINDOW: Duration = Duration::from_millis(50);

/// The bound on requests in flight: between `min` and `max`, adapted to keep their mean
/// latency at `latency_target`. `min == max` is a fixed bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The bound never goes below this: a replica whose every request is slow (its
    /// dependency is) still works on this many at once.
    pub min: usize,
    /// The bound at the start, and its ceiling: an opening burst is let through up to this
    /// many at once until the first window has measured what the replica sustains.
    pub max: usize,
    pub latency_target: Duration,
}

impl Limits {
    pub const fn fixed(bound: usize) -> Self {
        Self { min: bound, max: bound, latency_target: Duration::from_secs(1) }
    }

    /// The limits from a service's settings, checked: both bounds positive, the floor not
    /// above the ceiling, a target of at least a millisecond.
    pub fn from_settings(
        keys: &SettingKeys,
        min: usize,
        max: usize,
        latency_target_ms: u64,
    ) -> Result<Self, ConfigError> {
        ConfigError::check_positive(keys.max, max as u64)?;
        ConfigError::check_positive(keys.min, min as u64)?;
        ConfigError::check_positive(keys.latency_target, latency_target_ms)?;
        if min > max {
            return Err(ConfigError::at(
                keys.min,
                format!("must be at most {} ({max}); equal to it fixes the bound", keys.max),
            ));
        }
        Ok(Self { min, max, latency_target: Duration::from_millis(latency_target_ms) })
    }

    fn adaptive(&self) -> bool {
        self.min < self.max
    }
}

/// Where a service's settings hold the [`Limits`], for the errors that name them.
pub struct SettingKeys {
    pub min: &'static str,
    pub max: &'static str,
    pub latency_target: &'static str,
}

/// The bound and the requests under it; cloned handles share both.
#[derive(Clone)]
pub struct InFlight {
    inner: Arc<Inner>,
}

struct Inner {
    limits: Limits,
    /// What the bound is called in the metrics (`bound` label: gateway, seckill).
    name: &'static str,
    /// The counter of shed requests (`<name>{route}`).
    shed_metric: &'static str,
    in_flight: AtomicUsize,
    limit: AtomicUsize,
    /// The running average of refusals per request let through and completed (`f64` bits):
    /// `Retry-After` is it, rounded up.
    refused_per_completed: AtomicU64,
    /// The mean latency of recent windows in which the bound held nothing back, in µs (0:
    /// none yet).
    baseline_us: AtomicU64,
    /// The best completion rate of the last seconds, per second (`f64` bits).
    best_rate: AtomicU64,
    epoch: Instant,
    window: Window,
}

/// The requests that ended since the window opened, and how many were in flight at most.
struct Window {
    /// Microseconds from `epoch` to the window's opening.
    opened_us: AtomicU64,
    ended: AtomicU64,
    refused: AtomicU64,
    latency_us: AtomicU64,
    peak: AtomicUsize,
}

/// A request's slot, given back when dropped (the handler returned or was cancelled); its time
/// in flight is what the bound learns from.
#[must_use = "the slot is held only while this lives"]
pub struct Slot {
    inner: Arc<Inner>,
    entered: Instant,
    /// Whether its latency and its end count in the window (see [`InFlight::enter_unmeasured`]).
    measured: bool,
}

impl InFlight {
    /// `shed_metric` names the counter of refusals; `name` the bound in the gauges.
    pub fn new(limits: Limits, name: &'static str, shed_metric: &'static str) -> Self {
        let limits = Limits { min: limits.min.max(1), max: limits.max.max(limits.min.max(1)), ..limits };
        let inner = Inner {
            limits,
            name,
            shed_metric,
            in_flight: AtomicUsize::new(0),
            limit: AtomicUsize::new(limits.max),
            refused_per_completed: AtomicU64::new(0f64.to_bits()),
            baseline_us: AtomicU64::new(0),
            best_rate: AtomicU64::new(0f64.to_bits()),
            epoch: Instant::now(),
            window: Window {
                opened_us: AtomicU64::new(0),
                ended: AtomicU64::new(0),
                refused: AtomicU64::new(0),
                latency_us: AtomicU64::new(0),
                peak: AtomicUsize::new(0),
            },
        };
        metrics::gauge!("admission_concurrency_limit", "bound" => name).set(limits.max as f64);
        Self { inner: Arc::new(inner) }
    }

    /// A slot for one request of `route`, or 503 `BUSY` when the bound is reached. Never waits.
    pub fn enter(&self, route: &'static str) -> Result<Slot, ApiError> {
        self.take(route, true)
    }

    /// A slot whose latency the bound does not learn from: a kind of request far quicker than
    /// the ones the bound is for (a result poll beside the orders), whose many fast answers
    /// would pull the mean down and hide the orders' queueing. It still counts in flight.
    pub fn enter_unmeasured(&self, route: &'static str) -> Result<Slot, ApiError> {
        self.take(route, false)
    }

    fn take(&self, route: &'static str, measured: bool) -> Result<Slot, ApiError> {
        let inner = &self.inner;
        let now = inner.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
        if now > inner.limit.load(Ordering::Relaxed) {
            inner.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(self.busy(route));
        }
        inner.window.peak.fetch_max(now, Ordering::Relaxed);
        Ok(Slot { inner: inner.clone(), entered: Instant::now(), measured })
    }

    /// 503 `BUSY` when the bound is reached right now, without taking a slot: the first thing
    /// a route checks, so a shed request costs no token check and no rate-limit call. The slot
    /// itself is taken later with [`InFlight::enter`], which can still refuse.
    pub fn refuse_if_full(&self, route: &'static str) -> Result<(), ApiError> {
        if self.current() >= self.limit() {
            return Err(self.busy(route));
        }
        Ok(())
    }

    /// Requests in flight right now.
    pub fn current(&self) -> usize {
        self.inner.in_flight.load(Ordering::Relaxed)
    }

    /// The bound right now.
    pub fn limit(&self) -> usize {
        self.inner.limit.load(Ordering::Relaxed)
    }

    /// What a refused request is told to wait now, in seconds.
    pub fn retry_after_secs(&self) -> u64 {
        let average = f64::from_bits(self.inner.refused_per_completed.load(Ordering::Relaxed));
        (average.ceil() as u64).clamp(MIN_RETRY_AFTER_SECS, MAX_RETRY_AFTER_SECS)
    }

    fn busy(&self, route: &'static str) -> ApiError {
        metrics::counter!(self.inner.shed_metric, "route" => route).increment(1);
        self.inner.window.refused.fetch_add(1, Ordering::Relaxed);
        ApiError::new(ErrorCode::Busy, "too many requests in progress here, try again shortly")
            .with_retry_after(Duration::from_secs(self.retry_after_secs()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let inner = &self.inner;
        inner.in_flight.fetch_sub(1, Ordering::AcqRel);
        if !self.measured {
            return;
        }
        let ended = Instant::now();
        let took = ended.duration_since(self.entered).as_micros().min(u128::from(u32::MAX)) as u64;
        inner.window.latency_us.fetch_add(took, Ordering::Relaxed);
        inner.window.ended.fetch_add(1, Ordering::Relaxed);
        inner.close_window_if_due(ended);
    }
}

impl Inner {
    /// Ends the window if it has lasted `WINDOW`: the one caller that wins the race to reopen
    /// it takes the window's figures and sets the bound from them.
    fn close_window_if_due(&self, now: Instant) {
        let now_us = now.duration_since(self.epoch).as_micros() as u64;
        let opened = self.window.opened_us.load(Ordering::Relaxed);
        if now_us.saturating_sub(opened) < WINDOW.as_micros() as u64
            || self
                .window
                .opened_us
                .compare_exchange(opened, now_us, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let ended = self.window.ended.swap(0, Ordering::AcqRel);
        let refused = self.window.refused.swap(0, Ordering::AcqRel);
        let latency_us = self.window.latency_us.swap(0, Ordering::AcqRel);
        let peak = self.window.peak.swap(self.in_flight.load(Ordering::Relaxed), Ordering::AcqRel);
        self.learn_refusals(refused, ended);
        if ended == 0 || !self.limits.adaptive() {
            return;
        }
        let mean = Duration::from_micros(latency_us / ended);
        let limit = self.limit.load(Ordering::Relaxed);
        let target = self.target(held_back(limit, peak), mean, ended);
        let window = Duration::from_micros(now_us - opened).as_secs_f64();
        let rate = ended as f64 / window;
        let best_rate = self.best_rate(rate);
        let next = next_limit(&self.limits, target, limit, Measured { peak, mean, rate, best_rate });
        if next != limit {
            self.limit.store(next, Ordering::Relaxed);
            metrics::gauge!("admission_concurrency_limit", "bound" => self.name).set(next as f64);
        }
        metrics::gauge!("admission_in_flight", "bound" => self.name).set(peak as f64);
    }

    /// What `Retry-After` follows: how many requests were refused for each one let through: the
    /// refused of a second need about that many seconds of what the replica completes to be
    /// served, so told to come back then they return spread over the time it can take them,
    /// not all at the next second to be refused again (at five times the sustainable rate, a
    /// one-second wait makes every refused buyer a request a second: a storm of refusals
    /// that takes the cores from the work).
    fn learn_refusals(&self, refused: u64, ended: u64) {
        // One window's ratio counts up to the ceiling: after a storm the wait comes back down
        // within a second of windows, however wild the storm was.
        let ratio = (refused as f64 / ended.max(1) as f64).min(MAX_RETRY_AFTER_SECS as f64);
        let average = f64::from_bits(self.refused_per_completed.load(Ordering::Relaxed));
        let average = average + RATIO_WEIGHT * (ratio - average);
        self.refused_per_completed.store(average.to_bits(), Ordering::Relaxed);
    }

    /// The latency the bound aims at: `latency_target`, or more on a replica whose requests
    /// take longer than that even when the bound holds nothing back (a slower machine, a
    /// farther Redis): about [`TOLERANCE`] times what they take then, learned from the windows
    /// in which the bound was not reached, up to [`TOLERANCE`]² times the target. So a replica
    /// at its normal load refuses nobody, whatever its normal latency, and one past it is held
    /// near that latency rather than let slide into queueing.
    fn target(&self, held_back: bool, mean: Duration, ended: u64) -> Duration {
        let mut baseline = Duration::from_micros(self.baseline_us.load(Ordering::Relaxed));
        if !held_back && ended >= MIN_BASELINE_SAMPLES {
            baseline = if baseline.is_zero() { mean } else { baseline.mul_f64(0.8) + mean.mul_f64(0.2) };
            self.baseline_us.store(baseline.as_micros() as u64, Ordering::Relaxed);
        }
        let target = self.limits.latency_target;
        baseline.mul_f64(TOLERANCE).clamp(target, target.mul_f64(TOLERANCE * TOLERANCE))
    }

    /// The best completion rate of the last seconds, this window's `rate` included (a maximum
    /// that decays by half in about three seconds, so a replica that really got slower learns
    /// it).
    fn best_rate(&self, rate: f64) -> f64 {
        let best = (f64::from_bits(self.best_rate.load(Ordering::Relaxed)) * BEST_RATE_DECAY).max(rate);
        self.best_rate.store(best.to_bits(), Ordering::Relaxed);
        best
    }
}

/// Whether the bound held requests back in a window: the most in flight at once came within a
/// tenth of it.
fn held_back(limit: usize, peak: usize) -> bool {
    peak * 10 >= limit * 9
}

/// One window's figures, as the bound is set from them.
#[derive(Debug, Clone, Copy)]
struct Measured {
    /// The most requests in flight at once.
    peak: usize,
    /// Their mean latency.
    mean: Duration,
    /// Requests completed per second, against the best of the last seconds.
    rate: f64,
    best_rate: f64,
}

/// The bound for the next window, from `limit` and this window's figures, against `target`.
fn next_limit(limits: &Limits, target: Duration, limit: usize, m: Measured) -> usize {
    let target = target.as_secs_f64();
    let mean = m.mean.as_secs_f64().max(1e-6);
    // A bound that costs throughput is too low, however slow the requests are: when the cores
    // are taken by what arrives (refusals included), latency stays up at any bound, and
    // shrinking on latency alone would only starve the replica down to its floor.
    let starving = m.rate < m.best_rate * THROUGHPUT_KEPT;
    let next = if mean > target && !starving {
        // Too slow: the bound that would have met the target at this rate, at most halving a
        // window so one slow window (a pause of the process) does not empty the replica.
        (limit as f64 * (target / mean).max(0.5)).floor() as usize
    } else if held_back(limit, m.peak) {
        // Fast enough (or starved) and held back by the bound: grow, faster the further below
        // the target.
        let room = if mean * 2.0 < target { limit / 4 } else { (limit as f64).sqrt() as usize };
        limit + room.max(1)
    } else {
        // Not held back: the bound is not what is being measured.
        limit
    };
    next.clamp(limits.min, limits.max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adaptive(min: usize, max: usize, target_ms: u64) -> Limits {
        Limits { min, max, latency_target: Duration::from_millis(target_ms) }
    }

    /// The next bound at a throughput as good as the best of late.
    fn at(l: &Limits, limit: usize, peak: usize, mean_ms: u64) -> usize {
        let m = Measured { peak, mean: Duration::from_millis(mean_ms), rate: 1_000.0, best_rate: 1_000.0 };
        next_limit(l, l.latency_target, limit, m)
    }

    #[test]
    fn a_bound_that_costs_throughput_grows_however_slow_the_requests_are() {
        let l = adaptive(10, 1_000, 50);
        let slow =
            Measured { peak: 200, mean: Duration::from_millis(150), rate: 1_000.0, best_rate: 1_000.0 };
        assert_eq!(
            next_limit(&l, l.latency_target, 200, slow),
            100,
            "throughput kept: shrink (halved at most)"
        );
        // The same latency, and the throughput has fallen under the bound: the cores are taken
        // by something else (refusals), a lower bound only starves the replica.
        let starved = Measured { rate: 600.0, ..slow };
        assert_eq!(next_limit(&l, l.latency_target, 200, starved), 214, "grows by its square root");
        let not_held = Measured { peak: 50, ..starved };
        assert_eq!(next_limit(&l, l.latency_target, 200, not_held), 200);
    }

    #[test]
    fn past_the_bound_a_request_is_busy_at_once_and_a_slot_comes_back_when_dropped() {
        let bound = InFlight::new(Limits::fixed(2), "test", "test_shed_total");
        let a = bound.enter("r").unwrap();
        let _b = bound.enter("r").unwrap();
        assert_eq!(bound.current(), 2);
        let err = bound.enter("r").err().unwrap();
        assert_eq!(err.code, ErrorCode::Busy);
        assert_eq!(err.retry_after_secs, Some(1));
        assert_eq!(bound.refuse_if_full("r").unwrap_err().code, ErrorCode::Busy);
        assert_eq!(bound.current(), 2, "a refusal holds no slot");
        drop(a);
        assert_eq!(bound.current(), 1);
        bound.refuse_if_full("r").unwrap();
        let _c = bound.enter("r").unwrap();
    }

    #[test]
    fn too_slow_shrinks_the_bound_in_proportion_never_below_half_or_the_floor() {
        let l = adaptive(10, 1_000, 50);
        // Twice the target: half the bound would have met it.
        assert_eq!(at(&l, 800, 800, 100), 400);
        assert_eq!(at(&l, 800, 800, 80), 500);
        // Ten times the target (a pause): at most halved in one window.
        assert_eq!(at(&l, 800, 800, 500), 400);
        assert_eq!(at(&l, 16, 16, 500), 10, "the floor holds");
    }

    #[test]
    fn fast_enough_grows_the_bound_only_when_it_held_requests_back() {
        let l = adaptive(10, 1_000, 50);
        // Well below the target and the bound reached: a quarter more.
        assert_eq!(at(&l, 400, 400, 10), 500);
        // Close to the target: a gentler step (the square root).
        assert_eq!(at(&l, 400, 380, 40), 420);
        // Few requests in flight: a fast replica with room to spare learns nothing of its bound.
        assert_eq!(at(&l, 400, 100, 10), 400);
        assert_eq!(at(&l, 990, 990, 1), 1_000, "the ceiling holds");
    }

    /// Six windows of `n` measured requests that each take about 60 ms; `meanwhile` runs while
    /// they are held.
    fn slow_windows(bound: &InFlight, n: usize, meanwhile: impl Fn()) {
        for _ in 0..6 {
            let slots: Vec<Slot> = (0..n).map(|_| bound.enter("order").unwrap()).collect();
            meanwhile();
            std::thread::sleep(WINDOW.max(Duration::from_millis(60)));
            drop(slots);
        }
    }

    #[test]
    fn slow_requests_bring_the_bound_down_and_fast_ones_up_again() {
        let bound = InFlight::new(adaptive(4, 64, 20), "test", "test_shed_total");
        assert_eq!(bound.limit(), 64, "starts at its ceiling: a cold replica takes an opening burst");
        // Four requests at a time that take about three times the target: a replica whose
        // requests queue (its rate holds whatever the bound), so the bound falls to the floor.
        slow_windows(&bound, 4, || {});
        let low = bound.limit();
        assert!(low <= 8, "the bound came down: {low}");
        assert!(bound.enter("r").is_ok());
        // Quick requests that fill the bound: it climbs back.
        for _ in 0..40 {
            let slots: Vec<Slot> = (0..bound.limit()).map(|_| bound.enter("r").unwrap()).collect();
            let until = Instant::now() + WINDOW + Duration::from_millis(5);
            drop(slots);
            while Instant::now() < until {
                drop(bound.enter("r").unwrap());
            }
            if bound.limit() == 64 {
                break;
            }
        }
        assert_eq!(bound.limit(), 64, "the bound climbed back to its ceiling");
    }

    #[test]
    fn an_unmeasured_slot_counts_in_flight_but_teaches_the_bound_nothing() {
        let bound = InFlight::new(adaptive(8, 64, 20), "test", "test_shed_total");
        // Slow measured requests beside a flood of instant unmeasured ones: the mean the bound
        // sees is the slow ones', so it comes down as if the flood were not there.
        slow_windows(&bound, 2, || {
            let polls: Vec<Slot> = (0..4).map(|_| bound.enter_unmeasured("result").unwrap()).collect();
            assert_eq!(bound.current(), 6, "both kinds count in flight");
            drop(polls);
            for _ in 0..1_000 {
                drop(bound.enter_unmeasured("result").unwrap());
            }
        });
        assert!(bound.limit() <= 16, "the bound came down: {}", bound.limit());
        assert_eq!(bound.current(), 0);
    }

    #[test]
    fn retry_after_follows_the_refusals_for_each_request_served() {
        let bound = InFlight::new(Limits::fixed(8), "test", "test_shed_total");
        assert_eq!(bound.retry_after_secs(), 1, "nothing refused yet: one second");
        // Four refused for each one served, window after window: come back in about four seconds.
        for _ in 0..60 {
            bound.inner.learn_refusals(400, 100);
        }
        assert_eq!(bound.retry_after_secs(), 4);
        let err = bound.enter("r").map(drop).and_then(|()| {
            let _held: Vec<Slot> = (0..8).map(|_| bound.enter("r").unwrap()).collect();
            bound.enter("r").map(drop)
        });
        assert_eq!(err.unwrap_err().retry_after_secs, Some(4), "the refusal says so");
        // A storm far past it: never more than the ceiling.
        for _ in 0..60 {
            bound.inner.learn_refusals(100_000, 10);
        }
        assert_eq!(bound.retry_after_secs(), MAX_RETRY_AFTER_SECS);
        // The overload over: back to one second within a few seconds of windows.
        for _ in 0..100 {
            bound.inner.learn_refusals(0, 100);
        }
        assert_eq!(bound.retry_after_secs(), 1);
    }

    #[test]
    fn a_fixed_bound_does_not_move() {
        let bound = InFlight::new(Limits::fixed(3), "test", "test_shed_total");
        for _ in 0..3 {
            let slots: Vec<Slot> = (0..3).map(|_| bound.enter("r").unwrap()).collect();
            std::thread::sleep(WINDOW + Duration::from_millis(5));
            drop(slots);
        }
        assert_eq!(bound.limit(), 3);
    }
}
