//! The writer thread: samples become trace lines (docs/trace-format.md), written whole.
//!
//! It is the only thread that touches the output file, and the proxy threads reach it only
//! through a bounded queue they never wait on, so a slow disk shows up as dropped samples,
//! never as latency. Lines are written in batches that always end at a line end: whatever
//! stops the process between two writes, the file holds whole lines.

use std::collections::HashSet;
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError};

use crate::format::trace::MAX_ENDPOINTS;
use crate::record::line::{LineFormat, Sample};
use crate::record::sample::{Offer, Reservoirs};
use crate::record::shared::Shared;

/// How long after an interval ends its reservoir stays open for samples still on their way
/// from the proxy threads.
const CLOSE_GRACE_US: u64 = 100_000;
/// Longest the writer waits for a sample before looking at the clock and the stop flag.
const IDLE_WAIT: Duration = Duration::from_millis(50);
/// A batch is written once it holds this many bytes (or the queue is empty).
const BATCH_BYTES: usize = 256 * 1024;

/// The endpoint labels of the lines written so far, which may not outgrow what the engine
/// replays ([`MAX_ENDPOINTS`]): a trace from the recorder must never stop a run.
#[derive(Debug)]
pub struct LabelBudget {
    seen: HashSet<String>,
    max: usize,
}

impl LabelBudget {
    pub fn new(max: usize) -> LabelBudget {
        LabelBudget {
            seen: HashSet::new(),
            max,
        }
    }

    /// Whether a line with this label may be written: its label is in the trace already,
    /// or there is room for one more.
    pub fn admit(&mut self, label: &str) -> bool {
        if self.seen.contains(label) {
            return true;
        }
        if self.seen.len() >= self.max {
            return false;
        }
        self.seen.insert(label.to_owned());
        true
    }
}

impl Default for LabelBudget {
    fn default() -> Self {
        LabelBudget::new(MAX_ENDPOINTS)
    }
}

/// What the writer thread owns.
pub struct Writer {
    pub shared: Arc<Shared>,
    pub rx: Receiver<Sample>,
    pub out: File,
    pub format: LineFormat,
    /// `(K, T in µs)` in reservoir mode.
    pub reservoir: Option<(u32, u64)>,
    pub per_endpoint: bool,
    /// Bytes of the file known to end at a line end (the header included).
    pub whole_bytes: u64,
    pub labels: LabelBudget,
    /// Whether stderr was told that the label budget is spent.
    pub labels_full_told: bool,
}

struct Batch {
    bytes: Vec<u8>,
    lines: u64,
}

impl Writer {
    pub fn run(mut self) {
        let mut reservoirs: Option<Reservoirs<Sample>> =
            self.reservoir.map(|(k, t)| Reservoirs::new(k, t));
        let mut batch = Batch {
            bytes: Vec::with_capacity(BATCH_BYTES),
            lines: 0,
        };
        let mut write_failed = false;
        loop {
            let draining = self.shared.draining.load(Ordering::Acquire);
            match self.rx.recv_timeout(IDLE_WAIT) {
                Ok(sample) => self.take(sample, reservoirs.as_mut(), &mut batch),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {}
            }
            while batch.bytes.len() < BATCH_BYTES {
                match self.rx.try_recv() {
                    Ok(sample) => self.take(sample, reservoirs.as_mut(), &mut batch),
                    Err(_) => break,
                }
            }
            if let Some(res) = reservoirs.as_mut() {
                let now_us = self.shared.clock.now_us();
                let interval_us = res.interval_us();
                if let Some(oldest) = res.oldest_open() {
                    let due = now_us.saturating_sub(CLOSE_GRACE_US) / interval_us;
                    // Interval `i` closes once `(i + 1) * T + grace` has passed.
                    if due > oldest {
                        let closed = res.close_through(due - 1);
                        self.add_closed(closed, &mut batch);
                    }
                }
            }
            let finished = draining && self.rx.is_empty();
            if finished {
                if let Some(res) = reservoirs.as_mut() {
                    let closed = res.close_all();
                    self.add_closed(closed, &mut batch);
                }
            }
            if !batch.bytes.is_empty() {
                self.write(&mut batch, &mut write_failed);
            }
            if finished {
                // Durable, not only visible; an error here (a pipe) changes nothing.
                let _ = self.out.sync_data();
                break;
            }
        }
        self.shared.writer_done.store(true, Ordering::Release);
    }

    fn take(
        &mut self,
        sample: Sample,
        reservoirs: Option<&mut Reservoirs<Sample>>,
        batch: &mut Batch,
    ) {
        let counters = &self.shared.counters;
        self.shared
            .queued_bytes
            .fetch_sub(sample.size(), Ordering::Relaxed);
        match (sample.slot, reservoirs) {
            (Some(slot), Some(res)) => {
                let key = if self.per_endpoint {
                    sample.label.clone().unwrap_or_default()
                } else {
                    String::new()
                };
                if let Offer::Late(_) = res.offer(slot, &key, sample) {
                    counters.sampled.fetch_add(1, Ordering::Relaxed);
                    counters.dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            _ => self.append(&sample, batch),
        }
    }

    fn add_closed(&mut self, mut closed: Vec<Sample>, batch: &mut Batch) {
        self.shared
            .counters
            .sampled
            .fetch_add(closed.len() as u64, Ordering::Relaxed);
        closed.sort_by_key(|s| s.ts_us);
        for sample in &closed {
            self.append(sample, batch);
        }
    }

    fn append(&mut self, sample: &Sample, batch: &mut Batch) {
        match self.format.entry(sample) {
            Some((line, label)) if self.labels.admit(&label) => {
                batch.bytes.extend_from_slice(line.as_bytes());
                batch.lines += 1;
            }
            Some(_) => {
                self.shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
                if !self.labels_full_told {
                    eprintln!(
                        "hairline-engine record: the trace has {MAX_ENDPOINTS} endpoint labels, \
                         as many as the engine replays; requests with a new label are dropped \
                         (label fewer: --normalize-ids, --label REGEX=NAME)"
                    );
                    self.labels_full_told = true;
                }
            }
            None => {
                self.shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn write(&mut self, batch: &mut Batch, write_failed: &mut bool) {
        let counters = &self.shared.counters;
        match self.out.write_all(&batch.bytes) {
            Ok(()) => {
                counters.written.fetch_add(batch.lines, Ordering::Relaxed);
                self.whole_bytes += batch.bytes.len() as u64;
            }
            Err(e) => {
                counters.dropped.fetch_add(batch.lines, Ordering::Relaxed);
                // Part of the batch may have been written (a disk that filled up): cut the
                // file back to its last whole line. A pipe cannot be cut; nothing to do.
                if self.out.set_len(self.whole_bytes).is_ok() {
                    let _ = self.out.seek(SeekFrom::Start(self.whole_bytes));
                }
                if !*write_failed {
                    eprintln!("hairline-engine record: cannot write the trace ({e}); dropping samples until writes succeed");
                    *write_failed = true;
                }
            }
        }
        batch.bytes.clear();
        batch.lines = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_label_budget_admits_known_labels_once_it_is_spent() {
        let mut budget = LabelBudget::new(2);
        assert!(budget.admit("/a") && budget.admit("/b") && budget.admit("/a"));
        assert!(!budget.admit("/c"));
        assert!(budget.admit("/b"));
        assert_eq!(LabelBudget::default().max, MAX_ENDPOINTS);
    }
}
