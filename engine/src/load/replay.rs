//! One request stream fanned out to N targets in the same tick, on one thread.
//!
//! A mio event loop owns every connection. Each tick takes the requests that are due from
//! the [`Pacer`] and writes each of them to every target back to back, so all targets
//! receive request `i` within microseconds of each other (the dispatch skew is measured).
//! Latency is measured from the intended send time (corrected for coordinated omission) and
//! from the actual write (uncorrected).
//!
//! Sleeping: a timerfd armed with an absolute monotonic deadline wakes the loop shortly
//! before the next due time and the last stretch is spun with zero-timeout polls. epoll's
//! own timeout has millisecond granularity, far too coarse for 100 µs pacing, and spinning
//! the whole gap would burn a core at every rate.

use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::io::{self, BufRead, BufWriter, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream as StdTcpStream};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::Histogram;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use serde_json::{json, Map, Value};

use crate::format::request_log::{ErrorKind, RequestRecord};
use crate::load::client::{connect_error_kind, Conn, ConnState, ReadOutcome, Response};
use crate::load::histogram::{new_latency_histogram, percentiles_us, record_ns};
use crate::load::pace::{Arrival, Pacer, MAX_RATE_PER_S, NEVER_NS};
use crate::load::priority::{self, Priority, PriorityMode};
use crate::load::validity;
use crate::net::http::ResponseTracker;

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

/// One target, resolved.
#[derive(Debug, Clone)]
pub struct TargetPlan {
    pub name: String,
    pub url: String,
    pub addr: SocketAddr,
    /// Per request template: the request head up to (not including) the request-id header.
    pub heads: Vec<Vec<u8>>,
}

/// A warm-up probe: GET `path` on `addr` until it answers 2xx.
#[derive(Debug, Clone)]
pub struct WarmProbe {
    pub target: usize,
    pub url: String,
    pub addr: SocketAddr,
    pub host: String,
    pub path: String,
}

/// Everything a run needs, validated.
#[derive(Debug, Clone)]
pub struct Plan {
    pub targets: Vec<TargetPlan>,
    pub bodies: Vec<Vec<u8>>,
    pub head_request: Vec<bool>,
    pub endpoints: Vec<String>,
    pub template_endpoint: Vec<u16>,
    /// `--pace ordered`: each template's key id and the number of keys.
    pub ordered_keys: Option<(Vec<u32>, usize)>,
    pub arrival: Arrival,
    pub arrival_name: &'static str,
    pub pace_name: &'static str,
    pub rate_per_s: f64,
    /// `None`: run until stopped (only with `--control`).
    pub duration_ns: Option<u64>,
    pub warmup_arrival: Arrival,
    pub warmup_rate_per_s: f64,
    pub warmup_ns: u64,
    pub warm_probes: Vec<WarmProbe>,
    pub warm_timeout_ns: u64,
    pub connections: usize,
    pub max_in_flight: usize,
    pub timeout_ns: u64,
    pub interval_ns: u64,
    /// The last stretch before a due time that is spun rather than slept (`--spin-us`).
    pub spin_ns: u64,
    /// The event loop thread's scheduling policy (`--priority`).
    pub priority: PriorityMode,
    pub control: bool,
    pub seed: u64,
}

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

struct EndpointStats {
    requests: u64,
    errors: u64,
    hist: Histogram<u64>,
    uhist: Histogram<u64>,
}

struct TargetStats {
    requests: u64,
    errors: u64,
    sent: u64,
    dropped: u64,
    queued_sends: u64,
    bytes: u64,
    status: BTreeMap<u16, u64>,
    errors_by_kind: [u64; ErrorKind::ALL.len()],
    hist: Histogram<u64>,
    uhist: Histogram<u64>,
    endpoints: Vec<EndpointStats>,
    iv_hist: Histogram<u64>,
    iv_requests: u64,
    iv_errors: u64,
    iv_sent: u64,
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

/// Commands read from stdin under `--control`.
#[derive(Debug, Clone, Copy)]
enum Command {
    SetRate(f64),
    Stop,
}

/// Monotonic clock in ns (CLOCK_MONOTONIC, the clock the timerfd is armed against).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A timerfd armed at absolute CLOCK_MONOTONIC deadlines.
struct Timer {
    fd: RawFd,
}

impl Timer {
    fn new() -> io::Result<Timer> {
        // SAFETY: plain syscall; the result is checked.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Timer { fd })
    }

    fn arm_at(&self, at_ns: u64) -> io::Result<()> {
        let at_ns = at_ns.max(1); // an all-zero value would disarm the timer
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (at_ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (at_ns % 1_000_000_000) as libc::c_long,
            },
        };
        // SAFETY: `spec` is a valid itimerspec and `fd` a timerfd we own.
        let rc = unsafe {
            libc::timerfd_settime(
                self.fd,
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn drain(&self) {
        let mut buf = [0u8; 8];
        // SAFETY: reading 8 bytes into an 8-byte buffer; EAGAIN is fine (nothing expired).
        unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), 8) };
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor and close it once.
        unsafe { libc::close(self.fd) };
    }
}

fn new_stats(endpoints: usize) -> TargetStats {
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
    rate_changes: Vec<Value>,
    intervals: Vec<Value>,
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

/// Runs the plan to completion and returns the summary JSON.
pub fn run(plan: &Plan, sinks: Sinks, stop: Arc<AtomicBool>) -> Result<Value, ReplayError> {
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

            if let Some(rx) = commands {
                loop {
                    match rx.try_recv() {
                        Ok(Command::SetRate(r)) => {
                            self.rate_per_s = r;
                            self.rate_changes.push(json!({
                                "at_s": self.since_measure_s(now),
                                "rate_per_s": r,
                            }));
                            if self.phase == Phase::Measure {
                                pacer.set_rate(now, r);
                                self.last_tick_ns = None;
                            }
                        }
                        Ok(Command::Stop) => {
                            if self.phase != Phase::Drain {
                                stopped_by = "control";
                                drain_deadline_ns = self.begin_drain(now);
                            }
                        }
                        Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                    }
                }
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
                let all_warm = warm_flags.iter().all(|f| f.load(Ordering::Relaxed));
                if now >= t0 + plan.warmup_ns && all_warm {
                    self.start_measurement(&mut pacer, now)?;
                } else if !all_warm && now >= t0 + plan.warm_timeout_ns {
                    let detail = plan
                        .warm_probes
                        .iter()
                        .zip(warm_flags)
                        .filter(|(_, f)| !f.load(Ordering::Relaxed))
                        .map(|(p, _)| {
                            format!(
                                "{} ({} never answered 2xx)",
                                plan.targets[p.target].name, p.url
                            )
                        })
                        .collect::<Vec<_>>()
                        .join(", ");
                    return Err(ReplayError::NeverWarm {
                        timeout_s: plan.warm_timeout_ns as f64 / 1e9,
                        detail,
                    });
                }
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

    fn since_measure_s(&self, now: u64) -> f64 {
        if self.phase == Phase::Warmup {
            0.0
        } else {
            now.saturating_sub(self.measure_start_ns) as f64 / 1e9
        }
    }

    fn start_measurement(&mut self, pacer: &mut Pacer, now: u64) -> Result<(), ReplayError> {
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
    fn begin_drain(&mut self, end_ns: u64) -> u64 {
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

    fn dispatch_due(&mut self, pacer: &mut Pacer) -> Result<(), ReplayError> {
        // The buffer is reused because this runs on every turn of the loop.
        let mut writes = std::mem::take(&mut self.writes);
        writes.resize(self.targets.len(), None);
        let result = self.dispatch_due_into(pacer, &mut writes);
        self.writes = writes;
        result
    }

    fn dispatch_due_into(
        &mut self,
        pacer: &mut Pacer,
        writes: &mut [Option<u64>],
    ) -> Result<(), ReplayError> {
        let n_templates = self.plan.bodies.len() as u64;
        for _ in 0..MAX_TICKS_PER_TURN {
            let due = pacer.next_due_ns();
            let now = now_ns();
            if due > now {
                return Ok(());
            }
            let measured = self.phase == Phase::Measure;
            if measured && due >= self.window_end_ns {
                return Ok(());
            }
            let id = pacer.advance();
            let template = ((if measured { id } else { id - WARMUP_ID_BASE }) % n_templates) as u32;
            if measured {
                self.scheduled += 1;
                self.iv_scheduled += 1;
                if now.saturating_sub(due) > validity::LATE_NS {
                    self.behind += 1;
                    self.iv_behind += 1;
                }
                if matches!(self.plan.arrival, Arrival::Poisson { .. })
                    && self.gaps.len() < MAX_GAPS
                {
                    if let Some(prev) = self.last_tick_ns {
                        self.gaps
                            .push(now.saturating_sub(prev) as f64 * pacer.rate_per_s() / 1e9);
                    }
                    self.last_tick_ns = Some(now);
                }
            }
            let pending = Pending {
                id,
                template,
                intended_ns: due,
                sent_ns: 0,
                measured,
                retried: false,
                paced: true,
            };
            // Each write takes microseconds (loopback runs the receiver inline), so the
            // target written first gets the request earlier. Rotating who goes first makes
            // that head start the same for every arm on average instead of a bias.
            let n = writes.len();
            let first = (id % n as u64) as usize;
            for j in 0..n {
                let k = (first + j) % n;
                writes[k] = self.dispatch(k, pending)?;
            }
            if let (Some(w0), true) = (writes[first], measured) {
                for (k, w) in writes.iter().enumerate() {
                    if let (Some(w), false) = (w, k == first) {
                        record_ns(&mut self.skew, w.saturating_sub(w0).max(1));
                    }
                }
            }
        }
        Ok(())
    }

    /// Accepts a new request for target `k`; returns the write time if it went out at once.
    fn dispatch(&mut self, k: usize, p: Pending) -> Result<Option<u64>, ReplayError> {
        let t = &mut self.targets[k];
        if t.outstanding >= self.plan.max_in_flight {
            if p.measured {
                t.stats.dropped += 1;
                self.iv_dropped += 1;
                let rec = RequestRecord {
                    request_id: p.id,
                    intended_ns: p.intended_ns - self.measure_start_ns,
                    latency_ns: 0,
                    uncorrected_ns: 0,
                    bytes: 0,
                    status: 0,
                    target: k as u16,
                    endpoint: self.plan.template_endpoint[p.template as usize],
                    error: ErrorKind::Dropped,
                };
                self.write_record(&rec)?;
            }
            return Ok(None);
        }
        t.outstanding += 1;
        if let Some((keys, _)) = &self.plan.ordered_keys {
            let key = keys[p.template as usize] as usize;
            if t.key_busy[key] {
                t.key_queue[key].push_back(Pending { paced: false, ..p });
                return Ok(None);
            }
            t.key_busy[key] = true;
        }
        self.assign(k, p)
    }

    /// Puts an accepted request on a connection, or in the target's FIFO.
    fn assign(&mut self, k: usize, p: Pending) -> Result<Option<u64>, ReplayError> {
        let t = &mut self.targets[k];
        if let Some(c) = t.idle.pop() {
            return self.send(k, c, p);
        }
        if let Some(c) = t.closed.pop() {
            self.connect(k, c, p)?;
            return Ok(None);
        }
        if p.measured {
            t.stats.queued_sends += 1;
        }
        t.queue.push_back(Pending { paced: false, ..p });
        Ok(None)
    }

    fn token(&self, k: usize, c: usize) -> Token {
        Token(FIRST_CONN + k * self.plan.connections + c)
    }

    /// Opens slot `c` for request `p`; returns false when the connect failed at once.
    fn connect(&mut self, k: usize, c: usize, p: Pending) -> Result<bool, ReplayError> {
        let token = self.token(k, c);
        let addr = self.plan.targets[k].addr;
        let timeout_ns = self.plan.timeout_ns;
        let slot = &mut self.targets[k].slots[c];
        let opened = slot
            .conn
            .open(addr)
            .and_then(|()| match slot.conn.stream.as_mut() {
                Some(s) => {
                    self.poll
                        .registry()
                        .register(s, token, Interest::READABLE | Interest::WRITABLE)
                }
                None => Err(io::Error::new(io::ErrorKind::NotConnected, "no socket")),
            });
        match opened {
            Ok(()) => {
                slot.conn.deadline_ns = now_ns() + timeout_ns;
                slot.req = Some(p);
                Ok(true)
            }
            Err(e) => {
                slot.conn.stream = None;
                slot.conn.state = ConnState::Closed;
                self.targets[k].closed.push(c);
                self.finish(k, p, Err((connect_error_kind(&e), 0)), now_ns())?;
                Ok(false)
            }
        }
    }

    fn send(&mut self, k: usize, c: usize, mut p: Pending) -> Result<Option<u64>, ReplayError> {
        let plan = self.plan;
        let window_end = self.window_end_ns;
        let slot = &mut self.targets[k].slots[c];
        let conn = &mut slot.conn;
        conn.out.clear();
        conn.out_pos = 0;
        conn.out
            .extend_from_slice(&plan.targets[k].heads[p.template as usize]);
        // `write!` into a Vec cannot fail.
        let _ = write!(conn.out, "x-hairline-request-id: {}\r\n\r\n", p.id);
        conn.out
            .extend_from_slice(&plan.bodies[p.template as usize]);
        conn.expect_response(plan.head_request[p.template as usize]);
        conn.state = ConnState::Busy;
        // The write time: uncorrected latency, dispatch skew and pacing error all start here.
        p.sent_ns = now_ns();
        conn.deadline_ns = p.sent_ns + plan.timeout_ns;
        let flushed = conn.flush();
        let paced = p.paced && !p.retried;
        p.paced = false;
        slot.req = Some(p);
        if p.measured && p.sent_ns < window_end {
            let s = &mut self.targets[k].stats;
            s.sent += 1;
            s.iv_sent += 1;
            if paced {
                let late_ns = p.sent_ns.saturating_sub(p.intended_ns);
                record_ns(&mut self.lateness, late_ns);
                if late_ns > validity::LATE_NS {
                    self.late_sends += 1;
                    self.iv_late_sends += 1;
                }
            }
        }
        match flushed {
            Ok(_) => Ok(Some(p.sent_ns)),
            Err(e) => {
                self.fail_slot(k, c, Conn::write_error_kind(&e), 0)?;
                Ok(None)
            }
        }
    }

    fn on_conn_event(&mut self, k: usize, c: usize) -> Result<(), ReplayError> {
        let state = self.targets[k].slots[c].conn.state;
        match state {
            ConnState::Closed => Ok(()),
            ConnState::Connecting => match self.targets[k].slots[c].conn.check_connected() {
                Ok(false) => Ok(()),
                Ok(true) => {
                    let slot = &mut self.targets[k].slots[c];
                    slot.conn.state = ConnState::Idle;
                    match slot.req.take() {
                        Some(p) => self.send(k, c, p).map(|_| ()),
                        None => self.next_work_idle(k, c),
                    }
                }
                Err(e) => self.fail_slot(k, c, connect_error_kind(&e), 0),
            },
            ConnState::Idle | ConnState::Busy => {
                let slot = &mut self.targets[k].slots[c];
                if state == ConnState::Busy && slot.conn.out_pos < slot.conn.out.len() {
                    if let Err(e) = slot.conn.flush() {
                        return self.fail_slot(k, c, Conn::write_error_kind(&e), 0);
                    }
                }
                match slot.conn.read(&mut self.scratch) {
                    ReadOutcome::Pending => Ok(()),
                    ReadOutcome::Complete(r) => self.on_response(k, c, r),
                    ReadOutcome::Failed { kind, bytes_seen } => {
                        self.fail_slot(k, c, kind, bytes_seen)
                    }
                    ReadOutcome::IdleClosed => {
                        self.close_slot(k, c);
                        let t = &mut self.targets[k];
                        t.idle.retain(|&i| i != c);
                        self.next_work_closed(k, c)
                    }
                }
            }
        }
    }

    fn on_response(&mut self, k: usize, c: usize, r: Response) -> Result<(), ReplayError> {
        let now = now_ns();
        let slot = &mut self.targets[k].slots[c];
        slot.conn.served += 1;
        let req = slot.req.take();
        if r.keep_alive {
            slot.conn.state = ConnState::Idle;
        } else {
            self.close_slot(k, c);
        }
        if let Some(p) = req {
            self.finish(k, p, Ok(r), now)?;
        }
        if r.keep_alive {
            self.next_work_idle(k, c)
        } else {
            self.next_work_closed(k, c)
        }
    }

    fn close_slot(&mut self, k: usize, c: usize) {
        let registry = self.poll.registry();
        let slot = &mut self.targets[k].slots[c];
        if let Some(mut s) = slot.conn.stream.take() {
            // Deregistering a socket we are about to drop cannot matter if it fails.
            let _ = registry.deregister(&mut s);
        }
        slot.conn.state = ConnState::Closed;
    }

    /// A connection failed: its request (if any) fails with `kind` or is retried once when a
    /// reused keep-alive connection turned out to be closed by the peer.
    fn fail_slot(
        &mut self,
        k: usize,
        c: usize,
        kind: ErrorKind,
        bytes_seen: u64,
    ) -> Result<(), ReplayError> {
        let now = now_ns();
        let served = self.targets[k].slots[c].conn.served;
        let req = self.targets[k].slots[c].req.take();
        let was_idle = self.targets[k].slots[c].conn.state == ConnState::Idle;
        self.close_slot(k, c);
        if was_idle {
            self.targets[k].idle.retain(|&i| i != c);
        }
        if let Some(mut p) = req {
            let stale = served > 0
                && bytes_seen == 0
                && matches!(kind, ErrorKind::Closed | ErrorKind::Reset);
            if stale && !p.retried {
                p.retried = true;
                self.targets[k].queue.push_front(p);
            } else {
                self.finish(k, p, Err((kind, bytes_seen)), now)?;
            }
        }
        self.next_work_closed(k, c)
    }

    fn next_work_idle(&mut self, k: usize, c: usize) -> Result<(), ReplayError> {
        match self.targets[k].queue.pop_front() {
            Some(p) => self.send(k, c, p).map(|_| ()),
            None => {
                self.targets[k].idle.push(c);
                Ok(())
            }
        }
    }

    fn next_work_closed(&mut self, k: usize, c: usize) -> Result<(), ReplayError> {
        match self.targets[k].queue.pop_front() {
            // A failed connect puts the slot back on the closed list and fails that request;
            // the next queued request gets its own attempt on the next event.
            Some(p) => self.connect(k, c, p).map(|_| ()),
            None => {
                self.targets[k].closed.push(c);
                Ok(())
            }
        }
    }

    fn sweep_timeouts(&mut self, now: u64) -> Result<(), ReplayError> {
        let timeout_ns = self.plan.timeout_ns;
        for k in 0..self.targets.len() {
            for c in 0..self.plan.connections {
                let conn = &self.targets[k].slots[c].conn;
                if matches!(conn.state, ConnState::Busy | ConnState::Connecting)
                    && now > conn.deadline_ns
                {
                    let kind = if conn.state == ConnState::Connecting {
                        ErrorKind::ConnectTimeout
                    } else {
                        ErrorKind::Timeout
                    };
                    self.fail_slot(k, c, kind, 0)?;
                }
            }
            // Requests that waited a whole timeout for a connection are not sent any more.
            while let Some(front) = self.targets[k].queue.front() {
                if front.intended_ns + timeout_ns >= now {
                    break;
                }
                if let Some(p) = self.targets[k].queue.pop_front() {
                    self.finish(k, p, Err((ErrorKind::Timeout, 0)), now)?;
                }
            }
        }
        Ok(())
    }

    fn abandon_outstanding(&mut self, now: u64, kind: ErrorKind) -> Result<(), ReplayError> {
        for k in 0..self.targets.len() {
            let mut left: Vec<Pending> = Vec::new();
            for c in 0..self.plan.connections {
                if let Some(p) = self.targets[k].slots[c].req.take() {
                    left.push(p);
                }
                self.close_slot(k, c);
            }
            let t = &mut self.targets[k];
            left.extend(t.queue.drain(..));
            left.append(&mut t.key_ready);
            for q in &mut t.key_queue {
                left.extend(q.drain(..));
            }
            for p in left {
                self.finish(k, p, Err((kind, 0)), now)?;
            }
        }
        Ok(())
    }

    /// Records a finished request (response or failure) and releases its ordering key.
    fn finish(
        &mut self,
        k: usize,
        p: Pending,
        outcome: Result<Response, (ErrorKind, u64)>,
        now: u64,
    ) -> Result<(), ReplayError> {
        let plan = self.plan;
        let t = &mut self.targets[k];
        t.outstanding = t.outstanding.saturating_sub(1);
        if let Some((keys, _)) = &plan.ordered_keys {
            let key = keys[p.template as usize] as usize;
            match t.key_queue[key].pop_front() {
                Some(next) => t.key_ready.push(next),
                None => t.key_busy[key] = false,
            }
        }
        if !p.measured {
            return Ok(());
        }
        let endpoint = plan.template_endpoint[p.template as usize];
        let latency_ns = now.saturating_sub(p.intended_ns);
        let uncorrected_ns = if p.sent_ns > 0 {
            now.saturating_sub(p.sent_ns)
        } else {
            0
        };
        let (status, bytes, error) = match outcome {
            Ok(r) if r.status >= 500 => (r.status, r.bytes, ErrorKind::Http5xx),
            Ok(r) => (r.status, r.bytes, ErrorKind::None),
            Err((kind, bytes)) => (0, bytes, kind),
        };
        let s = &mut t.stats;
        s.requests += 1;
        s.iv_requests += 1;
        s.bytes += bytes;
        if status > 0 {
            *s.status.entry(status).or_insert(0) += 1;
        }
        let ep = &mut s.endpoints[endpoint as usize];
        ep.requests += 1;
        if error == ErrorKind::None {
            record_ns(&mut s.hist, latency_ns);
            record_ns(&mut s.uhist, uncorrected_ns);
            record_ns(&mut s.iv_hist, latency_ns);
            record_ns(&mut ep.hist, latency_ns);
            record_ns(&mut ep.uhist, uncorrected_ns);
        } else {
            s.errors += 1;
            s.iv_errors += 1;
            ep.errors += 1;
            s.errors_by_kind[error as usize] += 1;
        }
        let rec = RequestRecord {
            request_id: p.id,
            intended_ns: p.intended_ns.saturating_sub(self.measure_start_ns),
            latency_ns,
            uncorrected_ns,
            bytes: bytes.min(u32::MAX as u64) as u32,
            status,
            target: k as u16,
            endpoint,
            error,
        };
        self.write_record(&rec)
    }

    fn write_record(&mut self, rec: &RequestRecord) -> Result<(), ReplayError> {
        if let Some(w) = self.sinks.requests.as_mut() {
            w.write_all(&rec.to_bytes())
                .map_err(|source| ReplayError::Output {
                    what: "--requests",
                    source,
                })?;
        }
        Ok(())
    }

    fn close_interval(&mut self, end_ns: u64) -> Result<(), ReplayError> {
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

    fn summary(&mut self, stopped_by: &str) -> Result<Value, ReplayError> {
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

/// Reads one JSON command per stdin line; EOF ends the reader, not the run.
fn spawn_control_reader(waker: Arc<Waker>) -> Receiver<Command> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let stdin = io::stdin();
        for (i, line) in stdin.lock().lines().enumerate() {
            let Ok(line) = line else { break };
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            match parse_command(line) {
                Ok(cmds) => {
                    for c in cmds {
                        if tx.send(c).is_err() {
                            return;
                        }
                    }
                    // A failed wake only delays the change to the next loop turn.
                    let _ = waker.wake();
                }
                Err(msg) => eprintln!("hairline-engine: control line {}: {msg}", i + 1),
            }
        }
    });
    rx
}

fn parse_command(line: &str) -> Result<Vec<Command>, String> {
    let value: Value = serde_json::from_str(line)
        .map_err(|e| format!("not JSON ({e}); send e.g. {{\"rate_per_s\": 1500}}"))?;
    let Value::Object(obj) = value else {
        return Err("expected a JSON object".into());
    };
    let mut out = Vec::new();
    for (key, v) in &obj {
        match key.as_str() {
            "rate_per_s" => match v.as_f64() {
                Some(r) if r.is_finite() && (0.0..=MAX_RATE_PER_S).contains(&r) => {
                    out.push(Command::SetRate(r))
                }
                _ => {
                    return Err(format!(
                        "rate_per_s must be a number from 0 to {MAX_RATE_PER_S:.0} (per second, \
                         per target)"
                    ))
                }
            },
            "stop" => {
                if v.as_bool() == Some(true) {
                    out.push(Command::Stop);
                }
            }
            other => return Err(format!("unknown command {other:?}; use rate_per_s or stop")),
        }
    }
    Ok(out)
}

/// Polls each warm URL every 100 ms until it answers 2xx, on its own thread so a slow
/// target never stalls the event loop.
fn spawn_warm_prober(
    probes: Vec<WarmProbe>,
    flags: Arc<Vec<AtomicBool>>,
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
) {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let mut all = true;
            for (i, p) in probes.iter().enumerate() {
                if flags[i].load(Ordering::Relaxed) {
                    continue;
                }
                if probe_once(p) {
                    flags[i].store(true, Ordering::Relaxed);
                    let _ = waker.wake();
                } else {
                    all = false;
                }
            }
            if all {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
}

fn probe_once(p: &WarmProbe) -> bool {
    let timeout = Duration::from_secs(1);
    let Ok(mut s) = StdTcpStream::connect_timeout(&p.addr, timeout) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    let req = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        p.path, p.host
    );
    if io::Write::write_all(&mut s, req.as_bytes()).is_err() {
        return false;
    }
    // Only the status matters: read until the head of the final response is in.
    let mut tracker = ResponseTracker::for_request(false);
    let mut buf = [0u8; 1024];
    while tracker.final_head().is_none() {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => {
                if tracker.feed(&buf[..n]).is_err() {
                    return false;
                }
            }
        }
    }
    tracker
        .final_head()
        .is_some_and(|(status, _)| (200..300).contains(&status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_commands_parse_and_reject_clearly() {
        assert!(
            matches!(parse_command("{\"rate_per_s\": 1500}").as_deref(), Ok([Command::SetRate(r)]) if *r == 1500.0)
        );
        assert!(matches!(
            parse_command("{\"stop\": true}").as_deref(),
            Ok([Command::Stop])
        ));
        assert!(parse_command("{\"rate\": 3}").is_err_and(|e| e.contains("rate_per_s")));
        assert!(parse_command("{\"rate_per_s\": -1}").is_err());
        assert!(parse_command("{\"rate_per_s\": 1e12}").is_err_and(|e| e.contains("1000000")));
        assert!(parse_command("rate 5").is_err());
    }

    #[test]
    fn monotonic_clock_moves_forward() {
        let a = now_ns();
        let b = now_ns();
        assert!(b >= a && a > 0);
    }
}
