//! Statistics of a run's events: per call and per outcome, the count, the rate and the latency
//! percentiles (HDR histograms, 3 significant digits); and a timeline of throughput and
//! latency in fixed buckets for the chart.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::record::{Call, Event, outcome_label};

/// Latency percentiles, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
}

/// The percentiles of `values_us` (microseconds) through an HDR histogram from 1 µs to 1 h.
pub fn latency_of(values_us: impl IntoIterator<Item = u64>) -> Latency {
    let Ok(mut h) = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3) else {
        return Latency::default();
    };
    for v in values_us {
        h.saturating_record(v.max(1));
    }
    if h.is_empty() {
        return Latency::default();
    }
    let ms = |us: u64| us as f64 / 1_000.0;
    Latency {
        p50_ms: ms(h.value_at_quantile(0.5)),
        p90_ms: ms(h.value_at_quantile(0.9)),
        p99_ms: ms(h.value_at_quantile(0.99)),
        p999_ms: ms(h.value_at_quantile(0.999)),
        max_ms: ms(h.max()),
        mean_ms: h.mean() / 1_000.0,
    }
}

/// `count` per second over `secs` (0 for an empty window).
pub fn per_sec(count: u64, secs: f64) -> f64 {
    if secs > 0.0 { count as f64 / secs } else { 0.0 }
}

/// One row of the report: a call, one outcome of it (or `all`), and its figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallStats {
    pub call: String,
    pub outcome: String,
    pub count: u64,
    /// Requests per second over the call's window (its first start to its last end).
    pub per_sec: f64,
    pub window_secs: f64,
    pub latency: Latency,
}

/// Rows for every call present: first `all`, then each outcome by status.
pub fn call_stats(events: &[Event]) -> Vec<CallStats> {
    let mut by_call: BTreeMap<Call, Vec<&Event>> = BTreeMap::new();
    for e in events {
        by_call.entry(e.call).or_default().push(e);
    }
    let mut rows = Vec::new();
    for (call, evs) in by_call {
        let first = evs.iter().map(|e| e.start_us()).min().unwrap_or(0);
        let last = evs.iter().map(|e| e.end_us).max().unwrap_or(0);
        let window_secs = f64::from(last.saturating_sub(first)) / 1e6;
        let row = |outcome: String, evs: &[&Event]| {
            let count = evs.len() as u64;
            CallStats {
                call: call.name().into(),
                outcome,
                count,
                per_sec: per_sec(count, window_secs),
                window_secs,
                latency: latency_of(evs.iter().map(|e| u64::from(e.latency_us))),
            }
        };
        rows.push(row("all".into(), &evs));
        let mut by_status: BTreeMap<u16, Vec<&Event>> = BTreeMap::new();
        for e in &evs {
            by_status.entry(e.status).or_default().push(e);
        }
        for (status, group) in by_status {
            rows.push(row(outcome_label(call, status), &group));
        }
    }
    rows
}

/// One bucket of a series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Start of the bucket, seconds since the first request.
    pub t_s: f64,
    pub per_sec: f64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Series {
    pub name: String,
    /// Whether the points carry latencies (requests) or only a rate (e.g. results final).
    pub has_latency: bool,
    pub points: Vec<Point>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    pub bucket_ms: u64,
    pub series: Vec<Series>,
}

/// A round bucket width giving at most about 150 points over `span_us`.
pub fn bucket_ms_for(span_us: u64) -> u64 {
    const NICE: [u64; 10] = [100, 200, 250, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000];
    let ideal = span_us / 1_000 / 150;
    NICE.into_iter().find(|b| *b >= ideal).unwrap_or(60_000)
}

/// The nearest-rank percentile `q` of sorted values.
pub fn nearest_rank(sorted: &[u32], q: f64) -> Option<u32> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Requests per second and p50/p99 per bucket for each call (by end time), plus rate-only
/// series from `marks` (times in µs, e.g. when each result was seen final).
pub fn timeline(events: &[Event], marks: &[(String, Vec<u32>)], bucket_ms: u64) -> Timeline {
    let bucket_us = bucket_ms.max(1) * 1_000;
    let last = events
        .iter()
        .map(|e| e.end_us)
        .chain(marks.iter().flat_map(|(_, m)| m.iter().copied()))
        .max()
        .unwrap_or(0);
    let n = (u64::from(last) / bucket_us + 1) as usize;
    let secs = bucket_ms as f64 / 1_000.0;
    let t = |i: usize| (i as u64 * bucket_ms) as f64 / 1_000.0;
    let mut series = Vec::new();
    for call in Call::ALL {
        let mut buckets: Vec<Vec<u32>> = vec![Vec::new(); n];
        let mut any = false;
        for e in events.iter().filter(|e| e.call == call) {
            buckets[(u64::from(e.end_us) / bucket_us) as usize].push(e.latency_us);
            any = true;
        }
        if !any {
            continue;
        }
        let points = buckets
            .into_iter()
            .enumerate()
            .map(|(i, mut b)| {
                b.sort_unstable();
                let ms = |v: Option<u32>| v.map(|us| f64::from(us) / 1_000.0);
                Point {
                    t_s: t(i),
                    per_sec: b.len() as f64 / secs,
                    p50_ms: ms(nearest_rank(&b, 0.5)),
                    p99_ms: ms(nearest_rank(&b, 0.99)),
                }
            })
            .collect();
        series.push(Series { name: call.name().into(), has_latency: true, points });
    }
    for (name, times) in marks {
        let mut counts = vec![0u64; n];
        for at in times {
            counts[(u64::from(*at) / bucket_us) as usize] += 1;
        }
        series.push(Series {
            name: name.clone(),
            has_latency: false,
            points: counts
                .into_iter()
                .enumerate()
                .map(|(i, c)| Point { t_s: t(i), per_sec: c as f64 / secs, p50_ms: None, p99_ms: None })
                .collect(),
        });
    }
    Timeline { bucket_ms, series }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(call: Call, status: u16, end_ms: u32, latency_ms: u32) -> Event {
        Event { end_us: end_ms * 1_000, latency_us: latency_ms * 1_000, call, status }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= b.abs() * 0.002 + 1e-9
    }

    #[test]
    fn percentiles_of_one_to_a_thousand_milliseconds() {
        let l = latency_of((1..=1_000u64).map(|ms| ms * 1_000));
        assert!(close(l.p50_ms, 500.0), "{l:?}");
        assert!(close(l.p90_ms, 900.0), "{l:?}");
        assert!(close(l.p99_ms, 990.0), "{l:?}");
        assert!(close(l.p999_ms, 999.0), "{l:?}");
        assert!(close(l.max_ms, 1_000.0), "{l:?}");
        assert!(close(l.mean_ms, 500.5), "{l:?}");
    }

    #[test]
    fn a_single_slow_request_shows_only_at_the_top() {
        let mut values = vec![2_000u64; 999];
        values.push(800_000);
        let l = latency_of(values);
        assert!(close(l.p50_ms, 2.0) && close(l.p99_ms, 2.0), "{l:?}");
        assert!(close(l.p999_ms, 800.0) || l.p999_ms <= 2.01, "{l:?}");
        assert!(close(l.max_ms, 800.0), "{l:?}");
        assert_eq!(latency_of(Vec::new()), Latency::default());
    }

    #[test]
    fn rates_are_counts_over_seconds() {
        assert!(close(per_sec(5_000, 2.0), 2_500.0));
        assert_eq!(per_sec(10, 0.0), 0.0);
    }

    #[test]
    fn outcomes_are_counted_per_call_and_add_up() {
        // 2 s of orders: 3 accepted, 5 sold out, 1 connection error; 2 polls.
        let mut events = vec![ev(Call::Order, 202, 100, 100)];
        events.push(ev(Call::Order, 202, 500, 10));
        events.push(ev(Call::Order, 202, 900, 10));
        for i in 0..5 {
            events.push(ev(Call::Order, 410, 1_000 + i * 200, 1));
        }
        events.push(ev(Call::Order, 0, 2_000, 5));
        events.push(ev(Call::Result, 200, 2_100, 3));
        events.push(ev(Call::Result, 200, 2_200, 3));
        let rows = call_stats(&events);
        let find = |call: &str, outcome: &str| {
            rows.iter()
                .find(|r| r.call == call && r.outcome == outcome)
                .unwrap_or_else(|| panic!("{call} {outcome} in {rows:?}"))
        };
        let all = find("order", "all");
        assert_eq!(all.count, 9);
        assert!(close(all.window_secs, 2.0), "{all:?}");
        assert!(close(all.per_sec, 4.5), "{all:?}");
        assert_eq!(find("order", "202").count, 3);
        assert_eq!(find("order", "410").count, 5);
        assert_eq!(find("order", "err").count, 1);
        let sum: u64 = rows.iter().filter(|r| r.call == "order" && r.outcome != "all").map(|r| r.count).sum();
        assert_eq!(sum, all.count);
        assert!(close(find("order", "202").latency.max_ms, 100.0));
        assert_eq!(find("result", "all").count, 2);
        assert!(rows.iter().all(|r| r.call != "path-token"));
    }

    #[test]
    fn the_timeline_buckets_requests_by_end_time() {
        let events = [ev(Call::Get, 200, 50, 1), ev(Call::Get, 200, 60, 3), ev(Call::Get, 200, 150, 2)];
        let marks = vec![("final".to_owned(), vec![120_000u32, 130_000])];
        let t = timeline(&events, &marks, 100);
        assert_eq!(t.series.len(), 2);
        let get = &t.series[0];
        assert_eq!(get.points.len(), 2);
        assert!(close(get.points[0].per_sec, 20.0));
        assert_eq!(get.points[0].p50_ms, Some(1.0));
        assert_eq!(get.points[0].p99_ms, Some(3.0));
        assert!(close(get.points[1].per_sec, 10.0));
        assert!(close(t.series[1].points[1].per_sec, 20.0));
        assert!(!t.series[1].has_latency);
    }

    #[test]
    fn nearest_rank_and_bucket_widths() {
        assert_eq!(nearest_rank(&[1, 2, 3, 4], 0.5), Some(2));
        assert_eq!(nearest_rank(&[1, 2, 3, 4], 0.99), Some(4));
        assert_eq!(nearest_rank(&[], 0.5), None);
        assert_eq!(bucket_ms_for(5_000_000), 100);
        assert_eq!(bucket_ms_for(60_000_000), 500);
        assert_eq!(bucket_ms_for(3_600_000_000), 30_000);
    }
}
