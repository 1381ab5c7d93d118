//! HDR histograms of latencies (recorded in ns) and their summaries (reported in µs).

use hdrhistogram::Histogram;
use serde::Serialize;

/// Highest value a latency histogram records: one hour, in ns. Larger values saturate.
pub const MAX_TRACKABLE_NS: u64 = 3_600_000_000_000;
/// Three significant digits: a recorded value is within 0.1% of the true one.
pub const SIGNIFICANT_DIGITS: u8 = 3;

pub fn new_latency_histogram() -> Histogram<u64> {
    // Bounds are constants that satisfy the crate's preconditions (low >= 1, high >= 2 * low,
    // digits <= 5), so construction cannot fail.
    Histogram::new_with_bounds(1, MAX_TRACKABLE_NS, SIGNIFICANT_DIGITS)
        .expect("constant histogram bounds are valid")
}

/// Records `value_ns`, clamping into the trackable range instead of failing.
pub fn record_ns(h: &mut Histogram<u64>, value_ns: u64) {
    h.saturating_record(value_ns.clamp(1, MAX_TRACKABLE_NS));
}

/// Percentiles of a latency histogram in µs; every field but `count` is null when it is
/// empty. Fields in alphabetical order, as the summary writes them (`load::summary`).
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Percentiles {
    pub count: u64,
    pub max: Option<f64>,
    pub mean: Option<f64>,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
    pub p999: Option<f64>,
}

pub fn percentiles_us(h: &Histogram<u64>) -> Percentiles {
    let count = h.len();
    if count == 0 {
        return Percentiles {
            count,
            mean: None,
            p50: None,
            p90: None,
            p99: None,
            p999: None,
            max: None,
        };
    }
    let us = |ns: u64| Some(ns as f64 / 1e3);
    Percentiles {
        count,
        mean: Some(h.mean() / 1e3),
        p50: us(h.value_at_quantile(0.50)),
        p90: us(h.value_at_quantile(0.90)),
        p99: us(h.value_at_quantile(0.99)),
        p999: us(h.value_at_quantile(0.999)),
        max: us(h.max()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_uniform_spread() {
        let mut h = new_latency_histogram();
        for ms in 1..=1000u64 {
            record_ns(&mut h, ms * 1_000_000);
        }
        let p = percentiles_us(&h);
        assert_eq!(p.count, 1000);
        let within = |got: Option<f64>, want_us: f64| {
            let g = got.unwrap_or(f64::NAN);
            (g - want_us).abs() <= want_us * 0.002
        };
        assert!(within(p.p50, 500_000.0), "{p:?}");
        assert!(within(p.p99, 990_000.0), "{p:?}");
        assert!(within(p.p999, 999_000.0), "{p:?}");
        assert!(within(p.max, 1_000_000.0), "{p:?}");
    }

    #[test]
    fn empty_histogram_reports_nulls_and_extremes_saturate() {
        let mut h = new_latency_histogram();
        assert_eq!(percentiles_us(&h).p50, None);
        record_ns(&mut h, 0);
        record_ns(&mut h, u64::MAX);
        assert_eq!(h.len(), 2);
        assert!(h.max() >= MAX_TRACKABLE_NS);
    }
}
