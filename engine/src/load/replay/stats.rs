//! What a run counts and what the counts become: per target and endpoint histograms and
//! counters, each interval's line (printed under `--control`, kept for the summary, written
//! to the HDR log), and the summary at the end (its types: `load::summary`).

use std::collections::BTreeMap;
use std::io::{self, Write as _};
use std::time::Duration;

use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::Histogram;

use super::{Engine, ReplayError};
use crate::format::request_log::ErrorKind;
use crate::load::histogram::{new_latency_histogram, percentiles_us};
use crate::load::pace::Arrival;
use crate::load::summary::{
    EndpointSummary, IntervalLine, IntervalTarget, PoissonKs, Scheduling, Summary, TargetSummary,
    Warmup, SUMMARY_VERSION,
};
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
        let mut per_target = BTreeMap::new();
        for (k, t) in self.targets.iter_mut().enumerate() {
            let s = &mut t.stats;
            let p = percentiles_us(&s.iv_hist);
            per_target.insert(
                self.plan.targets[k].name.clone(),
                IntervalTarget {
                    achieved_rate_per_s: if length_s > 0.0 {
                        s.iv_sent as f64 / length_s
                    } else {
                        0.0
                    },
                    errors: s.iv_errors,
                    max_us: p.max,
                    mean_us: p.mean,
                    p50_us: p.p50,
                    p999_us: p.p999,
                    p99_us: p.p99,
                    requests: s.iv_requests,
                    sent: s.iv_sent,
                },
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
        let line = IntervalLine {
            behind: self.iv_behind,
            dropped: self.iv_dropped,
            end_s: end_ns.saturating_sub(self.measure_start_ns) as f64 / 1e9,
            in_flight: self.targets.iter().map(|t| t.outstanding).sum(),
            late_sends: self.iv_late_sends,
            rate_per_s: self.rate_per_s,
            scheduled: self.iv_scheduled,
            start_s: (start_ns - self.measure_start_ns) as f64 / 1e9,
            targets: per_target,
            kind: "interval",
        };
        self.iv_scheduled = 0;
        self.iv_late_sends = 0;
        self.iv_behind = 0;
        self.iv_dropped = 0;
        if self.plan.control {
            let mut out = io::stdout().lock();
            // A closed stdout must not end the run; the summary still gets written.
            let _ = serde_json::to_writer(&mut out, &line)
                .map_err(io::Error::from)
                .and_then(|()| writeln!(out))
                .and_then(|()| out.flush());
        }
        self.intervals.push(line);
        self.interval_start_ns = end_ns;
        Ok(())
    }

    pub(super) fn summary(&mut self, stopped_by: &'static str) -> Result<Summary, ReplayError> {
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
        let mut targets = BTreeMap::new();
        let mut sent_per_target = Vec::new();
        let mut dropped = 0;
        for (k, t) in self.targets.iter().enumerate() {
            let s = &t.stats;
            let name = plan.targets[k].name.clone();
            dropped += s.dropped;
            sent_per_target.push((name.clone(), s.sent));
            let errors_by_kind = ErrorKind::ALL
                .iter()
                .skip(1)
                .map(|kind| (kind.name(), s.errors_by_kind[*kind as usize]))
                .filter(|(_, n)| *n > 0)
                .collect();
            let status = s
                .status
                .iter()
                .map(|(code, n)| (code.to_string(), *n))
                .collect();
            let endpoints = s
                .endpoints
                .iter()
                .enumerate()
                .filter(|(_, ep)| ep.requests > 0)
                .map(|(e, ep)| {
                    let summary = EndpointSummary {
                        errors: ep.errors,
                        latency_us: percentiles_us(&ep.hist),
                        requests: ep.requests,
                        uncorrected_latency_us: percentiles_us(&ep.uhist),
                    };
                    (plan.endpoints[e].clone(), summary)
                })
                .collect();
            targets.insert(
                name,
                TargetSummary {
                    achieved_rate_per_s: per_s(s.sent),
                    bytes: s.bytes,
                    dropped: s.dropped,
                    endpoints,
                    errors: s.errors,
                    errors_by_kind,
                    index: k,
                    latency_us: percentiles_us(&s.hist),
                    queued_sends: s.queued_sends,
                    requests: s.requests,
                    sent: s.sent,
                    status,
                    uncorrected_latency_us: percentiles_us(&s.uhist),
                    url: plan.targets[k].url.clone(),
                },
            );
        }
        let poisson = matches!(plan.arrival, Arrival::Poisson { .. });
        let mut gates = vec![
            validity::rate_gate(self.scheduled, &sent_per_target),
            validity::late_gate(self.behind, self.scheduled),
            validity::dropped_gate(dropped),
        ];
        if poisson {
            gates.push(validity::poisson_gate(&self.gaps));
        }
        let valid = gates.iter().all(|g| g.passed);
        let (ks_d, ks_p) = validity::ks_exponential(&self.gaps);
        Ok(Summary {
            arrival: plan.arrival_name,
            behind: self.behind,
            coalesce_us: plan.coalesce_ns / 1_000,
            connections: plan.connections,
            dispatch_skew_us: percentiles_us(&self.skew),
            dropped,
            duration_s: window_s,
            endpoints: plan.endpoints.clone(),
            error_kinds: ErrorKind::ALL.iter().map(|k| k.name()).collect(),
            final_rate_per_s: self.rate_per_s,
            gates,
            hairline_load_summary: SUMMARY_VERSION,
            interval_s: plan.interval_ns as f64 / 1e9,
            intervals: std::mem::take(&mut self.intervals),
            late_sends: self.late_sends,
            late_share: if !self.lateness.is_empty() {
                self.late_sends as f64 / self.lateness.len() as f64
            } else {
                0.0
            },
            max_in_flight: plan.max_in_flight,
            pace: plan.pace_name,
            pacing_error_us: percentiles_us(&self.lateness),
            poisson_ks: poisson.then_some(PoissonKs {
                d: ks_d,
                n: self.gaps.len(),
                p: ks_p,
            }),
            rate_changes: std::mem::take(&mut self.rate_changes),
            rate_per_s: plan.rate_per_s,
            requested_duration_s: plan.duration_ns.map(|d| d as f64 / 1e9),
            scheduled: self.scheduled,
            scheduled_rate_per_s: per_s(self.scheduled),
            scheduling: Scheduling {
                detail: self.priority.detail.clone(),
                policy: self.priority.policy,
                run_delay_ms: match (self.run_delay_start_ns, self.run_delay_end_ns) {
                    (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / 1e6),
                    _ => None,
                },
            },
            seed: plan.seed,
            spin_us: plan.spin_ns / 1_000,
            stopped_by,
            target_names: plan.targets.iter().map(|t| t.name.clone()).collect(),
            targets,
            timeout_ms: plan.timeout_ns / 1_000_000,
            valid,
            warmup: Warmup {
                duration_s: plan.warmup_ns as f64 / 1e9,
                rate_per_s: plan.warmup_rate_per_s,
                requests: self.warmup_sent,
            },
        })
    }
}
