//! What a run counts and what the counts become: per target and endpoint histograms and
//! counters, each interval's line (printed under `--control`, kept for the summary, written
//! to the HDR log), and the summary at the end.

use std::collections::BTreeMap;
use std::io::{self, Write as _};
use std::time::Duration;

use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::Histogram;
use serde_json::{json, Map, Value};

use super::{Engine, ReplayError};
use crate::format::request_log::ErrorKind;
use crate::load::histogram::{new_latency_histogram, percentiles_us};
use crate::load::pace::Arrival;
use crate::load::validity;

pub(super) struct EndpointStats {
    pub(super) requests: u64,
    pub(super) errors: u64,
    pub(super) hist: Histogram<u64>,
    pub(super) uhist: Histogram<u64>,
}

pub(super) struct TargetStats {
    pub(super) requests: u64,
    pub(super) errors: u64,
    pub(super) sent: u64,
    pub(super) dropped: u64,
    pub(super) queued_sends: u64,
    pub(super) bytes: u64,
    pub(super) status: BTreeMap<u16, u64>,
    pub(super) errors_by_kind: [u64; ErrorKind::ALL.len()],
    pub(super) hist: Histogram<u64>,
    pub(super) uhist: Histogram<u64>,
    pub(super) endpoints: Vec<EndpointStats>,
    pub(super) iv_hist: Histogram<u64>,
    pub(super) iv_requests: u64,
    pub(super) iv_errors: u64,
    pub(super) iv_sent: u64,
}

pub(super) fn new_stats(endpoints: usize) -> TargetStats {
    TargetStats {
        requests: 0,
        errors: 0,
        sent: 0,
        dropped: 0,
        queued_sends: 0,
        bytes: 0,
        status: BTreeMap::new(),
        errors_by_kind: [0; ErrorKind::ALL.len()],
        hist: new_latency_histogram(),
        uhist: new_latency_histogram(),
        endpoints: (0..endpoints)
            .map(|_| EndpointStats {
                requests: 0,
                errors: 0,
                hist: new_latency_histogram(),
                uhist: new_latency_histogram(),
            })
            .collect(),
        iv_hist: new_latency_histogram(),
        iv_requests: 0,
        iv_errors: 0,
        iv_sent: 0,
    }
}

impl Engine<'_> {
    pub(super) fn close_interval(&mut self, end_ns: u64) -> Result<(), ReplayError> {
        let start_ns = self.interval_start_ns;
        let length_s = end_ns.saturating_sub(start_ns) as f64 / 1e9;
        let mut per_target = Map::new();
        for (k, t) in self.targets.iter_mut().enumerate() {
            let s = &mut t.stats;
            let p = percentiles_us(&s.iv_hist);
            per_target.insert(
                self.plan.targets[k].name.clone(),
                json!({
                    "requests": s.iv_requests,
                    "errors": s.iv_errors,
                    "sent": s.iv_sent,
                    "achieved_rate_per_s": if length_s > 0.0 { s.iv_sent as f64 / length_s } else { 0.0 },
                    "mean_us": p.mean,
                    "p50_us": p.p50,
                    "p99_us": p.p99,
                    "p999_us": p.p999,
                    "max_us": p.max,
                }),
            );
            if let Some(w) = self.sinks.hdr_log.as_mut() {
                let name = &self.plan.targets[k].name;
                let mut writer = IntervalLogWriterBuilder::new()
                    .begin_log_with(w, &mut self.hdr_serializer)
                    .map_err(|source| ReplayError::Output {
                        what: "--hdr-log",
                        source,
                    })?;
                writer
                    .write_histogram(
                        &s.iv_hist,
                        Duration::from_nanos(start_ns - self.measure_start_ns),
                        Duration::from_nanos(end_ns.saturating_sub(start_ns)),
                        Tag::new(name),
                    )
                    .map_err(|e| ReplayError::Output {
                        what: "--hdr-log",
                        source: io::Error::other(e.to_string()),
                    })?;
            }
            s.iv_hist.reset();
            s.iv_requests = 0;
            s.iv_errors = 0;
            s.iv_sent = 0;
        }
        let line = json!({
            "type": "interval",
            "start_s": (start_ns - self.measure_start_ns) as f64 / 1e9,
            "end_s": end_ns.saturating_sub(self.measure_start_ns) as f64 / 1e9,
            "rate_per_s": self.rate_per_s,
            "scheduled": self.iv_scheduled,
            "late_sends": self.iv_late_sends,
            "behind": self.iv_behind,
            "dropped": self.iv_dropped,
            "in_flight": self.targets.iter().map(|t| t.outstanding).sum::<usize>(),
            "targets": per_target,
        });
        self.iv_scheduled = 0;
        self.iv_late_sends = 0;
        self.iv_behind = 0;
        self.iv_dropped = 0;
        if self.plan.control {
            let mut out = io::stdout().lock();
            // A closed stdout must not end the run; the summary still gets written.
            let _ = writeln!(out, "{line}").and_then(|()| out.flush());
        }
        self.intervals.push(line);
        self.interval_start_ns = end_ns;
        Ok(())
    }

    pub(super) fn summary(&mut self, stopped_by: &str) -> Result<Value, ReplayError> {
        let plan = self.plan;
        if let Some(w) = self.sinks.requests.as_mut() {
            w.flush().map_err(|source| ReplayError::Output {
                what: "--requests",
                source,
            })?;
        }
        if let Some(w) = self.sinks.hdr_log.as_mut() {
            w.flush().map_err(|source| ReplayError::Output {
                what: "--hdr-log",
                source,
            })?;
        }
        let window_ns = self.window_end_ns.saturating_sub(self.measure_start_ns);
        let window_s = window_ns as f64 / 1e9;
        let per_s = |n: u64| {
            if window_s > 0.0 {
                n as f64 / window_s
            } else {
                0.0
            }
        };
        let mut targets = Map::new();
        let mut sent_per_target = Vec::new();
        let mut dropped = 0;
        for (k, t) in self.targets.iter().enumerate() {
            let s = &t.stats;
            let name = plan.targets[k].name.clone();
            dropped += s.dropped;
            sent_per_target.push((name.clone(), s.sent));
            let mut errors_by_kind = Map::new();
            for kind in ErrorKind::ALL.iter().skip(1) {
                let n = s.errors_by_kind[*kind as usize];
                if n > 0 {
                    errors_by_kind.insert(kind.name().to_owned(), json!(n));
                }
            }
            let status: Map<String, Value> = s
                .status
                .iter()
                .map(|(code, n)| (code.to_string(), json!(n)))
                .collect();
            let mut endpoints = Map::new();
            for (e, ep) in s.endpoints.iter().enumerate() {
                if ep.requests == 0 {
                    continue;
                }
                endpoints.insert(
                    plan.endpoints[e].clone(),
                    json!({
                        "requests": ep.requests,
                        "errors": ep.errors,
                        "latency_us": percentiles_us(&ep.hist),
                        "uncorrected_latency_us": percentiles_us(&ep.uhist),
                    }),
                );
            }
            targets.insert(
                name,
                json!({
                    "index": k,
                    "url": plan.targets[k].url,
                    "requests": s.requests,
                    "errors": s.errors,
                    "sent": s.sent,
                    "dropped": s.dropped,
                    "queued_sends": s.queued_sends,
                    "bytes": s.bytes,
                    "achieved_rate_per_s": per_s(s.sent),
                    "latency_us": percentiles_us(&s.hist),
                    "uncorrected_latency_us": percentiles_us(&s.uhist),
                    "status": status,
                    "errors_by_kind": errors_by_kind,
                    "endpoints": endpoints,
                }),
            );
        }
        let mut gates = vec![
            validity::rate_gate(self.scheduled, &sent_per_target),
            validity::late_gate(self.behind, self.scheduled),
            validity::dropped_gate(dropped),
        ];
        if matches!(plan.arrival, Arrival::Poisson { .. }) {
            gates.push(validity::poisson_gate(&self.gaps));
        }
        let valid = gates.iter().all(|g| g.passed);
        let (ks_d, ks_p) = validity::ks_exponential(&self.gaps);
        Ok(json!({
            "hairline_load_summary": 1,
            "target_names": plan.targets.iter().map(|t| t.name.clone()).collect::<Vec<_>>(),
            "endpoints": plan.endpoints,
            "error_kinds": ErrorKind::ALL.iter().map(|k| k.name()).collect::<Vec<_>>(),
            "targets": targets,
            "arrival": plan.arrival_name,
            "pace": plan.pace_name,
            "seed": plan.seed,
            "rate_per_s": plan.rate_per_s,
            "final_rate_per_s": self.rate_per_s,
            "rate_changes": self.rate_changes,
            "duration_s": window_s,
            "requested_duration_s": plan.duration_ns.map(|d| d as f64 / 1e9),
            "scheduled": self.scheduled,
            "scheduled_rate_per_s": per_s(self.scheduled),
            "late_sends": self.late_sends,
            "behind": self.behind,
            "late_share": if !self.lateness.is_empty() { self.late_sends as f64 / self.lateness.len() as f64 } else { 0.0 },
            "pacing_error_us": percentiles_us(&self.lateness),
            "dispatch_skew_us": percentiles_us(&self.skew),
            "dropped": dropped,
            "poisson_ks": if matches!(plan.arrival, Arrival::Poisson { .. }) {
                json!({"d": ks_d, "p": ks_p, "n": self.gaps.len()})
            } else { Value::Null },
            "valid": valid,
            "gates": gates,
            "stopped_by": stopped_by,
            "warmup": {"requests": self.warmup_sent, "rate_per_s": plan.warmup_rate_per_s, "duration_s": plan.warmup_ns as f64 / 1e9},
            "interval_s": plan.interval_ns as f64 / 1e9,
            "intervals": self.intervals,
            "connections": plan.connections,
            "max_in_flight": plan.max_in_flight,
            "timeout_ms": plan.timeout_ns / 1_000_000,
            "spin_us": plan.spin_ns / 1_000,
            "scheduling": {
                "policy": self.priority.policy,
                "detail": self.priority.detail,
                // How long the loop was runnable but had no CPU during the measurement:
                // lateness from sharing a CPU, not from the loop's own work.
                "run_delay_ms": match (self.run_delay_start_ns, self.run_delay_end_ns) {
                    (Some(a), Some(b)) => json!(b.saturating_sub(a) as f64 / 1e6),
                    _ => Value::Null,
                },
            },
        }))
    }
}
