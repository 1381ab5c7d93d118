//! The summary JSON of a load run: the engine's contract with Python
//! (`hairline.engine.results`), as types. docs/engine.md, "The summary JSON", says what each
//! field means.
//!
//! `hairline_load_summary` is the format's version, as `hairline_trace` is the trace's:
//! Python refuses a summary of another version and says to rebuild the engine. Raise
//! [`SUMMARY_VERSION`] (and Python's `SUMMARY_VERSION` with it) when a field is renamed or
//! removed or changes meaning; a new field needs none, Python ignores what it does not read.
//!
//! Every struct's fields are in alphabetical order, `Percentiles` and `Gate` included: serde
//! writes them in declaration order, and the summary was written with sorted keys (serde_json's
//! map) before it had types, so the order keeps its bytes the same. A test checks it.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::load::histogram::Percentiles;
use crate::load::validity::Gate;

/// The summary format's version, written as `hairline_load_summary`.
pub const SUMMARY_VERSION: u32 = 1;

/// One run's summary, printed (or written to `--summary`) when the run ends.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// `constant`, `poisson` or `recorded`.
    pub arrival: &'static str,
    /// Scheduled requests the pacer itself took off its schedule more than 1 ms late.
    pub behind: u64,
    /// `--coalesce-us`: how early a send may go out to share a wake-up.
    pub coalesce_us: u64,
    pub connections: usize,
    /// Lockstep skew between the targets' writes of one request.
    pub dispatch_skew_us: Percentiles,
    /// Requests dropped at `--max-in-flight`, all targets.
    pub dropped: u64,
    /// The measurement phase actually run.
    pub duration_s: f64,
    /// Endpoint labels in index order (the request records' `endpoint`).
    pub endpoints: Vec<String>,
    /// Error kind names by code.
    pub error_kinds: Vec<&'static str>,
    pub final_rate_per_s: f64,
    pub gates: Vec<Gate>,
    /// [`SUMMARY_VERSION`].
    pub hairline_load_summary: u32,
    pub interval_s: f64,
    pub intervals: Vec<IntervalLine>,
    /// Paced writes more than 1 ms behind schedule.
    pub late_sends: u64,
    /// `late_sends` over the paced writes.
    pub late_share: f64,
    pub max_in_flight: usize,
    /// `rate`, `recorded` or `ordered`.
    pub pace: &'static str,
    pub pacing_error_us: Percentiles,
    /// The KS test of the inter-send gaps (Poisson arrivals only; null otherwise).
    pub poisson_ks: Option<PoissonKs>,
    pub rate_changes: Vec<RateChange>,
    pub rate_per_s: f64,
    /// `--duration`, null when the run went on until stopped.
    pub requested_duration_s: Option<f64>,
    /// Requests due in the measurement phase (once, however many targets).
    pub scheduled: u64,
    pub scheduled_rate_per_s: f64,
    pub scheduling: Scheduling,
    pub seed: u64,
    pub spin_us: u64,
    /// `duration`, `signal` or `control`.
    pub stopped_by: &'static str,
    /// Target names in `--target` order (the request records' `target`).
    pub target_names: Vec<String>,
    pub targets: BTreeMap<String, TargetSummary>,
    pub timeout_ms: u64,
    /// Every gate passed.
    pub valid: bool,
    pub warmup: Warmup,
}

/// One target's measurement phase.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TargetSummary {
    /// `sent / duration_s`.
    pub achieved_rate_per_s: f64,
    pub bytes: u64,
    pub dropped: u64,
    /// Per endpoint label that got requests.
    pub endpoints: BTreeMap<String, EndpointSummary>,
    pub errors: u64,
    /// Per error kind that happened.
    pub errors_by_kind: BTreeMap<&'static str, u64>,
    /// Its place in `--target` order.
    pub index: usize,
    /// From the intended send time (corrected for coordinated omission); successes only.
    pub latency_us: Percentiles,
    pub queued_sends: u64,
    /// Measured requests finished, errors included, drops excluded.
    pub requests: u64,
    /// Written during the measurement phase.
    pub sent: u64,
    /// Responses per HTTP status code (`"200"`, ...).
    pub status: BTreeMap<String, u64>,
    /// From the actual write.
    pub uncorrected_latency_us: Percentiles,
    pub url: String,
}

/// One endpoint label's requests to one target.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EndpointSummary {
    pub errors: u64,
    pub latency_us: Percentiles,
    pub requests: u64,
    pub uncorrected_latency_us: Percentiles,
}

/// One `--interval-ms` slice of the measurement: a line of stdout under `--control`, and an
/// element of the summary's `intervals`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IntervalLine {
    pub behind: u64,
    pub dropped: u64,
    pub end_s: f64,
    /// Requests outstanding over all targets when the interval closed.
    pub in_flight: usize,
    pub late_sends: u64,
    pub rate_per_s: f64,
    pub scheduled: u64,
    pub start_s: f64,
    pub targets: BTreeMap<String, IntervalTarget>,
    /// Always `interval`: what a line of the `--control` stream is.
    #[serde(rename = "type")]
    pub kind: &'static str,
}

/// One target's responses in an interval; latencies null when there were none.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IntervalTarget {
    pub achieved_rate_per_s: f64,
    pub errors: u64,
    pub max_us: Option<f64>,
    pub mean_us: Option<f64>,
    pub p50_us: Option<f64>,
    pub p999_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub requests: u64,
    pub sent: u64,
}

/// The Kolmogorov-Smirnov test of the inter-send gaps against the exponential.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PoissonKs {
    pub d: f64,
    pub n: usize,
    pub p: f64,
}

/// A `--control` rate change, from the start of the measurement.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RateChange {
    pub at_s: f64,
    pub rate_per_s: f64,
}

/// The event loop's scheduling policy (`--priority`) and its wait for a CPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scheduling {
    pub detail: String,
    pub policy: &'static str,
    /// How long the loop was runnable but had no CPU during the measurement: lateness from
    /// sharing a CPU, not from the loop's own work (null where schedstat is unreadable).
    pub run_delay_ms: Option<f64>,
}

/// The warm-up phase.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Warmup {
    pub duration_s: f64,
    pub rate_per_s: f64,
    /// Requests sent during it, to each target.
    pub requests: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn latency(count: u64) -> Percentiles {
        let some = |us: f64| (count > 0).then_some(us);
        Percentiles {
            count,
            max: some(900.0),
            mean: some(150.5),
            p50: some(120.0),
            p90: some(300.0),
            p99: some(800.0),
            p999: some(900.0),
        }
    }

    /// A summary of two targets, one endpoint, a Poisson run changed once under control.
    fn summary() -> Summary {
        let target = |index: usize| TargetSummary {
            achieved_rate_per_s: 100.0,
            bytes: 4_000,
            dropped: 0,
            endpoints: BTreeMap::from([(
                "/api/feed".to_owned(),
                EndpointSummary {
                    errors: 1,
                    latency_us: latency(99),
                    requests: 100,
                    uncorrected_latency_us: latency(99),
                },
            )]),
            errors: 1,
            errors_by_kind: BTreeMap::from([("timeout", 1)]),
            index,
            latency_us: latency(99),
            queued_sends: 0,
            requests: 100,
            sent: 100,
            status: BTreeMap::from([("200".to_owned(), 99)]),
            uncorrected_latency_us: latency(99),
            url: format!("http://127.0.0.1:{}", 8080 + index),
        };
        let interval_target = IntervalTarget {
            achieved_rate_per_s: 100.0,
            errors: 0,
            max_us: None,
            mean_us: None,
            p50_us: None,
            p999_us: None,
            p99_us: None,
            requests: 0,
            sent: 100,
        };
        Summary {
            arrival: "poisson",
            behind: 0,
            coalesce_us: 0,
            connections: 32,
            dispatch_skew_us: latency(100),
            dropped: 0,
            duration_s: 1.0,
            endpoints: vec!["/api/feed".into()],
            error_kinds: vec!["none", "timeout"],
            final_rate_per_s: 150.0,
            gates: vec![Gate {
                detail: "every target got its scheduled rate".into(),
                limit: 0.01,
                name: "rate",
                passed: true,
                value: 0.0,
            }],
            hairline_load_summary: SUMMARY_VERSION,
            interval_s: 1.0,
            intervals: vec![IntervalLine {
                behind: 0,
                dropped: 0,
                end_s: 1.0,
                in_flight: 2,
                late_sends: 0,
                rate_per_s: 150.0,
                scheduled: 100,
                start_s: 0.0,
                targets: BTreeMap::from([
                    ("a".to_owned(), interval_target.clone()),
                    ("b".to_owned(), interval_target),
                ]),
                kind: "interval",
            }],
            late_sends: 0,
            late_share: 0.0,
            max_in_flight: 10_000,
            pace: "rate",
            pacing_error_us: latency(0),
            poisson_ks: Some(PoissonKs {
                d: 0.05,
                n: 99,
                p: 0.9,
            }),
            rate_changes: vec![RateChange {
                at_s: 0.5,
                rate_per_s: 150.0,
            }],
            rate_per_s: 100.0,
            requested_duration_s: Some(1.0),
            scheduled: 100,
            scheduled_rate_per_s: 100.0,
            scheduling: Scheduling {
                detail: "the default".into(),
                policy: "normal",
                run_delay_ms: None,
            },
            seed: 1,
            spin_us: 150,
            stopped_by: "duration",
            target_names: vec!["a".into(), "b".into()],
            targets: BTreeMap::from([("a".to_owned(), target(0)), ("b".to_owned(), target(1))]),
            timeout_ms: 2_000,
            valid: true,
            warmup: Warmup {
                duration_s: 0.5,
                rate_per_s: 100.0,
                requests: 50,
            },
        }
    }

    fn keys(value: &Value) -> Vec<&str> {
        value
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default()
    }

    /// The fields Python reads (hairline/engine/results.py and the reports' `raw`) and
    /// docs/engine.md lists: renaming or dropping one breaks the contract.
    #[test]
    fn a_summary_has_every_field_of_the_contract() {
        let value = serde_json::to_value(summary()).expect("a summary serialises");
        assert_eq!(
            keys(&value),
            [
                "arrival",
                "behind",
                "coalesce_us",
                "connections",
                "dispatch_skew_us",
                "dropped",
                "duration_s",
                "endpoints",
                "error_kinds",
                "final_rate_per_s",
                "gates",
                "hairline_load_summary",
                "interval_s",
                "intervals",
                "late_sends",
                "late_share",
                "max_in_flight",
                "pace",
                "pacing_error_us",
                "poisson_ks",
                "rate_changes",
                "rate_per_s",
                "requested_duration_s",
                "scheduled",
                "scheduled_rate_per_s",
                "scheduling",
                "seed",
                "spin_us",
                "stopped_by",
                "target_names",
                "targets",
                "timeout_ms",
                "valid",
                "warmup",
            ]
        );
        assert_eq!(value["hairline_load_summary"], 1);
        assert_eq!(
            keys(&value["targets"]["a"]),
            [
                "achieved_rate_per_s",
                "bytes",
                "dropped",
                "endpoints",
                "errors",
                "errors_by_kind",
                "index",
                "latency_us",
                "queued_sends",
                "requests",
                "sent",
                "status",
                "uncorrected_latency_us",
                "url",
            ]
        );
        assert_eq!(
            keys(&value["targets"]["a"]["endpoints"]["/api/feed"]),
            ["errors", "latency_us", "requests", "uncorrected_latency_us"]
        );
        assert_eq!(
            keys(&value["targets"]["a"]["latency_us"]),
            ["count", "max", "mean", "p50", "p90", "p99", "p999"]
        );
        assert_eq!(value["targets"]["b"]["status"]["200"], 99);
        assert_eq!(value["targets"]["b"]["errors_by_kind"]["timeout"], 1);
        assert_eq!(
            keys(&value["intervals"][0]),
            [
                "behind",
                "dropped",
                "end_s",
                "in_flight",
                "late_sends",
                "rate_per_s",
                "scheduled",
                "start_s",
                "targets",
                "type",
            ]
        );
        assert_eq!(value["intervals"][0]["type"], "interval");
        assert_eq!(
            keys(&value["intervals"][0]["targets"]["a"]),
            [
                "achieved_rate_per_s",
                "errors",
                "max_us",
                "mean_us",
                "p50_us",
                "p999_us",
                "p99_us",
                "requests",
                "sent",
            ]
        );
        assert_eq!(
            keys(&value["gates"][0]),
            ["detail", "limit", "name", "passed", "value"]
        );
        assert_eq!(keys(&value["poisson_ks"]), ["d", "n", "p"]);
        assert_eq!(keys(&value["rate_changes"][0]), ["at_s", "rate_per_s"]);
        assert_eq!(
            keys(&value["scheduling"]),
            ["detail", "policy", "run_delay_ms"]
        );
        assert_eq!(
            keys(&value["warmup"]),
            ["duration_s", "rate_per_s", "requests"]
        );
        // Nothing recorded: null percentiles, as Python reads them (NaN).
        assert_eq!(value["pacing_error_us"]["p99"], Value::Null);
        assert_eq!(value["scheduling"]["run_delay_ms"], Value::Null);
    }

    /// The bytes are those of the summary built as a JSON map before it had types: every
    /// object's keys in sorted order, at every depth.
    #[test]
    fn a_summary_is_written_with_sorted_keys_as_before() {
        let summary = summary();
        let typed = serde_json::to_string_pretty(&summary).expect("serialises");
        let as_map: Value = serde_json::from_str(&typed).expect("parses back");
        assert_eq!(
            typed,
            serde_json::to_string_pretty(&as_map).expect("serialises")
        );
        let line = serde_json::to_string(&summary.intervals[0]).expect("serialises");
        let as_map: Value = serde_json::from_str(&line).expect("parses back");
        assert_eq!(line, as_map.to_string());
    }
}
