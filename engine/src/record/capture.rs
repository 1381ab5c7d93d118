//! What recording takes of one proxied request: the decision (record, mirror, both or
//! neither) at its arrival, copies of its head and body as they pass, and the hand-over to
//! the writer's and the mirror's queues once it is complete, each a `try_send` that never
//! waits; a copy that cannot be handed over is counted as dropped.

use std::sync::atomic::Ordering;

use crate::record::line::Sample;
use crate::record::sample::Decision;
use crate::record::shared::{MirrorJob, Shared};

/// Copies of one request for the writer and the mirror.
pub(super) struct Capture {
    record: Option<Decision>,
    label: Option<String>,
    mirror: bool,
    head: Vec<u8>,
    /// De-chunked body, while recording.
    body: Vec<u8>,
    /// Body bytes as received, while mirroring.
    raw_body: Vec<u8>,
    /// The body passed `--max-body-bytes`: neither recorded nor mirrored.
    too_big: bool,
}

impl Capture {
    /// Decides what is copied of a request that arrived at `ts_us`: recorded (by the
    /// sampler, counted when kept), mirrored, both or neither. `head` is its head as sent.
    pub(super) fn new(shared: &Shared, path: Option<&str>, head: &[u8], ts_us: u64) -> Capture {
        let label = match path {
            Some(p) if shared.needs_label => Some(shared.format.labeler.label(p)),
            _ => None,
        };
        // A target with no path cannot be replayed, so it is never chosen.
        let decision = match path {
            Some(_) if shared.record_all => Decision::Keep,
            Some(_) => shared
                .sampler
                .lock()
                .map(|mut s| s.decide(ts_us, label.as_deref().unwrap_or("")))
                .unwrap_or(Decision::Skip),
            None => Decision::Skip,
        };
        if decision == Decision::Keep {
            shared.counters.sampled.fetch_add(1, Ordering::Relaxed);
        }
        let record = (decision != Decision::Skip).then_some(decision);
        let mirror = shared.mirror.is_some() && (shared.mirror_all || record.is_some());
        Capture {
            record,
            label,
            mirror,
            head: if record.is_some() || mirror {
                head.to_vec()
            } else {
                Vec::new()
            },
            body: Vec::new(),
            raw_body: Vec::new(),
            too_big: false,
        }
    }

    pub(super) fn wanted(&self) -> bool {
        (self.record.is_some() || self.mirror) && !self.too_big
    }

    pub(super) fn add(&mut self, raw: &[u8], decoded: &[u8], limit: usize) {
        if !self.wanted() {
            return;
        }
        let held = self.body.len().max(self.raw_body.len());
        if held + raw.len().max(decoded.len()) > limit {
            self.too_big = true;
            self.body = Vec::new();
            self.raw_body = Vec::new();
            return;
        }
        if self.record.is_some() {
            self.body.extend_from_slice(decoded);
        }
        if self.mirror {
            self.raw_body.extend_from_slice(raw);
        }
    }

    /// Hands the copies to the writer and the mirror once the request body is complete.
    pub(super) fn hand_over(&mut self, shared: &Shared, ts_us: u64, head_request: bool) {
        let capture = self;
        let counters = &shared.counters;
        if capture.too_big {
            if capture.record.is_some() {
                if !matches!(capture.record, Some(Decision::Keep)) {
                    counters.sampled.fetch_add(1, Ordering::Relaxed);
                }
                counters.dropped.fetch_add(1, Ordering::Relaxed);
            }
            if capture.mirror {
                counters.mirror_dropped.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        if capture.mirror {
            if let Some(tx) = &shared.mirror {
                let mut bytes = Vec::with_capacity(capture.head.len() + capture.raw_body.len());
                bytes.extend_from_slice(&capture.head);
                bytes.extend_from_slice(&capture.raw_body);
                if tx
                    .try_send(MirrorJob {
                        bytes,
                        head_request,
                    })
                    .is_err()
                {
                    counters.mirror_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if let Some(decision) = capture.record {
            let slot = match decision {
                Decision::Slot(s) => Some(s),
                _ => None,
            };
            let sample = Sample {
                ts_us,
                head: std::mem::take(&mut capture.head),
                body: std::mem::take(&mut capture.body),
                label: capture.label.take(),
                slot,
            };
            if !shared.offer_sample(sample) {
                // A reservoir candidate lost here never reaches the writer, which counts
                // the others as sampled when their interval closes.
                if slot.is_some() {
                    counters.sampled.fetch_add(1, Ordering::Relaxed);
                }
                counters.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Accounts for copies that will never be handed over (the request did not complete).
    pub(super) fn lose(&mut self, shared: &Shared) {
        self.too_big = true;
        self.hand_over(shared, 0, false);
    }
}
