//! One request stream fanned out to N targets in the same tick, on one thread.
//!
//! A mio event loop owns every connection. Each tick takes the requests that are due from
//! the [`Pacer`] and writes each of them to every target back to back, so all targets
//! receive request `i` within microseconds of each other (the dispatch skew is measured).
//! Latency is measured from the intended send time (corrected for coordinated omission) and
//! from the actual write (uncorrected); a send that went out early (`--coalesce-us`) is
//! measured from its write both ways (`pace::latency_start_ns`).
//!
//! Sleeping: a timerfd armed with an absolute monotonic deadline wakes the loop shortly
//! before the next due time and the last stretch is spun with zero-timeout polls. epoll's
//! own timeout has millisecond granularity, far too coarse for 100 µs pacing, and spinning
//! the whole gap would burn a core at every rate. On a VM each wake-up costs tens of
//! microseconds of CPU, so with `--coalesce-us` a turn of the loop (woken by the timer or
//! by a response) also sends the requests due within that window, early, instead of
//! sleeping until each is due.
//!
//! The loop is here, with its phases (warm-up, measurement, drain); each of its other jobs
//! is a module: `requests` (a request's way from its tick to its record), `timer` (the
//! clock and the timerfd), `control` (`--control`'s commands), `warmup` (the warm probes and
//! the warm-up's end), `stats` (the counts, interval lines and the summary).

mod control;
mod requests;
mod stats;
mod timer;
mod warmup;

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufWriter, Write as _};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hdrhistogram::serialization::interval_log::IntervalLogWriterBuilder;
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::Histogram;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};

use crate::format::request_log::ErrorKind;
use crate::load::client::Conn;
use crate::load::histogram::new_latency_histogram;
use crate::load::pace::{Pacer, NEVER_NS};
use crate::load::plan::Plan;
use crate::load::priority::{self, Priority};
use crate::load::summary::{IntervalLine, RateChange, Summary};
use control::{spawn_control_reader, Command};
use stats::{new_stats, TargetStats};
pub use timer::now_ns;
use timer::Timer;
use warmup::spawn_warm_prober;

/// Request ids of the warm-up phase start here, so measured ids are 0, 1, 2, ... on every
/// run regardless of how long the warm-up took.
pub const WARMUP_ID_BASE: u64 = 1 << 62;
/// Timeouts and warm-up are checked at least this often.
const HOUSEKEEPING_NS: u64 = 5_000_000;
/// Inter-send gaps kept for the Poisson goodness-of-fit test.
const MAX_GAPS: usize = 1_000_000;
/// Requests dispatched in one turn of the loop at most. A loop that is behind schedule
/// would otherwise keep dispatching, reading no signal, command or response, until it
/// caught up, which at a rate it cannot keep is never.
const MAX_TICKS_PER_TURN: u32 = 256;
/// After SIGINT/SIGTERM, how long requests already sent may take to finish (or
/// `--timeout-ms`, if shorter); those still unanswered then are cancelled.
const SIGNAL_DRAIN_NS: u64 = 500_000_000;
const WAKER: Token = Token(0);
const TIMER: Token = Token(1);
const FIRST_CONN: usize = 2;

/// Where per-request and per-interval data go while the run is going.
#[derive(Default)]
pub struct Sinks {
    pub requests: Option<BufWriter<File>>,
    pub hdr_log: Option<BufWriter<File>>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("event loop: {0}")]
    Io(#[from] io::Error),
    #[error("writing {what}: {source}")]
    Output {
        what: &'static str,
        source: io::Error,
    },
    #[error(
        "target(s) never got warm within --warm-timeout {timeout_s} s: {detail}; \
         check the warm URL, or raise --warm-timeout"
    )]
    NeverWarm { timeout_s: f64, detail: String },
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    id: u64,
    template: u32,
    /// Absolute intended send time (monotonic ns).
    intended_ns: u64,
    /// Actual write time (monotonic ns), 0 until written.
    sent_ns: u64,
    measured: bool,
    retried: bool,
    /// Still on its way to its first write without having waited in a queue (for a free
    /// connection, or behind its ordering key): its write is paced, and how late it is
    /// counts in `pacing_error_us`. A wait in a queue is the target's, not the pacer's.
    paced: bool,
}

struct Slot {
    conn: Conn,
    req: Option<Pending>,
}

struct TargetRt {
    slots: Vec<Slot>,
    idle: Vec<usize>,
    closed: Vec<usize>,
    queue: VecDeque<Pending>,
    /// Requests accepted and not finished: in connections, in the queue, in key queues.
    outstanding: usize,
    key_busy: Vec<bool>,
    key_queue: Vec<VecDeque<Pending>>,
    key_ready: Vec<Pending>,
    stats: TargetStats,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Warmup,
    Measure,
    Drain,
}

struct Engine<'p> {
    plan: &'p Plan,
    poll: Poll,
    timer: Timer,
    targets: Vec<TargetRt>,
    sinks: Sinks,
    scratch: Vec<u8>,
    phase: Phase,
    measure_start_ns: u64,
    window_end_ns: u64,
    /// Ticks scheduled in the measurement window.
    scheduled: u64,
    /// Paced writes (see [`Pending::paced`]) more than `LATE_NS` after their due time.
    late_sends: u64,
    /// Sends the pacer itself took off its schedule more than `LATE_NS` late: the engine's
    /// own loop fell behind (CPU, a stall). Unlike `late_sends` this never counts a wait for
    /// a connection the target was slow to accept, so it tells a saturated generator from a
    /// saturated target.
    behind: u64,
    /// Write time minus due time of each paced write, to each target.
    lateness: Histogram<u64>,
    skew: Histogram<u64>,
    gaps: Vec<f64>,
    last_tick_ns: Option<u64>,
    rate_per_s: f64,
    rate_changes: Vec<RateChange>,
    intervals: Vec<IntervalLine>,
    interval_start_ns: u64,
    /// The current interval's share of `scheduled`, `late_sends` and the targets' drops: a
    /// controller needs them per interval to tell a saturated generator from a saturated
    /// service.
    iv_scheduled: u64,
    iv_late_sends: u64,
    iv_behind: u64,
    iv_dropped: u64,
    warmup_sent: u64,
    hdr_serializer: V2DeflateSerializer,
    writes: Vec<Option<u64>>,
    /// The loop thread's policy, and its run delay (ns runnable without a CPU) when the
    /// measurement started and ended.
    priority: Priority,
    run_delay_start_ns: Option<u64>,
    run_delay_end_ns: Option<u64>,
}

/// Runs the plan to completion and returns its summary.
pub fn run(plan: &Plan, sinks: Sinks, stop: Arc<AtomicBool>) -> Result<Summary, ReplayError> {
    let poll = Poll::new()?;
    let timer = Timer::new()?;
    poll.registry()
        .register(&mut SourceFd(&timer.fd), TIMER, Interest::READABLE)?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    // Timer slack defaults to 50 µs; the pacing budget is 100 µs in total.
    // SAFETY: prctl with an integer argument; failure only means coarser wake-ups.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };

    let commands = if plan.control {
        Some(spawn_control_reader(Arc::clone(&waker)))
    } else {
        None
    };
    let warm_flags: Arc<Vec<AtomicBool>> = Arc::new(
        plan.warm_probes
            .iter()
            .map(|_| AtomicBool::new(false))
            .collect(),
    );
    let probe_stop = Arc::new(AtomicBool::new(false));
    if !plan.warm_probes.is_empty() {
        spawn_warm_prober(
            plan.warm_probes.clone(),
            Arc::clone(&warm_flags),
            Arc::clone(&probe_stop),
            Arc::clone(&waker),
        );
    }

    let n_keys = plan.ordered_keys.as_ref().map_or(0, |(_, n)| *n);
    let targets = plan
        .targets
        .iter()
        .map(|_| TargetRt {
            slots: (0..plan.connections)
                .map(|_| Slot {
                    conn: Conn::default(),
                    req: None,
                })
                .collect(),
            idle: Vec::with_capacity(plan.connections),
            closed: (0..plan.connections).rev().collect(),
            queue: VecDeque::new(),
            outstanding: 0,
            key_busy: vec![false; n_keys],
            key_queue: (0..n_keys).map(|_| VecDeque::new()).collect(),
            key_ready: Vec::new(),
            stats: new_stats(plan.endpoints.len()),
        })
        .collect();

    let mut engine = Engine {
        plan,
        poll,
        timer,
        targets,
        sinks,
        scratch: vec![0u8; 64 * 1024],
        phase: Phase::Warmup,
        measure_start_ns: 0,
        window_end_ns: NEVER_NS,
        scheduled: 0,
        late_sends: 0,
        behind: 0,
        lateness: new_latency_histogram(),
        skew: new_latency_histogram(),
        gaps: Vec::new(),
        last_tick_ns: None,
        rate_per_s: plan.rate_per_s,
        rate_changes: Vec::new(),
        intervals: Vec::new(),
        interval_start_ns: 0,
        iv_scheduled: 0,
        iv_late_sends: 0,
        iv_behind: 0,
        iv_dropped: 0,
        warmup_sent: 0,
        hdr_serializer: V2DeflateSerializer::new(),
        writes: Vec::new(),
        // After the helper threads started: only this thread's policy changes.
        priority: priority::apply(plan.priority, plan.spin_ns > 0),
        run_delay_start_ns: None,
        run_delay_end_ns: None,
    };
    let result = engine.event_loop(commands.as_ref(), &stop, &warm_flags);
    probe_stop.store(true, Ordering::Relaxed);
    let stopped_by = result?;
    engine.summary(stopped_by)
}

impl<'p> Engine<'p> {
    fn event_loop(
        &mut self,
        commands: Option<&Receiver<Command>>,
        stop: &AtomicBool,
        warm_flags: &[AtomicBool],
    ) -> Result<&'static str, ReplayError> {
        let plan = self.plan;
        let t0 = now_ns();
        let mut events = Events::with_capacity(1024);
        let mut pacer = Pacer::new(
            plan.warmup_arrival.clone(),
            plan.warmup_rate_per_s,
            t0,
            WARMUP_ID_BASE,
        );
        let needs_warmup = plan.warmup_ns > 0 || !plan.warm_probes.is_empty();
        if !needs_warmup {
            self.start_measurement(&mut pacer, t0)?;
        }
        let mut stopped_by = "duration";
        let mut drain_deadline_ns = NEVER_NS;
        let mut next_housekeeping_ns = t0;
        // Set when a signal cut the drain short: the requests left were cancelled, not late.
        let mut cut_short = false;
        loop {
            let mut now = now_ns();

            if let Some(deadline) = commands.and_then(|rx| self.apply_commands(rx, &mut pacer, now))
            {
                stopped_by = "control";
                drain_deadline_ns = deadline;
            }
            if stop.swap(false, Ordering::Relaxed) {
                if self.phase == Phase::Drain {
                    // A second signal: stop waiting for stragglers.
                    cut_short = true;
                    break;
                }
                stopped_by = "signal";
                let drain_end = self.begin_drain(now);
                let signal_end = now.saturating_add(SIGNAL_DRAIN_NS);
                cut_short = signal_end < drain_end;
                drain_deadline_ns = drain_end.min(signal_end);
            }

            if self.phase == Phase::Warmup {
                self.end_warmup_when_due(&mut pacer, t0, now, warm_flags)?;
            }

            if matches!(self.phase, Phase::Warmup | Phase::Measure) {
                self.dispatch_due(&mut pacer)?;
                now = now_ns();
            }
            if self.phase == Phase::Measure && now >= self.window_end_ns {
                drain_deadline_ns = self.begin_drain(self.window_end_ns);
            }
            for k in 0..self.targets.len() {
                while let Some(p) = self.targets[k].key_ready.pop() {
                    self.assign(k, p)?;
                }
            }
            if now >= next_housekeeping_ns {
                self.sweep_timeouts(now)?;
                next_housekeeping_ns = now + HOUSEKEEPING_NS;
            }
            if self.phase == Phase::Measure && now >= self.interval_start_ns + plan.interval_ns {
                self.close_interval(self.interval_start_ns + plan.interval_ns)?;
            }
            if self.phase == Phase::Drain {
                let outstanding: usize = self.targets.iter().map(|t| t.outstanding).sum();
                if outstanding == 0 || now >= drain_deadline_ns {
                    break;
                }
            }

            let next_due = if matches!(self.phase, Phase::Warmup | Phase::Measure) {
                pacer.next_due_ns()
            } else {
                NEVER_NS
            };
            let mut wake_ns = next_housekeeping_ns.min(drain_deadline_ns);
            if self.phase == Phase::Measure {
                wake_ns = wake_ns
                    .min(self.interval_start_ns + plan.interval_ns)
                    .min(self.window_end_ns);
            }
            let spin = next_due != NEVER_NS && next_due <= now + plan.spin_ns;
            let timeout = if spin {
                Some(Duration::ZERO)
            } else {
                let at = wake_ns.min(next_due.saturating_sub(plan.spin_ns));
                if at <= now {
                    Some(Duration::ZERO)
                } else {
                    self.timer.arm_at(at)?;
                    None
                }
            };
            match self.poll.poll(&mut events, timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
            for event in events.iter() {
                match event.token() {
                    WAKER => {}
                    TIMER => self.timer.drain(),
                    Token(t) => {
                        let idx = t - FIRST_CONN;
                        let (k, c) = (idx / plan.connections, idx % plan.connections);
                        if k < self.targets.len() {
                            self.on_conn_event(k, c)?;
                        }
                    }
                }
            }
        }
        let now = now_ns();
        let leftover_kind = if cut_short {
            ErrorKind::Cancelled
        } else {
            ErrorKind::Timeout
        };
        self.abandon_outstanding(now, leftover_kind)?;
        if self.phase != Phase::Warmup && now > self.interval_start_ns {
            self.close_interval(now.min(self.window_end_ns.max(self.interval_start_ns)))?;
        }
        Ok(stopped_by)
    }

    pub(super) fn since_measure_s(&self, now: u64) -> f64 {
        if self.phase == Phase::Warmup {
            0.0
        } else {
            now.saturating_sub(self.measure_start_ns) as f64 / 1e9
        }
    }

    pub(super) fn start_measurement(
        &mut self,
        pacer: &mut Pacer,
        now: u64,
    ) -> Result<(), ReplayError> {
        self.warmup_sent = pacer.next_index() - WARMUP_ID_BASE;
        self.run_delay_start_ns = priority::run_delay_ns();
        self.phase = Phase::Measure;
        self.measure_start_ns = now;
        self.interval_start_ns = now;
        self.window_end_ns = match self.plan.duration_ns {
            Some(d) => now + d,
            None => NEVER_NS,
        };
        *pacer = Pacer::new(self.plan.arrival.clone(), self.rate_per_s, now, 0);
        self.last_tick_ns = None;
        if let Some(w) = self.sinks.hdr_log.as_mut() {
            let start = SystemTime::now();
            let mut builder = IntervalLogWriterBuilder::new();
            builder
                .add_comment("hairline-engine load: corrected latency per target, values in ns")
                .with_start_time(start)
                .with_base_time(start);
            builder
                .begin_log_with(w, &mut self.hdr_serializer)
                .map(|_| ())
                .and_then(|()| {
                    w.write_all(b"\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n")
                })
                .map_err(|source| ReplayError::Output { what: "--hdr-log", source })?;
        }
        Ok(())
    }

    /// Ends scheduling at `end_ns`; returns the drain deadline.
    pub(super) fn begin_drain(&mut self, end_ns: u64) -> u64 {
        if self.phase != Phase::Drain {
            self.run_delay_end_ns = priority::run_delay_ns();
        }
        if self.phase == Phase::Measure {
            self.window_end_ns = end_ns.min(self.window_end_ns);
        } else if self.phase == Phase::Warmup {
            // Stopped before measuring anything: an empty measurement window.
            self.measure_start_ns = end_ns;
            self.interval_start_ns = end_ns;
            self.window_end_ns = end_ns;
        }
        self.phase = Phase::Drain;
        end_ns + self.plan.timeout_ns
    }
}
