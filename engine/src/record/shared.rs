//! What every thread of a recording shares: its counters, its clock, the sampler, the
//! queues to the writer and the mirror, and the flags a stop goes through.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Sender, TrySendError};

use crate::record::line::{LineFormat, Sample};
use crate::record::sample::Sampler;

/// Bytes of samples that may wait for the writer, whatever their count.
const MAX_QUEUED_BYTES: usize = 64 * 1024 * 1024;

/// The recorder's counters; all monotonic.
#[derive(Debug, Default)]
pub struct Counters {
    pub proxied: AtomicU64,
    pub sampled: AtomicU64,
    pub written: AtomicU64,
    pub dropped: AtomicU64,
    pub mirrored: AtomicU64,
    pub mirror_dropped: AtomicU64,
    pub upstream_errors: AtomicU64,
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct CounterSnapshot {
    /// Client requests handled (forwarded, or answered 502/504), stats requests excluded.
    pub proxied: u64,
    /// Requests chosen for the trace (for a reservoir: those kept when their interval closed).
    pub sampled: u64,
    /// Trace lines written.
    pub written: u64,
    /// Chosen requests not written: queue full, body over --max-body-bytes, not
    /// representable in the trace format, a failed write, or still queued at exit.
    pub dropped: u64,
    pub mirrored: u64,
    pub mirror_dropped: u64,
    /// Requests the upstream failed (refused, closed, timed out).
    pub upstream_errors: u64,
}

impl Counters {
    pub fn snapshot(&self) -> CounterSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CounterSnapshot {
            proxied: get(&self.proxied),
            sampled: get(&self.sampled),
            written: get(&self.written),
            dropped: get(&self.dropped),
            mirrored: get(&self.mirrored),
            mirror_dropped: get(&self.mirror_dropped),
            upstream_errors: get(&self.upstream_errors),
        }
    }
}

impl CounterSnapshot {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Arrival times: Unix µs at start plus monotonic time since, so that `ts_us` never goes
/// backwards within a recording (a wall-clock step would otherwise break the intervals).
#[derive(Debug)]
pub struct Clock {
    wall0_us: u64,
    mono0: Instant,
}

impl Clock {
    pub fn new() -> Clock {
        let wall0_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        Clock {
            wall0_us,
            mono0: Instant::now(),
        }
    }

    pub fn now_us(&self) -> u64 {
        self.wall0_us + self.mono0.elapsed().as_micros() as u64
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

/// One request to send to the mirror: the bytes the client sent, unchanged.
#[derive(Debug)]
pub struct MirrorJob {
    pub bytes: Vec<u8>,
    pub head_request: bool,
}

/// What every thread of a recording shares.
pub(crate) struct Shared {
    pub(super) counters: Counters,
    pub(super) stop: Arc<AtomicBool>,
    /// Set when the stop begins: requests still in flight after it are abandoned.
    pub(super) abandon_at: OnceLock<Instant>,
    /// Set once the proxy threads are done: the writer writes what is left and ends, and
    /// the mirror threads send what is queued and end.
    pub(super) draining: AtomicBool,
    pub(super) writer_done: AtomicBool,
    /// Set when the stop's drain begins: mirror requests still queued after it are dropped
    /// (and counted) instead of sent.
    pub(super) mirror_deadline: OnceLock<Instant>,
    /// Mirror threads still running.
    pub(super) mirror_workers: AtomicUsize,
    /// Mirror requests taken from the queue and not counted yet (being sent).
    pub(super) mirror_in_flight: AtomicU64,
    pub(super) mirror_timeout: Duration,
    pub(super) clock: Clock,
    pub(super) sampler: Mutex<Sampler>,
    pub(super) needs_label: bool,
    pub(super) format: LineFormat,
    pub(super) samples: Sender<Sample>,
    pub(super) queued_bytes: AtomicUsize,
    pub(super) mirror: Option<Sender<MirrorJob>>,
    pub(super) mirror_all: bool,
    pub(super) upstream: SocketAddr,
    pub(super) upstream_url: String,
    pub(super) connect_timeout: Duration,
    pub(super) upstream_timeout: Duration,
    pub(super) max_body_bytes: usize,
    pub(super) stats_path: String,
    /// Whether every request is recorded: then the sampler is not consulted.
    pub(super) record_all: bool,
    /// Client connections being served.
    pub(super) active: AtomicUsize,
    /// A handle on each client socket, to wake its thread at a stop.
    pub(super) clients: Mutex<HashMap<u64, TcpStream>>,
}

impl Shared {
    pub(super) fn abandon_now(&self) -> bool {
        self.abandon_at.get().is_some_and(|t| Instant::now() >= *t)
    }

    /// Queues a sample for the writer unless the queue is full; never waits.
    pub(super) fn offer_sample(&self, sample: Sample) -> bool {
        let size = sample.size();
        if self.queued_bytes.fetch_add(size, Ordering::Relaxed) + size > MAX_QUEUED_BYTES {
            self.queued_bytes.fetch_sub(size, Ordering::Relaxed);
            return false;
        }
        match self.samples.try_send(sample) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.queued_bytes.fetch_sub(size, Ordering::Relaxed);
                false
            }
        }
    }
}
